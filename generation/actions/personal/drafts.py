"""Drafts a user's clients keep on the server (Zulip's drafts), only while
the user's setting `enable_drafts_synchronization` is on: turning it off
deletes them (`delete_all_drafts`, without events, as Zulip: syncing
stopped, nothing was deleted by hand).

Every change sends a `drafts` event (add, update, remove) to the user only.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any, Literal

from psycopg.rows import class_row

from generation.actions.base import ActionContext, ActionError, Connection, UserRow, get_user
from generation.actions.messages.common import normalize_content, normalize_topic
from generation.actions.personal.common import _accessible_stream, _lock_user

DraftType = Literal["stream", "private", ""]
DRAFT_TYPES = ("stream", "private", "")
# Drafts per user: Zulip's register answers at most its newest 1,000
# (MAX_DRAFTS_IN_REGISTER_RESPONSE); eventq refuses a 1,001st instead, so
# that register's list is always whole (at most about 10 MB of content).
MAX_DRAFTS = 1000
# The latest timestamp a draft may carry: the end of year 9999, the last one
# a timestamp column (and Zulip's datetime) holds.
MAX_TIMESTAMP = 253_402_300_799
# Recipients of one direct-message draft; Zulip's limit on a group DM's size
# is far lower, this only bounds the request.
MAX_DRAFT_RECIPIENTS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class DraftData:
    """A draft as a client sends it (Zulip's `DraftData`); `timestamp` None
    is now."""

    type: DraftType
    to: list[int]
    topic: str
    content: str
    timestamp: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class _Valid:
    type: DraftType
    to: list[int]
    topic: str
    content: str
    timestamp: float


async def _users_of_realm(conn: Connection, realm_id: int, ids: Sequence[int]) -> None:
    cur = await conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND id = ANY(%s)", (realm_id, list(ids))
    )
    found = {int(row[0]) for row in await cur.fetchall()}
    for user_id in ids:
        if user_id not in found:
            raise ActionError(f"Invalid user ID {user_id}")


async def _validate(conn: Connection, user: UserRow, draft: DraftData) -> _Valid:
    """Zulip's checks of a draft, and its stored form: a channel draft names
    one channel the user may access; a direct one users of the realm (the
    others; the user alone for a note to self), and without recipients it
    is a draft of no type."""
    if draft.type not in DRAFT_TYPES:
        raise ActionError(f"Invalid draft type: '{draft.type}'")
    content = normalize_content(draft.content)
    stamp = time.time() if draft.timestamp is None else round(draft.timestamp, 6)
    if not math.isfinite(stamp) or stamp > MAX_TIMESTAMP:
        raise ActionError("Timestamp is too large.")
    if stamp < 0:
        raise ActionError("Timestamp must not be negative.")
    if draft.type == "stream":
        if len(draft.to) != 1:
            raise ActionError("Must specify exactly 1 channel ID for channel messages")
        await _accessible_stream(conn, user, draft.to[0])
        return _Valid("stream", list(draft.to), normalize_topic(draft.topic), content, stamp)
    if draft.type == "private" and draft.to:
        if len(draft.to) > MAX_DRAFT_RECIPIENTS:
            raise ActionError(f"A draft has at most {MAX_DRAFT_RECIPIENTS} recipients")
        wanted = sorted(set(draft.to))
        await _users_of_realm(conn, user.realm_id, wanted)
        others = [uid for uid in wanted if uid != user.id]
        return _Valid("private", others or [user.id], "", content, stamp)
    return _Valid("", [], "", content, stamp)


@dataclasses.dataclass(frozen=True, slots=True)
class _DraftRow:
    id: int
    type: str
    to_ids: list[int]
    topic: str
    content: str
    timestamp: int

    def as_dict(self) -> dict[str, Any]:
        """Zulip's draft object."""
        return {
            "id": self.id,
            "type": self.type,
            "to": list(self.to_ids),
            "topic": self.topic,
            "content": self.content,
            "timestamp": self.timestamp,
        }


_COLUMNS = (
    "id, type, to_ids, topic, content,"
    " floor(extract(epoch FROM last_edit_time))::bigint AS timestamp"
)


async def user_drafts(conn: Connection, user_id: int) -> list[dict[str, Any]]:
    """The user's drafts, by id (the order they were created)."""
    cur = conn.cursor(row_factory=class_row(_DraftRow))
    await cur.execute(
        f"SELECT {_COLUMNS} FROM drafts WHERE user_id = %s ORDER BY id",  # noqa: S608 (fixed columns)
        (user_id,),
    )
    return [row.as_dict() for row in await cur.fetchall()]


async def _syncing_user(conn: Connection, user_id: int) -> UserRow:
    """The user, if their drafts are synchronized (Zulip's `draft_endpoint`)."""
    user = await get_user(conn, user_id)
    cur = await conn.execute(
        "SELECT coalesce((SELECT enable_drafts_synchronization FROM user_settings"
        " WHERE user_id = %s), true)",
        (user.id,),
    )
    row = await cur.fetchone()
    if row is None or not row[0]:
        raise ActionError("User has disabled synchronizing drafts.")
    return user


async def get_drafts(conn: Connection, user_id: int) -> list[dict[str, Any]]:
    """`GET drafts`: the user's drafts, refused while synchronizing is off."""
    await _syncing_user(conn, user_id)
    return await user_drafts(conn, user_id)


def _not_found() -> ActionError:
    return ActionError("Draft does not exist", "BAD_REQUEST", 404)


async def do_create_drafts(
    ctx: ActionContext, user_id: int, drafts: Sequence[DraftData]
) -> list[int]:
    """Create drafts (all or none); returns their ids, in the request's
    order. One `drafts` add event with them all."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        user = await _syncing_user(conn, user_id)
        valid = [await _validate(conn, user, draft) for draft in drafts]
        await _lock_user(conn, user.id)
        cur = await conn.execute("SELECT count(*) FROM drafts WHERE user_id = %s", (user.id,))
        counted = await cur.fetchone()
        assert counted is not None
        if counted[0] + len(valid) > MAX_DRAFTS:
            raise ActionError(f"You can have at most {MAX_DRAFTS} drafts.")
        created = []
        for draft in valid:
            cur = conn.cursor(row_factory=class_row(_DraftRow))
            await cur.execute(
                f"""
                INSERT INTO drafts (user_id, type, to_ids, topic, content, last_edit_time)
                VALUES (%s, %s, %s, %s, %s, to_timestamp(%s)) RETURNING {_COLUMNS}
                """,  # noqa: S608 (fixed columns)
                (user.id, draft.type, draft.to, draft.topic, draft.content, draft.timestamp),
            )
            row = await cur.fetchone()
            assert row is not None
            created.append(row)
        if created:
            event = {"type": "drafts", "op": "add", "drafts": [row.as_dict() for row in created]}
            outbox.send(user.realm_id, event, [user.id])
    return [row.id for row in created]


async def do_edit_draft(ctx: ActionContext, user_id: int, draft_id: int, draft: DraftData) -> None:
    """Replace one of the user's drafts; a `drafts` update event."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        user = await _syncing_user(conn, user_id)
        valid = await _validate(conn, user, draft)
        cur = conn.cursor(row_factory=class_row(_DraftRow))
        await cur.execute(
            f"""
            UPDATE drafts SET type = %s, to_ids = %s, topic = %s, content = %s,
                              last_edit_time = to_timestamp(%s)
            WHERE id = %s AND user_id = %s RETURNING {_COLUMNS}
            """,  # noqa: S608 (fixed columns)
            (valid.type, valid.to, valid.topic, valid.content, valid.timestamp, draft_id, user.id),
        )
        row = await cur.fetchone()
        if row is None:
            raise _not_found()
        outbox.send(
            user.realm_id, {"type": "drafts", "op": "update", "draft": row.as_dict()}, [user.id]
        )


async def do_delete_draft(ctx: ActionContext, user_id: int, draft_id: int) -> None:
    """Delete one of the user's drafts; a `drafts` remove event."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        user = await _syncing_user(conn, user_id)
        cur = await conn.execute(
            "DELETE FROM drafts WHERE id = %s AND user_id = %s", (draft_id, user.id)
        )
        if not cur.rowcount:
            raise _not_found()
        outbox.send(
            user.realm_id, {"type": "drafts", "op": "remove", "draft_id": draft_id}, [user.id]
        )


async def delete_all_drafts(conn: Connection, user_id: int) -> None:
    """Delete every draft of the user, in the caller's transaction, without
    events: the user turned synchronizing off (the `user_settings` event
    says so, and register's appliers empty the list on it)."""
    await conn.execute("DELETE FROM drafts WHERE user_id = %s", (user_id,))
