"""The work of a background update runner while it holds the runner lock
(`Worker`, which the runner of server/database/background.py is): pick the
update to do a batch of, size the batch (the controller and the update's
`Pace`, server/database/background_controller.py), run it in the runner's
transaction and write what it did in the update's row in that same
transaction, so that a runner killed mid-update resumes from the last
committed batch, nothing skipped and nothing done twice. A failed update is
tried again after a pause written in its row, which every runner respects.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson

from server.database.background_controller import Controller, Pace
from server.database.background_status import UpdateStatus, read_status
from server.database.background_update import BackgroundUpdate, Batch, Conn

log = logging.getLogger("eventq.background")

# A failed batch is tried again after 2, 4, 8 ... seconds, at most this long.
MAX_RETRY_SECS = 300.0


class Worker:
    """Does the batches of the enqueued updates that `updates` knows, on a
    connection that holds the runner lock (`Runner`, in
    server/database/background.py, is a worker that takes it). Keeps the
    latest status it read in `status`; `stop()` has it return after the
    current batch."""

    def __init__(
        self,
        database: str,
        updates: Sequence[BackgroundUpdate],
        controller: Controller | None,
        clock: Callable[[], float],
    ) -> None:
        self.database = database
        self.updates = {update.name: update for update in updates}
        self.controller = controller or Controller()
        self.clock = clock
        # The latest status of every update read by this runner (for
        # /metrics): from the read that began last of those that returned.
        self.status: list[UpdateStatus] = []
        self._reads = 0  # status reads begun
        self._shown = 0  # the read `status` comes from: never goes back
        # This runner's measurements.
        self.paces: dict[str, Pace] = {}
        self._first_sizes: dict[str, int] = {}
        # Whether the next look re-arms the recurring updates that are due.
        # A run `until_idle` does it once, at its first look: a period
        # shorter than the time between two looks (EVENTQ_EVENT_LOG_PRUNE_SECS
        # of a few seconds, a slow machine) would have it run for ever.
        self._rearm = True
        self._stop = asyncio.Event()
        self._announced: set[str] = set()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def _work(self, conn: Conn, until_idle: bool) -> bool:
        """Batches until nothing can run now; False at once if one failed
        with `until_idle` (the command line stops and says so)."""
        while not self.stopping:
            if self._rearm:
                await self._rearm_recurring(conn)
                self._rearm = not until_idle
            update, status = self._next(await self._read_status(conn))
            if update is None or status is None:
                return True
            if not await self._run_batch(conn, update, status) and until_idle:
                return False
        return True

    async def _read_status(self, conn: Conn) -> list[UpdateStatus]:
        """Every update's status, now; kept in `status` unless a read that
        began later has already returned."""
        self._reads += 1
        read = self._reads
        statuses = await read_status(conn, list(self.updates.values()))
        if read > self._shown:
            self.status, self._shown = statuses, read
        return statuses

    async def _rearm_recurring(self, conn: Conn) -> None:
        for update in self.updates.values():
            if update.every_secs is None or not update.enabled:
                continue
            await conn.execute(
                """
                UPDATE background_updates SET
                  progress = '{}', items_done = 0, batches = 0, items_left = NULL,
                  run_secs = 0, started_at = NULL, updated_at = NULL, finished_at = NULL
                WHERE name = %s AND finished_at < now() - make_interval(secs => %s)
                """,
                (update.name, update.every_secs),
            )

    def _next(
        self, statuses: Sequence[UpdateStatus]
    ) -> tuple[BackgroundUpdate | None, UpdateStatus | None]:
        """The update to do a batch of: a due recurring one (retention)
        first, then the others in the order they were enqueued. A failing
        one waits for its `retry_at`, whichever runner saw it fail."""
        runnable = [
            status
            for status in statuses
            if status.kind in ("pending", "running", "failing") and status.retry_in is None
        ]
        runnable.sort(key=lambda status: self.updates[status.name].every_secs is None)
        if not runnable:
            return None, None
        return self.updates[runnable[0].name], runnable[0]

    async def _run_batch(self, conn: Conn, update: BackgroundUpdate, status: UpdateStatus) -> bool:
        """One batch (or the one-shot update); False if it failed."""
        name = update.name
        pace = self.paces.setdefault(name, Pace())
        controller = self.controller
        try:
            # Only a batched update is sized (and asks for the floor).
            minimum = 0 if update.one_shot else await controller.min_batch_size(name, self.database)
            if name not in self._first_sizes:
                self._first_sizes[name] = await controller.default_batch_size(name, self.database)
            first = self._first_sizes[name]
            self._announce(update, status)
            cycle_started = self.clock()
            async with controller.on_update(name, self.database, update.one_shot) as target_ms:
                if self.stopping:
                    return True
                started = self.clock()
                if update.one_shot:
                    # Synapse ignores a one-shot's duration: the controller
                    # may give none (a module's on_update yielding None).
                    enqueued_at = await self._mark_started(conn, name)
                    if enqueued_at is None:
                        return True  # its row went meanwhile
                    result = await update.batch(conn, status.progress, first)
                    elapsed = self.clock() - started
                    recorded = await self._record(
                        conn,
                        name,
                        result,
                        None,
                        None,
                        self.clock() - cycle_started,
                        done=True,
                        enqueued_at=enqueued_at,
                    )
                    if not recorded:
                        log.info(
                            "background update %s was enqueued again while it ran: it runs again",
                            name,
                        )
                        self._announced.discard(name)
                        return True
                else:
                    # Sized for the target of this very batch.
                    size = pace.next_size(int(target_ms), minimum, first)
                    async with conn.transaction():
                        progress = await self._locked_progress(conn, name)
                        if progress is None:
                            return True  # its row went meanwhile
                        result = await update.batch(conn, progress, size)
                        elapsed = self.clock() - started
                        pace.record(result.items, elapsed)
                        await self._record(
                            conn,
                            name,
                            result,
                            size,
                            pace.items_per_sec,
                            self.clock() - cycle_started,
                            done=result.done,
                        )
        except Exception as exc:
            if conn.broken or conn.closed:
                raise  # the connection: run() reconnects
            await self._failed(conn, name, status.failures + 1, exc)
            return False
        if update.one_shot or result.done:
            self._announced.discard(name)
            took = elapsed if status.started_at is None else time.time() - status.started_at
            items = status.items_done + result.items
            log.log(
                logging.DEBUG if update.every_secs and not items else logging.INFO,
                "background update %s finished: %d items in %d batches, %.1f s (progress %s)",
                name,
                items,
                status.batches + 1,
                took,
                orjson.dumps(result.progress).decode(),
            )
        return True

    def _announce(self, update: BackgroundUpdate, status: UpdateStatus) -> None:
        if update.name in self._announced:
            return
        self._announced.add(update.name)
        # A one-shot update that was interrupted starts again from nothing.
        if status.started_at is None or update.one_shot:
            # A recurring update says only what it did (when it finishes).
            log.log(
                logging.DEBUG if update.every_secs else logging.INFO,
                "background update %s started%s",
                update.name,
                " (one shot)" if update.one_shot else "",
            )
        else:
            log.info(
                "background update %s resumed after %d items (progress %s)",
                update.name,
                status.items_done,
                orjson.dumps(status.progress).decode(),
            )

    @staticmethod
    async def _mark_started(conn: Conn, name: str) -> datetime.datetime | None:
        """Say that a one-shot update runs (`status` shows it running) and
        return when it was enqueued, which its end is recorded against; None
        when its row went."""
        cur = await conn.execute(
            "UPDATE background_updates SET started_at = coalesce(started_at, now()),"
            " updated_at = now() WHERE name = %s RETURNING enqueued_at",
            (name,),
        )
        row = await cur.fetchone()
        return None if row is None else cast(datetime.datetime, row[0])

    @staticmethod
    async def _locked_progress(conn: Conn, name: str) -> dict[str, Any] | None:
        """The progress to go on from, read and locked in the batch's
        transaction: an `enqueue` meanwhile waits for the batch, then wins."""
        cur = await conn.execute(
            "SELECT progress FROM background_updates WHERE name = %s FOR UPDATE", (name,)
        )
        row = await cur.fetchone()
        return None if row is None else dict(row[0])

    @staticmethod
    async def _record(
        conn: Conn,
        name: str,
        result: Batch,
        size: int | None,
        rate: float | None,
        secs: float,
        *,
        done: bool,
        enqueued_at: datetime.datetime | None = None,
    ) -> bool:
        """Write what a batch did; with `enqueued_at`, only if the update
        was not enqueued again since then (False: it was, and runs again)."""
        cur = await conn.execute(
            """
            UPDATE background_updates SET
              progress = %s, items_done = items_done + %s, batches = batches + 1,
              batch_size = %s, items_per_sec = coalesce(%s, items_per_sec),
              items_left = CASE WHEN %s THEN 0 ELSE %s END, run_secs = run_secs + %s,
              started_at = coalesce(started_at, now()), updated_at = now(),
              finished_at = CASE WHEN %s THEN now() END,
              failures = 0, last_error = NULL, retry_at = NULL
            WHERE name = %s AND (%s::timestamptz IS NULL OR enqueued_at = %s)
            """,
            (
                orjson.dumps(result.progress).decode(),
                result.items,
                size,
                rate,
                done,
                result.items_left,
                secs,
                done,
                name,
                enqueued_at,
                enqueued_at,
            ),
        )
        return cur.rowcount > 0

    async def _failed(self, conn: Conn, name: str, failures: int, exc: Exception) -> None:
        wait = retry_secs(failures)
        log.error(
            "background update %s failed (%d in a row), trying again in %.0f s: %s: %s",
            name,
            failures,
            wait,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        # In the row, not in this runner: another runner waits as long.
        await conn.execute(
            "UPDATE background_updates SET failures = %s, last_error = %s, updated_at = now(),"
            " retry_at = now() + make_interval(secs => %s) WHERE name = %s",
            (failures, f"{type(exc).__name__}: {exc}"[:2000], wait, name),
        )


def retry_secs(failures: int) -> float:
    """2, 4, 8 ... seconds, at most MAX_RETRY_SECS."""
    return min(MAX_RETRY_SECS, 2.0 ** min(failures, 20))
