"""What a background update is: code registered under a name
(`BackgroundUpdate`, its batch function and what a batch did, `Batch`; the
standard ones are in server/database/updates.py) and a row in
`background_updates` that says it is wanted (`enqueue_sync`; a migration
inserts it; a recurring update's row is inserted by the runner,
server/database/background.py).

A batch function does up to N items in the runner's transaction and returns
how many it did and its progress, which the runner writes in that same
transaction (server/database/background_worker.py). A one-shot update
(`CREATE INDEX CONCURRENTLY`) runs outside a transaction, in one go, and must
be safe to run again after a crash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

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
