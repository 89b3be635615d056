"""What the message actions share: the limits and normalization of content
and topics, the rows they read (`_Message`, `_Realm`, `_Stream`), the
lookups of who may see a message (`_messages`, `_audience`, `_outsiders`),
rendering, and finding users and channels by id or name.

Its underscored names belong to this package: its modules share them, and
nothing outside it uses them.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Literal

from psycopg.rows import class_row

from generation.actions.access import access_map
from generation.actions.base import ROLE_GUEST, ActionError, Connection, UserRow
from generation.actions.messages.mentions import mentionable_groups
from generation.markdown import Person, Rendered, possible_mentions, render

# Zulip's limits (MAX_MESSAGE_LENGTH, MAX_TOPIC_NAME_LENGTH); the schema checks them too.
MAX_MESSAGE_LENGTH = 10_000
MAX_TOPIC_LENGTH = 60

_TRUNCATED_CONTENT = "\n[message truncated]"


@dataclasses.dataclass(frozen=True, slots=True)
class _Realm:
    subdomain: str
    allow_message_editing: bool
    mandatory_topics: bool
    message_content_edit_limit_seconds: int | None
    # False when the realm restricts what guests see (Zulip's
    # `can_access_all_users_group` role:members; generation/actions/access.py).
    guests_see_all_users: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Stream:
    id: int
    name: str
    invite_only: bool
    subscribed: bool
    # Archived: kept visible to its viewers, refused to every sender.
    deactivated: bool = False


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


# -- lookups --------------------------------------------------------------------


async def _realm(conn: Connection, realm_id: int) -> _Realm:
    cur = conn.cursor(row_factory=class_row(_Realm))
    await cur.execute(
        """
        SELECT subdomain, allow_message_editing, mandatory_topics,
               message_content_edit_limit_seconds, guests_see_all_users
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


async def _stream_for_sender(
    conn: Connection, sender: UserRow, stream: int | str, *, archived_known: bool = True
) -> _Stream:
    """The channel `sender` may post to (by id, or by name ignoring case).
    Members post to public channels and to private ones they belong to;
    guests only to channels they belong to. Channels a user cannot see are
    reported as nonexistent; an archived one they can see is refused as
    Zulip's access_stream_for_send_message does ("Not authorized to send to
    channel ..."), or as nonexistent without `archived_known` (typing:
    Zulip's access_stream_by_id)."""
    if isinstance(stream, str) and (len(stream) > 60 or "\x00" in stream):
        raise _no_such_stream(stream)  # no channel has such a name
    where = "s.id = %s" if isinstance(stream, int) else "lower(s.name) = lower(%s)"
    cur = conn.cursor(row_factory=class_row(_Stream))
    await cur.execute(
        f"""
        SELECT s.id, s.name, s.invite_only,
               EXISTS (SELECT 1 FROM subscriptions sub
                       WHERE sub.stream_id = s.id AND sub.user_id = %s AND sub.active)
                   AS subscribed,
               s.deactivated
        FROM streams s
        WHERE s.realm_id = %s AND (NOT s.deactivated OR %s) AND {where}
        ORDER BY s.deactivated, s.id LIMIT 1
        """,  # noqa: S608 (a fixed condition)
        (sender.id, sender.realm_id, archived_known, stream),
    )
    found = await cur.fetchone()
    if found is None or (not found.subscribed and (sender.is_guest or found.invite_only)):
        if found is not None and found.invite_only and sender.is_admin:
            raise ActionError(f"Not authorized to send to channel '{found.name}'")
        raise _no_such_stream(stream)
    if found.deactivated:
        raise ActionError(f"Not authorized to send to channel '{found.name}'")
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


async def _outsiders(
    conn: Connection, message: _Message, message_ids: Sequence[int], audience: set[int]
) -> dict[int, list[int]]:
    """Of `audience`, those who hold some of `message_ids` (messages of
    `message`'s channel) but cannot see that channel now: not subscribed to
    a private one (they left, or were removed), a guest not subscribed to a
    public one (an archived channel keeps its subscribers and its readers,
    docs/behaviour.md). For each, the ids they hold: an
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
          AND sub.user_id IS NULL AND (s.invite_only OR u.role = %(guest)s)
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


async def _people(
    conn: Connection, realm_id: int, content: str, sender: UserRow | None = None
) -> list[Person]:
    """The realm's active users that `content` may mention (one query, only
    when it has mention syntax). From a guest `sender` of a realm that
    restricts its guests (generation/actions/access.py), only the users they
    may see and the bots: a mention of anyone else stays plain text, as if
    there were no such user (Zulip's `MentionBackend` drops the users the
    sender may not access). The realm's setting is read by the same query."""
    wanted = possible_mentions(content)
    if not wanted:
        return []
    cur = await conn.execute(
        """
        SELECT u.id, u.full_name, u.is_bot, r.guests_see_all_users
        FROM users u JOIN realms r ON r.id = u.realm_id
        WHERE u.realm_id = %s AND u.is_active
          AND (lower(u.full_name) = ANY(%s) OR u.id = ANY(%s))
        """,
        (realm_id, sorted(wanted.names), sorted(wanted.user_ids)),
    )
    rows = await cur.fetchall()
    if sender is not None and sender.is_guest and rows and not rows[0][3]:
        seen = (await access_map(conn, [sender.id]))[sender.id]
        rows = [row for row in rows if row[2] or row[0] in seen]
    return [Person(row[0], row[1]) for row in rows]


async def _render(
    conn: Connection, realm_id: int, content: str, *, sender: UserRow | None = None
) -> Rendered:
    """The content rendered with the people and groups it may mention; a
    group's members are added by `mentions.with_group_members`, which needs
    the sender. `sender` (who writes the content) limits the people a guest
    may mention (`_people`); without it, anyone of the realm."""
    people = await _people(conn, realm_id, content, sender)
    return render(content, people, await mentionable_groups(conn, realm_id, content))


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
