"""The status of the background updates, as `db background status` and
/metrics show it: every row of `background_updates` read into an
`UpdateStatus`, its state (one of STATES) worked out from the row and the
code this process has. Every runner (working or waiting) reads it every few
seconds (server/database/background.py); the command line reads it once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from server.database.background_update import BackgroundUpdate, Conn

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
