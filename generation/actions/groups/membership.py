"""A group's direct members and direct subgroups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generation.actions.base import ActionContext, ActionError
from generation.actions.groups.common import (
    Actor,
    access_for_update,
    actor_of,
    check_active_users,
    check_count,
    check_groups,
    lock_subgroups,
    members_event,
    send_group_events,
    subgroups_event,
    unique,
)

# -- members and subgroups --------------------------------------------------------


async def do_update_user_group_members(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    group_id: int,
    *,
    add: Sequence[int] = (),
    delete: Sequence[int] = (),
    add_subgroups: Sequence[int] = (),
    delete_subgroups: Sequence[int] = (),
) -> None:
    """Add and remove direct members, then add and remove direct subgroups,
    all or nothing (Zulip's POST user_groups/{id}/members); one event per
    list given, in that order."""
    add, delete = unique(add), unique(delete)
    add_subgroups, delete_subgroups = unique(add_subgroups), unique(delete_subgroups)
    if not (add or delete or add_subgroups or delete_subgroups):
        raise ActionError(
            'Nothing to do. Specify at least one of "add", "delete", "add_subgroups"'
            ' or "delete_subgroups".'
        )
    for what, ids in (
        ("add", add),
        ("delete", delete),
        ("add_subgroups", add_subgroups),
        ("delete_subgroups", delete_subgroups),
    ):
        check_count(what, ids)
    actor = await actor_of(ctx, actor_id, realm_id)
    async with ctx.transaction():
        if add_subgroups:
            await lock_subgroups(ctx, realm_id)
        events: list[dict[str, Any]] = []
        if add:
            events.append(await _add_members(ctx, actor, realm_id, group_id, add))
        if delete:
            events.append(await _remove_members(ctx, actor, realm_id, group_id, delete))
        if add_subgroups:
            events.append(await _add_subgroups(ctx, actor, realm_id, group_id, add_subgroups))
        if delete_subgroups:
            events.append(await _remove_subgroups(ctx, actor, realm_id, group_id, delete_subgroups))
        await send_group_events(ctx, realm_id, events)


async def do_update_user_group_subgroups(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    group_id: int,
    *,
    add: Sequence[int] = (),
    delete: Sequence[int] = (),
) -> None:
    """Add and remove direct subgroups, all or nothing (Zulip's POST
    user_groups/{id}/subgroups)."""
    if not add and not delete:
        raise ActionError('Nothing to do. Specify at least one of "add" or "delete".')
    await do_update_user_group_members(
        ctx, actor_id, realm_id, group_id, add_subgroups=add, delete_subgroups=delete
    )


async def _add_members(
    ctx: ActionContext, actor: Actor, realm_id: int, group_id: int, user_ids: list[int]
) -> dict[str, Any]:
    # Joining oneself: can_join_group, else as adding anyone.
    joining = user_ids == [actor.user_id]
    settings = ("can_join_group",) if joining else ()
    group = await access_for_update(
        ctx, actor, realm_id, group_id, *settings, "can_add_members_group"
    )
    await check_active_users(ctx, realm_id, user_ids)
    cur = await ctx.conn.execute(
        "SELECT user_id FROM user_group_members WHERE group_id = %s AND user_id = ANY(%s)",
        (group.id, user_ids),
    )
    present = {row[0] for row in await cur.fetchall()}
    for user_id in user_ids:
        if user_id in present:
            raise ActionError(f"User {user_id} is already a member of this group")
    await ctx.conn.cursor().executemany(
        "INSERT INTO user_group_members (group_id, user_id) VALUES (%s, %s)",
        [(group.id, user_id) for user_id in user_ids],
    )
    return members_event("add_members", group.id, user_ids)


async def _remove_members(
    ctx: ActionContext, actor: Actor, realm_id: int, group_id: int, user_ids: list[int]
) -> dict[str, Any]:
    # Leaving oneself: can_leave_group, else as removing anyone.
    leaving = user_ids == [actor.user_id]
    settings = ("can_leave_group",) if leaving else ()
    await check_active_users(ctx, realm_id, user_ids)
    group = await access_for_update(
        ctx, actor, realm_id, group_id, *settings, "can_remove_members_group"
    )
    cur = await ctx.conn.execute(
        "SELECT m.user_id FROM user_group_members m JOIN users u ON u.id = m.user_id"
        " WHERE m.group_id = %s AND u.is_active",
        (group.id,),
    )
    present = {row[0] for row in await cur.fetchall()}
    for user_id in user_ids:
        if user_id not in present:
            raise ActionError(f"There is no member '{user_id}' in this user group")
    await ctx.conn.execute(
        "DELETE FROM user_group_members WHERE group_id = %s AND user_id = ANY(%s)",
        (group.id, user_ids),
    )
    return members_event("remove_members", group.id, user_ids)


async def _add_subgroups(
    ctx: ActionContext, actor: Actor, realm_id: int, group_id: int, subgroup_ids: list[int]
) -> dict[str, Any]:
    await check_groups(ctx, realm_id, subgroup_ids)
    group = await access_for_update(ctx, actor, realm_id, group_id, "can_add_members_group")
    cur = await ctx.conn.execute(
        "SELECT subgroup_id FROM user_group_subgroups WHERE supergroup_id = %s", (group.id,)
    )
    present = {row[0] for row in await cur.fetchall()}
    for subgroup_id in subgroup_ids:
        if subgroup_id in present:
            raise ActionError(f"User group {subgroup_id} is already a subgroup of this group.")
    # No cycle: the group may not be among the new subgroups or below them.
    cur = await ctx.conn.execute(
        """
        WITH RECURSIVE below (id) AS (
            SELECT unnest(%s::bigint[])
            UNION
            SELECT s.subgroup_id
            FROM user_group_subgroups s JOIN below ON s.supergroup_id = below.id
        )
        SELECT EXISTS (SELECT 1 FROM below WHERE id = %s)
        """,
        (subgroup_ids, group.id),
    )
    row = await cur.fetchone()
    if row and row[0]:
        raise ActionError(
            f"User group {group.id} is already a subgroup of one of the passed subgroups."
        )
    await ctx.conn.cursor().executemany(
        "INSERT INTO user_group_subgroups (supergroup_id, subgroup_id) VALUES (%s, %s)",
        [(group.id, subgroup_id) for subgroup_id in subgroup_ids],
    )
    return subgroups_event("add_subgroups", group.id, subgroup_ids)


async def _remove_subgroups(
    ctx: ActionContext, actor: Actor, realm_id: int, group_id: int, subgroup_ids: list[int]
) -> dict[str, Any]:
    await check_groups(ctx, realm_id, subgroup_ids)
    group = await access_for_update(ctx, actor, realm_id, group_id)
    cur = await ctx.conn.execute(
        "SELECT subgroup_id FROM user_group_subgroups WHERE supergroup_id = %s", (group.id,)
    )
    present = {row[0] for row in await cur.fetchall()}
    for subgroup_id in subgroup_ids:
        if subgroup_id not in present:
            raise ActionError(f"User group {subgroup_id} is not a subgroup of this group.")
    await ctx.conn.execute(
        "DELETE FROM user_group_subgroups WHERE supergroup_id = %s AND subgroup_id = ANY(%s)",
        (group.id, subgroup_ids),
    )
    return subgroups_event("remove_subgroups", group.id, subgroup_ids)
