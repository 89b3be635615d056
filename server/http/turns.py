"""A connection's next request waits for the answers already due.

A fan-out wakes thousands of parked long polls at once, and their answers
are written a slice per IO-loop iteration
(`server.delivery.longpoll.AnswerSlices`). Each answer brings its client's
next poll back within a fraction of a millisecond; serving those polls
between the slices (a head to parse, authentication, parking: about as much
work as an answer) put them ahead of the answers still due, and the last
client of a fan-out to 5,000 waited twice as long as the answers alone take
(tests/benchmarks/README.md, "Requests after the answers").

So while answers are due, a connection whose next `GET` has arrived whole
waits its turn (`RequestTurns.ready`; server/http/http1.py decides which
requests wait: notices and any other method are served at once). The
connections are remembered in the order their requests came and served
once the answers are out, a slice of the loop at a time; when a slice ends
with connections left and answers due again (those the served requests
caused), the rest wait for those. Once the first waiting request has waited
`MAX_WAIT_SECS`, the waiting ones are served a slice per loop iteration
between the answers, whatever is still due (answers that never stop, such
as deliveries from the broker to event streams, hold requests back no
longer). When the server stops, every request is served at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("eventq.http")

# The longest a request waits for the answers due before it.
MAX_WAIT_SECS = 0.25
# The longest stretch of the loop spent serving waiting requests at a time.
TURN_SLICE_SECS = 0.005


class Backlog(Protocol):
    """What requests wait for: answers still to write."""

    def __len__(self) -> int: ...

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Call `callback` from the loop once nothing is due."""


class Waiting(Protocol):
    """A connection whose next request has arrived."""

    def next_request(self) -> None:
        """Serve it, if it is still there to serve."""

    def close(self) -> None:
        """Close the connection (serving its request failed)."""


class RequestTurns:
    """The order in which connections' next requests are served (see the
    module's docstring); without a backlog, each at once."""

    __slots__ = (
        "_backlog",
        "_drain_asked",
        "_stopped",
        "_timer",
        "_waiting",
        "max_wait_secs",
        "slice_secs",
    )

    def __init__(
        self,
        backlog: Backlog | None,
        *,
        max_wait_secs: float = MAX_WAIT_SECS,
        slice_secs: float = TURN_SLICE_SECS,
    ) -> None:
        self._backlog = backlog
        self.max_wait_secs = max_wait_secs
        self.slice_secs = slice_secs
        # Connections waiting, in the order they came, with when they came.
        self._waiting: dict[Waiting, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._drain_asked = False
        # Once the server stops, requests are served at once (refused, most).
        self._stopped = False

    def __len__(self) -> int:
        return len(self._waiting)

    def ready(self, connection: Waiting) -> None:
        """`connection`'s next request has arrived: served now if nothing is
        due, else in its turn."""
        waiting = self._waiting
        if not waiting:
            backlog = self._backlog
            if backlog is None or not len(backlog) or self._stopped:
                connection.next_request()
                return
            waiting[connection] = time.monotonic()
            self._schedule()
        elif connection not in waiting:
            waiting[connection] = time.monotonic()

    def stop(self) -> None:
        """The server stops: the waiting requests are served now (answered
        as a stopping server answers them), and any later one at once."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, {}
        for connection in waiting:
            self._serve(connection)

    def _serve(self, connection: Waiting) -> None:
        try:
            connection.next_request()
        except Exception:
            log.exception("serving a request that waited its turn failed")
            connection.close()

    def _schedule(self) -> None:
        """Serve the waiting connections once the backlog is drained, or
        when the first of them has waited `max_wait_secs`."""
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
        waited = time.monotonic() - next(iter(self._waiting.values()))
        backlog = self._backlog
        if waited >= self.max_wait_secs or backlog is None or not len(backlog):
            self._timer = loop.call_later(0, self._run)
            return
        self._timer = loop.call_later(self.max_wait_secs - waited, self._run)
        if not self._drain_asked:
            self._drain_asked = True
            backlog.when_drained(self._drained)

    def _drained(self) -> None:
        self._drain_asked = False
        if self._waiting:
            self._run()

    def _run(self) -> None:
        """Serve the connections waiting now, for at most a slice."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting = self._waiting
        turn = list(waiting)
        deadline = time.perf_counter() + self.slice_secs
        for connection in turn:
            del waiting[connection]
            self._serve(connection)
            if time.perf_counter() >= deadline:
                break
        if waiting:
            self._schedule()
