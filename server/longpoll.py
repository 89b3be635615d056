"""A parked long-poll request and its heartbeat timer."""

from __future__ import annotations

import asyncio
import random
from typing import Literal

from queues.client import WakeReason


def heartbeat_delay(base_secs: float, jitter_secs: float) -> float:
    """When to send a parked request its heartbeat: `base_secs` plus a uniform
    0-`jitter_secs` (45 + 0-10 s by default), spreading the wake-ups of
    clients that parked together."""
    return base_secs + random.uniform(0.0, jitter_secs)  # noqa: S311 (timing, not secrets)


# What a parked GET learns when it resumes: why the queue woke it, or that
# its own connection went away.
Outcome = WakeReason | Literal["disconnected"]


class ParkedRequest:
    """The `queues.client.Waiter` of one GET. Created, parked and awaited on the
    IO loop by `handlers.events`; woken by the registry or by its connection
    closing. Waking only resolves `outcome`: the handler builds the response
    when it resumes, so events that arrive in the same loop iteration go out
    in the same response."""

    __slots__ = ("outcome", "timer")

    def __init__(self) -> None:
        self.outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        # The pending heartbeat; cancelled as soon as the request is answered.
        self.timer: asyncio.TimerHandle | None = None

    def wake(self, reason: WakeReason) -> None:
        self._resolve(reason)

    def disconnected(self) -> None:
        self._resolve("disconnected")

    def _resolve(self, outcome: Outcome) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.outcome.done():
            self.outcome.set_result(outcome)
