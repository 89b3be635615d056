"""Archiving a stream (administrators): its subscribers are unsubscribed,
it disappears for everyone who saw it, and it stops being a default stream."""

from __future__ import annotations

from generation.actions.base import ActionContext
from generation.actions.streams.common import (
    _actor,
    _default_stream_ids,
    _lock_realm_defaults,
    _non_guests,
    _require_admin,
    _send_default_streams,
    _send_stream_delete,
    _subscribers,
    _viewers,
    _visible_stream,
)


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
