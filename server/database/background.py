"""Background updates: long database work done in small batches, paced by a
controller, resumable after a crash (Synapse's background updates and their
controller, in Synapse's `synapse/storage/background_updates.py`).

An update is code registered under a name (`BackgroundUpdate`; the standard
ones are in server/database/updates.py) and a row in `background_updates` that says it
is wanted (a migration inserts it; a recurring update's row is inserted by
the runner). Its batch function does up to N items in the runner's
transaction and returns how many it did and its progress, which the runner
writes in that same transaction: a runner killed mid-update resumes from the
last committed batch, nothing skipped and nothing done twice. A one-shot
update (`CREATE INDEX CONCURRENTLY`) runs outside a transaction, in one go,
and must be safe to run again after a crash.

Before each batch the runner enters the controller's `on_update(name,
database, one_shot)`, an async context manager whose value is the target
duration of the batch in milliseconds (ignored for one-shot updates); the
default one sleeps first, so that the database serves its other work between
batches. The first batch has `default_batch_size` items, each later one as
many as the measured rate does in the target duration, never fewer than
`min_batch_size`. A module named in EVENTQ_MODULES may replace the three
callbacks; the first registration wins.

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
import dataclasses
import datetime
import importlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import orjson
import psycopg
import psycopg.conninfo

log = logging.getLogger("eventq.background")

# Held (per session) by the one runner working on this database.
RUNNER_LOCK = 0x6576_656E_7471_0002

# Synapse's defaults: the first batch, the floor, the target per batch.
DEFAULT_BATCH_SIZE = 100
MIN_BATCH_SIZE = 100
DEFAULT_TARGET_MS = 100
# Between two batches of the default controller.
DEFAULT_SLEEP_MS = 1000
# With nothing to do, the runner looks for new work this often.
IDLE_SECS = 5.0
# A failed batch is tried again after 2, 4, 8 ... seconds, at most this long.
MAX_RETRY_SECS = 300.0
# How much a new measurement moves the rate used to size batches.
RATE_SMOOTHING = 0.3
# A batch has at most this many times the items of the one before: one fast
# batch (a first one that found little to do, a cache just warmed) would
# otherwise size the next for a rate it cannot keep, holding its locks for
# many times the target. Growth from 100 to 100,000 takes three batches.
MAX_GROWTH = 10
# The status a runner shows (/metrics) is read from the table this often (or
# as often as it looks for work, when that is more often), whoever works.
STATUS_SECS = 10.0

Conn = psycopg.AsyncConnection[Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """What a batch did: `items` handled, the `progress` to resume from, and
    whether the update is `done`. `items_left`, when the function can tell,
    feeds the estimated time left."""

    items: int
    progress: dict[str, Any]
    done: bool
    items_left: int | None = None


BatchFunction = Callable[[Conn, dict[str, Any], int], Awaitable[Batch]]


@dataclasses.dataclass(frozen=True, slots=True)
class BackgroundUpdate:
    """An update's code. `batch(conn, progress, batch_size)` runs in the
    runner's transaction on `conn` (autocommit and outside any transaction
    when `one_shot`), starting from `{}`. A recurring update (`every_secs`)
    starts again from `{}` that long after it finished. One not `enabled`
    is known here (its rows are listed as `disabled here`) but this
    process's settings turn it off: it never runs it."""

    name: str
    batch: BatchFunction
    depends_on: tuple[str, ...] = ()
    one_shot: bool = False
    every_secs: float | None = None
    description: str = ""
    enabled: bool = True


# -- the controller ----------------------------------------------------------

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


class ModuleApi:
    """What a module named in EVENTQ_MODULES is given: its `setup(api)` is
    called once at start (and by each `eventq db background` command). It
    may replace the controller's callbacks and add updates of its own."""

    def __init__(self, controller: Controller, module: str) -> None:
        self._controller = controller
        self._module = module
        self.updates: list[BackgroundUpdate] = []

    def register_background_update(self, update: BackgroundUpdate) -> None:
        """Run `update` when a row of `background_updates` names it."""
        self.updates.append(update)

    def register_background_update_controller_callbacks(
        self,
        on_update: OnUpdate,
        default_batch_size: BatchSizeCallback | None = None,
        min_batch_size: BatchSizeCallback | None = None,
    ) -> bool:
        return self._controller.register(
            on_update, default_batch_size, min_batch_size, module=self._module
        )


class ModuleError(ValueError):
    """A module in EVENTQ_MODULES cannot be loaded; the message says which and why."""


def load_modules(names: Sequence[str], controller: Controller) -> list[BackgroundUpdate]:
    """Import each module and call its `setup(api)`, in order; returns the
    updates they registered."""
    updates: list[BackgroundUpdate] = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ModuleError(f"EVENTQ_MODULES: cannot import {name}: {exc}") from exc
        setup = getattr(module, "setup", None)
        if not callable(setup):
            raise ModuleError(f"EVENTQ_MODULES: {name} has no setup(api) function")
        api = ModuleApi(controller, name)
        try:
            setup(api)
        except Exception as exc:
            raise ModuleError(
                f"EVENTQ_MODULES: {name}.setup(api) failed: {type(exc).__name__}: {exc}"
            ) from exc
        updates += api.updates
    return updates


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


# -- status --------------------------------------------------------------------

# An update's state without its details (`waiting for X` is `waiting`): the
# values of the `state` label in /metrics. `disabled here`: this process's
# settings turn the update off (another runner may have them on).
STATES = ("pending", "running", "waiting", "failing", "done", "unknown", "disabled here")


@dataclasses.dataclass(frozen=True, slots=True)
class UpdateStatus:
    """One row of `background_updates`, as `db background status` shows it."""

    name: str
    state: str
    depends_on: tuple[str, ...]
    progress: dict[str, Any]
    items_done: int
    batches: int
    batch_size: int | None
    items_per_sec: float | None
    items_left: int | None
    started_at: float | None
    updated_at: float | None
    finished_at: float | None
    failures: int
    last_error: str | None
    # Seconds spent on it: its batches and the controller's pauses before
    # them (not the time no runner worked on it).
    run_secs: float = 0.0
    # Seconds until a failing update may be tried again (by any runner);
    # None when it may be now.
    retry_in: float | None = None

    @property
    def kind(self) -> str:
        """The state, one of STATES."""
        return "waiting" if self.state.startswith("waiting") else self.state

    @property
    def seconds_left(self) -> float | None:
        """Items left over the rate achieved so far, pauses included."""
        if self.state == "done" or self.items_left is None:
            return None
        if self.items_done <= 0 or self.run_secs <= 0:
            return None
        return self.items_left / (self.items_done / self.run_secs)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["depends_on"] = list(self.depends_on)
        out["seconds_left"] = self.seconds_left
        return out


# `retry_at` counts only while `failures` > 0: a runner of the version before
# migration 0011 resets `failures` (on success, on enqueue) but not it.
_STATUS_COLUMNS = """
    name, depends_on, progress, items_done, batches, batch_size, items_per_sec,
    items_left, extract(epoch FROM started_at), extract(epoch FROM updated_at),
    extract(epoch FROM finished_at), failures, last_error, run_secs,
    CASE WHEN failures > 0 AND retry_at > now() THEN extract(epoch FROM retry_at - now()) END
"""
_STATUS_QUERY = f"SELECT {_STATUS_COLUMNS} FROM background_updates ORDER BY enqueued_at, seq"  # noqa: S608


def _status_of(
    row: Sequence[Any],
    finished: set[str],
    updates: Mapping[str, BackgroundUpdate] | None,
) -> UpdateStatus:
    (name, row_depends, progress, items_done, batches, batch_size, rate, left) = row[:8]
    started, updated, finished_at, failures, error, run_secs, retry_in = row[8:]
    code = None if updates is None else updates.get(name)
    depends_on = tuple(dict.fromkeys([*row_depends, *(code.depends_on if code else ())]))
    waiting = [d for d in depends_on if d not in finished]
    if finished_at is not None:
        state = "done"
    elif updates is not None and code is None:
        state = "unknown"  # enqueued by a newer version's migration
    elif code is not None and not code.enabled:
        state = "disabled here"
    elif waiting:
        state = "waiting for " + ", ".join(waiting)
    elif failures:
        state = "failing"
    elif started is not None:
        state = "running"
    else:
        state = "pending"
    return UpdateStatus(
        name=name,
        state=state,
        depends_on=tuple(depends_on),
        progress=progress,
        items_done=int(items_done),
        batches=int(batches),
        batch_size=batch_size,
        items_per_sec=rate,
        items_left=None if left is None else int(left),
        started_at=None if started is None else float(started),
        updated_at=None if updated is None else float(updated),
        finished_at=None if finished_at is None else float(finished_at),
        failures=int(failures),
        last_error=error,
        run_secs=float(run_secs),
        retry_in=None if retry_in is None else float(retry_in),
    )


def _statuses(
    rows: Sequence[Sequence[Any]], updates: Sequence[BackgroundUpdate] | None
) -> list[UpdateStatus]:
    by_name = None if updates is None else {update.name: update for update in updates}
    code = by_name or {}
    # A dependency without a row was never enqueued here: nothing to wait for.
    present = {row[0] for row in rows}
    finished = {row[0] for row in rows if row[10] is not None}
    wanted = {
        d for row in rows for d in (*row[1], *(code[row[0]].depends_on if row[0] in code else ()))
    }
    finished |= wanted - present
    return [_status_of(row, finished, by_name) for row in rows]


async def read_status(
    conn: Conn, updates: Sequence[BackgroundUpdate] | None = None
) -> list[UpdateStatus]:
    """Every update enqueued in this database, in the order they run;
    `updates`: the code this process has (what each depends on, which are
    `unknown` or `disabled here`); None: states without that."""
    cur = await conn.execute(_STATUS_QUERY)
    return _statuses(await cur.fetchall(), updates)


def read_status_sync(
    conn: psycopg.Connection[Any], updates: Sequence[BackgroundUpdate] | None = None
) -> list[UpdateStatus]:
    """`read_status` for the command line."""
    return _statuses(conn.execute(_STATUS_QUERY).fetchall(), updates)


def enqueue_sync(conn: psycopg.Connection[Any], name: str, depends_on: Sequence[str] = ()) -> None:
    """Ask for an update (again, from the start, if it ran before)."""
    conn.execute(
        """
        INSERT INTO background_updates (name, depends_on) VALUES (%s, %s)
        ON CONFLICT (name) DO UPDATE SET
          depends_on = excluded.depends_on,
          progress = '{}', items_done = 0, batches = 0, items_left = NULL, run_secs = 0,
          enqueued_at = now(), started_at = NULL, updated_at = NULL,
          finished_at = NULL, failures = 0, last_error = NULL, retry_at = NULL
        """,
        (name, list(depends_on)),
    )


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


class Runner:
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
        self.conninfo = conninfo
        self.database = database_name(conninfo)
        self.updates = {update.name: update for update in updates}
        self.controller = controller or Controller()
        self.idle_secs = idle_secs
        self.clock = clock
        self.application_name = application_name
        self.watch_status = watch_status
        self.status_secs = min(STATUS_SECS, idle_secs)
        self.lock_wait_secs = lock_wait_secs
        # True while this runner works (holds the lock).
        self.holding_lock = False
        # The latest status of every update read by this runner (for
        # /metrics): from the read that began last of those that returned.
        self.status: list[UpdateStatus] = []
        self._reads = 0  # status reads begun
        self._shown = 0  # the read `status` comes from: never goes back
        # This runner's measurements.
        self.paces: dict[str, Pace] = {}
        self._first_sizes: dict[str, int] = {}
        # Crashes (exceptions out of a session) since the last cycle of work
        # that ended well: the pause before starting again grows with it.
        self._crashes = 0
        # Whether the next look re-arms the recurring updates that are due.
        # A run `until_idle` does it once, at its first look: a period
        # shorter than the time between two looks (EVENTQ_EVENT_LOG_PRUNE_SECS
        # of a few seconds, a slow machine) would have it run for ever.
        self._rearm = True
        self._stop = asyncio.Event()
        self._waiting_logged = False
        self._lock_logged = False
        self._announced: set[str] = set()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

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
                wait = _retry_secs(self._crashes)
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
        wait = _retry_secs(failures)
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


def _retry_secs(failures: int) -> float:
    """2, 4, 8 ... seconds, at most MAX_RETRY_SECS."""
    return min(MAX_RETRY_SECS, 2.0 ** min(failures, 20))
