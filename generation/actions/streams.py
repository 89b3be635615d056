"""Streams (Zulip's channels), subscriptions and the realm's default streams.

Who can see a stream, and its subscriber list: its active subscribers, and
for a public stream every active user who is not a guest (`_viewers`). Every
event about a stream goes to exactly the users who can see it (or who just
gained or lost sight of it), so nothing about a private stream reaches anyone
else; `apply_events/fetch/streams.py` builds the state by the same rule.

Invariant kept here: an unsubscribed (inactive) subscription row exists only
for a stream its user can still see. Whoever loses sight of a stream loses
their row for it (a private stream they leave or that stops being public, a
public stream a guest leaves), so that regaining sight of it later makes it
"never subscribed", as the `stream` create event they then get says.

Administrators manage streams they can see; `actor_id` None is the operator
(the command line), who may do anything. Every action takes one transaction
(a savepoint inside a caller's) and sends its events after the outermost
commit; streams are locked in id order, and where the realm's default
streams change, the realm row first.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from generation.actions.base import (
    ROLE_GUEST,
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    UserRow,
    get_user,
)
from generation.events.streams import render_description

MAX_NAME_LENGTH = 60
MAX_DESCRIPTION_LENGTH = 1024

# Colors given to new subscriptions, the first one the user does not use yet.
PALETTE = (
    "#76ce90",
    "#fae589",
    "#a6c7e5",
    "#e79ab5",
    "#bfd56f",
    "#f4ae55",
    "#b0a5fd",
    "#addfe5",
    "#f5ce6e",
    "#c2726a",
    "#94c849",
    "#bd86e5",
)

_HEX_COLOR = re.compile(r"#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})")
_BOOLEAN_PROPERTIES = ("is_muted", "in_home_view", "pin_to_top")
SUBSCRIPTION_PROPERTIES = ("color", *_BOOLEAN_PROPERTIES)

_STREAM_COLUMNS = """
    id, realm_id, name, description, invite_only,
    floor(extract(epoch FROM date_created))::bigint AS date_created
"""
_INSERT_STREAM = f"""
    INSERT INTO streams (realm_id, name, description, invite_only) VALUES (%s, %s, %s, %s)
    RETURNING {_STREAM_COLUMNS}
"""  # noqa: S608 (fixed SQL fragments)


@dataclasses.dataclass(frozen=True, slots=True)
class StreamRow:
    id: int
    realm_id: int
    name: str
    description: str
    invite_only: bool
    # UNIX seconds
    date_created: int

    def basic(self) -> dict[str, Any]:
        """The stream object of events (`BasicStream`)."""
        return {
            "stream_id": self.id,
            "name": self.name,
            "description": self.description,
            "rendered_description": render_description(self.description),
            "invite_only": self.invite_only,
            "date_created": self.date_created,
        }


@dataclasses.dataclass(frozen=True)
class StreamRequest:
    """A stream to subscribe to by name, created (public unless asked
    otherwise, with this description) if it does not exist."""

    name: str
    description: str = ""


@dataclasses.dataclass
class SubscriptionsAdded:
    """Per user id, the names of the streams newly subscribed and already
    subscribed; the names the actor may not use (when not fatal)."""

    subscribed: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    already_subscribed: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    unauthorized: list[str] = dataclasses.field(default_factory=list)
    created: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SubscriptionsRemoved:
    """Stream names, once per (user, stream): unsubscribed, or not subscribed."""

    removed: list[str] = dataclasses.field(default_factory=list)
    not_removed: list[str] = dataclasses.field(default_factory=list)


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


def _check_property(prop: str, value: Any) -> Any:
    """The value to store for a subscription property (colors normalized to
    lowercase #rrggbb), or ActionError."""
    if prop == "color":
        if not isinstance(value, str) or not _HEX_COLOR.fullmatch(value):
            raise ActionError("color is not a valid hex color code")
        digits = value[1:].lower()
        if len(digits) == 3:
            digits = "".join(digit * 2 for digit in digits)
        return "#" + digits
    if prop in _BOOLEAN_PROPERTIES:
        if not isinstance(value, bool):
            raise ActionError(f"{prop} is not a boolean")
        return value
    raise ActionError(f"Unknown subscription property: {prop}")


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


# -- subscribing and unsubscribing (shared by several actions) ----------------


def _pick_color(used: set[str]) -> str:
    for color in PALETTE:
        if color not in used:
            return color
    return PALETTE[len(used) % len(PALETTE)]


async def _subscribe(
    conn: Connection,
    outbox: Outbox,
    realm_id: int,
    streams: Sequence[StreamRow],
    users: Sequence[UserRow],
    created: Collection[int] = (),
) -> dict[int, list[StreamRow]]:
    """Subscribe every user to every stream (locked by the caller), in the
    caller's transaction; returns per user id the streams newly subscribed.

    Events, in order: `stream` create to whoever newly sees a stream (all
    viewers of a stream in `created`; a new subscriber who could not see it
    before), `subscription` add to each new subscriber (with the subscriber
    lists after the change), `peer_add` to the stream's other viewers.
    """
    by_id = {stream.id: stream for stream in streams}
    before = await _subscribers(conn, by_id)
    added: dict[int, list[UserRow]] = {
        stream.id: [user for user in users if user.id not in before[stream.id]]
        for stream in streams
    }
    pairs = [(user, by_id[stream_id]) for stream_id, new in added.items() for user in new]
    if not pairs and not created:
        return {}
    settings = await _insert_subscriptions(conn, pairs)
    after = await _subscribers(conn, by_id)
    viewers = await _viewers(conn, by_id)

    newly_seen: dict[int, list[int]] = defaultdict(list)
    for stream in streams:
        if stream.id in created:
            for user_id in viewers[stream.id]:
                newly_seen[user_id].append(stream.id)
            continue
        for user in added[stream.id]:
            if stream.invite_only or user.is_guest:
                newly_seen[user.id].append(stream.id)
    _send_stream_create(outbox, realm_id, by_id, newly_seen)

    subscribed: dict[int, list[StreamRow]] = defaultdict(list)
    for user, stream in sorted(pairs, key=lambda pair: (pair[0].id, pair[1].id)):
        subscribed[user.id].append(stream)
    for user_id, user_streams in subscribed.items():
        subscriptions = []
        for stream in user_streams:
            color, is_muted, pin_to_top = settings[(user_id, stream.id)]
            subscriptions.append(
                {
                    **stream.basic(),
                    "color": color,
                    "is_muted": is_muted,
                    "in_home_view": not is_muted,
                    "pin_to_top": pin_to_top,
                    "subscribers": sorted(after[stream.id]),
                }
            )
        outbox.send(
            realm_id,
            {"type": "subscription", "op": "add", "subscriptions": subscriptions},
            [user_id],
        )

    peers = {}
    for stream_id, new in added.items():
        new_ids = {user.id for user in new}
        peers[stream_id] = (new_ids, viewers[stream_id] - new_ids)
    _send_peer_events(outbox, realm_id, "peer_add", peers)
    return dict(subscribed)


async def _insert_subscriptions(
    conn: Connection, pairs: Sequence[tuple[UserRow, StreamRow]]
) -> dict[tuple[int, int], tuple[str, bool, bool]]:
    """Activate a row per (user, stream), a returning user keeping their old
    settings, a new one getting a color they do not use yet; returns the
    settings (color, is_muted, pin_to_top) of each pair."""
    if not pairs:
        return {}
    user_ids = sorted({user.id for user, _ in pairs})
    stream_ids = sorted({stream.id for _, stream in pairs})
    cur = await conn.execute(
        "SELECT user_id, color FROM subscriptions WHERE user_id = ANY(%s)", (user_ids,)
    )
    used: dict[int, set[str]] = defaultdict(set)
    for user_id, color in await cur.fetchall():
        used[user_id].add(color)
    rows = []
    for user, stream in pairs:
        color = _pick_color(used[user.id])
        used[user.id].add(color)
        rows.append((user.id, stream.id, color))
    async with conn.cursor() as insert:
        await insert.executemany(
            "INSERT INTO subscriptions (user_id, stream_id, color) VALUES (%s, %s, %s)"
            " ON CONFLICT (user_id, stream_id) DO UPDATE SET active = true",
            rows,
        )
    cur = await conn.execute(
        "SELECT user_id, stream_id, color, is_muted, pin_to_top FROM subscriptions"
        " WHERE user_id = ANY(%s) AND stream_id = ANY(%s)",
        (user_ids, stream_ids),
    )
    return {(row[0], row[1]): (row[2], row[3], row[4]) for row in await cur.fetchall()}


async def _unsubscribe(
    conn: Connection,
    outbox: Outbox,
    realm_id: int,
    streams: Sequence[StreamRow],
    users: Sequence[UserRow],
) -> tuple[list[tuple[UserRow, StreamRow]], list[tuple[UserRow, StreamRow]]]:
    """Unsubscribe every user from every stream (locked by the caller), in
    the caller's transaction; returns the (user, stream) pairs removed and
    those that were not subscribed.

    Events, in order: `subscription` remove to each user removed,
    `peer_remove` to the stream's remaining viewers (and, when several users
    leave at once, to those of them who still see it), `stream` delete to the
    users who can no longer see the stream.
    """
    by_id = {stream.id: stream for stream in streams}
    before = await _subscribers(conn, by_id)
    removed: list[tuple[UserRow, StreamRow]] = []
    not_removed: list[tuple[UserRow, StreamRow]] = []
    for stream in streams:
        for user in users:
            (removed if user.id in before[stream.id] else not_removed).append((user, stream))
    if not removed:
        return removed, not_removed

    lost: dict[int, list[int]] = defaultdict(list)
    for user, stream in removed:
        if stream.invite_only or user.is_guest:
            # They lose sight of it: no unsubscribed row (module docstring).
            lost[user.id].append(stream.id)
            await conn.execute(
                "DELETE FROM subscriptions WHERE user_id = %s AND stream_id = %s",
                (user.id, stream.id),
            )
        else:
            await conn.execute(
                "UPDATE subscriptions SET active = false WHERE user_id = %s AND stream_id = %s",
                (user.id, stream.id),
            )
    viewers = await _viewers(conn, by_id)

    per_user: dict[int, list[StreamRow]] = defaultdict(list)
    left: dict[int, set[int]] = defaultdict(set)
    for user, stream in sorted(removed, key=lambda pair: (pair[0].id, pair[1].id)):
        per_user[user.id].append(stream)
        left[stream.id].add(user.id)
    for user_id, user_streams in per_user.items():
        event = {
            "type": "subscription",
            "op": "remove",
            "subscriptions": [{"name": s.name, "stream_id": s.id} for s in user_streams],
        }
        outbox.send(realm_id, event, [user_id])
    # A user who leaves alone knows it from their own `remove`; users who
    # leave together and still see the stream learn about each other.
    _send_peer_events(
        outbox,
        realm_id,
        "peer_remove",
        {
            stream_id: (gone, viewers[stream_id] if len(gone) > 1 else viewers[stream_id] - gone)
            for stream_id, gone in left.items()
        },
    )
    _send_stream_delete(outbox, realm_id, lost)
    return removed, not_removed


# -- subscriptions --------------------------------------------------------------


async def do_add_subscriptions(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    requests: Sequence[StreamRequest],
    *,
    principals: Sequence[str | int] | None = None,
    invite_only: bool = False,
    authorization_errors_fatal: bool = True,
) -> SubscriptionsAdded:
    """Subscribe `principals` (user ids or emails; default: the actor) to
    the named streams, creating the missing ones (public unless
    `invite_only`). Only administrators subscribe others; guests neither
    create streams nor subscribe themselves. A stream the actor cannot see
    is refused, or skipped and listed as unauthorized when not fatal."""
    names: dict[str, StreamRequest] = {}
    for request in requests:
        name = check_stream_name(request.name)
        description = check_description(request.description)
        names.setdefault(name.lower(), StreamRequest(name, description))
    result = SubscriptionsAdded()
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        if actor is not None and actor.is_guest:
            raise ActionError("Not allowed for guest users", "UNAUTHORIZED", 403)
        if principals is None:
            targets = [] if actor is None else [actor]
        else:
            targets = await _resolve_principals(conn, realm_id, principals)
            if actor is not None and any(user.id != actor.id for user in targets):
                _require_admin(actor)
        existing = {
            stream.name.lower(): stream
            for stream in await _lock_streams(
                conn, realm_id, "lower(name) = ANY(%s)", (list(names),)
            )
        }
        streams: list[StreamRow] = []
        for key, request in names.items():
            stream = existing.get(key)
            if stream is None:
                stream = await _create_stream(conn, realm_id, request, invite_only)
                result.created.append(stream.id)
            elif not await _can_see(conn, actor, stream):
                if authorization_errors_fatal:
                    raise ActionError(f"Unable to access channel ({stream.name}).")
                result.unauthorized.append(stream.name)
                continue
            streams.append(stream)
        subscribed = await _subscribe(conn, outbox, realm_id, streams, targets, result.created)
        for user in targets:
            mine = {stream.id for stream in subscribed.get(user.id, ())}
            for stream in streams:
                bucket = result.subscribed if stream.id in mine else result.already_subscribed
                bucket.setdefault(user.id, []).append(stream.name)
    return result


async def _create_stream(
    conn: Connection, realm_id: int, request: StreamRequest, invite_only: bool
) -> StreamRow:
    cur = conn.cursor(row_factory=class_row(StreamRow))
    try:
        await cur.execute(
            _INSERT_STREAM, (realm_id, request.name, request.description, invite_only)
        )
    except psycopg.errors.UniqueViolation:
        # Created by a concurrent request since we looked.
        raise ActionError(f"Channel name '{request.name}' is already taken.") from None
    stream = await cur.fetchone()
    assert stream is not None
    return stream


async def do_create_stream(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    name: str,
    *,
    description: str = "",
    invite_only: bool = False,
    subscribers: Sequence[str | int] | None = None,
) -> int:
    """Create a stream, subscribing `subscribers` (default: the creator);
    returns its id. A name in use (case-insensitively) is refused."""
    name = check_stream_name(name)
    async with ctx.transaction():
        found = await _lock_streams(ctx.conn, realm_id, "lower(name) = lower(%s)", (name,))
        if found:
            raise ActionError(f"Channel name '{found[0].name}' is already taken.")
        result = await do_add_subscriptions(
            ctx,
            actor_id,
            realm_id,
            [StreamRequest(name, description)],
            principals=subscribers,
            invite_only=invite_only,
        )
    return result.created[0]


async def do_remove_subscriptions(
    ctx: ActionContext,
    actor_id: int,
    realm_id: int,
    stream_names: Sequence[str],
    *,
    principals: Sequence[str | int] | None = None,
) -> SubscriptionsRemoved:
    """Unsubscribe `principals` (default: the actor) from the named streams;
    only administrators unsubscribe others. Every name must be a stream the
    actor can see."""
    result = SubscriptionsRemoved()
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await get_user(conn, actor_id, realm_id)
        if principals is None:
            targets = [actor]
        else:
            targets = await _resolve_principals(conn, realm_id, principals)
            if any(user.id != actor.id for user in targets):
                _require_admin(actor)
        # A name no stream could have (a NUL, say) is simply not found.
        keys = [
            key for key in dict.fromkeys(n.strip().lower() for n in stream_names) if _valid(key)
        ]
        found = {
            stream.name.lower(): stream
            for stream in await _lock_streams(conn, realm_id, "lower(name) = ANY(%s)", (keys,))
            if await _can_see(conn, actor, stream)
        }
        missing = [name.strip() for name in stream_names if name.strip().lower() not in found]
        if missing:
            raise ActionError(f"Channel(s) ({', '.join(missing)}) do not exist")
        streams = [found[key] for key in keys]
        removed, not_removed = await _unsubscribe(conn, outbox, realm_id, streams, targets)
        result.removed = [stream.name for _, stream in removed]
        result.not_removed = [stream.name for _, stream in not_removed]
    return result


async def do_update_subscription_properties(
    ctx: ActionContext, user_id: int, changes: Sequence[tuple[int, str, Any]]
) -> list[dict[str, Any]]:
    """Change the user's own settings of streams they are subscribed to:
    (stream id, property, value) each, all or none. Each change sends its
    `subscription` update to the user only; `is_muted` and its legacy
    inverse `in_home_view` always go together (two events, as Zulip's).
    Returns the changes as stored."""
    clean = [(stream_id, prop, _check_property(prop, value)) for stream_id, prop, value in changes]
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        user = await get_user(conn, user_id)
        for stream_id, prop, value in clean:
            await _check_subscribed(conn, user, stream_id)
            stored = value
            if prop == "color":
                column, events = "color", [("color", value)]
            elif prop == "pin_to_top":
                column, events = "pin_to_top", [("pin_to_top", value)]
            else:
                stored = value if prop == "is_muted" else not value
                column, events = "is_muted", [("in_home_view", not stored), ("is_muted", stored)]
            await conn.execute(
                f"UPDATE subscriptions SET {column} = %s"  # noqa: S608 (fixed column names)
                " WHERE user_id = %s AND stream_id = %s",
                (stored, user.id, stream_id),
            )
            for name, event_value in events:
                event = {
                    "type": "subscription",
                    "op": "update",
                    "stream_id": stream_id,
                    "property": name,
                    "value": event_value,
                }
                outbox.send(user.realm_id, event, [user.id])
    return [
        {"stream_id": stream_id, "property": prop, "value": value}
        for stream_id, prop, value in clean
    ]


async def _check_subscribed(conn: Connection, user: UserRow, stream_id: int) -> None:
    found = await _lock_streams(conn, user.realm_id, "id = %s", (stream_id,))
    if not found or not await _can_see(conn, user, found[0]):
        raise ActionError("Invalid channel ID")
    if not await _is_subscribed(conn, user.id, stream_id):
        raise ActionError(f"Not subscribed to channel ID {stream_id}")


# -- stream administration ----------------------------------------------------


async def do_rename_stream(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int, new_name: str
) -> None:
    """Rename a stream (administrators); the name must be free, ignoring
    case, unless only its case changes."""
    name = check_stream_name(new_name)
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        stream = await _visible_stream(conn, actor, realm_id, stream_id)
        if name == stream.name:
            raise ActionError("Channel already has that name.")
        cur = await conn.execute(
            "SELECT name FROM streams WHERE realm_id = %s AND lower(name) = lower(%s)"
            " AND id <> %s AND NOT deactivated",
            (realm_id, name, stream.id),
        )
        if await cur.fetchone() is not None:
            raise ActionError(f"Channel name '{name}' is already taken.")
        try:
            await conn.execute("UPDATE streams SET name = %s WHERE id = %s", (name, stream.id))
        except psycopg.errors.UniqueViolation:
            raise ActionError(f"Channel name '{name}' is already taken.") from None
        viewers = (await _viewers(conn, [stream.id]))[stream.id]
        event = {
            "type": "stream",
            "op": "update",
            "stream_id": stream.id,
            "name": stream.name,
            "property": "name",
            "value": name,
        }
        outbox.send(realm_id, event, sorted(viewers))


async def do_change_stream_description(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int, description: str
) -> None:
    """Change a stream's description (administrators)."""
    description = check_description(description)
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        stream = await _visible_stream(conn, actor, realm_id, stream_id)
        await conn.execute(
            "UPDATE streams SET description = %s WHERE id = %s", (description, stream.id)
        )
        viewers = (await _viewers(conn, [stream.id]))[stream.id]
        event = {
            "type": "stream",
            "op": "update",
            "stream_id": stream.id,
            "name": stream.name,
            "property": "description",
            "value": description,
            "rendered_description": render_description(description),
        }
        outbox.send(realm_id, event, sorted(viewers))


async def do_change_stream_invite_only(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int, invite_only: bool
) -> None:
    """Make a stream private or public (administrators). Users who keep
    sight of it get the `stream` update; users who lose it get `stream`
    delete (and lose their unsubscribed row); users who gain it get `stream`
    create and the current subscribers as `peer_add`. A default stream
    cannot be made private."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        stream = await _visible_stream(conn, actor, realm_id, stream_id)
        if stream.invite_only == invite_only:
            return
        if invite_only and stream.id in await _default_stream_ids(conn, realm_id):
            raise ActionError("A default channel cannot be private.")
        before = (await _viewers(conn, [stream.id]))[stream.id]
        await conn.execute(
            "UPDATE streams SET invite_only = %s WHERE id = %s", (invite_only, stream.id)
        )
        if invite_only:
            # Every unsubscribed row is a non-subscriber's, who loses sight.
            await conn.execute(
                "DELETE FROM subscriptions WHERE stream_id = %s AND NOT active", (stream.id,)
            )
        after = (await _viewers(conn, [stream.id]))[stream.id]
        subscribers = (await _subscribers(conn, [stream.id]))[stream.id]
        changed = dataclasses.replace(stream, invite_only=invite_only)
        event = {
            "type": "stream",
            "op": "update",
            "stream_id": stream.id,
            "name": stream.name,
            "property": "invite_only",
            "value": invite_only,
        }
        outbox.send(realm_id, event, sorted(before & after))
        _send_stream_delete(outbox, realm_id, {user_id: [stream.id] for user_id in before - after})
        gainers = after - before
        _send_stream_create(
            outbox, realm_id, {stream.id: changed}, {user_id: [stream.id] for user_id in gainers}
        )
        _send_peer_events(outbox, realm_id, "peer_add", {stream.id: (subscribers, gainers)})


async def do_delete_stream(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int
) -> None:
    """Archive a stream (administrators): its subscribers are unsubscribed
    (`subscription` remove), everyone who could see it gets `stream` delete,
    and if it was a default stream, the realm's new default streams."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        await _lock_realm_defaults(conn, realm_id)
        stream = await _visible_stream(conn, actor, realm_id, stream_id)
        viewers = (await _viewers(conn, [stream.id]))[stream.id]
        subscribers = (await _subscribers(conn, [stream.id]))[stream.id]
        await conn.execute("UPDATE streams SET deactivated = true WHERE id = %s", (stream.id,))
        await conn.execute(
            "UPDATE subscriptions SET active = false WHERE stream_id = %s AND active", (stream.id,)
        )
        cur = await conn.execute(
            "DELETE FROM default_streams WHERE stream_id = %s RETURNING 1", (stream.id,)
        )
        was_default = await cur.fetchone() is not None
        removal = {
            "type": "subscription",
            "op": "remove",
            "subscriptions": [{"name": stream.name, "stream_id": stream.id}],
        }
        outbox.send(realm_id, removal, sorted(subscribers))
        _send_stream_delete(outbox, realm_id, {user_id: [stream.id] for user_id in viewers})
        if was_default:
            _send_default_streams(
                outbox,
                realm_id,
                await _default_stream_ids(conn, realm_id),
                await _non_guests(conn, realm_id),
            )


# -- default streams ------------------------------------------------------------


async def do_add_default_stream(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int
) -> None:
    """Make a public stream one that new users join (administrators); every
    non-guest gets the new list. Already default: nothing happens."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        await _lock_realm_defaults(conn, realm_id)
        stream = await _visible_stream(conn, actor, realm_id, stream_id)
        if stream.invite_only:
            raise ActionError("Private channels cannot be made default.")
        cur = await conn.execute(
            "INSERT INTO default_streams (realm_id, stream_id) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING RETURNING 1",
            (realm_id, stream.id),
        )
        if await cur.fetchone() is None:
            return
        _send_default_streams(
            outbox,
            realm_id,
            await _default_stream_ids(conn, realm_id),
            await _non_guests(conn, realm_id),
        )


async def do_remove_default_stream(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int
) -> None:
    """Stop new users joining a stream (administrators); every non-guest
    gets the new list. Not a default stream: nothing happens."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        await _lock_realm_defaults(conn, realm_id)
        stream = await _visible_stream(conn, actor, realm_id, stream_id)
        cur = await conn.execute(
            "DELETE FROM default_streams WHERE realm_id = %s AND stream_id = %s RETURNING 1",
            (realm_id, stream.id),
        )
        if await cur.fetchone() is None:
            return
        _send_default_streams(
            outbox,
            realm_id,
            await _default_stream_ids(conn, realm_id),
            await _non_guests(conn, realm_id),
        )


# -- for the users area ---------------------------------------------------------


async def subscribe_to_default_streams(ctx: ActionContext, user_id: int) -> list[int]:
    """Subscribe a (new) user to the realm's default streams; returns their
    ids. Call it inside the transaction that creates the user, after the
    user row exists and after the `realm_user` add event is queued (other
    users get `peer_add` naming the user)."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        user = await get_user(conn, user_id)
        streams = await _lock_streams(
            conn,
            user.realm_id,
            "id IN (SELECT stream_id FROM default_streams WHERE realm_id = %s)",
            (user.realm_id,),
        )
        await _subscribe(conn, outbox, user.realm_id, streams, [user])
    return [stream.id for stream in streams]


async def send_subscriber_activity(ctx: ActionContext, user_id: int) -> None:
    """After a user is deactivated or reactivated (in the caller's
    transaction, after `users.is_active` changed): subscriber lists hold
    active users only, so the viewers of each stream the user is subscribed
    to get `peer_remove` (deactivated) or `peer_add` (reactivated) for them.
    Deactivation: call before queueing the `realm_user` remove event."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        cur = await conn.execute(
            "SELECT u.realm_id, u.is_active, array_agg(x.stream_id ORDER BY x.stream_id)"
            " FROM users u JOIN subscriptions x ON x.user_id = u.id"
            " JOIN streams s ON s.id = x.stream_id"
            " WHERE u.id = %s AND x.active AND NOT s.deactivated GROUP BY u.realm_id, u.is_active",
            (user_id,),
        )
        row = await cur.fetchone()
        if row is None:
            return  # no subscriptions: nobody's state changes
        realm_id, active, stream_ids = row
        viewers = await _viewers(conn, stream_ids)
        _send_peer_events(
            outbox,
            realm_id,
            "peer_add" if active else "peer_remove",
            {stream_id: ({user_id}, viewers[stream_id] - {user_id}) for stream_id in stream_ids},
        )


async def send_stream_access_for_role(ctx: ActionContext, user_id: int, was_guest: bool) -> None:
    """After a user's role changed (in the caller's transaction, after
    `users.role` changed): a user who became a guest loses sight of the
    public streams they are not subscribed to (`stream` delete, their
    unsubscribed rows go) and of the default streams (an empty
    `default_streams`); a guest who became a member gains them (`stream`
    create, their subscribers as `peer_add`, the default streams)."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        user = await get_user(conn, user_id)
        if user.is_guest == was_guest:
            return
        cur = conn.cursor(row_factory=class_row(StreamRow))
        await cur.execute(
            f"SELECT {_STREAM_COLUMNS} FROM streams s"  # noqa: S608 (fixed SQL fragments)
            " WHERE realm_id = %s AND NOT deactivated AND NOT invite_only AND NOT EXISTS ("
            "   SELECT 1 FROM subscriptions x"
            "   WHERE x.stream_id = s.id AND x.user_id = %s AND x.active)"
            " ORDER BY id FOR SHARE",
            (user.realm_id, user.id),
        )
        streams = {stream.id: stream for stream in await cur.fetchall()}
        if user.is_guest:
            await conn.execute(
                "DELETE FROM subscriptions WHERE user_id = %s AND NOT active", (user.id,)
            )
            _send_stream_delete(outbox, user.realm_id, {user.id: list(streams)})
            _send_default_streams(outbox, user.realm_id, [], [user.id])
            return
        _send_stream_create(outbox, user.realm_id, streams, {user.id: list(streams)})
        subscribers = await _subscribers(conn, streams)
        _send_peer_events(
            outbox,
            user.realm_id,
            "peer_add",
            {stream_id: (subscribers[stream_id], {user.id}) for stream_id in streams},
        )
        _send_default_streams(
            outbox, user.realm_id, await _default_stream_ids(conn, user.realm_id), [user.id]
        )
