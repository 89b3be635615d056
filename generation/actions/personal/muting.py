"""Users a user muted (Zulip's muted users).

Muting hides a user's messages from the muter: their unread messages to the
muter are marked read when they are muted (one `update_message_flags`
event), and each message they send later arrives read for the muter
(`muters_of`, read by message sending). Every change sends the whole list
(`muted_users`) to the muter only; no one else learns of it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from generation.actions.base import ActionContext, ActionError, Connection, UserRow, get_user
from generation.actions.personal.common import _lock_user

# No limit of our own: a user can mute each user of their realm at most
# once, so the list (and each event, which carries it whole) is bounded by
# the realm's size, as in Zulip.


async def muted_users(conn: Connection, user_id: int) -> list[dict[str, int]]:
    """Zulip's `muted_users`: `{id, timestamp}` per muted user, deactivated
    ones included, by id."""
    cur = await conn.execute(
        "SELECT muted_user_id, floor(extract(epoch FROM date_muted))::bigint"
        " FROM muted_users WHERE user_id = %s ORDER BY muted_user_id",
        (user_id,),
    )
    return [{"id": int(row[0]), "timestamp": int(row[1])} for row in await cur.fetchall()]


async def muters_of(conn: Connection, sender_id: int, user_ids: Collection[int]) -> set[int]:
    """Of `user_ids`, those who muted `sender_id`."""
    cur = await conn.execute(
        "SELECT user_id FROM muted_users WHERE muted_user_id = %s AND user_id = ANY(%s)",
        (sender_id, list(user_ids)),
    )
    return {int(row[0]) for row in await cur.fetchall()}


async def _target(conn: Connection, user: UserRow, target_id: int) -> int:
    """A user of the muter's realm, active or not (Zulip lets one mute a
    deactivated user)."""
    cur = await conn.execute(
        "SELECT id FROM users WHERE id = %s AND realm_id = %s", (target_id, user.realm_id)
    )
    if await cur.fetchone() is None:
        raise ActionError("No such user")
    return target_id


def _list_event(muted: list[dict[str, int]]) -> dict[str, Any]:
    return {"type": "muted_users", "muted_users": muted}


async def do_mute_user(ctx: ActionContext, user_id: int, muted_user_id: int) -> None:
    """Mute a user of one's realm: their messages to the user that are still
    unread become read (an `update_message_flags` event, when there are
    some), then the `muted_users` event."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        if muted_user_id == user.id:
            raise ActionError("Cannot mute self")
        await _target(conn, user, muted_user_id)
        await _lock_user(conn, user.id)
        cur = await conn.execute(
            "INSERT INTO muted_users (user_id, muted_user_id) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            (user.id, muted_user_id),
        )
        if not cur.rowcount:
            raise ActionError("User already muted")
        # One statement, however many: the messages one user sent another
        # are the muter's own rows, as in Zulip's do_mark_muted_user_messages_as_read.
        cur = await conn.execute(
            """
            UPDATE user_messages um SET read = true FROM messages m
            WHERE um.user_id = %s AND NOT um.read AND m.id = um.message_id AND m.sender_id = %s
            RETURNING um.message_id
            """,
            (user.id, muted_user_id),
        )
        read = sorted(int(row[0]) for row in await cur.fetchall())
        if read:
            flags = {
                "type": "update_message_flags",
                "op": "add",
                "operation": "add",
                "flag": "read",
                "messages": read,
                "all": False,
            }
            outbox.send(user.realm_id, flags, [user.id])
        outbox.send(user.realm_id, _list_event(await muted_users(conn, user.id)), [user.id])


async def do_unmute_user(ctx: ActionContext, user_id: int, muted_user_id: int) -> None:
    """Unmute a user; the `muted_users` event. Messages marked read stay read."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        await _target(conn, user, muted_user_id)
        await _lock_user(conn, user.id)
        cur = await conn.execute(
            "DELETE FROM muted_users WHERE user_id = %s AND muted_user_id = %s",
            (user.id, muted_user_id),
        )
        if not cur.rowcount:
            raise ActionError("User is not muted")
        outbox.send(user.realm_id, _list_event(await muted_users(conn, user.id)), [user.id])
