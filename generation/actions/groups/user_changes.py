"""What changes to users mean for the groups' members."""

from __future__ import annotations

from generation.actions.base import ActionContext
from generation.actions.groups.common import (
    ROLE_GROUPS,
    members_event,
    send_group_events,
    system_group_ids,
)

# -- changes to users -----------------------------------------------------------------


async def send_role_group_changes(
    ctx: ActionContext, realm_id: int, user_id: int, old_role: int | None, new_role: int
) -> None:
    """A user was made (`old_role` None) or changed role: the system groups
    of their roles (whose members are computed from roles) lose and gain
    them; every active user is told, as Zulip: `remove_members` of the old
    role's groups, then `add_members` of the new one's."""
    old = ROLE_GROUPS[old_role] if old_role is not None else ()
    new = ROLE_GROUPS[new_role]
    system = await system_group_ids(ctx.conn, realm_id)
    events = [members_event("remove_members", system[n], [user_id]) for n in old if n not in new]
    events += [members_event("add_members", system[n], [user_id]) for n in new if n not in old]
    await send_group_events(ctx, realm_id, events)


async def send_activity_group_changes(
    ctx: ActionContext, realm_id: int, user_id: int, *, active: bool
) -> None:
    """A user was deactivated (`active` False) or reactivated: they leave or
    rejoin the members of every group they are a direct member of (system
    groups by role, others by row; their rows are kept). Every active user
    is told with `remove_members` / `add_members` per group. Zulip's clients
    drop a deactivated user from the groups on `realm_user` already; eventq
    says it in the groups' own events too, and says the way back."""
    cur = await ctx.conn.execute(
        "SELECT group_id FROM user_group_direct_members WHERE user_id = %s ORDER BY group_id",
        (user_id,),
    )
    op = "add_members" if active else "remove_members"
    events = [members_event(op, row[0], [user_id]) for row in await cur.fetchall()]
    await send_group_events(ctx, realm_id, events)
