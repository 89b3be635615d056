"""What parked long-poll requests share: their heartbeats' deadlines and their
answers' turns. A parked poll itself is `handlers.longpoll_flow.ParkedPoll`."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable

from queues.client import ClientDescriptor, Waiter, WakeReason

log = logging.getLogger("eventq.longpoll")

# How long one IO-loop iteration may spend answering woken parked requests.
# An answer costs about 60 us of CPU and its client's next poll as much
# again, read in the next iteration: with 5 ms slices a fan-out to 5,000
# parked clients kept the loop's lag p99 at 34 ms (15 ms slices: 73 ms),
# for 8% more time until the last client had its answer.
ANSWER_SLICE_SECS = 0.005
# Answers between two looks at the clock.
_ANSWERS_PER_CHECK = 16
# Heartbeat deadlines are gathered in ticks of this (or a tenth of the
# heartbeat period, if shorter): a heartbeat is at most a tick late.
HEARTBEAT_TICK_SECS = 0.1


def heartbeat_delay(base_secs: float, jitter_secs: float) -> float:
    """When to send a parked request its heartbeat: `base_secs` plus a uniform
    0-`jitter_secs` (45 + 0-10 s by default), spreading the wake-ups of
    clients that parked together."""
    # Timing, not secrets; random.uniform costs twice as much, once a poll.
    return base_secs + jitter_secs * random.random()  # noqa: S311


class Heartbeats:
    """The heartbeat deadlines of parked requests, each `heartbeat_delay`
    after parking, gathered in ticks: one loop timer per tick that has a
    deadline in it, not one per parked request (a timer costs about 1.3 us
    to start and cancel under uvloop, and memory for as long as its request
    is parked). A deadline fires at the end of its tick, `fire(client)`,
    unless cancelled first, and only while its request is still the one
    parked on `client`."""

    __slots__ = ("_due", "_fire", "_loop", "base_secs", "jitter_secs", "tick_secs")

    def __init__(
        self,
        fire: Callable[[ClientDescriptor], None],
        base_secs: float,
        jitter_secs: float,
        tick_secs: float | None = None,
    ):
        self._fire = fire
        self.base_secs = base_secs
        self.jitter_secs = jitter_secs
        if tick_secs is None:
            tick_secs = min(HEARTBEAT_TICK_SECS, base_secs / 10)
        self.tick_secs = tick_secs
        # Tick -> the requests due then, each with its queue.
        self._due: dict[int, dict[Waiter, ClientDescriptor]] = {}
        # The loop of the first `start` (a Heartbeats serves one loop, as its
        # ticks' timers do): asking asyncio for it costs a getpid() system
        # call each time.
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return sum(len(due) for due in self._due.values())

    def start(self, waiter: Waiter, client: ClientDescriptor, delay: float | None = None) -> int:
        """Fire for `client` in `delay` s (default: a jittered heartbeat
        period) unless `cancel` comes first; returns the tick to give `cancel`."""
        if delay is None:
            delay = heartbeat_delay(self.base_secs, self.jitter_secs)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        tick = math.ceil((loop.time() + delay) / self.tick_secs)
        due = self._due.get(tick)
        if due is None:
            due = self._due[tick] = {}
            loop.call_at(tick * self.tick_secs, self._run, tick)
        due[waiter] = client
        return tick

    def cancel(self, tick: int, waiter: Waiter) -> None:
        due = self._due.get(tick)
        if due is not None:
            due.pop(waiter, None)

    def pending(self, tick: int, waiter: Waiter) -> bool:
        """Whether `waiter`'s deadline in `tick` is still to fire."""
        due = self._due.get(tick)
        return due is not None and waiter in due

    def _run(self, tick: int) -> None:
        for waiter, client in self._due.pop(tick, {}).items():
            if client.waiter is not waiter:
                # Not parked there now (an event stream between two writes
                # keeps its deadline): a heartbeat is its own waiter's only.
                continue
            try:
                self._fire(client)
            except Exception:
                log.exception("a heartbeat failed")


class AnswerSlices:
    """Answers woken parked requests a slice per IO-loop iteration.

    The registry wakes every parked request of a notice in one call; answering
    them all in that same iteration would stall the loop for as long as a
    5,000-client fan-out takes (and the re-polls those answers provoke would
    arrive in one burst as well). Here the answers run in the order the
    requests were woken, for at most `slice_secs` per iteration; between
    slices the loop runs its timers and reads sockets.

    A poll that finds events already waiting takes its turn here too, behind
    the answers before it, rather than being answered at once: an idle server
    answers it in the next iteration, a busy one once the answers ahead of it
    are out, with every event that came meanwhile. Under load an answer then
    carries more events, and the server makes fewer: fanout.py's 1,000
    clients with notices as fast as the server takes them read 6.3 events
    per answer instead of 1.8, and got 89,000 events/s instead of 39,000.
    """

    __slots__ = ("_drained", "_pending", "_scheduled", "slice_secs")

    def __init__(self, slice_secs: float = ANSWER_SLICE_SECS):
        self.slice_secs = slice_secs
        self._pending: deque[tuple[Callable[[WakeReason], None], WakeReason]] = deque()
        self._scheduled = False
        # Called once nothing is pending (`when_drained`).
        self._drained: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Call `callback` from the loop once every answer pending is out
        (server/http/turns.py: the next requests wait for them)."""
        self._drained.append(callback)
        if not self._pending:
            self._call_drained()

    def _call_drained(self) -> None:
        callbacks, self._drained = self._drained, []
        loop = asyncio.get_running_loop()
        for callback in callbacks:
            loop.call_soon(callback)

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
                if self._drained:
                    self._call_drained()
