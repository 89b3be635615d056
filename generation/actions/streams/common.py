"""What the stream actions share: the limits and checks of names and
descriptions, the stream row (`StreamRow`), the lookups of who may act on,
see or subscribe to a stream (`_actor`, `_require_admin`, `_lock_streams`,
`_can_see`, `_visible_stream`, `_subscribers`, `_viewers`, ...), and the
senders of the `stream`, `subscription` peer and `default_streams` events.

Its underscored names belong to this package: its modules share them, and
nothing outside it uses them.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from psycopg.rows import class_row

from generation.actions.base import (
    ROLE_GUEST,
    ActionError,
    Connection,
    Outbox,
    UserRow,
    get_user,
)
from generation.events.streams import CHANNEL_POLICIES, render_description

MAX_NAME_LENGTH = 60
MAX_DESCRIPTION_LENGTH = 1024

_STREAM_COLUMNS = """
    id, realm_id, name, description, invite_only,
    floor(extract(epoch FROM date_created))::bigint AS date_created,
    deactivated
"""


@dataclasses.dataclass(frozen=True, slots=True)
class StreamRow:
    id: int
    realm_id: int
    name: str
    description: str
    invite_only: bool
    # UNIX seconds
    date_created: int
    # Archived (Zulip's `is_archived`): its subscriptions are kept.
    deactivated: bool = False

    def basic(self) -> dict[str, Any]:
        """The stream object of events (`BasicStream`)."""
        return {
            "stream_id": self.id,
            "name": self.name,
            "description": self.description,
            "rendered_description": render_description(self.description),
            "invite_only": self.invite_only,
            "date_created": self.date_created,
            "is_archived": self.deactivated,
            **CHANNEL_POLICIES,
        }


# -- validation ---------------------------------------------------------------


def check_stream_name(name: str) -> str:
    """A valid stream name (surrounding whitespace removed), or ActionError."""
    name = name.strip()
    if not name:
        raise ActionError("Channel name can't be empty.")
    if len(name) > MAX_NAME_LENGTH:
        raise ActionError(f"Channel name too long (limit: {MAX_NAME_LENGTH} characters).")
    for position, char in enumerate(name, start=1):
        if unicodedata.category(char) in ("Cc", "Cs", "Cn"):
            raise ActionError(f"Invalid character in channel name, at position {position}.")
    return name


def _valid(name: str) -> bool:
    try:
        check_stream_name(name)
    except ActionError:
        return False
    return True


def check_description(description: str) -> str:
    """A valid description; newlines become spaces (a description is one
    line, as Zulip's)."""
    description = description.replace("\r\n", " ").replace("\n", " ")
    if len(description) > MAX_DESCRIPTION_LENGTH:
        raise ActionError(f"description is too long (limit: {MAX_DESCRIPTION_LENGTH} characters)")
    if any(unicodedata.category(char) in ("Cc", "Cs") and char != "\t" for char in description):
        raise ActionError("description contains a control character")
    return description


# -- lookups --------------------------------------------------------------------


async def _actor(conn: Connection, actor_id: int | None, realm_id: int) -> UserRow | None:
    return None if actor_id is None else await get_user(conn, actor_id, realm_id)


def _require_admin(actor: UserRow | None) -> None:
    if actor is not None and not actor.is_admin:
        raise ActionError("Must be an organization administrator", "UNAUTHORIZED", 403)


async def _lock_streams(conn: Connection, realm_id: int, where: str, args: Any) -> list[StreamRow]:
    """Active streams of the realm matching `where`, locked, by id."""
    cur = conn.cursor(row_factory=class_row(StreamRow))
    await cur.execute(
        f"SELECT {_STREAM_COLUMNS} FROM streams"  # noqa: S608 (fixed SQL fragments)
        f" WHERE realm_id = %s AND NOT deactivated AND {where} ORDER BY id FOR UPDATE",
        (realm_id, *args),
    )
    return await cur.fetchall()


async def _lock_any_streams(
    conn: Connection, realm_id: int, where: str, args: Any
) -> list[StreamRow]:
    """Streams of the realm matching `where`, archived ones included, locked, by id."""
    cur = conn.cursor(row_factory=class_row(StreamRow))
    await cur.execute(
        f"SELECT {_STREAM_COLUMNS} FROM streams"  # noqa: S608 (fixed SQL fragments)
        f" WHERE realm_id = %s AND {where} ORDER BY id FOR UPDATE",
        (realm_id, *args),
    )
    return await cur.fetchall()


async def _lock_realm_defaults(conn: Connection, realm_id: int) -> None:
    """Serialize changes of the realm's default streams, so that each
    `default_streams` event carries the list as of its own commit. Taken
    before any stream lock."""
    await conn.execute("SELECT 1 FROM realms WHERE id = %s FOR NO KEY UPDATE", (realm_id,))


async def _is_subscribed(conn: Connection, user_id: int, stream_id: int) -> bool:
    cur = await conn.execute(
        "SELECT 1 FROM subscriptions WHERE user_id = %s AND stream_id = %s AND active",
        (user_id, stream_id),
    )
    return await cur.fetchone() is not None


async def _can_see(conn: Connection, user: UserRow | None, stream: StreamRow) -> bool:
    if user is None or (not stream.invite_only and not user.is_guest):
        return True
    return await _is_subscribed(conn, user.id, stream.id)


async def _visible_stream(
    conn: Connection, actor: UserRow | None, realm_id: int, stream_id: int
) -> StreamRow:
    """The stream, locked, if the actor can see it; otherwise the same error
    as for a stream that does not exist."""
    found = await _lock_streams(conn, realm_id, "id = %s", (stream_id,))
    if not found or not await _can_see(conn, actor, found[0]):
        raise ActionError("Invalid channel ID")
    return found[0]


async def _visible_stream_any(
    conn: Connection, actor: UserRow | None, realm_id: int, stream_id: int
) -> StreamRow:
    """The stream, archived or not, locked, if the actor can see it (its
    subscribers keep it when it is archived); otherwise "Invalid channel ID"."""
    found = await _lock_any_streams(conn, realm_id, "id = %s", (stream_id,))
    if not found or not await _can_see(conn, actor, found[0]):
        raise ActionError("Invalid channel ID")
    return found[0]


async def _resolve_principals(
    conn: Connection, realm_id: int, principals: Sequence[str | int]
) -> list[UserRow]:
    """Active users of the realm by email or id, without repeats."""
    users: dict[int, UserRow] = {}
    for principal in principals:
        if isinstance(principal, int) and not isinstance(principal, bool):
            cur = conn.cursor(row_factory=class_row(UserRow))
            await cur.execute(
                "SELECT id, realm_id, email, full_name, role, is_active FROM users"
                " WHERE id = %s AND realm_id = %s AND is_active",
                (principal, realm_id),
            )
        elif isinstance(principal, str) and "\x00" not in principal:
            cur = conn.cursor(row_factory=class_row(UserRow))
            await cur.execute(
                "SELECT id, realm_id, email, full_name, role, is_active FROM users"
                " WHERE lower(email) = lower(%s) AND realm_id = %s AND is_active",
                (principal, realm_id),
            )
        else:
            raise ActionError("No such user")
        user = await cur.fetchone()
        if user is None:
            raise ActionError("No such user")
        users.setdefault(user.id, user)
    return list(users.values())


async def _subscribers(conn: Connection, stream_ids: Collection[int]) -> dict[int, set[int]]:
    """Active subscribers (active users) of each stream."""
    found: dict[int, set[int]] = {stream_id: set() for stream_id in stream_ids}
    cur = await conn.execute(
        "SELECT x.stream_id, x.user_id FROM subscriptions x JOIN users u ON u.id = x.user_id"
        " WHERE x.stream_id = ANY(%s) AND x.active AND u.is_active",
        (list(stream_ids),),
    )
    for stream_id, user_id in await cur.fetchall():
        found[stream_id].add(user_id)
    return found


async def _viewers(conn: Connection, stream_ids: Collection[int]) -> dict[int, set[int]]:
    """Who can see each stream and its subscribers: active subscribers, and
    for a public stream every active non-guest of its realm."""
    found: dict[int, set[int]] = {stream_id: set() for stream_id in stream_ids}
    cur = await conn.execute(
        """
        SELECT s.id, u.id FROM streams s JOIN users u ON u.realm_id = s.realm_id
        WHERE s.id = ANY(%s) AND u.is_active
          AND ((NOT s.invite_only AND u.role <> %s)
               OR EXISTS (SELECT 1 FROM subscriptions x
                          WHERE x.stream_id = s.id AND x.user_id = u.id AND x.active))
        """,
        (list(stream_ids), ROLE_GUEST),
    )
    for stream_id, user_id in await cur.fetchall():
        found[stream_id].add(user_id)
    return found


async def _non_guests(conn: Connection, realm_id: int) -> list[int]:
    """The audience of `default_streams` events (guests see none)."""
    cur = await conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND is_active AND role <> %s ORDER BY id",
        (realm_id, ROLE_GUEST),
    )
    return [row[0] for row in await cur.fetchall()]


async def _default_stream_ids(conn: Connection, realm_id: int) -> list[int]:
    cur = await conn.execute(
        "SELECT d.stream_id FROM default_streams d JOIN streams s ON s.id = d.stream_id"
        " WHERE d.realm_id = %s AND NOT s.deactivated ORDER BY d.stream_id",
        (realm_id,),
    )
    return [row[0] for row in await cur.fetchall()]


# -- events -------------------------------------------------------------------


def _grouped(per_user: Mapping[int, Iterable[int]]) -> dict[tuple[int, ...], list[int]]:
    """Users grouped by identical (sorted) id lists, so that one notice goes
    to all the users who receive the same event."""
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for user_id, ids in sorted(per_user.items()):
        key = tuple(sorted(set(ids)))
        if key:
            groups[key].append(user_id)
    return groups


def _send_stream_create(
    outbox: Outbox,
    realm_id: int,
    streams: Mapping[int, StreamRow],
    per_user: Mapping[int, Iterable[int]],
) -> None:
    for stream_ids, users in _grouped(per_user).items():
        event = {
            "type": "stream",
            "op": "create",
            "streams": [streams[i].basic() for i in stream_ids],
        }
        outbox.send(realm_id, event, users)


def _send_stream_delete(
    outbox: Outbox, realm_id: int, per_user: Mapping[int, Iterable[int]]
) -> None:
    for stream_ids, users in _grouped(per_user).items():
        event = {
            "type": "stream",
            "op": "delete",
            "streams": [{"stream_id": i} for i in stream_ids],
            "stream_ids": list(stream_ids),
        }
        outbox.send(realm_id, event, users)


def _send_peer_events(
    outbox: Outbox,
    realm_id: int,
    op: str,
    changes: Mapping[int, tuple[Collection[int], Collection[int]]],
) -> None:
    """`changes`: stream id -> (user ids that joined or left, recipients).
    Streams with the same users and recipients share one event."""
    shared: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = defaultdict(list)
    for stream_id, (user_ids, recipients) in sorted(changes.items()):
        if user_ids and recipients:
            shared[(tuple(sorted(user_ids)), tuple(sorted(recipients)))].append(stream_id)
    for (user_ids, recipients), stream_ids in shared.items():
        event = {
            "type": "subscription",
            "op": op,
            "stream_ids": stream_ids,
            "user_ids": list(user_ids),
        }
        outbox.send(realm_id, event, list(recipients))


def _send_default_streams(outbox: Outbox, realm_id: int, ids: list[int], users: list[int]) -> None:
    outbox.send(realm_id, {"type": "default_streams", "default_streams": ids}, users)
