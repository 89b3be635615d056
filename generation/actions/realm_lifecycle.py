"""A realm's deactivation and reactivation, by the operator (`eventq realm
deactivate|reactivate`).

Deactivating sends Zulip's `realm` op `deactivated` to every active user of
the realm, in the transaction that marks the realm; every shard that
delivers it then forgets what it cached of the realm's users and ends their
queues (server/delivering.py), so each parked poll answers with the event
and every later request of the realm's users is refused with Zulip's
REALM_DEACTIVATED (401, "This organization has been deactivated"). The
users keep their state: reactivating gives them back their access, and
their clients register again. Reactivation tells no one (Zulip's neither):
no queue of the realm exists by then.
"""

from __future__ import annotations

from generation.actions.base import ActionContext, ActionError, active_user_ids


async def _lock_realm(ctx: ActionContext, realm_id: int) -> bool:
    """Lock the realm's row (serializing with role changes and deactivations
    of its users); returns whether it is deactivated."""
    cur = await ctx.conn.execute(
        "SELECT deactivated FROM realms WHERE id = %s FOR UPDATE", (realm_id,)
    )
    row = await cur.fetchone()
    if row is None:
        raise ActionError("Invalid realm")
    return bool(row[0])


async def do_deactivate_realm(ctx: ActionContext, realm_id: int) -> bool:
    """Deactivate an active realm and tell every active user of it (see the
    module's docstring). Returns False, telling no one, if it was already
    deactivated (Zulip returns too)."""
    async with ctx.transaction() as outbox:
        if await _lock_realm(ctx, realm_id):
            return False
        await ctx.conn.execute("UPDATE realms SET deactivated = true WHERE id = %s", (realm_id,))
        outbox.send(
            realm_id,
            {"type": "realm", "op": "deactivated", "realm_id": realm_id},
            await active_user_ids(ctx.conn, realm_id),
        )
    return True


async def do_reactivate_realm(ctx: ActionContext, realm_id: int) -> bool:
    """Reactivate a deactivated realm: its active users may authenticate
    again. Returns False if it was active."""
    async with ctx.transaction():
        if not await _lock_realm(ctx, realm_id):
            return False
        await ctx.conn.execute("UPDATE realms SET deactivated = false WHERE id = %s", (realm_id,))
    return True
