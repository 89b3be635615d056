"""A parked long-poll request and its heartbeat timer."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from queues.client import WakeReason

log = logging.getLogger("eventq.longpoll")

# How long one IO-loop iteration may spend answering woken parked requests.
# An answer costs about 60 us of CPU and its client's next poll as much
# again, read in the next iteration: with 5 ms slices a fan-out to 5,000
# parked clients kept the loop's lag p99 at 34 ms (15 ms slices: 73 ms),
# for 8% more time until the last client had its answer.
ANSWER_SLICE_SECS = 0.005
# Answers between two looks at the clock.
_ANSWERS_PER_CHECK = 16


def heartbeat_delay(base_secs: float, jitter_secs: float) -> float:
    """When to send a parked request its heartbeat: `base_secs` plus a uniform
    0-`jitter_secs` (45 + 0-10 s by default), spreading the wake-ups of
    clients that parked together."""
    return base_secs + random.uniform(0.0, jitter_secs)  # noqa: S311 (timing, not secrets)


class AnswerSlices:
    """Answers woken parked requests a slice per IO-loop iteration.

    The registry wakes every parked request of a notice in one call; answering
    them all in that same iteration would stall the loop for as long as a
    5,000-client fan-out takes (and the re-polls those answers provoke would
    arrive in one burst as well). Here the answers run in the order the
    requests were woken, for at most `slice_secs` per iteration; between
    slices the loop runs its timers and reads sockets.
    """

    __slots__ = ("_pending", "_scheduled", "slice_secs")

    def __init__(self, slice_secs: float = ANSWER_SLICE_SECS):
        self.slice_secs = slice_secs
        self._pending: deque[tuple[Callable[[WakeReason], None], WakeReason]] = deque()
        self._scheduled = False

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, answer: Callable[[WakeReason], None], reason: WakeReason) -> None:
        self._pending.append((answer, reason))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        pending = self._pending
        popleft = pending.popleft
        deadline = time.monotonic() + self.slice_secs
        try:
            while pending:
                for _ in range(min(len(pending), _ANSWERS_PER_CHECK)):
                    answer, reason = popleft()
                    try:
                        answer(reason)
                    except Exception:
                        log.exception("answering a parked request failed")
                if time.monotonic() >= deadline:
                    break
        finally:
            if pending:
                asyncio.get_running_loop().call_soon(self._run)
            else:
                self._scheduled = False


# What a parked GET learns when it resumes: why the queue woke it, or that
# its own connection went away.
Outcome = WakeReason | Literal["disconnected"]


class ParkedRequest:
    """The `queues.client.Waiter` of one GET served by `handlers.events`.
    Created, parked and awaited on the IO loop; woken by the registry (its
    answer waits its turn in `slices`) or by its connection closing. Waking
    only resolves `outcome`: the handler builds the response when it
    resumes, so events that arrive meanwhile go out in the same response."""

    __slots__ = ("outcome", "slices", "timer")

    def __init__(self, slices: AnswerSlices) -> None:
        self.outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.slices = slices
        # The pending heartbeat; cancelled as soon as the request is answered.
        self.timer: asyncio.TimerHandle | None = None

    def wake(self, reason: WakeReason) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.slices.add(self._resolve, reason)

    def disconnected(self) -> None:
        self._resolve("disconnected")

    def _resolve(self, outcome: Outcome) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.outcome.done():
            self.outcome.set_result(outcome)
