"""The background update controller (Synapse's, in
`synapse/storage/background_updates.py`): how fast the runner goes.

Before each batch the runner enters the controller's `on_update(name,
database, one_shot)`, an async context manager whose value is the target
duration of the batch in milliseconds (ignored for one-shot updates); the
default one (`DefaultController`) sleeps first, so that the database serves
its other work between batches. The first batch has `default_batch_size`
items, each later one as many as the measured rate (`Pace`) does in the
target duration, never fewer than `min_batch_size`. A module named in
EVENTQ_MODULES may replace the three callbacks (`Controller.register`,
server/database/background_modules.py); the first registration wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager

log = logging.getLogger("eventq.background")

# Synapse's defaults: the first batch, the floor, the target per batch.
DEFAULT_BATCH_SIZE = 100
MIN_BATCH_SIZE = 100
DEFAULT_TARGET_MS = 100
# Between two batches of the default controller.
DEFAULT_SLEEP_MS = 1000
# How much a new measurement moves the rate used to size batches.
RATE_SMOOTHING = 0.3
# A batch has at most this many times the items of the one before: one fast
# batch (a first one that found little to do, a cache just warmed) would
# otherwise size the next for a rate it cannot keep, holding its locks for
# many times the target. Growth from 100 to 100,000 takes three batches.
MAX_GROWTH = 10


OnUpdate = Callable[[str, str, bool], AbstractAsyncContextManager[int]]
BatchSizeCallback = Callable[[str, str], Awaitable[int]]


class DefaultController:
    """Sleeps `sleep_ms` before each batch and targets `target_ms` per batch."""

    def __init__(
        self,
        target_ms: int = DEFAULT_TARGET_MS,
        sleep_ms: int = DEFAULT_SLEEP_MS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.target_ms = target_ms
        self.sleep_ms = sleep_ms
        self._sleep = sleep

    def on_update(
        self, name: str, database: str, one_shot: bool
    ) -> AbstractAsyncContextManager[int]:
        return self._iteration()

    @contextlib.asynccontextmanager
    async def _iteration(self) -> AsyncIterator[int]:
        if self.sleep_ms > 0:
            await self._sleep(self.sleep_ms / 1000)
        yield self.target_ms

    async def default_batch_size(self, name: str, database: str) -> int:
        return DEFAULT_BATCH_SIZE

    async def min_batch_size(self, name: str, database: str) -> int:
        return MIN_BATCH_SIZE


class Controller:
    """The callbacks in use: the default controller's, unless a module
    registered its own (`register`; the first registration wins)."""

    def __init__(self, default: DefaultController | None = None) -> None:
        self.default = default or DefaultController()
        self.on_update: OnUpdate = self.default.on_update
        self.default_batch_size: BatchSizeCallback = self.default.default_batch_size
        self.min_batch_size: BatchSizeCallback = self.default.min_batch_size
        self.registered_by: str | None = None

    def register(
        self,
        on_update: OnUpdate,
        default_batch_size: BatchSizeCallback | None = None,
        min_batch_size: BatchSizeCallback | None = None,
        *,
        module: str = "<unnamed>",
    ) -> bool:
        """Use these callbacks; returns False (and logs why) when a module
        registered before. `on_update` is required, the others default."""
        if self.registered_by is not None:
            log.warning(
                "background update controller callbacks of %s refused: %s registered first",
                module,
                self.registered_by,
            )
            return False
        if not callable(on_update):
            raise TypeError("on_update is required and must be callable")
        self.on_update = on_update
        self.default_batch_size = default_batch_size or self.default.default_batch_size
        self.min_batch_size = min_batch_size or self.default.min_batch_size
        self.registered_by = module
        log.info("background update controller callbacks registered by %s", module)
        return True


# -- batch sizes -------------------------------------------------------------


class Pace:
    """The measured rate of one update and the batch size it implies: a
    smoothed ratio of items to seconds over the batches so far."""

    def __init__(self) -> None:
        self.items = 0.0
        self.seconds = 0.0
        # The size of the batch before (None before the first): the next one
        # has at most MAX_GROWTH times as many items.
        self.last_size: int | None = None

    def record(self, items: int, seconds: float) -> None:
        if items <= 0 or seconds <= 0:
            return  # says nothing about the rate
        if self.seconds == 0:
            self.items, self.seconds = float(items), seconds
        else:
            self.items += RATE_SMOOTHING * (items - self.items)
            self.seconds += RATE_SMOOTHING * (seconds - self.seconds)

    @property
    def items_per_sec(self) -> float | None:
        return self.items / self.seconds if self.seconds > 0 else None

    def next_size(self, target_ms: int, minimum: int, first: int) -> int:
        """The size of the next batch: `first` until a rate is measured, then
        what the rate does in `target_ms`, at most MAX_GROWTH times the
        batch before, never below `minimum` (which wins over the cap)."""
        rate = self.items_per_sec
        size = first if rate is None else int(rate * target_ms / 1000)
        if self.last_size is not None:
            size = min(size, self.last_size * MAX_GROWTH)
        size = max(size, minimum, 1)
        self.last_size = size
        return size
