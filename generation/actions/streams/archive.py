"""Archiving a stream (administrators), as Zulip does since feature level
315: the stream keeps its subscriptions and who can see it, it stops being a
default stream, and nobody may send to it or subscribe to it any more.

Its viewers get one `stream` update `is_archived` true; the queues turn it
into Zulip's `stream` delete for clients without the `archived_channels`
capability, which hold no archived channel (`queues/specialize.py`,
form "archived_hidden"). Unarchiving is `generation/actions/streams/unarchive.py`.
"""

from __future__ import annotations

from generation.actions.base import ActionContext, ActionError
from generation.actions.streams.common import (
    _actor,
    _default_stream_ids,
    _lock_realm_defaults,
    _non_guests,
    _require_admin,
    _send_default_streams,
    _viewers,
    _visible_stream_any,
)


async def do_delete_stream(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int
) -> None:
    """Archive a stream (administrators; Zulip's do_deactivate_stream): if
    it was a default stream, the realm's new default streams first, then
    `stream` update `is_archived` true to everyone who can see it. An
    archived stream is refused with Zulip's "Channel is already deactivated"."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        await _lock_realm_defaults(conn, realm_id)
        stream = await _visible_stream_any(conn, actor, realm_id, stream_id)
        if stream.deactivated:
            raise ActionError("Channel is already deactivated")
        viewers = (await _viewers(conn, [stream.id]))[stream.id]
        await conn.execute("UPDATE streams SET deactivated = true WHERE id = %s", (stream.id,))
        cur = await conn.execute(
            "DELETE FROM default_streams WHERE stream_id = %s RETURNING 1", (stream.id,)
        )
        if await cur.fetchone() is not None:
            _send_default_streams(
                outbox,
                realm_id,
                await _default_stream_ids(conn, realm_id),
                await _non_guests(conn, realm_id),
            )
        archived = {
            "type": "stream",
            "op": "update",
            "stream_id": stream.id,
            "name": stream.name,
            "property": "is_archived",
            "value": True,
        }
        outbox.send(realm_id, archived, sorted(viewers))
