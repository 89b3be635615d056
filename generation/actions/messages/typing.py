"""Typing notifications, in a direct conversation or a channel topic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generation.actions.base import ActionContext, ActionError, UserRow, get_user
from generation.actions.messages.common import (
    _stream_for_sender,
    _subscriber_ids,
    _users_by_ids_or_emails,
    normalize_topic,
)

TYPING_OPS = ("start", "stop")


def _typing_event(op: str, sender: UserRow, message_type: str) -> dict[str, Any]:
    if op not in TYPING_OPS:
        raise ActionError(f"Invalid op: '{op}'")
    return {
        "type": "typing",
        "op": op,
        "message_type": message_type,
        "sender": {"user_id": sender.id, "email": sender.email},
    }


async def do_send_direct_typing(
    ctx: ActionContext, sender_id: int, op: str, recipients: Sequence[int | str]
) -> None:
    """The sender started or stopped typing a direct message to `recipients`
    (ids or e-mails); told to every participant, the sender included."""
    conn = ctx.conn
    if not recipients:
        raise ActionError("Missing recipients")
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        event = _typing_event(op, sender, "direct")
        users = {u.id: u for u in await _users_by_ids_or_emails(conn, sender.realm_id, recipients)}
        users[sender.id] = sender
        event["recipients"] = [{"user_id": uid, "email": users[uid].email} for uid in sorted(users)]
        outbox.send(sender.realm_id, event, sorted(users))


async def do_send_stream_typing(
    ctx: ActionContext, sender_id: int, op: str, stream_id: int, topic: str
) -> None:
    """The sender started or stopped typing in a channel topic they may post
    to; told to the channel's subscribers (whose clients declared
    `stream_typing_notifications`: the queue filters)."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        event = _typing_event(op, sender, "stream")
        target = await _stream_for_sender(conn, sender, stream_id)
        event["stream_id"] = target.id
        event["topic"] = normalize_topic(topic)
        subscribers = await _subscriber_ids(conn, [target.id])
        outbox.send(sender.realm_id, event, sorted(subscribers))
