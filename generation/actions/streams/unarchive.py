"""Unarchiving a stream (administrators; Zulip's do_unarchive_stream,
`PATCH /streams/{id}` with `is_archived` false since feature level 315).

Clients with the `archived_channels` capability kept the archived stream
and its subscriptions: they get one `stream` update `is_archived` false.
The others dropped the stream when it was archived and must learn it anew:
for them only (the events carry `WITHOUT_ARCHIVED_CHANNELS`, which the
queues drop for the capable clients and remove for these), a `stream`
create to everyone who sees it, its subscribers as `peer_add`, and to each
user who holds a subscription row for it that row as Zulip's `subscription`
add (followed by `remove` where the row is inactive, so that it lands in
`unsubscribed`). Zulip sends them the `stream` create alone, after which
their state lists a subscribed stream as never subscribed; eventq's
register must equal a client's state after its events, so it says more.
"""

from __future__ import annotations

import dataclasses

import psycopg

from generation.actions.base import ActionContext, ActionError, Outbox
from generation.actions.streams.common import (
    StreamRow,
    _actor,
    _lock_streams,
    _require_admin,
    _subscribers,
    _viewers,
    _visible_stream_any,
)
from generation.actions.streams.subscription_settings import (
    settings_sql,
    subscription_settings,
)
from generation.events.streams import WITHOUT_ARCHIVED_CHANNELS

# For clients without `archived_channels` only (see the module docstring).
_HIDDEN = {WITHOUT_ARCHIVED_CHANNELS: True}


async def do_unarchive_stream(
    ctx: ActionContext, actor_id: int | None, realm_id: int, stream_id: int
) -> None:
    """Unarchive a stream the actor can see (administrators), keeping its
    name, subscriptions and privacy. Refused as Zulip does: a stream not
    archived ("Channel is not currently deactivated"), a name another stream
    took meanwhile ("Channel named ... already exists"), a private stream
    without subscribers ("Channel is private and have no subscribers")."""
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        actor = await _actor(conn, actor_id, realm_id)
        _require_admin(actor)
        stream = await _visible_stream_any(conn, actor, realm_id, stream_id)
        if not stream.deactivated:
            raise ActionError("Channel is not currently deactivated")
        if await _lock_streams(conn, realm_id, "lower(name) = lower(%s)", (stream.name,)):
            raise ActionError(f"Channel named {stream.name} already exists")
        subscribers = (await _subscribers(conn, [stream.id]))[stream.id]
        if stream.invite_only and not subscribers:
            raise ActionError("Channel is private and have no subscribers")
        try:
            # In a savepoint: a same-named stream unarchived or created by a
            # concurrent transaction is Zulip's error, not a broken one.
            async with conn.transaction():
                await conn.execute(
                    "UPDATE streams SET deactivated = false WHERE id = %s", (stream.id,)
                )
        except psycopg.errors.UniqueViolation:
            raise ActionError(f"Channel named {stream.name} already exists") from None
        stream = dataclasses.replace(stream, deactivated=False)
        viewers = sorted((await _viewers(conn, [stream.id]))[stream.id])
        unarchived = {
            "type": "stream",
            "op": "update",
            "stream_id": stream.id,
            "name": stream.name,
            "property": "is_archived",
            "value": False,
        }
        outbox.send(realm_id, unarchived, viewers)
        create = {"type": "stream", "op": "create", "streams": [stream.basic()], **_HIDDEN}
        outbox.send(realm_id, create, viewers)
        if subscribers:
            peers = {
                "type": "subscription",
                "op": "peer_add",
                "stream_ids": [stream.id],
                "user_ids": sorted(subscribers),
                **_HIDDEN,
            }
            outbox.send(realm_id, peers, viewers)
        await _send_rows(ctx, outbox, realm_id, stream, set(viewers), sorted(subscribers))


async def _send_rows(
    ctx: ActionContext,
    outbox: Outbox,
    realm_id: int,
    stream: StreamRow,
    viewers: set[int],
    subscribers: list[int],
) -> None:
    """Each viewer's own subscription row, for clients without
    `archived_channels`: `subscription` add, and `remove` after it for an
    inactive row."""
    cur = await ctx.conn.execute(
        f"SELECT user_id, active, {settings_sql()} FROM subscriptions"  # noqa: S608 (fixed columns)
        " WHERE stream_id = %s ORDER BY user_id",
        (stream.id,),
    )
    for user_id, active, *settings in await cur.fetchall():
        if user_id not in viewers:
            continue
        subscription = {
            **stream.basic(),
            **subscription_settings(settings),
            "subscribers": subscribers,
        }
        add = {"type": "subscription", "op": "add", "subscriptions": [subscription], **_HIDDEN}
        outbox.send(realm_id, add, [user_id])
        if not active:
            removed = [{"name": stream.name, "stream_id": stream.id}]
            remove = {"type": "subscription", "op": "remove", "subscriptions": removed, **_HIDDEN}
            outbox.send(realm_id, remove, [user_id])
