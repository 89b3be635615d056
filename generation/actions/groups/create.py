"""Making a group, with its members, subgroups and permission settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from generation.actions.base import ActionContext, ActionError
from generation.actions.groups.common import (
    MAX_GROUPS_PER_REALM,
    SETTINGS,
    actor_of,
    check_active_users,
    check_count,
    check_group_description,
    check_group_name,
    check_groups,
    check_setting,
    group_row,
    insufficient,
    send_group_events,
    subgroups_event,
    system_group_ids,
    unique,
)
from generation.events.groups import UserGroup, setting_value

# -- making a group -------------------------------------------------------------


async def do_create_user_group(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    name: str,
    description: str,
    members: Sequence[int],
    subgroups: Sequence[int] = (),
    settings: Mapping[str, int] | None = None,
) -> int:
    """Make a group with its direct members and subgroups, and permission
    settings (named groups; the others take Zulip's defaults). Everyone in
    the realm gets `add` (with no subgroups), then `add_subgroups` if it has
    some, as Zulip sends them. Returns the group's id."""
    actor = await actor_of(ctx, actor_id, realm_id)
    if actor.is_guest:
        raise insufficient()
    name = check_group_name(name)
    description = check_group_description(description)
    members, subgroups = unique(members), unique(subgroups)
    check_count("members", members)
    check_count("subgroups", subgroups)
    async with ctx.transaction():
        system = await system_group_ids(ctx.conn, realm_id)
        values: dict[str, int | None] = {
            setting: None if rule.default is None else system[rule.default]
            for setting, rule in SETTINGS.items()
        }
        for setting, group_id in (settings or {}).items():
            values[setting] = await check_setting(ctx, realm_id, setting, group_id, system)
        await check_active_users(ctx, realm_id, members)
        await check_groups(ctx, realm_id, subgroups)
        cur = await ctx.conn.execute(
            "SELECT count(*) FROM user_groups WHERE realm_id = %s AND NOT is_system_group",
            (realm_id,),
        )
        row = await cur.fetchone()
        if row is not None and row[0] >= MAX_GROUPS_PER_REALM:
            raise ActionError(f"An organization has at most {MAX_GROUPS_PER_REALM} user groups")
        group_id = await _insert_group(ctx, realm_id, name, description, actor.user_id, values)
        await ctx.conn.cursor().executemany(
            "INSERT INTO user_group_members (group_id, user_id) VALUES (%s, %s)",
            [(group_id, user_id) for user_id in members],
        )
        group = await group_row(ctx, realm_id, group_id)
        payload: UserGroup = {
            "id": group.id,
            "name": group.name,
            "description": group.description,
            "members": sorted(members),
            "direct_subgroup_ids": [],
            "creator_id": group.creator_id,
            "date_created": group.date_created,
            "is_system_group": False,
            "can_add_members_group": setting_value(
                group.can_add_members_group_id, group.creator_id
            ),
            "can_join_group": group.can_join_group_id,
            "can_leave_group": group.can_leave_group_id,
            "can_manage_group": setting_value(group.can_manage_group_id, group.creator_id),
            "can_mention_group": group.can_mention_group_id,
            "can_remove_members_group": group.can_remove_members_group_id,
            "deactivated": False,
        }
        events: list[dict[str, Any]] = [{"type": "user_group", "op": "add", "group": payload}]
        if subgroups:
            # A new group is nobody's subgroup: no cycle can close.
            await ctx.conn.cursor().executemany(
                "INSERT INTO user_group_subgroups (supergroup_id, subgroup_id) VALUES (%s, %s)",
                [(group_id, subgroup_id) for subgroup_id in subgroups],
            )
            events.append(subgroups_event("add_subgroups", group_id, subgroups))
        await send_group_events(ctx, realm_id, events)
    return group_id


async def _insert_group(
    ctx: ActionContext,
    realm_id: int,
    name: str,
    description: str,
    creator_id: int | None,
    settings: Mapping[str, int | None],
) -> int:
    """Insert the row (in a savepoint, so that a name taken meanwhile is an
    ActionError, not a broken transaction)."""
    columns = ", ".join(f"{setting}_id" for setting in settings)
    marks = ", ".join(["%s"] * len(settings))
    try:
        async with ctx.conn.transaction():
            cur = await ctx.conn.execute(
                "INSERT INTO user_groups (realm_id, name, description, creator_id,"  # noqa: S608 (fixed columns)
                f" {columns}) VALUES (%s, %s, %s, %s, {marks}) RETURNING id",
                (realm_id, name, description, creator_id, *settings.values()),
            )
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation:
        raise ActionError(f"User group '{name}' already exists.") from None
    assert row is not None
    return int(row[0])
