"""Typing notifications: composing in a direct conversation or a channel
topic (`typing`), and editing a message (`typing_edit_message`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generation.actions.base import ActionContext, ActionError, UserRow, get_user
from generation.actions.messages.common import (
    _holder_ids,
    _messages,
    _realm,
    _stream_for_sender,
    _subscriber_ids,
    _users_by_ids_or_emails,
    normalize_topic,
)
from generation.actions.messages.edit import _can_modify, check_content_editor

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
        target = await _stream_for_sender(conn, sender, stream_id, archived_known=False)
        event["stream_id"] = target.id
        event["topic"] = normalize_topic(topic)
        subscribers = await _subscriber_ids(conn, [target.id])
        outbox.send(sender.realm_id, event, sorted(subscribers))


async def do_send_edit_typing(ctx: ActionContext, sender_id: int, op: str, message_id: int) -> None:
    """The sender started or stopped editing the content of their message
    `message_id`; told to those who would see the edit: the channel's
    subscribers, or the direct message's participants (listed in
    `recipient.user_ids`). The sender must be allowed to edit it now, with
    no grace past the realm's limit (Zulip's edit_limit_buffer 0)."""
    conn = ctx.conn
    if op not in TYPING_OPS:
        raise ActionError(f"Invalid op: '{op}'")
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        [message] = await _messages(conn, sender, [message_id])
        if not _can_modify(sender, message):
            raise ActionError("Invalid message(s)")
        realm = await _realm(conn, sender.realm_id)
        if not realm.allow_message_editing:
            raise ActionError("Your organization has turned off message editing")
        check_content_editor(sender, realm, message, 0)
        recipient: dict[str, Any]
        if message.stream_id is not None:
            users = await _subscriber_ids(conn, [message.stream_id])
            recipient = {"type": "channel", "channel_id": message.stream_id}
            recipient["topic"] = message.topic
        else:
            users = await _holder_ids(conn, [message.id])
            recipient = {"type": "direct", "user_ids": sorted(users)}
        event = {
            "type": "typing_edit_message",
            "op": op,
            "sender_id": sender.id,
            "message_id": message.id,
            "recipient": recipient,
        }
        outbox.send(sender.realm_id, event, sorted(users))
