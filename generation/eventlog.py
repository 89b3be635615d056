"""The event log: every event written to PostgreSQL with its position, in the
transaction of the change it describes (a transactional outbox; the table is
`deploy/migrations/0005_event_log.sql`).

A position comes from the `event_log_position` sequence when the row is
written, which the callers do at the very end of their transaction, after
the change's own writes: two transactions that touch the same rows then get
positions in their commit order. Unrelated transactions may commit out of
position order and a rolled-back one leaves a hole; the server reads only
the contiguous prefix as complete (`queues.positions`).

Every event is logged, typing and presence too: a queue rebuilt after a crash
must number its events as before, so it must see every event it saw then.

The row holds the notice's wire form without its position (the position is
the row's key); `with_position` adds it to the copy RabbitMQ carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from generation.notice import Notice
from generation.sharding import reaches_whole_realm

# The transaction takes its id (pg_current_xact_id) before its position: a
# server that finds the position missing must see the writer among the
# transactions still running, or it would take the gap for a rollback.
# nextval alone does not assign one, and an INSERT only once it writes the row.
_ONE = (
    "WITH xact AS MATERIALIZED (SELECT pg_current_xact_id())"
    " INSERT INTO event_log"
    " (position, realm_id, event_type, notice, recipients, public_message)"
    " SELECT nextval('event_log_position'), %s::integer, %s::text, %s::bytea,"
    " %s::text::bigint[], %s::boolean FROM xact"
    " RETURNING position"
)
_ONE_WITH_ID = (
    "WITH xact AS MATERIALIZED (SELECT pg_current_xact_id())"
    " INSERT INTO event_log"
    " (position, realm_id, event_type, notice, recipients, public_message, notice_id)"
    " SELECT nextval('event_log_position'), %s::integer, %s::text, %s::bytea,"
    " %s::text::bigint[], %s::boolean, %s::text FROM xact"
    " ON CONFLICT (notice_id) WHERE notice_id IS NOT NULL DO NOTHING RETURNING position"
)
_BY_ID = "SELECT position FROM event_log WHERE notice_id = %s"
_RESERVE = (
    "WITH xact AS MATERIALIZED (SELECT pg_current_xact_id())"
    " SELECT nextval('event_log_position') FROM xact, generate_series(1, %s)"
)
# A notice's recipients travel as one text literal per row ('{1,2,3}'): an
# array of arrays must be rectangular, and rows name different numbers of
# users.
_MANY = (
    "INSERT INTO event_log"
    " (position, realm_id, event_type, notice, recipients, public_message)"
    " SELECT position, realm_id, event_type, notice, recipients::bigint[], public_message"
    " FROM unnest(%s::bigint[], %s::integer[], %s::text[], %s::bytea[], %s::text[],"
    " %s::boolean[]) AS r(position, realm_id, event_type, notice, recipients, public_message)"
)

Entry = tuple[Notice, bytes]


def with_position(body: bytes, position: int) -> bytes:
    """The wire form `body` (an encoded notice, without a position) with its
    position added, without encoding the notice again."""
    if not body.endswith(b"}"):
        raise ValueError("not an encoded notice")
    return b'%s,"position":%d}' % (body[:-1], position)


def recipients(notice: Notice) -> str:
    """The ids of the notice's users as the literal of the log's
    `recipients` column (`{1,2,3}`): a notice may name thousands, and
    PostgreSQL parses the text faster than psycopg adapts a list of ints
    (about 1 ms against 3-6 ms of the caller's CPU for 10,000)."""
    ids = [user if isinstance(user, int) else user["id"] for user in notice.users]
    return "{" + ",".join(map(str, ids)) + "}"


def _row(notice: Notice, body: bytes) -> tuple[Any, ...]:
    """The values of one row after its position: realm, type, wire form,
    recipients and whether all_public_streams queues take it."""
    return (
        notice.realm_id,
        notice.event["type"],
        body,
        recipients(notice),
        reaches_whole_realm(notice.event),
    )


def _columns(entries: Sequence[Entry], positions: list[int]) -> tuple[list[Any], ...]:
    return (
        positions,
        [notice.realm_id for notice, _ in entries],
        [notice.event["type"] for notice, _ in entries],
        [body for _, body in entries],
        [recipients(notice) for notice, _ in entries],
        [reaches_whole_realm(notice.event) for notice, _ in entries],
    )


def write_once(conn: psycopg.Connection[Any], entry: Entry, notice_id: str) -> int:
    """Write one event known by `notice_id`, unless a row with that id is
    already there (an earlier try of the same send); its position either way."""
    notice, body = entry
    row = conn.execute(_ONE_WITH_ID, (*_row(notice, body), notice_id)).fetchone()
    if row is None:
        row = conn.execute(_BY_ID, (notice_id,)).fetchone()
    assert row is not None
    return int(row[0])


def write(conn: psycopg.Connection[Any], entries: Sequence[Entry]) -> list[int]:
    """Write `entries` (notice, wire form) in `conn`'s current transaction
    (or in one of its own in autocommit); their positions, in order."""
    if not entries:
        return []
    if len(entries) == 1:
        row = conn.execute(_ONE, _row(*entries[0])).fetchone()
        assert row is not None
        return [int(row[0])]
    positions = sorted(int(r[0]) for r in conn.execute(_RESERVE, (len(entries),)).fetchall())
    conn.execute(_MANY, _columns(entries, positions))
    return positions


async def write_async(conn: psycopg.AsyncConnection[Any], entries: Sequence[Entry]) -> list[int]:
    """`write` on an async connection."""
    if not entries:
        return []
    if len(entries) == 1:
        cur = await conn.execute(_ONE, _row(*entries[0]))
        row = await cur.fetchone()
        assert row is not None
        return [int(row[0])]
    cur = await conn.execute(_RESERVE, (len(entries),))
    positions = sorted(int(r[0]) for r in await cur.fetchall())
    await conn.execute(_MANY, _columns(entries, positions))
    return positions
