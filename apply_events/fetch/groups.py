"""The `realm_user_groups` section: every group of the realm with its active
direct members and direct subgroups (three queries, whatever the number of
groups). Also the reads behind the groups endpoints (GET user_groups, GET
user_groups/{id}/members), which answer in the same shapes.

System groups' direct members are the users of their role
(`user_group_direct_members`, migration 0017); deactivated users are in no
group's `members` (Zulip's rule), though their memberships are kept.
"""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import groups as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.events.groups import UserGroup, setting_value

Connection = psycopg.AsyncConnection[Any]

INCLUDE_DEACTIVATED = "include_deactivated_groups"


async def fetch_groups(
    conn: Connection, realm_id: int, *, include_deactivated: bool
) -> list[UserGroup]:
    """The realm's groups in id order (deactivated ones only if asked)."""
    cur = await conn.execute(
        """
        SELECT id, name, description, creator_id,
               floor(extract(epoch FROM date_created))::bigint, is_system_group, deactivated,
               can_add_members_group_id, can_join_group_id, can_leave_group_id,
               can_manage_group_id, can_mention_group_id, can_remove_members_group_id
        FROM user_groups WHERE realm_id = %s AND (%s OR NOT deactivated) ORDER BY id
        """,
        (realm_id, include_deactivated),
    )
    groups: dict[int, UserGroup] = {}
    for row in await cur.fetchall():
        creator_id = row[3]
        groups[row[0]] = {
            "id": row[0],
            "name": row[1],
            "description": row[2],
            "members": [],
            "direct_subgroup_ids": [],
            "creator_id": creator_id,
            "date_created": row[4],
            "is_system_group": row[5],
            "can_add_members_group": setting_value(row[7], creator_id),
            "can_join_group": row[8],
            "can_leave_group": row[9],
            "can_manage_group": setting_value(row[10], creator_id),
            "can_mention_group": row[11],
            "can_remove_members_group": row[12],
            "deactivated": row[6],
        }
    cur = await conn.execute(
        """
        SELECT m.group_id, m.user_id
        FROM user_group_direct_members m
        JOIN user_groups g ON g.id = m.group_id
        JOIN users u ON u.id = m.user_id
        WHERE g.realm_id = %s AND u.is_active
        ORDER BY m.user_id
        """,
        (realm_id,),
    )
    for group_id, user_id in await cur.fetchall():
        if group_id in groups:
            groups[group_id]["members"].append(user_id)
    cur = await conn.execute(
        """
        SELECT s.supergroup_id, s.subgroup_id
        FROM user_group_subgroups s JOIN user_groups g ON g.id = s.supergroup_id
        WHERE g.realm_id = %s ORDER BY s.subgroup_id
        """,
        (realm_id,),
    )
    for supergroup_id, subgroup_id in await cur.fetchall():
        if supergroup_id in groups:
            groups[supergroup_id]["direct_subgroup_ids"].append(subgroup_id)
    return list(groups.values())


async def fetch_realm_user_groups(conn: Connection, ctx: StateContext) -> State:
    groups = await fetch_groups(
        conn, ctx.realm_id, include_deactivated=INCLUDE_DEACTIVATED in ctx.capabilities
    )
    return {"realm_user_groups": groups}


async def group_deactivated(conn: Connection, realm_id: int, group_id: int) -> bool | None:
    """Whether a group of the realm is deactivated; None if there is none."""
    cur = await conn.execute(
        "SELECT deactivated FROM user_groups WHERE id = %s AND realm_id = %s",
        (group_id, realm_id),
    )
    row = await cur.fetchone()
    return None if row is None else bool(row[0])


async def group_member_ids(conn: Connection, group_id: int, *, direct_only: bool) -> list[int]:
    """A group's active members in id order: direct ones, or (Zulip's
    default) those of every group below it too."""
    cur = await conn.execute(
        """
        WITH RECURSIVE tree (id) AS (
            SELECT %(group)s::bigint
            UNION
            SELECT s.subgroup_id
            FROM user_group_subgroups s JOIN tree ON s.supergroup_id = tree.id
            WHERE NOT %(direct)s
        )
        SELECT DISTINCT m.user_id
        FROM tree
        JOIN user_group_direct_members m ON m.group_id = tree.id
        JOIN users u ON u.id = m.user_id
        WHERE u.is_active
        ORDER BY m.user_id
        """,
        {"group": group_id, "direct": direct_only},
    )
    return [row[0] for row in await cur.fetchall()]


SECTIONS: tuple[Section, ...] = (
    Section(
        "realm_user_groups",
        fetch_realm_user_groups,
        appliers.APPLIERS,
        state=appliers.UserGroupsState,
    ),
)
