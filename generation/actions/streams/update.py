"""Changing a stream (administrators): its name, its description, and
whether it is private, with the events of whoever keeps, loses or gains
sight of it."""

from __future__ import annotations

import dataclasses

import psycopg

from generation.actions.base import ActionContext, ActionError
from generation.actions.streams.common import (
    _actor,
    _default_stream_ids,
    _require_admin,
    _send_peer_events,
    _send_stream_create,
    _send_stream_delete,
    _subscribers,
    _viewers,
    _visible_stream,
    check_description,
    check_stream_name,
)
from generation.events.streams import render_description


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
