"""The background updates this version knows (server/database/background_update.py), by name.

- `wrap_legacy_api_key_hashes` (migration 0009): every API key hash still of
  scheme 1 (a plain SHA-256, from before migration 0004, waiting for its user
  to log in) becomes the keyed hash of that hash (scheme 3), which
  authentication checks without knowing more than the key. Once it has
  finished, a dump of the database holds no unkeyed hash.
- `event_log_realm_index` (migration 0009, one shot): the index that lets
  `resume_from` read one realm's events from a large event log, built
  `CONCURRENTLY` so that writers of the log (every `send_event`) never wait.
- `event_log_recipients_index` (migration 0012, one shot): the indexes
  that let `resume_from` read one user's events (its recipients, a realm's
  public channel messages, rows written by an earlier version), built
  `CONCURRENTLY` too.
- `message_history_indexes` (migration 0013, one shot): the indexes of
  message history's reads (server/database/history.py): a channel's
  messages by id, a sender's, a direct conversation's, full-text search;
  `CONCURRENTLY` too.
- `event_log_retention`, `queue_journal_retention` (recurring, every
  EVENTQ_EVENT_LOG_PRUNE_SECS): server/database/retention.py. Listed even where that
  is 0 (their rows are then `disabled here`, not `unknown`), run only where
  it is not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
from typing import Any

from psycopg import sql

from server.config import Settings
from server.database.background_update import BackgroundUpdate, Batch, Conn
from server.database.history import search_document
from server.database.retention import event_log_retention, queue_journal_retention

# Hashes computed between two yields to the IO loop (about a millisecond).
_HASH_SLICE = 500


def wrap_legacy_api_key_hashes(secret: bytes) -> BackgroundUpdate:
    # Which secret wraps: a runner with another one (an operator's shell
    # without the installation's settings) must not go on with it. Kept in
    # the progress as "secret_fingerprint", and as "secret" too, the name a
    # runner of the version before reads (shards of both versions may take
    # turns during a rolling upgrade); rows it wrote have only "secret".
    fingerprint = hmac.digest(secret, b"eventq wrap_legacy_api_key_hashes", "sha256").hex()[:16]

    async def batch(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        after = int(progress.get("last_id", 0))
        total = progress.get("total")
        if total is None:
            # A first step of its own, counted once for the time left (and
            # kept out of the rate the batch size follows).
            cur = await conn.execute("SELECT count(*) FROM users WHERE api_key_hash_scheme = 1")
            row = await cur.fetchone()
            total = 0 if row is None else int(row[0])
            start = {
                "last_id": 0,
                "wrapped": 0,
                "total": total,
                "secret_fingerprint": fingerprint,
                "secret": fingerprint,
            }
            return Batch(0, start, done=total == 0, items_left=total)
        if progress.get("secret_fingerprint", progress.get("secret")) != fingerprint:
            raise RuntimeError(
                "this runner's EVENTQ_API_KEY_SECRET is not the one this update began with;"
                " run it with the installation's settings"
            )
        cur = await conn.execute(
            """
            SELECT id, api_key_hash FROM users
            WHERE id > %s AND api_key_hash_scheme = 1
            ORDER BY id LIMIT %s FOR UPDATE
            """,
            (after, size),
        )
        rows = await cur.fetchall()
        ids: list[int] = []
        wrapped: list[bytes] = []
        for index, (user_id, legacy) in enumerate(rows):
            if index and index % _HASH_SLICE == 0:
                await asyncio.sleep(0)
            ids.append(int(user_id))
            wrapped.append(hmac.digest(secret, bytes(legacy), "sha256"))
        if ids:
            # Rows locked above: a login upgrading one of them waits for this
            # transaction, then finds it no longer of scheme 1.
            await conn.execute(
                """
                UPDATE users u SET api_key_hash = w.hash, api_key_hash_scheme = 3
                FROM unnest(%s::bigint[], %s::bytea[]) AS w(id, hash)
                WHERE u.id = w.id AND u.api_key_hash_scheme = 1
                """,
                (ids, wrapped),
            )
        done_before = int(progress.get("wrapped", 0))
        new_progress = {
            "last_id": ids[-1] if ids else after,
            "wrapped": done_before + len(ids),
            "total": total,
            "secret_fingerprint": fingerprint,
            "secret": fingerprint,
        }
        done = len(rows) < size
        left = 0 if done else max(0, int(total) - done_before - len(ids))
        return Batch(len(ids), new_progress, done=done, items_left=left)

    return BackgroundUpdate(
        "wrap_legacy_api_key_hashes",
        batch,
        description="replace every plain SHA-256 API key hash by its keyed hash",
    )


EVENT_LOG_REALM_INDEX = "event_log_realm_position"
# resume_from's reads of one user's events (server/database/db.py `log_for_user`): the
# rows naming them, the public channel messages of a realm (for
# all_public_streams), and the rows written by a version that did not say
# (parsed instead; none once those are pruned); and of a realm's deletions
# (`deleted_messages`: a message deleted since is not replayed).
EVENT_LOG_RECIPIENT_INDEXES = {
    "event_log_recipients": "USING gin (recipients)",
    "event_log_public_messages": "(realm_id, position) WHERE public_message",
    "event_log_unknown_recipients": "(realm_id, position) WHERE recipients IS NULL",
    "event_log_deletions": "(realm_id, position) WHERE event_type = 'delete_message'",
}


# Message history's reads (server/database/history.py): a channel's messages
# by id, a sender's, and full-text search of topic and content (the
# expression `search` queries with).
MESSAGE_HISTORY_INDEXES = {
    "messages_channel": "(stream_id, id) WHERE stream_id IS NOT NULL",
    "messages_sender": "(sender_id, id)",
    "messages_search": f"USING gin (({search_document()}))",
    # A direct message conversation's messages (`dm` narrows).
    "messages_direct": "(participant_ids, id) WHERE participant_ids IS NOT NULL",
}


async def _build_index(conn: Conn, name: str, definition: str, table: str = "event_log") -> bool:
    """`CREATE INDEX CONCURRENTLY name ON table definition`, unless a
    valid one of that name is there; True if it built one. A build that was
    interrupted (its runner killed) left an invalid index, which writers
    still maintain: it is dropped and built again."""
    cur = await conn.execute(
        """
        SELECT i.indisvalid FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace
        """,
        (name,),
    )
    row = await cur.fetchone()
    if row is not None and row[0]:
        return False
    identifier = sql.Identifier(name)
    if row is not None:
        await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY {}").format(identifier))
    # The definitions are this module's constants, not input.
    await conn.execute(
        sql.SQL("CREATE INDEX CONCURRENTLY {} ON {} {}").format(
            identifier, sql.Identifier(table), sql.SQL(definition)
        )
    )
    return True


def event_log_realm_index() -> BackgroundUpdate:
    async def build(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        built = await _build_index(conn, EVENT_LOG_REALM_INDEX, "(realm_id, position)")
        return Batch(int(built), {"index": EVENT_LOG_REALM_INDEX, "built": built}, done=True)

    return BackgroundUpdate(
        "event_log_realm_index",
        build,
        one_shot=True,
        description="index the event log by realm for resume_from",
    )


def event_log_recipients_index() -> BackgroundUpdate:
    async def build(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        built = [
            name
            for name, definition in EVENT_LOG_RECIPIENT_INDEXES.items()
            if await _build_index(conn, name, definition)
        ]
        return Batch(len(built), {"built": built}, done=True)

    return BackgroundUpdate(
        "event_log_recipients_index",
        build,
        one_shot=True,
        description="index the event log by recipient for resume_from",
    )


def message_history_indexes() -> BackgroundUpdate:
    async def build(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        built = [
            name
            for name, definition in MESSAGE_HISTORY_INDEXES.items()
            if await _build_index(conn, name, definition, "messages")
        ]
        return Batch(len(built), {"built": built}, done=True)

    return BackgroundUpdate(
        "message_history_indexes",
        build,
        one_shot=True,
        description="index messages by channel, sender and text for GET /messages",
    )


def standard_updates(settings: Settings, api_key_secret: bytes) -> list[BackgroundUpdate]:
    """Every update this version knows, configured from `settings`: the
    retention updates are not `enabled` when pruning is off here."""
    retention = [
        event_log_retention(
            settings.log_retention_hours, settings.log_retention_bytes, settings.log_prune_secs
        ),
        queue_journal_retention(settings.log_retention_hours, settings.log_prune_secs),
    ]
    pruning = settings.log_prune_secs > 0
    return [
        wrap_legacy_api_key_hashes(api_key_secret),
        event_log_realm_index(),
        event_log_recipients_index(),
        message_history_indexes(),
        *(dataclasses.replace(update, enabled=pruning) for update in retention),
    ]
