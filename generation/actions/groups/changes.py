"""A group's name and description, and its deactivation."""

from __future__ import annotations

from typing import Any

import psycopg

from generation.actions.base import ActionContext, ActionError
from generation.actions.groups.common import (
    SETTINGS,
    access_for_update,
    actor_of,
    check_group_description,
    check_group_name,
    lock_subgroups,
    send_group_events,
    update_event,
)

# -- name and description -------------------------------------------------------


async def do_update_user_group(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    group_id: int,
    *,
    name: str | None = None,
    description: str | None = None,
) -> bool:
    """Rename a group and/or change its description (its managers may);
    one `update` event per changed field. Returns whether anything changed."""
    if name is None and description is None:
        raise ActionError("No new data supplied")
    actor = await actor_of(ctx, actor_id, realm_id)
    async with ctx.transaction():
        group = await access_for_update(ctx, actor, realm_id, group_id)
        events: list[dict[str, Any]] = []
        if name is not None and name != group.name:
            name = check_group_name(name)
            try:
                async with ctx.conn.transaction():
                    await ctx.conn.execute(
                        "UPDATE user_groups SET name = %s WHERE id = %s", (name, group_id)
                    )
            except psycopg.errors.UniqueViolation:
                raise ActionError(f"User group '{name}' already exists.") from None
            events.append(update_event(group_id, {"name": name}))
        if description is not None and description != group.description:
            description = check_group_description(description)
            await ctx.conn.execute(
                "UPDATE user_groups SET description = %s WHERE id = %s", (description, group_id)
            )
            events.append(update_event(group_id, {"description": description}))
        await send_group_events(ctx, realm_id, events)
    return bool(events)


# -- deactivation -------------------------------------------------------------------


async def do_deactivate_user_group(
    ctx: ActionContext, actor_id: int | None, realm_id: int, group_id: int
) -> None:
    """Deactivate a group its managers may, unless an active group still uses
    it (as a subgroup or a permission setting). Everyone is told once with
    `update` `{"deactivated": true}`; the queues turn it into `remove` for
    clients without `include_deactivated_groups`."""
    actor = await actor_of(ctx, actor_id, realm_id)
    async with ctx.transaction():
        await lock_subgroups(ctx, realm_id)
        group = await access_for_update(ctx, actor, realm_id, group_id)
        uses = " OR ".join(f"g.{setting}_id = %(id)s" for setting in SETTINGS)
        cur = await ctx.conn.execute(
            f"""
            SELECT EXISTS (
                SELECT 1 FROM user_group_subgroups s JOIN user_groups g ON g.id = s.supergroup_id
                WHERE s.subgroup_id = %(id)s AND NOT g.deactivated
            ) OR EXISTS (
                SELECT 1 FROM user_groups g
                WHERE g.realm_id = %(realm)s AND NOT g.deactivated AND ({uses})
            )
            """,  # noqa: S608 (fixed columns)
            {"id": group.id, "realm": realm_id},
        )
        row = await cur.fetchone()
        if row and row[0]:
            raise ActionError(
                "Cannot deactivate user group in use.", "CANNOT_DEACTIVATE_GROUP_IN_USE"
            )
        await ctx.conn.execute(
            "UPDATE user_groups SET deactivated = true WHERE id = %s", (group.id,)
        )
        await send_group_events(ctx, realm_id, [update_event(group.id, {"deactivated": True})])
