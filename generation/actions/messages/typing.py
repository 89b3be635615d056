"""Typing notifications: composing in a direct conversation or a channel
topic (`typing`), and editing a message (`typing_edit_message`).

In a realm that restricts its guests (generation/actions/access.py), a guest
may not tell someone they may not see that they are typing to them (Zulip's
`check_sender_can_access_recipients`), and a guest subscriber who may not
see a channel's typist (one not subscribed to it) is told of them under
their placeholder address, as of a message they send there."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from psycopg.rows import class_row

from generation.actions.access import guests_not_seeing, inaccessible_email, inaccessible_user_ids
from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    UserRow,
    get_user,
)
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

REFUSED_RECIPIENTS = "You do not have permission to access some of the recipients."


@dataclasses.dataclass(frozen=True, slots=True)
class _Typist:
    """Who is typing, with what the access rule needs of them and their
    realm, read with them (typing is frequent: an unrestricted realm pays
    no query for the rule)."""

    id: int
    realm_id: int
    email: str
    full_name: str
    role: int
    is_active: bool
    is_bot: bool
    subdomain: str
    # False when the realm restricts what guests see (Zulip's
    # `can_access_all_users_group` role:members; generation/actions/access.py).
    guests_see_all_users: bool

    @property
    def user(self) -> UserRow:
        return UserRow(
            self.id, self.realm_id, self.email, self.full_name, self.role, self.is_active
        )


async def _typist(conn: Connection, sender_id: int) -> _Typist:
    """The active user `sender_id` (refused as `get_user` refuses)."""
    cur = conn.cursor(row_factory=class_row(_Typist))
    await cur.execute(
        """
        SELECT u.id, u.realm_id, u.email, u.full_name, u.role, u.is_active, u.is_bot,
               r.subdomain, r.guests_see_all_users
        FROM users u JOIN realms r ON r.id = u.realm_id WHERE u.id = %s
        """,
        (sender_id,),
    )
    typist = await cur.fetchone()
    if typist is None or not typist.is_active:
        raise ActionError(f"Invalid user ID {sender_id}", "BAD_REQUEST")
    return typist


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
    (ids or e-mails); told to every participant, the sender included. A
    guest of a realm that restricts them may type only to users they may
    see (else `ActionError`, as a direct message to them)."""
    conn = ctx.conn
    if not recipients:
        raise ActionError("Missing recipients")
    async with ctx.transaction() as outbox:
        typist = await _typist(conn, sender_id)
        sender = typist.user
        event = _typing_event(op, sender, "direct")
        named = await _users_by_ids_or_emails(conn, sender.realm_id, recipients)
        if (
            sender.is_guest
            and not typist.guests_see_all_users
            and await inaccessible_user_ids(conn, sender.realm_id, sender.id, [u.id for u in named])
        ):
            raise ActionError(REFUSED_RECIPIENTS)
        users = {u.id: u for u in named}
        users[sender.id] = sender
        event["recipients"] = [{"user_id": uid, "email": users[uid].email} for uid in sorted(users)]
        outbox.send(sender.realm_id, event, sorted(users))


async def do_send_stream_typing(
    ctx: ActionContext, sender_id: int, op: str, stream_id: int, topic: str
) -> None:
    """The sender started or stopped typing in a channel topic they may post
    to; told to the channel's subscribers (whose clients declared
    `stream_typing_notifications`: the queue filters). In a realm that
    restricts its guests, the guest subscribers who may not see a typist
    not subscribed to the channel get the typist's placeholder address
    (`inaccessible_email`), in a notice of their own."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        typist = await _typist(conn, sender_id)
        sender = typist.user
        event = _typing_event(op, sender, "stream")
        target = await _stream_for_sender(conn, sender, stream_id, archived_known=False)
        event["stream_id"] = target.id
        event["topic"] = normalize_topic(topic)
        subscribers = await _subscriber_ids(conn, [target.id])
        # A subscribed typist shares the channel with every subscriber, and
        # a bot is seen by everyone: only an unsubscribed human may be
        # unknown to a guest (as the sender of a message, send.py).
        hidden = (
            set(await guests_not_seeing(conn, sender.id, subscribers))
            if not typist.guests_see_all_users and not target.subscribed and not typist.is_bot
            else set()
        )
        outbox.send(sender.realm_id, event, sorted(subscribers - hidden))
        if hidden:
            unknown = event | {
                "sender": {
                    "user_id": sender.id,
                    "email": inaccessible_email(sender.id, typist.subdomain),
                }
            }
            outbox.send(sender.realm_id, unknown, sorted(hidden))


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
