"""Sending a message to a channel topic or directly."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from generation.actions.access import (
    access_before,
    guests_not_seeing,
    inaccessible_user_ids,
    new_conversation_for_guests,
    send_access_changes,
)
from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    UserRow,
    get_user,
)
from generation.actions.messages.common import (
    _Realm,
    _realm,
    _render,
    _stream_for_sender,
    _subscriber_ids,
    _users_by_ids_or_emails,
    normalize_content,
    normalize_topic,
)
from generation.actions.messages.mentions import with_group_members
from generation.actions.messages.notify import notifiable
from generation.actions.messages.submessages import insert_submessage
from generation.actions.messages.widgets import WIDGET_MSG_TYPE, widget_content
from generation.actions.personal.alert_words import alerted_user_ids
from generation.actions.personal.muting import muters_of
from generation.events.messages import USER_IDS_WITHOUT_ACCESS_TO_SENDER
from generation.markdown import Rendered, is_me_message


def avatar_url(email: str) -> str:
    """The Gravatar of an e-mail address (eventq stores no avatars)."""
    digest = hashlib.md5(email.strip().lower().encode(), usedforsecurity=False).hexdigest()
    return f"https://secure.gravatar.com/avatar/{digest}?d=identicon&version=1"


def _flags(
    user_id: int, sender_id: int, rendered: Rendered, *, stream: bool, read_by_sender: bool
) -> list[str]:
    """A recipient's flags on a new message, in Zulip's order: the sender has
    read their own message (unless `read_by_sender` is false: a scheduled
    message may say so); mentions alert."""
    flags = []
    if user_id == sender_id and read_by_sender:
        flags.append("read")
    if user_id in rendered.mentioned_user_ids:
        flags.append("mentioned")
    if stream and rendered.wildcard:
        flags.append("wildcard_mentioned")
    return flags


async def _add_personal_flags(
    conn: Connection, sender_id: int, content: str, flags: dict[int, list[str]]
) -> None:
    """The recipients' own preferences, in Zulip's flag order: a message
    from a user one muted arrives read; one containing an alert word of
    one's own has `has_alert_word`."""
    for user_id in await muters_of(conn, sender_id, flags):
        if "read" not in flags[user_id]:
            flags[user_id].insert(0, "read")
    for user_id in await alerted_user_ids(conn, flags, content):
        flags[user_id].append("has_alert_word")


async def _insert(
    conn: Connection,
    sender: UserRow,
    *,
    stream_id: int | None,
    topic: str,
    participant_ids: list[int] | None,
    content: str,
    rendered: Rendered,
    flags: Mapping[int, list[str]],
    client: str,
) -> tuple[int, int]:
    """Store a message and its recipients' rows; returns (id, timestamp)."""
    cur = await conn.execute(
        """
        INSERT INTO messages (realm_id, sender_id, stream_id, topic, participant_ids,
                              content, rendered_content, client)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        RETURNING id, extract(epoch FROM date_sent)::bigint
        """,
        (
            sender.realm_id, sender.id, stream_id, topic, participant_ids, content,
            rendered.html, client,
        ),
    )  # fmt: skip
    row = await cur.fetchone()
    assert row is not None
    message_id, timestamp = row
    users = sorted(flags)
    await conn.execute(
        """
        INSERT INTO user_messages (user_id, message_id, read, mentioned, wildcard_mentioned,
                                   has_alert_word)
        SELECT user_id, %s, read, mentioned, wildcard, alerted
        FROM unnest(%s::bigint[], %s::boolean[], %s::boolean[], %s::boolean[], %s::boolean[])
            AS t (user_id, read, mentioned, wildcard, alerted)
        """,
        (
            message_id,
            users,
            ["read" in flags[u] for u in users],
            ["mentioned" in flags[u] for u in users],
            ["wildcard_mentioned" in flags[u] for u in users],
            ["has_alert_word" in flags[u] for u in users],
        ),
    )
    return message_id, timestamp


async def _widget(
    conn: Connection, sender: UserRow, message_id: int, content: str
) -> list[dict[str, Any]]:
    """The new message's `submessages`: the widget its content declares
    (`/poll`, `/todo`), stored as its first submessage, or none."""
    declared = widget_content(content)
    if declared is None:
        return []
    return [await insert_submessage(conn, message_id, sender.id, WIDGET_MSG_TYPE, declared)]


def _message_dict(
    sender: UserRow,
    realm: _Realm,
    message_id: int,
    timestamp: int,
    content: str,
    rendered: Rendered,
    client: str,
    display_recipient: str | list[dict[str, Any]],
    stream_id: int | None,
    topic: str,
) -> dict[str, Any]:
    """The producer's message dict: the client form (generation.events
    .messages.MessageObject) with `rendered_content` beside the raw content;
    the queue picks one per client and sets `content_type`."""
    message: dict[str, Any] = {
        "id": message_id,
        "type": "private" if stream_id is None else "stream",
        "sender_id": sender.id,
        "sender_email": sender.email,
        "sender_full_name": sender.full_name,
        "sender_realm_str": realm.subdomain,
        "avatar_url": avatar_url(sender.email),
        "client": client,
        "content": content,
        "rendered_content": rendered.html,
        "display_recipient": display_recipient,
        "subject": topic,
        "topic_links": [],
        "is_me_message": is_me_message(content),
        "reactions": [],
        "submessages": [],
        "timestamp": timestamp,
    }
    if stream_id is not None:
        message["stream_id"] = stream_id
    return message


async def _check_sender_sees(
    conn: Connection, sender: UserRow, recipients: Sequence[UserRow]
) -> None:
    """Refuse a direct message from a guest to a user they may not see
    (Zulip's `check_sender_can_access_recipients`)."""
    if await inaccessible_user_ids(conn, sender.realm_id, sender.id, [u.id for u in recipients]):
        raise ActionError("You do not have permission to access some of the recipients.")


def _message_event(
    message: dict[str, Any],
    invite_only: bool | None,
    local_id: str | None,
    sender_queue_id: str | None,
    without_access: Sequence[int] = (),
) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "message", "message": message}
    if invite_only is not None:
        event["invite_only"] = invite_only
    if without_access:
        event[USER_IDS_WITHOUT_ACCESS_TO_SENDER] = sorted(without_access)
    if local_id is not None and sender_queue_id is not None:
        event["local_id"] = local_id
        event["sender_queue_id"] = sender_queue_id
    return event


async def do_send_stream_message(
    ctx: ActionContext,
    sender_id: int,
    stream: int | str,
    topic: str,
    content: str,
    *,
    local_id: str | None = None,
    sender_queue_id: str | None = None,
    client: str = "Internal",
    read_by_sender: bool = True,
) -> int:
    """Send a message to a channel (by id or name) and topic; returns its id.

    Recipients are the channel's active subscribers, and the sender. The
    sender's copy is read (unless `read_by_sender` is false); mentioned
    recipients are flagged `mentioned`, and every recipient
    `wildcard_mentioned` for @**all** and its synonyms. `local_id` comes
    back as `local_message_id` on the queue `sender_queue_id`. Content
    starting with `/poll` or `/todo` makes the message a widget
    (widgets.py): its first submessage is in the message's `submessages`.
    In a realm that restricts its guests, the guests who do not see the
    sender (one not subscribed to the channel) get them as "Unknown user".
    """
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        realm = await _realm(conn, sender.realm_id)
        target = await _stream_for_sender(conn, sender, stream)
        topic = normalize_topic(topic)
        if not topic and realm.mandatory_topics:
            raise ActionError("Topics are required in this organization.")
        content = normalize_content(content)
        rendered = await _render(conn, sender.realm_id, content, sender=sender)
        rendered = await with_group_members(conn, sender, rendered)
        recipients = await _subscriber_ids(conn, [target.id]) | {sender.id}
        flags = {
            uid: _flags(uid, sender.id, rendered, stream=True, read_by_sender=read_by_sender)
            for uid in recipients
        }
        await _add_personal_flags(conn, sender.id, content, flags)
        message_id, timestamp = await _insert(
            conn,
            sender,
            stream_id=target.id,
            topic=topic,
            participant_ids=None,
            content=content,
            rendered=rendered,
            flags=flags,
            client=client,
        )
        message = _message_dict(
            sender, realm, message_id, timestamp, content, rendered, client,
            target.name, target.id, topic,
        )  # fmt: skip
        message["submessages"] = await _widget(conn, sender, message_id, content)
        # A sender subscribed to the channel shares it with every recipient:
        # only an unsubscribed one may be unknown to a guest (Zulip's rule).
        without_access = (
            await guests_not_seeing(conn, sender.id, recipients)
            if not realm.guests_see_all_users and not target.subscribed
            else []
        )
        outbox.send(
            sender.realm_id,
            _message_event(message, target.invite_only, local_id, sender_queue_id, without_access),
            [{"id": uid, "flags": flags[uid]} for uid in sorted(recipients)],
            await notifiable(conn, sender.id, flags, target.id),
        )
    return message_id


async def do_send_direct_message(
    ctx: ActionContext,
    sender_id: int,
    recipients: Sequence[int | str],
    content: str,
    *,
    local_id: str | None = None,
    sender_queue_id: str | None = None,
    client: str = "Internal",
    read_by_sender: bool = True,
) -> int:
    """Send a direct message to users of the sender's realm (by id or
    e-mail); its participants are they and the sender. Returns its id.
    Flags and widgets as `do_send_stream_message`.

    In a realm that restricts its guests (generation/actions/access.py), a
    guest may write only to users they see (else `ActionError`, Zulip's
    "You do not have permission to access some of the recipients."); a
    conversation makes its participants visible to each other, so its
    guests first receive `realm_user` add for each participant they did not
    see (Zulip's `get_recipients_for_user_creation_events`)."""
    conn = ctx.conn
    if not recipients:
        raise ActionError("Message must have recipients")
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        realm = await _realm(conn, sender.realm_id)
        named = await _users_by_ids_or_emails(conn, sender.realm_id, recipients)
        restricted = not realm.guests_see_all_users
        if restricted and sender.is_guest:
            await _check_sender_sees(conn, sender, named)
        participants = {user.id: user for user in named}
        participants[sender.id] = sender
        ids = sorted(participants)
        # A conversation makes its participants visible to each other
        # (generation/actions/access.py): its guests are told whom they gain,
        # before the message, as Zulip sends the user data first.
        before = (
            await access_before(conn, sender.realm_id, guests=newcomers)
            if restricted
            and len(ids) > 1
            and any(u.is_guest for u in participants.values())
            and (newcomers := await new_conversation_for_guests(conn, ids))
            else None
        )
        content = normalize_content(content)
        rendered = await _render(conn, sender.realm_id, content, sender=sender)
        rendered = await with_group_members(conn, sender, rendered)
        flags = {
            uid: _flags(uid, sender.id, rendered, stream=False, read_by_sender=read_by_sender)
            for uid in ids
        }
        await _add_personal_flags(conn, sender.id, content, flags)
        message_id, timestamp = await _insert(
            conn,
            sender,
            stream_id=None,
            topic="",
            participant_ids=ids,
            content=content,
            rendered=rendered,
            flags=flags,
            client=client,
        )
        display = [
            {"id": u.id, "email": u.email, "full_name": u.full_name, "is_mirror_dummy": False}
            for u in (participants[uid] for uid in ids)
        ]
        message = _message_dict(
            sender, realm, message_id, timestamp, content, rendered, client, display, None, ""
        )
        message["submessages"] = await _widget(conn, sender, message_id, content)
        if before is not None:
            await send_access_changes(conn, outbox, before)
        outbox.send(
            sender.realm_id,
            _message_event(message, None, local_id, sender_queue_id),
            [{"id": uid, "flags": flags[uid]} for uid in ids],
            await notifiable(conn, sender.id, flags, None),
        )
    return message_id
