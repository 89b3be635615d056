"""What changes to a user mean for streams, for the users area
(`generation.actions.users`): a new user joins the default streams, a
(de)activated user joins or leaves the subscriber lists, a user whose role
changes to or from guest loses or gains sight of public streams."""

from __future__ import annotations

from psycopg.rows import class_row

from generation.actions.base import ActionContext, get_user
from generation.actions.streams.common import (
    _STREAM_COLUMNS,
    StreamRow,
    _default_stream_ids,
    _lock_streams,
    _send_default_streams,
    _send_peer_events,
    _send_stream_create,
    _send_stream_delete,
    _subscribers,
    _viewers,
)
from generation.actions.streams.membership import _subscribe


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
    to get `peer_remove` (deactivated) or `peer_add` (reactivated) for them,
    archived streams included (their subscriptions are kept).
    Deactivation: call before queueing the `realm_user` remove event."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        cur = await conn.execute(
            "SELECT u.realm_id, u.is_active, array_agg(x.stream_id ORDER BY x.stream_id)"
            " FROM users u JOIN subscriptions x ON x.user_id = u.id"
            " WHERE u.id = %s AND x.active GROUP BY u.realm_id, u.is_active",
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
    public streams they are not subscribed to, archived ones included
    (`stream` delete, their
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
            " WHERE realm_id = %s AND NOT invite_only AND NOT EXISTS ("
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
