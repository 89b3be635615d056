"""Who is online: a user's clients report that they are connected, and
active or idle (`POST users/me/presence`); the users who may see them get a
`presence` event when the stored row changes."""

from __future__ import annotations

import time
from typing import Literal

from generation.actions.access import users_who_can_access
from generation.actions.base import ActionContext, ActionError, get_user
from generation.events.users import presence_event

# Zulip's PRESENCE_UPDATE_MIN_FREQ_SECONDS: a user's presence row is written
# at most this often per field, however many clients ping (each open tab pings
# every minute); an event goes out exactly when the row is written, so that
# register's state plus the events always equals a fresh fetch.
PRESENCE_UPDATE_MIN_FREQ_SECS = 55

PresenceStatus = Literal["active", "idle"]


async def do_update_presence(
    ctx: ActionContext, user_id: int, status: str, *, now: float | None = None
) -> bool:
    """Record that a client of the user is connected, and active or idle, at
    `now` (seconds since the epoch; default: the current time, kept to whole
    seconds as clients see it).

    Zulip's rules: the row's `last_connected_time` moves at most every
    `PRESENCE_UPDATE_MIN_FREQ_SECS`, `last_active_time` likewise and only for
    `active`; an update older than the row changes nothing. When the row
    changes every active user who may see the user gets a `presence` event (modern
    form: `user_id` and `email`; the queues drop `email` for `slim_presence`
    clients). Returns whether it changed.
    """
    if status not in ("active", "idle"):
        raise ActionError(f"Invalid status: {status}")
    user = await get_user(ctx.conn, user_id)
    moment = int(time.time() if now is None else now)
    async with ctx.transaction() as outbox:
        await ctx.conn.execute(
            "INSERT INTO presences (user_id, realm_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (user_id, user.realm_id),
        )
        cur = await ctx.conn.execute(
            """
            SELECT floor(extract(epoch FROM p.last_active_time))::bigint,
                   floor(extract(epoch FROM p.last_connected_time))::bigint,
                   floor(extract(epoch FROM u.date_joined))::bigint
            FROM presences p JOIN users u ON u.id = p.user_id
            WHERE p.user_id = %s FOR UPDATE OF p
            """,
            (user_id,),
        )
        row = await cur.fetchone()
        assert row is not None
        active, connected, joined = row
        new_active, new_connected = _presence_after(active, connected, status, moment)
        if (new_active, new_connected) == (active, connected):
            return False
        await ctx.conn.execute(
            "UPDATE presences SET last_active_time = to_timestamp(%s),"
            " last_connected_time = to_timestamp(%s) WHERE user_id = %s",
            (new_active, new_connected, user_id),
        )
        # Zulip shows a user who never was active as active when they joined.
        shown_active = joined if new_active is None else new_active
        event = presence_event(user_id, user.email, shown_active, new_connected)
        users = await users_who_can_access(ctx.conn, user.realm_id, user_id)
        outbox.send(user.realm_id, event, users)
    return True


def _presence_after(
    active: int | None, connected: int | None, status: str, now: int
) -> tuple[int | None, int]:
    """(last active, last connected) after an update at `now`."""
    if connected is None:  # the first update: the user has connected
        return (now if status == "active" else active), now
    if now - connected > PRESENCE_UPDATE_MIN_FREQ_SECS:
        connected = now
    if status == "active" and (active is None or now - active > PRESENCE_UPDATE_MIN_FREQ_SECS):
        active = now
        connected = max(connected, now)
    return active, connected
