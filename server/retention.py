"""Retention of the event log: events older than a number of hours, or beyond
a number of bytes (oldest first), are deleted in batches with a pause between
them, so that pruning a large backlog never holds locks or the disk for long.

Every server runs it; an advisory lock taken per batch makes two of them take
turns rather than delete the same rows. `event_log_pruned.through` records
how far the log is pruned, in the batch's transaction: `resume_from` and the
queues saved before a crash are refused below it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from server.db import Database

log = logging.getLogger("eventq.retention")

# Between two batches: the database serves its other work meanwhile.
PAUSE_SECS = 0.05


@dataclasses.dataclass(frozen=True, slots=True)
class Pruned:
    through: int
    rows: int
    batches: int
    seconds: float


async def prune_event_log(
    db: Database,
    *,
    max_age_hours: float,
    max_bytes: int,
    batch: int,
    ceiling: int | None = None,
    pause_secs: float = PAUSE_SECS,
) -> Pruned:
    """Delete what retention no longer keeps, never above `ceiling` (the
    position this server's saved queues still need)."""
    started = time.monotonic()
    cut, through = await db.log_cut(max_age_hours, max_bytes)
    if ceiling is not None:
        cut = min(cut, ceiling)
    rows = batches = 0
    while cut > through:
        deleted = await db.log_prune_batch(cut, batch)
        batches += 1
        rows += deleted
        if deleted < batch:
            break
        await asyncio.sleep(pause_secs)
    outcome = Pruned(max(cut, through), rows, batches, time.monotonic() - started)
    if rows:
        log.info(
            "event log pruned through position %d: %d rows in %d batches, %.1f s"
            " (kept: %g hours, about %d bytes)",
            outcome.through,
            rows,
            batches,
            outcome.seconds,
            max_age_hours,
            max_bytes,
        )
    return outcome
