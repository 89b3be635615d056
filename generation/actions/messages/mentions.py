"""User group mentions in messages (`@*group*`): which groups a message may
name, whether its sender may mention them aloud, and who they reach.

Zulip's rules (zerver/lib/mention.py, `check_user_group_mention_allowed`):
a group is named by its exact name, system groups included; a silent
mention (`@_*group*`) or a mention of a deactivated group reaches nobody
and needs no permission; any other mention needs the sender to be in the
group's `can_mention_group` (directly or through its subgroups; guests
too, as that setting allows role:everyone), and gives `mentioned` to the
group's active members, directly or through its subgroups, who receive
the message. A system group's `can_mention_group` is role:nobody
(deploy/migrations/0017_user_groups.sql), so no one mentions one aloud.
"""

from __future__ import annotations

import dataclasses

from generation.actions.base import ActionError, Connection, UserRow
from generation.markdown import MentionGroup, Rendered, possible_group_mentions


async def mentionable_groups(conn: Connection, realm_id: int, content: str) -> list[MentionGroup]:
    """The realm's groups `content` may mention (one query, only when it
    has group mention syntax)."""
    names = possible_group_mentions(content)
    if not names:
        return []
    cur = await conn.execute(
        "SELECT id, name, is_system_group, deactivated FROM user_groups"
        " WHERE realm_id = %s AND name = ANY(%s)",
        (realm_id, sorted(names)),
    )
    return [MentionGroup(row[0], row[1], row[2], row[3]) for row in await cur.fetchall()]


async def with_group_members(conn: Connection, sender: UserRow, rendered: Rendered) -> Rendered:
    """`rendered` with the members of the groups it mentions aloud among its
    `mentioned_user_ids`; `ActionError` (Zulip's message) if the sender may
    not mention one of them. No query when it mentions no group."""
    groups = sorted(rendered.mentioned_group_ids)
    if not groups:
        return rendered
    # The groups whose can_mention_group the sender is not in, whole tree.
    cur = await conn.execute(
        """
        WITH RECURSIVE tree (root, id) AS (
            SELECT g.id, g.can_mention_group_id FROM user_groups g WHERE g.id = ANY(%(groups)s)
            UNION
            SELECT tree.root, s.subgroup_id
            FROM user_group_subgroups s JOIN tree ON s.supergroup_id = tree.id
        )
        SELECT g.name FROM user_groups g
        WHERE g.id = ANY(%(groups)s) AND NOT EXISTS (
            SELECT 1 FROM tree JOIN user_group_direct_members m ON m.group_id = tree.id
            WHERE tree.root = g.id AND m.user_id = %(sender)s
        )
        ORDER BY g.id LIMIT 1
        """,
        {"groups": groups, "sender": sender.id},
    )
    refused = await cur.fetchone()
    if refused is not None:
        raise ActionError(f"You are not allowed to mention user group '{refused[0]}'.")
    cur = await conn.execute(
        """
        WITH RECURSIVE tree (id) AS (
            SELECT unnest(%s::bigint[])
            UNION
            SELECT s.subgroup_id FROM user_group_subgroups s JOIN tree ON s.supergroup_id = tree.id
        )
        SELECT DISTINCT m.user_id
        FROM tree
        JOIN user_group_direct_members m ON m.group_id = tree.id
        JOIN users u ON u.id = m.user_id
        WHERE u.is_active
        """,
        (groups,),
    )
    members = {int(row[0]) for row in await cur.fetchall()}
    return dataclasses.replace(rendered, mentioned_user_ids=rendered.mentioned_user_ids | members)
