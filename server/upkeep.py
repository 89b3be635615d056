"""The server's periodic work on the IO loop, started with the server and
stopped with it: the idle-queue garbage collector (whose queue ends are
where notifications for users who are away begin), reading the event log's
tail for notices that never came, checkpoints of the queues, telling the
retention update how far back this server needs the log, reading the
notification workers' figures, and the background updates' runner when this
process runs them.

In the assembly room with `app.py` (tests/test_layout.py, ROOMS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import psycopg
from tornado.ioloop import PeriodicCallback

from queues.registry import QueueRegistry
from server.config import Settings
from server.database.background import Runner
from server.database.db import Database, DatabaseUnavailable
from server.delivery.eventlog import EventLogReader
from server.durability.saved_queues import CHECKPOINT_SLICE_SECS, SavedQueues
from server.http.ratelimit import RateLimiter
from server.observability.notification_figures import NotificationFigures
from server.observability.observe import Observers

log = logging.getLogger("eventq.server")

# How often the event log's tail is read for events whose notice never came.
TAIL_SECS = 1.0
# How often a server tells the retention update how far back it needs the log
# (at most; after each checkpoint when they are more frequent), and how long
# an unchanged floor goes without being said again.
READER_FLOOR_SECS = 10.0
READER_FLOOR_REFRESH_SECS = 60.0
# How often the notification workers' figures are read (PostgreSQL, RabbitMQ)
# for /metrics and the operator page: Prometheus' usual scrape interval, so
# a scrape shows figures at most one scrape old, for two small queries and
# a passive queue.declare per server.
NOTIFICATION_FIGURES_SECS = 15.0
# The most of the server's CPU time checkpoints take: after a checkpoint of
# C seconds of CPU (its slices on the loop and the file's writing, not the
# waits for the disk), the next starts no sooner than C / CHECKPOINT_SHARE
# after that one's start, nor later than MAX_CHECKPOINT_GAP_SECS after it
# (the timer's next tick after either). A checkpoint's cost follows the
# events queued, and thousands of event streams hold hundreds of
# unacknowledged events each: every 5 s, such checkpoints took a quarter of
# the server's time (tests/benchmarks/README.md, "Requests after the answers").
CHECKPOINT_SHARE = 0.05
MAX_CHECKPOINT_GAP_SECS = 60.0


def _runner_ended(task: asyncio.Task[bool]) -> None:
    """The runner returns only when stopped: say so if it did otherwise."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background updates' runner ended", exc_info=task.exception())


class Upkeep:
    """The timers of one server process. Every method runs on the IO loop."""

    def __init__(
        self,
        settings: Settings,
        registry: QueueRegistry,
        db: Database,
        eventlog: EventLogReader,
        saved: SavedQueues,
        observers: Observers,
        limiters: tuple[RateLimiter | None, ...],
        background: Runner | None,
        reader_key: str,
        clock: Callable[[], float],
        stopping: Callable[[], bool],
        notification_figures: NotificationFigures | None = None,
    ):
        self.settings = settings
        self.registry = registry
        self.db = db
        self.eventlog = eventlog
        self.saved = saved
        self.observers = observers
        self.limiters = limiters
        self.background = background
        self.reader_key = reader_key
        self.clock = clock
        self.stopping = stopping
        self.notification_figures = notification_figures
        self._timers: list[PeriodicCallback] = []
        # The idle-queue collector's sweeps: how many, the last one's and the
        # longest one's duration (seconds), for the stats.
        self.gc_sweeps = 0
        self.gc_last_secs = 0.0
        self.gc_max_secs = 0.0
        self._floor_said: tuple[int, float] = (-1, 0.0)
        self._background_task: asyncio.Task[bool] | None = None
        # No checkpoint starts before this (time.monotonic(); CHECKPOINT_SHARE).
        self._checkpoint_not_before = 0.0

    def start_timers(self) -> None:
        settings = self.settings
        every = [
            (self.collect_garbage, settings.gc_interval_secs),
            (self._read_tail_soon, TAIL_SECS),
        ]
        if settings.checkpoint_secs > 0:
            every.append((self._checkpoint_soon, settings.checkpoint_secs))
        floor_secs = READER_FLOOR_SECS
        if settings.checkpoint_secs > 0:
            floor_secs = min(floor_secs, settings.checkpoint_secs)
        every.append((self._say_reader_floor_soon, floor_secs))
        if self.notification_figures is not None:
            every.append((self._read_notification_figures_soon, NOTIFICATION_FIGURES_SECS))
            self._read_notification_figures_soon()  # and now, not in 15 s
        for callback, secs in every:
            timer = PeriodicCallback(callback, secs * 1000)
            timer.start()
            self._timers.append(timer)

    def stop_timers(self) -> None:
        for timer in self._timers:
            timer.stop()
        self._timers.clear()

    def start_background(self) -> None:
        if self.background is not None:
            self._background_task = asyncio.get_running_loop().create_task(self.background.run())
            self._background_task.add_done_callback(_runner_ended)

    async def stop_background(self) -> None:
        task = self._background_task
        if self.background is None or task is None:
            return
        self.background.stop()  # after the batch in progress, if any
        try:
            await asyncio.wait_for(asyncio.shield(task), self.settings.shutdown_grace_secs)
        except TimeoutError:
            # A long one-shot update (an index build) starts again next time;
            # `eventq db background run` is the place for those.
            log.warning("background update still running at shutdown: cancelled")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def collect_garbage(self) -> None:
        """End the queues idle past their lifespan (the registry's end hooks
        see each one), and forget idle rate-limit buckets."""
        started = time.monotonic()
        collected = self.registry.collect_expired(self.clock())
        for limiter in self.limiters:
            if limiter is not None:
                limiter.forget_idle(self.clock())
        duration = time.monotonic() - started
        self.gc_sweeps += 1
        self.gc_last_secs = duration
        self.gc_max_secs = max(self.gc_max_secs, duration)
        self.observers.gc_ran(len(collected), duration)
        if collected:
            log.info(
                "collected %d idle queues in %.1f ms; %d remain",
                len(collected),
                duration * 1000,
                len(self.registry),
            )

    def _read_tail_soon(self) -> None:
        if not self.stopping():
            asyncio.get_running_loop().create_task(self.eventlog.read_tail())

    def _read_notification_figures_soon(self) -> None:
        figures = self.notification_figures
        if figures is not None and not self.stopping():
            asyncio.get_running_loop().create_task(figures.refresh())

    def _say_reader_floor_soon(self) -> None:
        if not self.stopping():
            asyncio.get_running_loop().create_task(self.say_reader_floor())

    async def say_reader_floor(self) -> None:
        """Tell the retention update (stream_readers) the lowest position
        this server's saved queues need: its last checkpoint's, or where its
        stream is when it saves none (then only a lagging stream needs it)."""
        floor = self.eventlog.position
        if self.settings.checkpoint_secs > 0:
            floor = min(floor, self.saved.checkpoint_floor or 0)
        said, at = self._floor_said
        if floor == said and time.monotonic() - at < READER_FLOOR_REFRESH_SECS:
            return
        try:
            await self.db.reader_floor(self.reader_key, floor)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log.warning("cannot record this server's event log floor (%s)", exc)
            return
        self._floor_said = (floor, time.monotonic())

    def _checkpoint_soon(self) -> None:
        if (
            not self.saved.checkpointing
            and not self.stopping()
            and time.monotonic() >= self._checkpoint_not_before
        ):
            asyncio.get_running_loop().create_task(self.checkpoint())

    async def checkpoint(self, slice_secs: float = CHECKPOINT_SLICE_SECS) -> float:
        """Save every queue for recovery after a crash; returns the seconds
        it took (`SavedQueues.checkpoint`). The periodic checkpoints after it
        wait for as long as CHECKPOINT_SHARE says."""
        started = time.monotonic()
        took = await self.saved.checkpoint(slice_secs)
        cpu = self.saved.last_checkpoint.get("cpu_ms", 0.0) / 1000
        self._checkpoint_not_before = started + min(cpu / CHECKPOINT_SHARE, MAX_CHECKPOINT_GAP_SECS)
        return took
