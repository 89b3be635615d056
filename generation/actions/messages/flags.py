"""The user's own flags on messages they received (read, starred)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from generation.actions.base import ActionContext, ActionError, Connection, get_user

FLAG_OPS = ("add", "remove")
# The flags a user may change, and their column.
EDITABLE_FLAGS = {"read": "read", "starred": "starred"}
# Flags Zulip knows but a user may not set.
_SYSTEM_FLAGS = frozenset(
    {"mentioned", "wildcard_mentioned", "stream_wildcard_mentioned", "topic_wildcard_mentioned",
     "has_alert_word", "historical", "collapsed", "is_private", "active_mobile_push_notification"}
)  # fmt: skip

FlagOp = Literal["add", "remove"]


def _flag_column(flag: str) -> str:
    column = EDITABLE_FLAGS.get(flag)
    if column is None:
        if flag in _SYSTEM_FLAGS:
            raise ActionError(f"Flag not editable: '{flag}'")
        raise ActionError(f"Invalid flag: '{flag}'")
    return column


async def _unread_details(
    conn: Connection, user_id: int, message_ids: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """`message_details` of a `read` removal: where each message belongs in
    the user's `unread_msgs`."""
    cur = await conn.execute(
        """
        SELECT m.id, m.stream_id, m.topic, m.participant_ids,
               um.mentioned OR um.wildcard_mentioned,
               EXISTS (SELECT 1 FROM subscriptions sub JOIN streams s ON s.id = sub.stream_id
                       WHERE sub.user_id = um.user_id AND sub.stream_id = m.stream_id
                         AND sub.active AND sub.is_muted AND NOT s.deactivated)
        FROM messages m JOIN user_messages um ON um.message_id = m.id AND um.user_id = %s
        WHERE m.id = ANY(%s)
        """,
        (user_id, list(message_ids)),
    )
    details: dict[str, dict[str, Any]] = {}
    for message_id, stream_id, topic, participants, mentioned, muted in await cur.fetchall():
        detail: dict[str, Any]
        if stream_id is None:
            others = sorted(p for p in participants if p != user_id)
            detail = {"type": "private", "user_ids": others}
        else:
            detail = {
                "type": "stream",
                "stream_id": stream_id,
                "topic": topic,
                "unmuted_stream_msg": not muted,
            }
        if mentioned:
            detail["mentioned"] = True
        details[str(message_id)] = detail
    return details


async def do_update_message_flags(
    ctx: ActionContext, user_id: int, op: str, flag: str, message_ids: Sequence[int]
) -> list[int]:
    """Add or remove the user's `read` or `starred` flag on messages they
    received; returns the ids whose flag changed. One
    `update_message_flags` event to the user, naming those messages (none if
    nothing changed); removing `read` carries `message_details`."""
    conn = ctx.conn
    if op not in FLAG_OPS:
        raise ActionError(f"Invalid message flag operation: '{op}'")
    column = _flag_column(flag)
    ids = sorted(set(message_ids))
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        cur = await conn.execute(
            "SELECT count(*) FROM user_messages WHERE user_id = %s AND message_id = ANY(%s)",
            (user.id, ids),
        )
        row = await cur.fetchone()
        if row is None or row[0] != len(ids):
            raise ActionError("Invalid message(s)")
        value = op == "add"
        cur = await conn.execute(
            f"""
            UPDATE user_messages SET {column} = %s
            WHERE user_id = %s AND message_id = ANY(%s) AND {column} <> %s
            RETURNING message_id
            """,  # noqa: S608 (column from a fixed map)
            (value, user.id, ids, value),
        )
        changed = sorted(r[0] for r in await cur.fetchall())
        if changed:
            event: dict[str, Any] = {
                "type": "update_message_flags",
                "op": op,
                "operation": op,
                "flag": flag,
                "messages": changed,
                "all": False,
            }
            if op == "remove" and flag == "read":
                event["message_details"] = await _unread_details(conn, user.id, changed)
            outbox.send(user.realm_id, event, [user.id])
    return changed


async def do_mark_all_as_read(ctx: ActionContext, user_id: int) -> int:
    """Mark every message the user received as read; returns how many were
    unread. The event says `all` with no message ids, as Zulip's."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        cur = await conn.execute(
            "UPDATE user_messages SET read = true WHERE user_id = %s AND NOT read", (user.id,)
        )
        count = cur.rowcount
        if count:
            event = {
                "type": "update_message_flags",
                "op": "add",
                "operation": "add",
                "flag": "read",
                "messages": [],
                "all": True,
            }
            outbox.send(user.realm_id, event, [user.id])
    return count


async def do_mark_stream_as_read(
    ctx: ActionContext, user_id: int, stream_id: int, topic: str | None = None
) -> list[int]:
    """Mark the user's unread messages of a channel (or of one of its topics,
    ignoring case) as read; returns their ids. The channel must be one the
    user can see. An `update_message_flags` event naming them (none if there
    were none). The streams area may call it inside an unsubscription's
    transaction, as Zulip marks a channel read when one leaves it."""
    conn = ctx.conn
    if topic is not None and "\x00" in topic:
        raise ActionError("No such topic")  # none can hold a NUL
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        cur = await conn.execute(
            """
            SELECT s.invite_only, EXISTS (SELECT 1 FROM subscriptions sub WHERE
                       sub.stream_id = s.id AND sub.user_id = %s AND sub.active)
            FROM streams s WHERE s.id = %s AND s.realm_id = %s
            """,
            (user.id, stream_id, user.realm_id),
        )
        row = await cur.fetchone()
        if row is None or not (row[1] or not (row[0] or user.is_guest)):
            raise ActionError("Invalid channel ID")
        cur = await conn.execute(
            """
            UPDATE user_messages um SET read = true FROM messages m
            WHERE um.user_id = %s AND NOT um.read AND m.id = um.message_id
              AND m.stream_id = %s AND (%s::text IS NULL OR lower(m.topic) = lower(%s::text))
            RETURNING um.message_id
            """,
            (user.id, stream_id, topic, topic),
        )
        changed = sorted(r[0] for r in await cur.fetchall())
        if changed:
            event = {
                "type": "update_message_flags",
                "op": "add",
                "operation": "add",
                "flag": "read",
                "messages": changed,
                "all": False,
            }
            outbox.send(user.realm_id, event, [user.id])
    return changed
