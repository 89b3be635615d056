"""The realm's default streams, the ones new users join (administrators)."""

from __future__ import annotations

from generation.actions.base import ActionContext, ActionError
from generation.actions.streams.common import (
    _actor,
    _default_stream_ids,
    _lock_realm_defaults,
    _non_guests,
    _require_admin,
    _send_default_streams,
    _visible_stream,
)


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
