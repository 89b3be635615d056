"""Subscribing and unsubscribing users (shared by several actions): the rows
written, a color for each new subscription, and the events that go with a
change of subscribers, in the caller's transaction.

In a realm that restricts its guests (generation/actions/access.py), a
shared channel is what lets a guest see a user: every subscription change
here also tells the guests concerned the users they gained (`realm_user`
add, before the subscription events, as Zulip's bulk_add_subscriptions) or
lost (`realm_user` remove, after them, as Zulip's
bulk_remove_subscriptions).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Any

from generation.actions.access import access_before, send_access_changes
from generation.actions.base import Connection, Outbox, UserRow
from generation.actions.streams.common import (
    StreamRow,
    _send_peer_events,
    _send_stream_create,
    _send_stream_delete,
    _subscribers,
    _viewers,
)
from generation.actions.streams.subscription_settings import (
    settings_sql,
    subscription_settings,
)

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

    Events, in order: `realm_user` add to each restricted guest of the
    streams (new subscribers or not) for the users they now share a stream
    with, `stream` create to whoever newly sees a stream (all viewers of a
    stream in `created`; a new subscriber who could not see it before),
    `subscription` add to each new subscriber (with the subscriber lists
    after the change), `peer_add` to the stream's other viewers.
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
    # Only these streams' subscribers, old and new, can gain anyone.
    access = await access_before(
        conn, realm_id, guests={user.id for user, _ in pairs}.union(*before.values())
    )
    settings = await _insert_subscriptions(conn, pairs)
    await send_access_changes(conn, outbox, access)
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
            subscriptions.append(
                {
                    **stream.basic(),
                    **settings[(user_id, stream.id)],
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
) -> dict[tuple[int, int], dict[str, Any]]:
    """Activate a row per (user, stream), a returning user keeping their old
    settings, a new one getting a color they do not use yet; returns the
    settings of each pair as its subscription object shows them."""
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
        f"SELECT user_id, stream_id, {settings_sql()} FROM subscriptions"  # noqa: S608 (fixed columns)
        " WHERE user_id = ANY(%s) AND stream_id = ANY(%s)",
        (user_ids, stream_ids),
    )
    return {(row[0], row[1]): subscription_settings(row[2:]) for row in await cur.fetchall()}


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
    users who can no longer see the stream, and last `realm_user` remove to
    each restricted guest of the streams for the users they no longer share
    anything with.
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
    # Only these streams' subscribers before the change can lose anyone.
    access = await access_before(conn, realm_id, guests=set[int]().union(*before.values()))

    lost: dict[int, list[int]] = defaultdict(list)
    for user, stream in removed:
        if stream.invite_only or user.is_guest:
            # They lose sight of it: no unsubscribed row (package docstring).
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
    await send_access_changes(conn, outbox, access)
    return removed, not_removed
