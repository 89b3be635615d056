"""Background updates: long database work done in small batches, paced by a
controller, resumable after a crash (Synapse's background updates and their
controller, in Synapse's `synapse/storage/background_updates.py`). This
module holds the runner; the rest is in its neighbours, and every name of
theirs is importable from here too:

- server/database/background_update.py: what an update is, its code
  (`BackgroundUpdate`, `Batch`) and its row (`enqueue_sync`);
- server/database/background_controller.py: the controller that paces the
  batches (`DefaultController`, `Controller`, `Pace`);
- server/database/background_modules.py: what a module of EVENTQ_MODULES is
  given (`ModuleApi`, `load_modules`);
- server/database/background_status.py: the status of every update, for
  `db background status` and /metrics (`UpdateStatus`, `read_status`);
- server/database/background_worker.py: the batches a runner does while it
  holds the runner lock (`Worker`).

One runner works at a time per database: it holds a session advisory lock on
its own connection, and a second runner waits for it (the lock goes with the
connection when the first dies, even by SIGKILL). A failed update is tried
again after a pause written in its row, which every runner respects. Every
runner (working or waiting) reads the status of every update from the table
every few seconds, for /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import psycopg.conninfo

from server.database.background_controller import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_SLEEP_MS,
    DEFAULT_TARGET_MS,
    MAX_GROWTH,
    MIN_BATCH_SIZE,
    RATE_SMOOTHING,
    BatchSizeCallback,
    Controller,
    DefaultController,
    OnUpdate,
    Pace,
)
from server.database.background_modules import ModuleApi, ModuleError, load_modules
from server.database.background_status import (
    STATES,
    UpdateStatus,
    read_status,
    read_status_sync,
)
from server.database.background_update import (
    BackgroundUpdate,
    Batch,
    BatchFunction,
    Conn,
    enqueue_sync,
)
from server.database.background_worker import MAX_RETRY_SECS, Worker, retry_secs

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_SLEEP_MS",
    "DEFAULT_TARGET_MS",
    "IDLE_SECS",
    "MAX_GROWTH",
    "MAX_RETRY_SECS",
    "MIN_BATCH_SIZE",
    "RATE_SMOOTHING",
    "RUNNER_LOCK",
    "STATES",
    "STATUS_SECS",
    "BackgroundUpdate",
    "Batch",
    "BatchFunction",
    "BatchSizeCallback",
    "Conn",
    "Controller",
    "DefaultController",
    "ModuleApi",
    "ModuleError",
    "OnUpdate",
    "Pace",
    "Runner",
    "RunnerBusy",
    "UpdateStatus",
    "Worker",
    "database_name",
    "enqueue_sync",
    "load_modules",
    "read_status",
    "read_status_sync",
    "runner_sync",
]

log = logging.getLogger("eventq.background")

# Held (per session) by the one runner working on this database.
RUNNER_LOCK = 0x6576_656E_7471_0002

# With nothing to do, the runner looks for new work this often.
IDLE_SECS = 5.0
# The status a runner shows (/metrics) is read from the table this often (or
# as often as it looks for work, when that is more often), whoever works.
STATUS_SECS = 10.0


def runner_sync(conn: psycopg.Connection[Any]) -> str | None:
    """Who holds the runner lock, for the command line; None: no runner."""
    row = conn.execute(_HOLDER, (RUNNER_LOCK,)).fetchone()
    return None if row is None else _holder(row)


_HOLDER = """
    SELECT a.pid, a.application_name, a.client_addr::text FROM pg_locks l
    JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
        SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint) = %s
"""


def _holder(row: Sequence[Any]) -> str:
    return f"backend pid {row[0]}, {row[1] or 'no application name'}, from {row[2] or 'local'}"


# -- the runner ----------------------------------------------------------------


def database_name(conninfo: str) -> str:
    """The database name of a connection string, for the controller."""
    try:
        return str(psycopg.conninfo.conninfo_to_dict(conninfo).get("dbname") or "eventq")
    except psycopg.ProgrammingError:
        return "eventq"


class RunnerBusy(RuntimeError):
    """Raised by `Runner.run` when another runner held the runner lock for
    longer than the runner's `lock_wait_secs`; the message says who."""


class Runner(Worker):
    """Runs the enqueued updates that `updates` knows, one batch at a time.

    It takes the runner lock when there is work and releases it when there
    is none, so that another runner (a shard, `eventq db background run`)
    may work meanwhile; never two at once. `run()` returns when `stop()` is
    called, or with `until_idle` once nothing is left that it can do now
    (False if an update failed); such a run does a recurring update only if
    it was due when the run began, and then once. With `watch_status`, `status` is read from
    the table every `min(STATUS_SECS, idle_secs)` while `run()` runs,
    whether this runner works or another does (for /metrics). With
    `lock_wait_secs`, `run()` raises RunnerBusy rather than wait longer for
    another runner. Everything runs on the event loop that runs `run()`."""

    def __init__(
        self,
        conninfo: str,
        updates: Sequence[BackgroundUpdate],
        controller: Controller | None = None,
        *,
        idle_secs: float = IDLE_SECS,
        clock: Callable[[], float] = time.monotonic,
        application_name: str = "eventq-background",
        watch_status: bool = True,
        lock_wait_secs: float | None = None,
    ) -> None:
        super().__init__(database_name(conninfo), updates, controller, clock)
        self.conninfo = conninfo
        self.idle_secs = idle_secs
        self.application_name = application_name
        self.watch_status = watch_status
        self.status_secs = min(STATUS_SECS, idle_secs)
        self.lock_wait_secs = lock_wait_secs
        # True while this runner works (holds the lock).
        self.holding_lock = False
        # Crashes (exceptions out of a session) since the last cycle of work
        # that ended well: the pause before starting again grows with it.
        self._crashes = 0
        self._waiting_logged = False
        self._lock_logged = False

    async def _pause(self, secs: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), secs)

    async def run(self, *, until_idle: bool = False) -> bool:
        """Work until stopped (or idle). A lost connection, or anything
        unexpected, is logged and the runner starts again after a pause."""
        watcher = (
            asyncio.get_running_loop().create_task(self._watch()) if self.watch_status else None
        )
        self._rearm = True
        try:
            return await self._run(until_idle)
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    async def _run(self, until_idle: bool) -> bool:
        while not self.stopping:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, application_name=self.application_name
                )
            except psycopg.OperationalError as exc:
                log.error("background updates: cannot connect (%s); trying again", exc)
                await self._pause(self.idle_secs)
                continue
            try:
                async with conn:
                    return await self._session(conn, until_idle)
            except psycopg.OperationalError as exc:
                log.error("background updates: database connection lost (%s); reconnecting", exc)
                await self._pause(min(self.idle_secs, 1.0))
            except RunnerBusy:
                raise
            except Exception:
                self._crashes += 1
                wait = retry_secs(self._crashes)
                log.exception("background updates: the runner failed; again in %.0f s", wait)
                await self._pause(wait)
            finally:
                self.holding_lock = False
        return True

    async def _session(self, conn: Conn, until_idle: bool) -> bool:
        """Work on one connection: lock, work until idle, unlock, pause."""
        for known in self.updates.values():
            if known.every_secs is not None and known.enabled:
                await conn.execute(
                    "INSERT INTO background_updates (name, depends_on) VALUES (%s, %s)"
                    " ON CONFLICT (name) DO NOTHING",
                    (known.name, list(known.depends_on)),
                )
        while not self.stopping:
            if not await self._lock(conn):
                break
            try:
                succeeded = await self._work(conn, until_idle)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (RUNNER_LOCK,))
                self.holding_lock = False
            # A cycle that ended well: a crash after it is a first one again.
            self._crashes = 0
            if until_idle:
                return succeeded
            await self._pause(self._idle_wait())
        return True

    async def _lock(self, conn: Conn) -> bool:
        """Take the runner lock, waiting while another runner has it (at
        most `lock_wait_secs`, then RunnerBusy)."""
        began = self.clock()
        while not self.stopping:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (RUNNER_LOCK,))
            row = await cur.fetchone()
            if row is not None and row[0]:
                self.holding_lock = True
                if not self._lock_logged or self._waiting_logged:
                    log.info(
                        "background updates: this process runs them (database %s)", self.database
                    )
                self._lock_logged = True
                self._waiting_logged = False
                return True
            if not self._waiting_logged:
                holder = await self._lock_holder(conn)
                log.info(
                    "background updates: another runner works on database %s (%s); waiting",
                    self.database,
                    holder,
                )
                self._waiting_logged = True
            pause = self.idle_secs
            if self.lock_wait_secs is not None:
                left = self.lock_wait_secs - (self.clock() - began)
                if left <= 0:
                    raise RunnerBusy(
                        f"another runner works on database {self.database}"
                        f" ({await self._lock_holder(conn)});"
                        f" gave up after waiting {self.lock_wait_secs:g} s"
                    )
                pause = min(pause, left)
            await self._pause(pause)
        return False

    @staticmethod
    async def _lock_holder(conn: Conn) -> str:
        cur = await conn.execute(_HOLDER, (RUNNER_LOCK,))
        row = await cur.fetchone()
        return "it just finished" if row is None else _holder(row)

    async def _watch(self) -> None:
        """Read `status` every `status_secs` on a connection of its own (the
        runner's may be busy with a long one-shot update, or another runner
        may be doing the work), until cancelled."""
        conn: Conn | None = None
        failing = False
        try:
            while not self.stopping:
                try:
                    if conn is None or conn.closed:
                        conn = await psycopg.AsyncConnection.connect(
                            self.conninfo,
                            autocommit=True,
                            application_name=f"{self.application_name} status",
                        )
                    await self._read_status(conn)
                    failing = False
                except Exception as exc:
                    if not failing:
                        log.warning(
                            "background updates: cannot read their status (%s); /metrics"
                            " shows the last one read",
                            exc,
                            exc_info=not isinstance(exc, psycopg.OperationalError),
                        )
                    failing = True
                    if conn is not None:
                        await conn.close()
                        conn = None
                await self._pause(self.status_secs)
        finally:
            if conn is not None:
                await conn.close()

    def _idle_wait(self) -> float:
        """Until the next look for work: sooner when a failed update may be
        tried again before then."""
        soonest = min(
            (status.retry_in for status in self.status if status.retry_in is not None),
            default=self.idle_secs,
        )
        return max(0.01, min(self.idle_secs, soonest))
