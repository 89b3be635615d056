"""The server's PostgreSQL access: one psycopg async pool on the IO loop.

Nothing here blocks the loop: every query awaits a pooled connection. psycopg
errors become `DatabaseUnavailable` here, so handlers answer 503 instead of 500.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from generation.accounts import ROLE_GUEST

log = logging.getLogger("eventq.db")

# A row of the event log as resume reads it: position, wire form, and whether
# its recipients are unknown (written by an earlier version).
LogRow = tuple[int, bytes, bool]


class DatabaseUnavailable(Exception):
    """Raised by `Database` when PostgreSQL cannot be reached or a query fails
    for a reason outside the request (connection lost, timeout)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKeyRow:
    """The user behind an API key id, with what authentication checks."""

    user_id: int
    realm_id: int
    email: str
    full_name: str
    role: int
    is_active: bool
    api_key_hash: bytes
    api_key_hash_scheme: int
    realm_deactivated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SessionRow:
    """The user of a browser session, found by id: what authentication
    checks, their API key's id, and the generation of their sessions."""

    row: ApiKeyRow
    api_key_id: str
    sessions_generation: int


# One user's logged notices for resume_from (`Database.log_for_user`): three
# reads, each by its own index (server/database/updates.py) and each stopping at the
# limit, merged: the rows naming the user, the realm's public channel
# messages (all_public_streams; a message both is read twice and kept once),
# and rows an earlier version wrote without recipients. The first `limit`
# positions of the whole are among the first `limit` of each read: fewer
# than `limit` rows means there are no more.
LOG_FOR_USER = """
SELECT DISTINCT ON (position) position, notice, unknown FROM (
(SELECT position, notice, false AS unknown FROM event_log
 WHERE recipients @> ARRAY[%(user)s::bigint]
   AND position > %(after)s AND position <= %(upto)s
   AND (realm_id = %(realm)s OR realm_id IS NULL)
   AND (%(types)s::text[] IS NULL OR event_type = ANY(%(types)s::text[]))
 ORDER BY position LIMIT %(limit)s)
UNION ALL
(SELECT position, notice, false FROM event_log
 WHERE %(public)s AND public_message AND realm_id = %(realm)s
   AND position > %(after)s AND position <= %(upto)s
   AND (%(types)s::text[] IS NULL OR event_type = ANY(%(types)s::text[]))
 ORDER BY position LIMIT %(limit)s)
UNION ALL
(SELECT position, notice, true FROM event_log
 WHERE recipients IS NULL
   AND position > %(after)s AND position <= %(upto)s
   AND (realm_id = %(realm)s OR realm_id IS NULL)
   AND (%(types)s::text[] IS NULL OR event_type = ANY(%(types)s::text[]))
 ORDER BY position LIMIT %(limit)s)
) candidates
ORDER BY position LIMIT %(limit)s
"""


# Of the message ids asked about, those a deletion logged in the realm in a
# range of positions names (`Database.deleted_messages`). json, not jsonb: a
# notice may hold an escaped NUL, which jsonb refuses; an id is compared as a number
# (5.0 names message 5) before it is cast.
DELETED_MESSAGES = """
SELECT DISTINCT (id #>> '{}')::numeric::bigint FROM (
    SELECT convert_from(notice, 'UTF8')::json -> 'event' AS event
    FROM event_log
    WHERE event_type = 'delete_message' AND realm_id = %(realm)s
      AND position > %(after)s AND position <= %(upto)s
) deletions,
LATERAL json_array_elements(
    CASE WHEN json_typeof(event -> 'message_ids') = 'array'
         THEN event -> 'message_ids'
         ELSE json_build_array(event -> 'message_id') END
) AS id
WHERE json_typeof(id) = 'number' AND (id #>> '{}')::numeric = ANY(%(ids)s::numeric[])
"""


class Database:
    """Created closed; `open()` on the IO loop before use, `close()` at shutdown."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 5.0):
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            # A request waits at most this long for a connection, then gets a 503.
            timeout=timeout,
            # Connections broken by a database restart are replaced on checkout.
            check=AsyncConnectionPool.check_connection,
            kwargs={"autocommit": True, "application_name": "eventq"},
            name="eventq",
        )

    async def open(self, wait_secs: float = 5.0) -> bool:
        """Open the pool; returns whether the database answered within
        `wait_secs`. If not, the pool keeps trying in the background."""
        await self._pool.open(wait=False)
        try:
            async with self._pool.connection(timeout=wait_secs) as conn:
                await conn.execute("SELECT 1")
        except (PoolTimeout, psycopg.OperationalError) as exc:
            log.error("database not reachable yet (%s); requests needing it get 503", exc)
            return False
        return True

    async def missing_migrations(self, latest: str) -> str | None:
        """None if `latest` has been applied; otherwise what is missing."""
        try:
            async with self.connection() as conn:
                cur = await conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE name = %s", (latest,)
                )
                if await cur.fetchone() is None:
                    return f"migration {latest} not applied"
        except psycopg.errors.UndefinedTable:
            return "no schema_migrations table"
        return None

    async def close(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled autocommit connection: each statement sees its own snapshot."""
        try:
            async with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseUnavailable(f"no database connection: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(f"database error: {exc}") from exc

    async def api_key(self, key_id: str) -> ApiKeyRow | None:
        """The user whose API key has this id, or None."""
        async with self.connection() as conn:
            cur = conn.cursor(row_factory=class_row(ApiKeyRow))
            await cur.execute(
                """
                SELECT u.id AS user_id, u.realm_id, u.email, u.full_name, u.role,
                       u.is_active, u.api_key_hash, u.api_key_hash_scheme,
                       r.deactivated AS realm_deactivated
                FROM users u JOIN realms r ON r.id = u.realm_id
                WHERE u.api_key_id = %s
                """,
                (key_id,),
            )
            return await cur.fetchone()

    async def session_user(self, user_id: int) -> SessionRow | None:
        """The user `user_id` as a browser session needs them, or None."""
        async with self.connection() as conn:
            cur = await conn.execute(
                """
                SELECT u.id, u.realm_id, u.email, u.full_name, u.role, u.is_active,
                       u.api_key_hash, u.api_key_hash_scheme, r.deactivated,
                       u.api_key_id, u.sessions_generation
                FROM users u JOIN realms r ON r.id = u.realm_id
                WHERE u.id = %s
                """,
                (user_id,),
            )
            found = await cur.fetchone()
        if found is None:
            return None
        return SessionRow(ApiKeyRow(*found[:9]), found[9], int(found[10]))

    async def realm_users(self, subdomain: str) -> list[tuple[int, str, str, str]]:
        """The active users of an active realm: (id, email, full name, API key id)."""
        async with self.connection() as conn:
            cur = await conn.execute(
                """
                SELECT u.id, u.email, u.full_name, u.api_key_id
                FROM users u JOIN realms r ON r.id = u.realm_id
                WHERE r.subdomain = %s AND NOT r.deactivated AND u.is_active
                ORDER BY u.id
                """,
                (subdomain,),
            )
            return [(int(r[0]), r[1], r[2], r[3]) for r in await cur.fetchall()]

    async def upgrade_api_key_hash(self, user_id: int, legacy: bytes, keyed: bytes) -> None:
        """Replace a row's plain SHA-256 (scheme 1) or its wrapped form
        (scheme 3) by the keyed hash, unless the key changed meanwhile."""
        async with self.connection() as conn:
            await conn.execute(
                """
                UPDATE users SET api_key_hash = %s, api_key_hash_scheme = 2
                WHERE id = %s AND api_key_hash = %s AND api_key_hash_scheme IN (1, 3)
                """,
                (keyed, user_id, legacy),
            )

    async def log_lookup(self, positions: list[int]) -> tuple[int, int, dict[int, bytes]]:
        """For missing positions, read in one statement (one snapshot): the
        oldest transaction id still running (xmin), the next one to be
        assigned (xmax), and the logged notices among `positions`."""
        async with self.connection() as conn:
            cur = await conn.execute(
                """
                SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                       pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                       l.position, l.notice
                FROM (SELECT 1) one
                LEFT JOIN event_log l ON l.position = ANY(%s)
                """,
                (positions,),
            )
            rows = await cur.fetchall()
        found = {int(r[2]): bytes(r[3]) for r in rows if r[2] is not None}
        return int(rows[0][0]), int(rows[0][1]), found

    async def log_after(self, position: int, limit: int) -> list[tuple[int, bytes]]:
        """Logged notices above `position`, in position order (at most `limit`)."""
        async with self.connection() as conn:
            cur = await conn.execute(
                "SELECT position, notice FROM event_log WHERE position > %s"
                " ORDER BY position LIMIT %s",
                (position, limit),
                binary=True,  # as log_for_user: no hex to decode on the loop
            )
            return [(int(r[0]), bytes(r[1])) for r in await cur.fetchall()]

    async def log_bounds(self) -> tuple[int, int]:
        """The lowest and highest position still logged (0, 0 when empty)."""
        async with self.connection() as conn:
            cur = await conn.execute(
                "SELECT coalesce(min(position), 0), coalesce(max(position), 0) FROM event_log"
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    async def log_last_position(self) -> int:
        """The last position the sequence gave out (0 before any)."""
        async with self.connection() as conn:
            cur = await conn.execute(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM event_log_position"
            )
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def log_pruned_through(self) -> int:
        """Every logged position at or below this may have been pruned."""
        async with self.connection() as conn:
            cur = await conn.execute("SELECT through FROM event_log_pruned")
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def log_for_user(
        self,
        after: int,
        upto: int,
        realm_id: int,
        user_id: int,
        public: bool,
        event_types: list[str] | None,
        limit: int,
    ) -> list[LogRow]:
        """Logged notices of `realm_id` (or of no realm) with a position in
        (`after`, `upto`], in order, at most `limit`, that name `user_id`,
        or (with `public`) are public channel messages, or whose recipients
        an earlier version did not record (`unknown`: parse to tell); only
        the types in `event_types` when given."""
        async with self.connection() as conn:
            # Never prepared: a prepared statement's generic plan, made without
            # the values, reads the range by position (the primary key) for a
            # user the recipients index finds in a few rows: the whole 1 GiB
            # log for a guest (tests/benchmarks/resume.py --explain shows both).
            cur = await conn.execute(
                LOG_FOR_USER,
                {
                    "after": after,
                    "upto": upto,
                    "realm": realm_id,
                    "user": user_id,
                    "public": public,
                    "types": event_types,
                    "limit": limit,
                },
                prepare=False,
                # The notices as they are stored: no hex to decode on the loop
                # (a page is up to 1,000 notices of a few KB each).
                binary=True,
            )
            return [(int(r[0]), bytes(r[1]), bool(r[2])) for r in await cur.fetchall()]

    async def deleted_messages(
        self, realm_id: int, message_ids: list[int], after: int, upto: int
    ) -> set[int]:
        """Of `message_ids`, those a `delete_message` logged in `realm_id`
        with a position in (`after`, `upto`] names (whoever it was sent to)."""
        if not message_ids:
            return set()
        async with self.connection() as conn:
            cur = await conn.execute(
                DELETED_MESSAGES,
                {"realm": realm_id, "after": after, "upto": upto, "ids": message_ids},
            )
            return {int(r[0]) for r in await cur.fetchall()}

    async def message_channels(self, realm_id: int, message_ids: list[int]) -> dict[int, int]:
        """The channel of each of `message_ids` that is a channel message of
        `realm_id` the domain has."""
        if not message_ids:
            return {}
        async with self.connection() as conn:
            cur = await conn.execute(
                "SELECT id, stream_id FROM messages"
                " WHERE realm_id = %s AND id = ANY(%s) AND stream_id IS NOT NULL",
                (realm_id, message_ids),
            )
            return {int(r[0]): int(r[1]) for r in await cur.fetchall()}

    async def channel_access(
        self, user_id: int, realm_id: int, channel_ids: list[int]
    ) -> tuple[set[int], set[int]]:
        """Of `channel_ids`, those of `realm_id` the domain has, and of those
        the ones `user_id` may see now: subscribed, or a public channel and
        not a guest; an archived one too (it keeps its subscriptions and its
        history stays readable, as Zulip's since feature level 315)."""
        if not channel_ids:
            return set(), set()
        async with self.connection() as conn:
            cur = await conn.execute(
                """
                SELECT s.id, (
                    COALESCE(sub.active, false)
                    OR (NOT s.invite_only AND u.role <> %(guest)s)
                )
                FROM streams s
                JOIN users u ON u.id = %(user)s
                LEFT JOIN subscriptions sub ON sub.stream_id = s.id AND sub.user_id = %(user)s
                WHERE s.realm_id = %(realm)s AND s.id = ANY(%(ids)s)
                """,
                {"user": user_id, "realm": realm_id, "ids": channel_ids, "guest": ROLE_GUEST},
            )
            rows = await cur.fetchall()
        return {int(r[0]) for r in rows}, {int(r[0]) for r in rows if r[1]}

    async def stream_floor(self, user_id: int) -> int | None:
        """The lowest stream position a register gave `user_id` (None: none
        recorded)."""
        async with self.connection() as conn:
            cur = await conn.execute(
                "SELECT position FROM user_stream_floors WHERE user_id = %s", (user_id,)
            )
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def record_stream_floors(self, floors: dict[int, int]) -> None:
        """Say that registers gave these users these positions: each user's
        floor stays the lowest (a position pruned since is refused anyway, as
        expired: another device's register must not raise the floor above
        what an older one may still resume from)."""
        async with self.connection() as conn:
            await conn.execute(
                """
                INSERT INTO user_stream_floors (user_id, position)
                SELECT f.user_id, f.position FROM unnest(%s::bigint[], %s::bigint[])
                    AS f(user_id, position)
                JOIN users u ON u.id = f.user_id
                ON CONFLICT (user_id) DO UPDATE SET
                  position = least(user_stream_floors.position, excluded.position),
                  updated_at = now()
                """,
                (list(floors), list(floors.values())),
            )

    async def reader_floor(self, reader: str, floor: int) -> None:
        """Say that `reader`'s saved queues need the event log from `floor`
        (server/database/retention.py prunes no further)."""
        async with self.connection() as conn:
            await conn.execute(
                "INSERT INTO stream_readers (reader, floor) VALUES (%s, %s)"
                " ON CONFLICT (reader) DO UPDATE SET floor = excluded.floor, updated_at = now()",
                (reader, floor),
            )

    async def journal_apply(self, key: str, ops: list[tuple[str, str, float, bytes]]) -> None:
        """Apply journal operations in order, in one transaction: ("write",
        queue_id, at, definition), ("delete", queue_id, _, _) and ("trim", _,
        before, _) (forget what was journaled before a checkpoint)."""
        async with self.connection() as conn, conn.transaction():
            for kind, queue_id, at, definition in ops:
                if kind == "write":
                    await conn.execute(
                        "INSERT INTO queue_journal (queue_id, shard, journaled_at, definition)"
                        " VALUES (%s, %s, %s, %s) ON CONFLICT (queue_id) DO UPDATE SET"
                        " journaled_at = excluded.journaled_at, definition = excluded.definition",
                        (queue_id, key, at, definition),
                    )
                elif kind == "delete":
                    await conn.execute("DELETE FROM queue_journal WHERE queue_id = %s", (queue_id,))
                else:
                    await conn.execute(
                        "DELETE FROM queue_journal WHERE shard = %s AND journaled_at < %s",
                        (key, at),
                    )

    async def journal_since(self, shard: str, since: float) -> list[bytes]:
        """The definitions journaled at or after `since`, oldest first."""
        async with self.connection() as conn:
            cur = await conn.execute(
                "SELECT definition FROM queue_journal WHERE shard = %s AND journaled_at >= %s"
                " ORDER BY journaled_at",
                (shard, since),
            )
            return [bytes(row[0]) for row in await cur.fetchall()]

    def stats(self) -> dict[str, int]:
        return dict(self._pool.get_stats())
