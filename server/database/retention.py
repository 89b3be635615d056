"""Retention of what grows without bound, as recurring background updates
(server/database/background.py): paced batched deletes, never one long `DELETE`.

- `event_log_retention`: events older than a number of hours, or beyond a
  number of bytes (oldest first), leave the event log. Never above the
  lowest floor of the servers that read it (`stream_readers`: each server's
  last checkpoint needs the log from there to rebuild its queues after a
  crash). `event_log_pruned.through` records how far the log is pruned, in
  each batch's transaction: `resume_from` and the queues saved before a
  crash are refused below it.
- `queue_journal_retention`: journal rows of queues registered longer ago
  than the event log keeps events, of servers that no longer say their floor
  (a removed shard's) are of no use: their queue could not be refilled. A
  live server trims its own rows at each checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any

from server.database.background_update import BackgroundUpdate, Batch, Conn

log = logging.getLogger("eventq.retention")

# A server says its floor at least every few minutes (server/app.py): its row
# counts for the retention period, and never for less than this.
MIN_FRESH_SECS = 600.0


def fresh_secs(max_age_hours: float) -> float:
    """How long a server's `stream_readers` row holds pruning back."""
    return max(max_age_hours * 3600, MIN_FRESH_SECS)


async def log_cut(conn: Conn, max_age_hours: float, max_bytes: int) -> tuple[int, int]:
    """The position to prune the log through so that what is left is younger
    than `max_age_hours` and about `max_bytes` of notices and their
    recipients (the size is estimated from the span of positions and a
    sample of row sizes, so that no query reads the whole log; indexes come
    on top), and the position to prune above: the current pruned-through,
    or lower when rows are left below it (a send that committed a position
    after a batch had deleted past it), so that a run deletes those too."""
    cur = await conn.execute(
        """
        SELECT
          (SELECT coalesce(max(position), 0) FROM event_log
           WHERE created_at < now() - make_interval(secs => %s)),
          (SELECT coalesce(min(position), 0) FROM event_log),
          (SELECT coalesce(max(position), 0) FROM event_log),
          (SELECT avg(octet_length(notice) + coalesce(pg_column_size(recipients), 0) + 64)
           FROM (SELECT notice, recipients FROM event_log
                 ORDER BY position DESC LIMIT 1000) newest),
          (SELECT through FROM event_log_pruned)
        """,
        (max_age_hours * 3600,),
    )
    row = await cur.fetchone()
    assert row is not None
    by_age, oldest, newest, mean, through = row
    cut = int(by_age)
    if mean and newest:
        keep = int(max_bytes / float(mean))
        if newest - oldest + 1 > keep:
            cut = max(cut, int(newest) - keep)
    start = int(through) if not oldest else min(int(through), int(oldest) - 1)
    return cut, start


async def readers_floor(conn: Conn, fresh: float) -> int | None:
    """The lowest position a server reading the log still needs, among those
    that said so within `fresh` seconds; None when none did."""
    cur = await conn.execute(
        "SELECT min(floor) FROM stream_readers"
        " WHERE updated_at > now() - make_interval(secs => %s)",
        (fresh,),
    )
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def event_log_retention(
    max_age_hours: float, max_bytes: int, every_secs: float
) -> BackgroundUpdate:
    async def batch(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        # Each batch deletes above `through` (what the run has pruned so far),
        # never scanning again what an earlier batch deleted.
        if "cut" in progress:
            cut, through = int(progress["cut"]), int(progress["through"])
        else:  # a new run: decide once how far it goes
            cut, through = await log_cut(conn, max_age_hours, max_bytes)
            floor = await readers_floor(conn, fresh_secs(max_age_hours))
            if floor is not None and floor < cut:
                log.info(
                    "event log: retention would prune through %d, but a server's saved"
                    " queues need it from %d (stream_readers); pruning through %d",
                    cut,
                    floor,
                    floor,
                )
                cut = floor
        if cut <= through:
            return Batch(0, {"cut": cut, "through": through}, done=True, items_left=0)
        cur = await conn.execute(
            """
            WITH gone AS (
              DELETE FROM event_log WHERE position IN (
                SELECT position FROM event_log WHERE position > %s AND position <= %s
                ORDER BY position LIMIT %s)
              RETURNING position)
            SELECT count(*), max(position) FROM gone
            """,
            (through, cut, size),
        )
        row = await cur.fetchone()
        assert row is not None
        deleted = int(row[0])
        done = deleted < size
        # Below a batch that was not full, nothing at or below `cut` is left.
        through = cut if done else int(row[1])
        await conn.execute(
            "UPDATE event_log_pruned SET through = greatest(through, %s)", (through,)
        )
        return Batch(deleted, {"cut": cut, "through": through}, done=done, items_left=cut - through)

    return BackgroundUpdate(
        "event_log_retention",
        batch,
        every_secs=every_secs,
        description="delete events past the event log's retention, oldest first",
    )


def queue_journal_retention(max_age_hours: float, every_secs: float) -> BackgroundUpdate:
    async def batch(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        cur = await conn.execute(
            """
            WITH gone AS (
              DELETE FROM queue_journal WHERE queue_id IN (
                SELECT queue_id FROM queue_journal
                WHERE journaled_at < extract(epoch FROM now()) - %s
                  AND shard NOT IN (
                    SELECT reader FROM stream_readers
                    WHERE updated_at > now() - make_interval(secs => %s))
                LIMIT %s)
              RETURNING 1)
            SELECT count(*) FROM gone
            """,
            (max_age_hours * 3600, fresh_secs(max_age_hours), size),
        )
        row = await cur.fetchone()
        deleted = 0 if row is None else int(row[0])
        total = int(progress.get("deleted", 0)) + deleted
        return Batch(deleted, {"deleted": total}, done=deleted < size)

    return BackgroundUpdate(
        "queue_journal_retention",
        batch,
        every_secs=every_secs,
        description="delete queue journal rows older than the event log's retention",
    )
