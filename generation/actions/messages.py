"""Messages: sending to a channel topic or directly, editing, deleting, the
user's own flags (read, starred), emoji reactions and typing notifications.

Who may see a message: the users who received it (a `user_messages` row), and
the active subscribers of its channel (who can read the channel's history).
Every event about an existing message goes to exactly them, so a private
channel's messages never reach anyone outside it. A new message goes to its
recipients, and, through the `invite_only` flag of the producer's event, to
`all_public_streams` queues only when its channel is public.

Who may change a message (edit it, move its topic) is narrower: a channel
message only while its channel is open to the user now (`_can_modify`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from psycopg.rows import class_row

from generation.actions.base import (
    ROLE_GUEST,
    ActionContext,
    ActionError,
    Connection,
    UserRow,
    get_user,
)
from generation.markdown import Person, Rendered, is_me_message, possible_mentions, render

# Zulip's limits (MAX_MESSAGE_LENGTH, MAX_TOPIC_NAME_LENGTH); the schema checks them too.
MAX_MESSAGE_LENGTH = 10_000
MAX_TOPIC_LENGTH = 60
# A sender who started editing just before the limit may save just after it
# (Zulip's edit_limit_buffer).
EDIT_GRACE_SECS = 20

PROPAGATE_MODES = ("change_one", "change_later", "change_all")
FLAG_OPS = ("add", "remove")
# The flags a user may change, and their column.
EDITABLE_FLAGS = {"read": "read", "starred": "starred"}
# Flags Zulip knows but a user may not set.
_SYSTEM_FLAGS = frozenset(
    {"mentioned", "wildcard_mentioned", "stream_wildcard_mentioned", "topic_wildcard_mentioned",
     "has_alert_word", "historical", "collapsed", "is_private", "active_mobile_push_notification"}
)  # fmt: skip
TYPING_OPS = ("start", "stop")
REACTION_TYPES = ("unicode_emoji", "realm_emoji", "zulip_extra_emoji")

_TRUNCATED_CONTENT = "\n[message truncated]"
_EMOJI_NAME = re.compile(r"[a-z0-9_+-]{1,60}")
_EMOJI_CODE = re.compile(r"[0-9a-f]{1,8}(-[0-9a-f]{1,8}){0,9}")

# Zulip's names of common Unicode emoji, for reactions sent by name only.
# (Zulip resolves names through its full emoji table; a client may always
# send `emoji_code` for any other emoji.)
EMOJI_CODES = {
    "+1": "1f44d", "thumbs_up": "1f44d", "-1": "1f44e", "thumbs_down": "1f44e",
    "tada": "1f389", "heart": "2764", "smile": "1f604", "smiley": "1f603",
    "grinning": "1f600", "joy": "1f602", "laughing": "1f606", "slight_smile": "1f642",
    "wink": "1f609", "thinking": "1f914", "cry": "1f622", "sob": "1f62d",
    "eyes": "1f440", "fire": "1f525", "rocket": "1f680", "clap": "1f44f",
    "wave": "1f44b", "pray": "1f64f", "star": "2b50", "100": "1f4af",
    "heart_eyes": "1f60d", "octopus": "1f419", "check": "2705", "x": "274c",
    "question": "2753", "exclamation": "2757", "working_on_it": "1f6e0",
    "coffee": "2615", "zzz": "1f4a4", "muscle": "1f4aa", "ok": "1f197",
}  # fmt: skip

FlagOp = Literal["add", "remove"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Realm:
    subdomain: str
    allow_message_editing: bool
    mandatory_topics: bool
    message_content_edit_limit_seconds: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Stream:
    id: int
    name: str
    invite_only: bool
    subscribed: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Message:
    """A message as its actions need it."""

    id: int
    sender_id: int
    stream_id: int | None
    stream_name: str | None
    invite_only: bool | None
    topic: str
    participant_ids: list[int] | None
    content: str
    rendered_content: str
    age_secs: float
    has_row: bool
    subscribed: bool
    stream_archived: bool

    @property
    def message_type(self) -> Literal["stream", "private"]:
        return "private" if self.stream_id is None else "stream"


# -- validation -----------------------------------------------------------------


def _unprintable_at(text: str) -> int | None:
    """Where the first control or surrogate character is, if any."""
    for index, char in enumerate(text):
        if unicodedata.category(char) in ("Cc", "Cs"):
            return index
    return None


def normalize_topic(topic: str) -> str:
    """A topic as stored: stripped, one line of printable characters,
    truncated to 60 characters as Zulip does."""
    topic = topic.strip()
    position = _unprintable_at(topic)
    if position is not None:
        raise ActionError(f"Invalid character in topic, at position {position + 1}!")
    if len(topic) > MAX_TOPIC_LENGTH:
        topic = topic[: MAX_TOPIC_LENGTH - 3] + "..."
    return topic


def normalize_content(content: str) -> str:
    """Content as stored: trailing whitespace and leading blank lines dropped,
    truncated to 10,000 characters as Zulip does."""
    content = content.rstrip().lstrip("\n")
    if not content:
        raise ActionError("Message must not be empty")
    if "\x00" in content:
        raise ActionError("Message must not contain null bytes")
    if any(unicodedata.category(char) == "Cs" for char in content):
        raise ActionError("Message must be valid Unicode")
    if len(content) > MAX_MESSAGE_LENGTH:
        content = content[: MAX_MESSAGE_LENGTH - len(_TRUNCATED_CONTENT)] + _TRUNCATED_CONTENT
    return content


def avatar_url(email: str) -> str:
    """The Gravatar of an e-mail address (eventq stores no avatars)."""
    digest = hashlib.md5(email.strip().lower().encode(), usedforsecurity=False).hexdigest()
    return f"https://secure.gravatar.com/avatar/{digest}?d=identicon&version=1"


# -- lookups --------------------------------------------------------------------


async def _realm(conn: Connection, realm_id: int) -> _Realm:
    cur = conn.cursor(row_factory=class_row(_Realm))
    await cur.execute(
        """
        SELECT subdomain, allow_message_editing, mandatory_topics,
               message_content_edit_limit_seconds
        FROM realms WHERE id = %s
        """,
        (realm_id,),
    )
    realm = await cur.fetchone()
    assert realm is not None, "an active user's realm exists"
    return realm


def _no_such_stream(stream: int | str) -> ActionError:
    if isinstance(stream, int):
        return ActionError(f"Channel with ID '{stream}' does not exist", "STREAM_DOES_NOT_EXIST")
    return ActionError(f"Channel '{stream}' does not exist", "STREAM_DOES_NOT_EXIST")


async def _stream_for_sender(conn: Connection, sender: UserRow, stream: int | str) -> _Stream:
    """The channel `sender` may post to (by id, or by name ignoring case).
    Members post to public channels and to private ones they belong to;
    guests only to channels they belong to. Channels a user cannot see are
    reported as nonexistent."""
    if isinstance(stream, str) and (len(stream) > 60 or "\x00" in stream):
        raise _no_such_stream(stream)  # no channel has such a name
    where = "s.id = %s" if isinstance(stream, int) else "lower(s.name) = lower(%s)"
    cur = conn.cursor(row_factory=class_row(_Stream))
    await cur.execute(
        f"""
        SELECT s.id, s.name, s.invite_only,
               EXISTS (SELECT 1 FROM subscriptions sub
                       WHERE sub.stream_id = s.id AND sub.user_id = %s AND sub.active)
                   AS subscribed
        FROM streams s
        WHERE s.realm_id = %s AND NOT s.deactivated AND {where}
        """,  # noqa: S608 (a fixed condition)
        (sender.id, sender.realm_id, stream),
    )
    found = await cur.fetchone()
    if found is None or (not found.subscribed and (sender.is_guest or found.invite_only)):
        if found is not None and found.invite_only and sender.is_admin:
            raise ActionError(f"Not authorized to send to channel '{found.name}'")
        raise _no_such_stream(stream)
    return found


async def _subscriber_ids(conn: Connection, stream_ids: Iterable[int]) -> set[int]:
    """Active users actively subscribed to any of the channels."""
    cur = await conn.execute(
        """
        SELECT DISTINCT sub.user_id FROM subscriptions sub JOIN users u ON u.id = sub.user_id
        WHERE sub.stream_id = ANY(%s) AND sub.active AND u.is_active
        """,
        (list(stream_ids),),
    )
    return {row[0] for row in await cur.fetchall()}


async def _holder_ids(conn: Connection, message_ids: Sequence[int]) -> set[int]:
    """Active users who received any of the messages."""
    cur = await conn.execute(
        """
        SELECT DISTINCT um.user_id FROM user_messages um JOIN users u ON u.id = um.user_id
        WHERE um.message_id = ANY(%s) AND u.is_active
        """,
        (list(message_ids),),
    )
    return {row[0] for row in await cur.fetchall()}


# The fields of an update_message event that carry the edited message's content.
_CONTENT_KEYS = frozenset(
    {"orig_content", "orig_rendered_content", "content", "rendered_content", "is_me_message"}
)


async def _outsiders(
    conn: Connection, message: _Message, message_ids: Sequence[int], audience: set[int]
) -> dict[int, list[int]]:
    """Of `audience`, those who hold some of `message_ids` (messages of
    `message`'s channel) but cannot see that channel now: not subscribed to
    a private one (they left, or were removed), a guest not subscribed to a
    public one, anyone once it is archived. For each, the ids they hold: an
    event about the messages tells them of those only. None for a direct
    message (its recipients hold it)."""
    if message.stream_id is None or not audience:
        return {}
    cur = await conn.execute(
        """
        SELECT u.id, array_agg(um.message_id ORDER BY um.message_id)
        FROM users u
        JOIN user_messages um ON um.user_id = u.id AND um.message_id = ANY(%(ids)s)
        JOIN streams s ON s.id = %(stream)s
        LEFT JOIN subscriptions sub
          ON sub.user_id = u.id AND sub.stream_id = s.id AND sub.active
        WHERE u.id = ANY(%(audience)s)
          AND (s.deactivated OR (sub.user_id IS NULL AND (s.invite_only OR u.role = %(guest)s)))
        GROUP BY u.id
        """,
        {
            "ids": list(message_ids),
            "stream": message.stream_id,
            "audience": sorted(audience),
            "guest": ROLE_GUEST,
        },
    )
    return {int(row[0]): [int(i) for i in row[1]] for row in await cur.fetchall()}


async def _audience(conn: Connection, messages: Sequence[_Message]) -> set[int]:
    """Who may see these messages: their recipients and the subscribers of
    their channels."""
    streams = {m.stream_id for m in messages if m.stream_id is not None}
    audience = await _holder_ids(conn, [m.id for m in messages])
    if streams:
        audience |= await _subscriber_ids(conn, streams)
    return audience


_MESSAGE_COLUMNS = """
    m.id, m.sender_id, m.stream_id, s.name AS stream_name, s.invite_only, m.topic,
    m.participant_ids, m.content, m.rendered_content,
    extract(epoch FROM now() - m.date_sent)::float8 AS age_secs,
    um.user_id IS NOT NULL AS has_row,
    COALESCE(sub.active, false) AS subscribed,
    COALESCE(s.deactivated, false) AS stream_archived
"""
_MESSAGE_JOINS = """
    LEFT JOIN streams s ON s.id = m.stream_id
    LEFT JOIN user_messages um ON um.message_id = m.id AND um.user_id = %(user)s
    LEFT JOIN subscriptions sub ON sub.stream_id = m.stream_id AND sub.user_id = %(user)s
"""


def _can_see(user: UserRow, message: _Message) -> bool:
    """A user sees the messages they received, and the history of the
    channels they belong to and (unless a guest) of public channels."""
    if message.has_row or message.subscribed:
        return True
    return message.stream_id is not None and not message.invite_only and not user.is_guest


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


async def _messages(
    conn: Connection, user: UserRow, message_ids: Sequence[int], *, lock: bool = False
) -> list[_Message]:
    """The messages (of the user's realm) that the user can see, by id;
    `ActionError` if any is unknown or hidden from them. `lock` takes row
    locks against concurrent edits and deletions."""
    ids = sorted(set(message_ids))
    cur = conn.cursor(row_factory=class_row(_Message))
    await cur.execute(
        f"""
        SELECT {_MESSAGE_COLUMNS} FROM messages m {_MESSAGE_JOINS}
        WHERE m.realm_id = %(realm)s AND m.id = ANY(%(ids)s)
        ORDER BY m.id {"FOR UPDATE OF m" if lock else ""}
        """,  # noqa: S608 (fixed fragments)
        {"user": user.id, "realm": user.realm_id, "ids": ids},
    )
    found = await cur.fetchall()
    if not ids or len(found) != len(ids) or not all(_can_see(user, m) for m in found):
        raise ActionError("Invalid message(s)")
    return found


async def _people(conn: Connection, realm_id: int, content: str) -> list[Person]:
    """The realm's active users that `content` may mention (one query, only
    when it has mention syntax)."""
    wanted = possible_mentions(content)
    if not wanted:
        return []
    cur = await conn.execute(
        """
        SELECT id, full_name FROM users
        WHERE realm_id = %s AND is_active AND (lower(full_name) = ANY(%s) OR id = ANY(%s))
        """,
        (realm_id, sorted(wanted.names), sorted(wanted.user_ids)),
    )
    return [Person(row[0], row[1]) for row in await cur.fetchall()]


async def _render(conn: Connection, realm_id: int, content: str) -> Rendered:
    return render(content, await _people(conn, realm_id, content))


async def _users_by_ids_or_emails(
    conn: Connection, realm_id: int, targets: Sequence[int | str]
) -> list[UserRow]:
    """Active users of the realm named by id or e-mail (any case), sorted by
    id; `ActionError` naming the first unknown one."""
    for target in targets:
        if isinstance(target, str) and "\x00" in target:
            raise ActionError(f"Invalid email {target!r}")
    ids = sorted({t for t in targets if isinstance(t, int)})
    emails = sorted({t.strip().lower() for t in targets if isinstance(t, str)})
    cur = conn.cursor(row_factory=class_row(UserRow))
    await cur.execute(
        """
        SELECT id, realm_id, email, full_name, role, is_active FROM users
        WHERE realm_id = %s AND (id = ANY(%s) OR lower(email) = ANY(%s))
        ORDER BY id
        """,
        (realm_id, ids, emails),
    )
    found = await cur.fetchall()
    by_id = {user.id: user for user in found}
    by_email = {user.email.lower(): user for user in found}
    for target in targets:
        if isinstance(target, int):
            user = by_id.get(target)
        else:
            user = by_email.get(target.strip().lower())
        if user is None:
            if isinstance(target, int):
                raise ActionError(f"Invalid user ID {target}")
            raise ActionError(f"Invalid email '{target}'")
        if not user.is_active:
            raise ActionError(f"'{user.email}' is no longer using Zulip.")
    return sorted(by_id.values(), key=lambda user: user.id)


# -- sending --------------------------------------------------------------------


def _flags(user_id: int, sender_id: int, rendered: Rendered, *, stream: bool) -> list[str]:
    """A recipient's flags on a new message, in Zulip's order: the sender has
    read their own message; mentions alert."""
    flags = []
    if user_id == sender_id:
        flags.append("read")
    if user_id in rendered.mentioned_user_ids:
        flags.append("mentioned")
    if stream and rendered.wildcard:
        flags.append("wildcard_mentioned")
    return flags


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
) -> tuple[int, int]:
    """Store a message and its recipients' rows; returns (id, timestamp)."""
    cur = await conn.execute(
        """
        INSERT INTO messages (realm_id, sender_id, stream_id, topic, participant_ids,
                              content, rendered_content)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        RETURNING id, extract(epoch FROM date_sent)::bigint
        """,
        (sender.realm_id, sender.id, stream_id, topic, participant_ids, content, rendered.html),
    )
    row = await cur.fetchone()
    assert row is not None
    message_id, timestamp = row
    users = sorted(flags)
    await conn.execute(
        """
        INSERT INTO user_messages (user_id, message_id, read, mentioned, wildcard_mentioned)
        SELECT user_id, %s, read, mentioned, wildcard
        FROM unnest(%s::bigint[], %s::boolean[], %s::boolean[], %s::boolean[])
            AS t (user_id, read, mentioned, wildcard)
        """,
        (
            message_id,
            users,
            ["read" in flags[u] for u in users],
            ["mentioned" in flags[u] for u in users],
            ["wildcard_mentioned" in flags[u] for u in users],
        ),
    )
    return message_id, timestamp


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


def _message_event(
    message: dict[str, Any],
    invite_only: bool | None,
    local_id: str | None,
    sender_queue_id: str | None,
) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "message", "message": message}
    if invite_only is not None:
        event["invite_only"] = invite_only
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
) -> int:
    """Send a message to a channel (by id or name) and topic; returns its id.

    Recipients are the channel's active subscribers, and the sender. The
    sender's copy is read; mentioned recipients are flagged `mentioned`,
    and every recipient `wildcard_mentioned` for @**all** and its synonyms.
    `local_id` comes back as `local_message_id` on the queue `sender_queue_id`.
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
        rendered = await _render(conn, sender.realm_id, content)
        recipients = await _subscriber_ids(conn, [target.id]) | {sender.id}
        flags = {uid: _flags(uid, sender.id, rendered, stream=True) for uid in recipients}
        message_id, timestamp = await _insert(
            conn,
            sender,
            stream_id=target.id,
            topic=topic,
            participant_ids=None,
            content=content,
            rendered=rendered,
            flags=flags,
        )
        message = _message_dict(
            sender, realm, message_id, timestamp, content, rendered, client,
            target.name, target.id, topic,
        )  # fmt: skip
        outbox.send(
            sender.realm_id,
            _message_event(message, target.invite_only, local_id, sender_queue_id),
            [{"id": uid, "flags": flags[uid]} for uid in sorted(recipients)],
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
) -> int:
    """Send a direct message to users of the sender's realm (by id or
    e-mail); its participants are they and the sender. Returns its id."""
    conn = ctx.conn
    if not recipients:
        raise ActionError("Message must have recipients")
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        realm = await _realm(conn, sender.realm_id)
        named = await _users_by_ids_or_emails(conn, sender.realm_id, recipients)
        participants = {user.id: user for user in named}
        participants[sender.id] = sender
        ids = sorted(participants)
        content = normalize_content(content)
        rendered = await _render(conn, sender.realm_id, content)
        flags = {uid: _flags(uid, sender.id, rendered, stream=False) for uid in ids}
        message_id, timestamp = await _insert(
            conn,
            sender,
            stream_id=None,
            topic="",
            participant_ids=ids,
            content=content,
            rendered=rendered,
            flags=flags,
        )
        display = [
            {"id": u.id, "email": u.email, "full_name": u.full_name, "is_mirror_dummy": False}
            for u in (participants[uid] for uid in ids)
        ]
        message = _message_dict(
            sender, realm, message_id, timestamp, content, rendered, client, display, None, ""
        )
        outbox.send(
            sender.realm_id,
            _message_event(message, None, local_id, sender_queue_id),
            [{"id": uid, "flags": flags[uid]} for uid in ids],
        )
    return message_id


# -- editing --------------------------------------------------------------------


_FLAG_NAMES = ("read", "starred", "mentioned", "wildcard_mentioned")


async def _flags_of(conn: Connection, message_id: int) -> dict[int, list[str]]:
    """Every recipient's flags on a message, in Zulip's order."""
    cur = await conn.execute(
        """
        SELECT user_id, read, starred, mentioned, wildcard_mentioned
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
        SELECT um.user_id, um.read, um.starred, um.mentioned, um.wildcard_mentioned
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
    its topic, or the whole topic (`propagate_mode`). Mention flags follow
    the new content. One `update_message` event to everyone who may see the
    messages, each with their own flags for `message_id`.
    """
    conn = ctx.conn
    if content is None and topic is None:
        raise ActionError("Nothing to change")
    if propagate_mode not in PROPAGATE_MODES:
        raise ActionError(f"Invalid propagate_mode: '{propagate_mode}'")
    async with ctx.transaction() as outbox:
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
        moved = [message.id]
        if new_topic is not None:
            moved = await _topic_message_ids(conn, message, propagate_mode)
            await conn.execute(
                "UPDATE messages SET topic = %s, last_edit_time = now() WHERE id = ANY(%s)",
                (new_topic, moved),
            )
        rendered = None
        if new_content is not None:
            rendered = await _render(conn, actor.realm_id, new_content)
            await conn.execute(
                """
                UPDATE messages SET content = %s, rendered_content = %s, last_edit_time = now()
                WHERE id = %s
                """,
                (new_content, rendered.html, message.id),
            )
            await conn.execute(
                """
                UPDATE user_messages SET mentioned = user_id = ANY(%s), wildcard_mentioned = %s
                WHERE message_id = %s
                """,
                (
                    sorted(rendered.mentioned_user_ids),
                    rendered.wildcard and message.stream_id is not None,
                    message.id,
                ),
            )
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
                propagate_mode=propagate_mode,
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
        if others and new_topic is not None:
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
    if message.sender_id != actor.id:
        raise ActionError("You don't have permission to edit this message")
    limit = realm.message_content_edit_limit_seconds
    if limit is not None and message.age_secs > limit + EDIT_GRACE_SECS:
        raise ActionError("The time limit for editing this message has passed")
    new_content = normalize_content(content)
    return None if new_content == message.content else new_content


# -- deleting -------------------------------------------------------------------


async def do_delete_messages(ctx: ActionContext, actor_id: int, message_ids: Sequence[int]) -> None:
    """Delete messages (their reactions and flags with them). A user deletes
    their own messages; administrators any they can see. One `delete_message`
    event per channel topic (or direct conversation) to everyone who may see
    its messages."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        actor = await get_user(conn, actor_id)
        messages = await _messages(conn, actor, message_ids, lock=True)
        if not actor.is_admin and any(m.sender_id != actor.id for m in messages):
            raise ActionError("You don't have permission to delete this message")
        groups: dict[tuple[Any, ...], list[_Message]] = {}
        for message in messages:
            key = (
                ("stream", message.stream_id, message.topic)
                if message.stream_id is not None
                else ("private", tuple(message.participant_ids or ()))
            )
            groups.setdefault(key, []).append(message)
        events: list[tuple[dict[str, Any], list[Any]]] = []
        for group in groups.values():
            first = group[0]
            event: dict[str, Any] = {
                "type": "delete_message",
                "message_ids": [m.id for m in group],
                "message_type": first.message_type,
            }
            if first.stream_id is not None:
                event["stream_id"] = first.stream_id
                event["topic"] = first.topic
            audience = await _audience(conn, group)
            # Those who cannot see the channel now hear only of theirs.
            outsiders = await _outsiders(conn, first, [m.id for m in group], audience)
            events.append((event, sorted(audience - outsiders.keys())))
            if outsiders:
                theirs = {key: value for key, value in event.items() if key != "message_ids"}
                held = [{"id": uid, "message_ids": ids} for uid, ids in sorted(outsiders.items())]
                events.append((theirs, held))
        await conn.execute("DELETE FROM messages WHERE id = ANY(%s)", ([m.id for m in messages],))
        for event, users in events:
            outbox.send(actor.realm_id, event, users)


# -- flags ----------------------------------------------------------------------


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


# -- reactions ------------------------------------------------------------------


def _emoji(name: str | None, code: str | None, reaction_type: str | None) -> tuple[str, str, str]:
    """(name, code, type) of a reaction from what a client gave: a Unicode
    emoji by name (common names only) or by name and code, or Zulip's extra
    emoji `zulip`. eventq has no custom (realm) emoji."""
    kind = reaction_type or "unicode_emoji"
    if kind not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{kind}'")
    if name is None or not _EMOJI_NAME.fullmatch(name):
        raise ActionError("Invalid emoji name.")
    if kind == "realm_emoji":
        raise ActionError("Invalid custom emoji.")
    if kind == "zulip_extra_emoji":
        if name != "zulip" or code not in (None, "zulip"):
            raise ActionError("Invalid emoji name.")
        return name, "zulip", kind
    known = EMOJI_CODES.get(name)
    if code is None:
        if known is None:
            raise ActionError(f"Emoji '{name}' does not exist")
        return name, known, kind
    if not _EMOJI_CODE.fullmatch(code):
        raise ActionError("Invalid emoji code.")
    if known is not None and known != code:
        raise ActionError("Invalid emoji name.")
    return name, code, kind


def _reaction_event(
    op: str, user: UserRow, message_id: int, emoji: tuple[str, str, str]
) -> dict[str, Any]:
    name, code, kind = emoji
    return {
        "type": "reaction",
        "op": op,
        "message_id": message_id,
        "emoji_name": name,
        "emoji_code": code,
        "reaction_type": kind,
        "user_id": user.id,
        "user": {"user_id": user.id, "email": user.email, "full_name": user.full_name},
    }


async def do_add_reaction(
    ctx: ActionContext,
    user_id: int,
    message_id: int,
    emoji_name: str,
    emoji_code: str | None = None,
    reaction_type: str | None = None,
) -> None:
    """React to a message the user can see with an emoji; a `reaction` add
    event to everyone who may see the message."""
    conn = ctx.conn
    emoji = _emoji(emoji_name, emoji_code, reaction_type)
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        [message] = await _messages(conn, user, [message_id])
        cur = await conn.execute(
            """
            INSERT INTO reactions (message_id, user_id, emoji_name, emoji_code, reaction_type)
            VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
            """,
            (message.id, user.id, *emoji),
        )
        if not cur.rowcount:
            raise ActionError("Reaction already exists.", "REACTION_ALREADY_EXISTS")
        audience = await _audience(conn, [message])
        outbox.send(
            user.realm_id, _reaction_event("add", user, message.id, emoji), sorted(audience)
        )


async def do_remove_reaction(
    ctx: ActionContext,
    user_id: int,
    message_id: int,
    emoji_name: str | None = None,
    emoji_code: str | None = None,
    reaction_type: str | None = None,
) -> None:
    """Remove the user's own reaction, named by `emoji_code` (and type) or by
    `emoji_name`; a `reaction` remove event to everyone who may see the
    message."""
    conn = ctx.conn
    kind = reaction_type or "unicode_emoji"
    if kind not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{kind}'")
    if emoji_name is None and emoji_code is None:
        raise ActionError(
            "At least one of the following arguments must be present: emoji_name, emoji_code"
        )
    if emoji_code is not None and not (_EMOJI_CODE.fullmatch(emoji_code) or emoji_code == "zulip"):
        raise ActionError("Invalid emoji code.")
    if emoji_code is None and emoji_name is not None and not _EMOJI_NAME.fullmatch(emoji_name):
        raise ActionError("Invalid emoji name.")
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        [message] = await _messages(conn, user, [message_id])
        value: tuple[str | None, ...]
        if emoji_code is not None:
            condition, value = "emoji_code = %s AND reaction_type = %s", (emoji_code, kind)
        else:
            condition, value = "emoji_name = %s", (emoji_name,)
        cur = await conn.execute(
            f"""
            DELETE FROM reactions WHERE message_id = %s AND user_id = %s AND {condition}
            RETURNING emoji_name, emoji_code, reaction_type
            """,  # noqa: S608 (a fixed condition)
            (message.id, user.id, *value),
        )
        removed = await cur.fetchall()
        if not removed:
            raise ActionError("Reaction doesn't exist.", "REACTION_DOES_NOT_EXIST")
        audience = sorted(await _audience(conn, [message]))
        for name, code, removed_kind in removed:
            event = _reaction_event("remove", user, message.id, (name, code, removed_kind))
            outbox.send(user.realm_id, event, audience)


# -- typing ---------------------------------------------------------------------


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
