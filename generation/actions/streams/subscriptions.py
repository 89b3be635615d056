"""Subscribing to streams by name, creating the ones that do not exist yet
(and `do_create_stream`), and unsubscribing from them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import psycopg
from psycopg.rows import class_row

from generation.actions.base import ActionContext, ActionError, Connection, get_user
from generation.actions.streams.common import (
    _STREAM_COLUMNS,
    StreamRow,
    _actor,
    _can_see,
    _lock_any_streams,
    _lock_streams,
    _require_admin,
    _resolve_principals,
    _valid,
    check_description,
    check_stream_name,
)
from generation.actions.streams.membership import _subscribe, _unsubscribe

_INSERT_STREAM = f"""
    INSERT INTO streams (realm_id, name, description, invite_only) VALUES (%s, %s, %s, %s)
    RETURNING {_STREAM_COLUMNS}
"""  # noqa: S608 (fixed SQL fragments)


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
    create streams nor subscribe themselves. A stream the actor cannot see,
    or an archived one, is refused, or skipped and listed as unauthorized
    when not fatal."""
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
        # An archived stream keeps its name; nobody subscribes to it.
        archived = {
            stream.name.lower(): stream
            for stream in await _lock_any_streams(
                conn,
                realm_id,
                "deactivated AND lower(name) = ANY(%s)",
                ([key for key in names if key not in existing],),
            )
        }
        streams: list[StreamRow] = []
        for key, request in names.items():
            stream = existing.get(key)
            if stream is None and key not in archived:
                stream = await _create_stream(conn, realm_id, request, invite_only)
                result.created.append(stream.id)
            elif stream is None or not await _can_see(conn, actor, stream):
                stream = stream or archived[key]
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
    """Unsubscribe `principals` (default: the actor) from the named streams,
    archived ones included; only administrators unsubscribe others. Every
    name must be a stream the actor can see."""
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
        # Archived streams too, as Zulip's list_to_streams (an active
        # stream wins over an archived one of the same name).
        found = {
            stream.name.lower(): stream
            for stream in sorted(
                await _lock_any_streams(conn, realm_id, "lower(name) = ANY(%s)", (keys,)),
                key=lambda stream: not stream.deactivated,
            )
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
