"""Editing a message: its content, its topic, and moving the later messages
of its topic or the whole topic with it.

`do_update_message` runs in steps: `_checked_edit` loads the message and
checks the actor may make the edit, `_store_edit` writes it,
`_update_message_event` builds its event, and `_send_edit_events` sends
that to everyone who may see the messages (a narrower one to those who
hold some but cannot see their channel now).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    UserRow,
    get_user,
)
from generation.actions.messages.common import (
    _audience,
    _Message,
    _messages,
    _outsiders,
    _Realm,
    _realm,
    _render,
    normalize_content,
    normalize_topic,
)
from generation.actions.messages.mentions import with_group_members
from generation.actions.personal.alert_words import alerted_recipient_ids
from generation.markdown import Rendered, is_me_message

# A sender who started editing just before the limit may save just after it
# (Zulip's edit_limit_buffer).
EDIT_GRACE_SECS = 20

PROPAGATE_MODES = ("change_one", "change_later", "change_all")

# The fields of an update_message event that carry the edited message's content.
_CONTENT_KEYS = frozenset(
    {"orig_content", "orig_rendered_content", "content", "rendered_content", "is_me_message"}
)


def _can_modify(user: UserRow, message: _Message) -> bool:
    """Whether a user who can see a message may change it at all (edit it,
    move its topic; what their role allows is checked apart): a direct
    message they received; a channel message only while its channel is not
    archived and they can access it now, that is they are subscribed, or the
    channel is public and they are not a guest. (Zulip's
    `has_message_access` with `is_modifying_message`, zerver/lib/message.py.)
    """
    if message.stream_id is None:
        return message.has_row
    if message.stream_archived:
        return False
    return message.subscribed or (not message.invite_only and not user.is_guest)


_FLAG_NAMES = ("read", "starred", "mentioned", "wildcard_mentioned", "has_alert_word")


async def _flags_of(conn: Connection, message_id: int) -> dict[int, list[str]]:
    """Every recipient's flags on a message, in Zulip's order."""
    cur = await conn.execute(
        """
        SELECT user_id, read, starred, mentioned, wildcard_mentioned, has_alert_word
        FROM user_messages WHERE message_id = %s
        """,
        (message_id,),
    )
    return {
        user_id: [name for name, value in zip(_FLAG_NAMES, values, strict=True) if value]
        for user_id, *values in await cur.fetchall()
    }


async def _flags_on(conn: Connection, wanted: Mapping[int, int]) -> dict[int, list[str]]:
    """Each user's flags on one message of theirs (`wanted`: user -> message)."""
    cur = await conn.execute(
        """
        SELECT um.user_id, um.read, um.starred, um.mentioned, um.wildcard_mentioned,
               um.has_alert_word
        FROM unnest(%s::bigint[], %s::bigint[]) AS w(user_id, message_id)
        JOIN user_messages um ON um.user_id = w.user_id AND um.message_id = w.message_id
        """,
        (list(wanted), list(wanted.values())),
    )
    return {
        user_id: [name for name, value in zip(_FLAG_NAMES, values, strict=True) if value]
        for user_id, *values in await cur.fetchall()
    }


async def _topic_message_ids(conn: Connection, message: _Message, propagate_mode: str) -> list[int]:
    """The messages a topic edit moves: the one, those of its topic from it on,
    or the whole topic (topics match ignoring case, as Zulip's). The caller
    has checked that the actor may change `message` (`_can_modify`), so the
    actor may see every message of its channel."""
    # Every message of the topic, not just those the actor received: eventq
    # has no channels with protected history (Zulip's
    # history_public_to_subscribers=False); every channel shares its history
    # with its subscribers, and a public one with every member, so whoever
    # passes `_can_modify` may see every id the event lists. Were protected
    # history ever added, this set and the event's audience would need a rule
    # of their own (Zulip's update_messages_for_topic_edit, zerver/lib/
    # topic.py, still moves the whole topic within a channel).
    if propagate_mode == "change_one":
        return [message.id]
    cur = await conn.execute(
        """
        SELECT id FROM messages
        WHERE stream_id = %s AND lower(topic) = lower(%s) AND (%s OR id >= %s)
        ORDER BY id FOR UPDATE
        """,
        (message.stream_id, message.topic, propagate_mode == "change_all", message.id),
    )
    return [row[0] for row in await cur.fetchall()]


@dataclasses.dataclass(frozen=True, slots=True)
class _Edit:
    """An edit that passed its checks: the message as it was, and what
    changes (None: that part stays)."""

    actor: UserRow
    message: _Message
    new_topic: str | None
    new_content: str | None
    propagate_mode: str


async def do_update_message(
    ctx: ActionContext,
    actor_id: int,
    message_id: int,
    *,
    content: str | None = None,
    topic: str | None = None,
    propagate_mode: str = "change_one",
) -> None:
    """Edit a message's content and/or its topic.

    The message must be one the actor may change (`_can_modify`): a channel
    message only while its channel is not archived and the actor can access
    it now (subscribed, or public and not a guest); otherwise "Invalid
    message(s)", as for a message that does not exist, and nothing changes.
    Editing needs the realm's `allow_message_editing`. Only the sender edits
    the content, within `message_content_edit_limit_seconds` of sending
    (when set); the sender, administrators and members (not guests) edit
    the topic of a channel message, for this message only, the later ones of
    its topic, or the whole topic (`propagate_mode`). Mention flags (user
    groups' members included) and `has_alert_word` follow the new content,
    for everyone who holds the message. One `update_message` event to everyone who may see the
    messages, each with their own flags for `message_id`.
    """
    conn = ctx.conn
    if content is None and topic is None:
        raise ActionError("Nothing to change")
    if propagate_mode not in PROPAGATE_MODES:
        raise ActionError(f"Invalid propagate_mode: '{propagate_mode}'")
    async with ctx.transaction() as outbox:
        edit = await _checked_edit(conn, actor_id, message_id, content, topic, propagate_mode)
        moved, rendered = await _store_edit(conn, edit)
        event = await _update_message_event(conn, edit, moved, rendered)
        await _send_edit_events(conn, outbox, edit, event, moved)


async def _checked_edit(
    conn: Connection,
    actor_id: int,
    message_id: int,
    content: str | None,
    topic: str | None,
    propagate_mode: str,
) -> _Edit:
    """The edit the actor asks for, once the message is loaded (and locked)
    and the actor may make it; `ActionError` otherwise, or if nothing
    would change."""
    actor = await get_user(conn, actor_id)
    realm = await _realm(conn, actor.realm_id)
    [message] = await _messages(conn, actor, [message_id], lock=True)
    # Zulip's check_update_message (zerver/actions/message_edit.py) takes
    # the message with access_message(is_modifying_message=True) before
    # any other check, for content edits and moves alike, and answers
    # a user who only kept a copy from a channel they left (or an
    # archived channel) "Invalid message(s)" (400, BAD_REQUEST), as its
    # test_edit_message_in_unsubscribed_private_stream and
    # test_edit_message_guest_in_unsubscribed_public_stream show. Were
    # the copy enough, a change_all move would list in its event the ids
    # of messages posted after they left.
    if not _can_modify(actor, message):
        raise ActionError("Invalid message(s)")
    if not realm.allow_message_editing:
        raise ActionError("Your organization has turned off message editing")
    new_topic = _new_topic(actor, realm, message, topic)
    new_content = _new_content(actor, realm, message, content)
    if new_topic is None and new_content is None:
        raise ActionError("Nothing to change")
    return _Edit(actor, message, new_topic, new_content, propagate_mode)


# An edit history entry's common part (Zulip's `edit_history`, server/database
# /message_rows.py reads it): who edited, and when.
_EDIT_ENTRY = (
    "jsonb_build_object('user_id', %(user)s::bigint,"
    " 'timestamp', extract(epoch FROM now())::bigint)"
)


async def _store_edit(conn: Connection, edit: _Edit) -> tuple[list[int], Rendered | None]:
    """Write the edit: the new topic on every message it moves, the new
    content (rendered) and the mention flags that follow it. Returns the
    ids of the messages the edit names (the moved ones, or just the
    edited one) and the new content's rendering, if it changed."""
    message = edit.message
    moved = [message.id]
    if edit.new_topic is not None:
        moved = await _topic_message_ids(conn, message, edit.propagate_mode)
        await conn.execute(
            f"""
            UPDATE messages SET topic = %(topic)s, last_edit_time = now(),
                   edit_history = COALESCE(edit_history, '[]'::jsonb)
                       || jsonb_build_array({_EDIT_ENTRY} || jsonb_build_object(
                            'prev_topic', topic, 'topic', %(topic)s::text))
            WHERE id = ANY(%(ids)s)
            """,  # noqa: S608 (a fixed fragment)
            {"topic": edit.new_topic, "ids": moved, "user": edit.actor.id},
        )
    rendered = None
    if edit.new_content is not None:
        rendered = await _render(conn, edit.actor.realm_id, edit.new_content, sender=edit.actor)
        rendered = await with_group_members(conn, edit.actor, rendered)
        # One entry per edit: a topic changed with the content is in the
        # entry the move just added.
        prev = (
            "jsonb_build_object('prev_content', content, 'prev_rendered_content', rendered_content)"
        )
        entry = (
            f"jsonb_set(edit_history, '{{-1}}', (edit_history -> -1) || {prev})"
            if edit.new_topic is not None
            else f"COALESCE(edit_history, '[]'::jsonb)"
            f" || jsonb_build_array({_EDIT_ENTRY} || {prev})"
        )
        await conn.execute(
            f"""
            UPDATE messages SET content = %(content)s, rendered_content = %(html)s,
                   last_edit_time = now(), edit_history = {entry}
            WHERE id = %(id)s
            """,  # noqa: S608 (fixed fragments)
            {
                "content": edit.new_content,
                "html": rendered.html,
                "id": message.id,
                "user": edit.actor.id,
            },
        )
        # Zulip's update_user_message_flags: mentions and alert words are
        # recounted for everyone who holds the message.
        alerted = await alerted_recipient_ids(conn, message.id, edit.new_content)
        await conn.execute(
            """
            UPDATE user_messages SET mentioned = user_id = ANY(%s), wildcard_mentioned = %s,
                   has_alert_word = user_id = ANY(%s)
            WHERE message_id = %s
            """,
            (
                sorted(rendered.mentioned_user_ids),
                rendered.wildcard and message.stream_id is not None,
                sorted(alerted),
                message.id,
            ),
        )
    return moved, rendered


async def _update_message_event(
    conn: Connection, edit: _Edit, moved: list[int], rendered: Rendered | None
) -> dict[str, Any]:
    """The `update_message` event of a stored edit, as everyone who can see
    the channel gets it (without recipients' flags)."""
    actor, message = edit.actor, edit.message
    new_topic, new_content = edit.new_topic, edit.new_content
    cur = await conn.execute("SELECT extract(epoch FROM now())::bigint")
    row = await cur.fetchone()
    assert row is not None
    event: dict[str, Any] = {
        "type": "update_message",
        "user_id": actor.id,
        "edit_timestamp": row[0],
        "message_id": message.id,
        "message_ids": moved,
        "rendering_only": False,
    }
    if message.stream_id is not None:
        event["stream_name"] = message.stream_name
        event["stream_id"] = message.stream_id
    if new_topic is not None:
        event.update(
            orig_subject=message.topic,
            subject=new_topic,
            propagate_mode=edit.propagate_mode,
            topic_links=[],
        )
    if new_content is not None and rendered is not None:
        event.update(
            orig_content=message.content,
            orig_rendered_content=message.rendered_content,
            content=new_content,
            rendered_content=rendered.html,
            is_me_message=is_me_message(new_content),
        )
    return event


async def _send_edit_events(
    conn: Connection, outbox: Outbox, edit: _Edit, event: dict[str, Any], moved: list[int]
) -> None:
    """Send `event` to everyone who may see the messages, each with their
    flags on the edited one; those who hold some of them but cannot see
    their channel now get a narrower event of their own."""
    actor, message = edit.actor, edit.message
    flags = await _flags_of(conn, message.id)
    moved_messages = [dataclasses.replace(message, id=mid) for mid in moved]
    audience = await _audience(conn, moved_messages)
    outsiders = await _outsiders(conn, message, moved, audience)
    # Zulip's rule for those without a row for the message (subscribers
    # who may have read it in the channel's history): treat it as read.
    outbox.send(
        actor.realm_id,
        event,
        [
            {"id": uid, "flags": flags.get(uid, ["read"])}
            for uid in sorted(audience - outsiders.keys())
        ],
    )
    # Those who cannot see the channel now (they left it) hear only of
    # the messages they hold: the edit with their ids if they hold the
    # edited one, else only the move of theirs, without its content.
    # (Their own `message_ids` come with each one's data.)
    theirs = {key: value for key, value in event.items() if key != "message_ids"}
    holding = [
        {"id": uid, "flags": flags.get(uid, ["read"]), "message_ids": held}
        for uid, held in sorted(outsiders.items())
        if message.id in held
    ]
    outbox.send(actor.realm_id, theirs, holding)
    others = {uid: held for uid, held in outsiders.items() if message.id not in held}
    if others and edit.new_topic is not None:
        move = {
            key: value
            for key, value in theirs.items()
            if key not in _CONTENT_KEYS and key != "message_id"
        }
        own = await _flags_on(conn, {uid: held[0] for uid, held in others.items()})
        users = [
            {"id": uid, "flags": own.get(uid, []), "message_id": held[0], "message_ids": held}
            for uid, held in sorted(others.items())
        ]
        outbox.send(actor.realm_id, move, users)


def _new_topic(actor: UserRow, realm: _Realm, message: _Message, topic: str | None) -> str | None:
    """The topic after the edit, or None if it does not change."""
    if topic is None:
        return None
    if message.stream_id is None:
        raise ActionError("Direct messages cannot have topics.")
    if actor.is_guest and message.sender_id != actor.id:
        raise ActionError("You don't have permission to edit this message")
    new_topic = normalize_topic(topic)
    if not new_topic and realm.mandatory_topics:
        raise ActionError("Topics are required in this organization.")
    return None if new_topic == message.topic else new_topic


def _new_content(
    actor: UserRow, realm: _Realm, message: _Message, content: str | None
) -> str | None:
    """The content after the edit, or None if it does not change."""
    if content is None:
        return None
    check_content_editor(actor, realm, message, EDIT_GRACE_SECS)
    new_content = normalize_content(content)
    return None if new_content == message.content else new_content


def check_content_editor(
    actor: UserRow, realm: _Realm, message: _Message, grace_secs: float
) -> None:
    """`ActionError` unless `actor` may edit `message`'s content now: its
    sender, within the realm's edit limit (if any) and `grace_secs` more."""
    if message.sender_id != actor.id:
        raise ActionError("You don't have permission to edit this message")
    limit = realm.message_content_edit_limit_seconds
    if limit is not None and message.age_secs > limit + grace_secs:
        raise ActionError("The time limit for editing this message has passed")
