"""Realm administration: name, description and settings (CLI and admins)."""

from __future__ import annotations

from typing import Any

from generation.actions import access
from generation.actions.base import ActionContext, ActionError, active_user_ids, get_user

# property -> (column, accepted Python type)
_PROPERTIES: dict[str, tuple[str, type]] = {
    "name": ("name", str),
    "description": ("description", str),
    "allow_message_editing": ("allow_message_editing", bool),
    "mandatory_topics": ("mandatory_topics", bool),
}
_LIMITS = {"name": 200, "description": 1000}


async def _check_admin(ctx: ActionContext, actor_id: int | None, realm_id: int) -> None:
    """`actor_id` None is the operator (the command line)."""
    if actor_id is not None and not (await get_user(ctx.conn, actor_id, realm_id)).is_admin:
        raise ActionError("Must be an organization administrator", "UNAUTHORIZED", 403)


async def do_set_realm_property(
    ctx: ActionContext, actor_id: int | None, realm_id: int, prop: str, value: Any
) -> None:
    """Change one realm property; every active user of the realm is told.
    Only administrators (or the operator) may."""
    await _check_admin(ctx, actor_id, realm_id)
    if prop not in _PROPERTIES:
        raise ActionError(f"Unknown realm property: {prop}")
    column, kind = _PROPERTIES[prop]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ActionError(f"Invalid value for {prop}: expected {kind.__name__}")
    if isinstance(value, str):
        if len(value) > _LIMITS[prop]:
            raise ActionError(f"{prop} is longer than {_LIMITS[prop]} characters")
        if prop == "name" and not value.strip():
            raise ActionError("A realm name cannot be empty")
    async with ctx.transaction() as outbox:
        await ctx.conn.execute(
            f"UPDATE realms SET {column} = %s WHERE id = %s",  # noqa: S608 (column from a fixed map)
            (value, realm_id),
        )
        users = await active_user_ids(ctx.conn, realm_id)
        outbox.send(
            realm_id, {"type": "realm", "op": "update", "property": prop, "value": value}, users
        )


async def do_set_message_edit_limit(
    ctx: ActionContext, actor_id: int | None, realm_id: int, seconds: int | None
) -> None:
    """How long after sending a message its content may be edited (None: no
    limit); sent as Zulip's `update_dict`."""
    await _check_admin(ctx, actor_id, realm_id)
    if seconds is not None and (isinstance(seconds, bool) or seconds <= 0):
        raise ActionError("message_content_edit_limit_seconds must be a positive integer or null")
    async with ctx.transaction() as outbox:
        await ctx.conn.execute(
            "UPDATE realms SET message_content_edit_limit_seconds = %s WHERE id = %s",
            (seconds, realm_id),
        )
        users = await active_user_ids(ctx.conn, realm_id)
        outbox.send(
            realm_id,
            {
                "type": "realm",
                "op": "update_dict",
                "property": "default",
                "data": {"message_content_edit_limit_seconds": seconds},
            },
            users,
        )


async def do_set_can_access_all_users_group(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    group_id: int,
    *,
    old: int | None = None,
) -> bool:
    """Zulip's `can_access_all_users_group`: the realm's role:everyone group
    (everyone sees every user) or its role:members group (guests see only
    whom they share a channel or a conversation with, and the bots;
    generation/actions/access.py). Every active user gets `realm`
    `update_dict`; each guest then gets `realm_user` remove for every user
    they can no longer see (or add for every user they now can). Returns
    False (and tells nobody) if the value is unchanged. `old`, when given, is
    what the caller believes the setting is (Zulip's check). Only
    administrators (or the operator) may."""
    await _check_admin(ctx, actor_id, realm_id)
    async with ctx.transaction() as outbox:
        cur = await ctx.conn.execute(
            "SELECT name FROM user_groups WHERE id = %s AND realm_id = %s AND is_system_group",
            (group_id, realm_id),
        )
        row = await cur.fetchone()
        if row is None:
            raise ActionError("Invalid user group")
        if row[0] not in access.ACCESS_GROUPS:
            raise ActionError(
                f"'can_access_all_users_group' setting cannot be set to '{row[0]}' group."
            )
        see_all = row[0] == "role:everyone"
        cur = await ctx.conn.execute(
            """
            SELECT r.guests_see_all_users, g.id FROM realms r
            JOIN user_groups g ON g.realm_id = r.id AND g.is_system_group
                 AND g.name = CASE WHEN r.guests_see_all_users THEN %s ELSE %s END
            WHERE r.id = %s FOR UPDATE OF r
            """,
            (*access.ACCESS_GROUPS, realm_id),
        )
        current = await cur.fetchone()
        if current is None:
            raise ActionError("Invalid realm")
        if old is not None and old != current[1]:
            raise ActionError("'old' value does not match the expected value.")
        if current[0] == see_all:
            return False
        before = await access.access_before(ctx.conn, realm_id, everyone=True)
        await ctx.conn.execute(
            "UPDATE realms SET guests_see_all_users = %s WHERE id = %s", (see_all, realm_id)
        )
        users = await active_user_ids(ctx.conn, realm_id)
        outbox.send(
            realm_id,
            {
                "type": "realm",
                "op": "update_dict",
                "property": "default",
                "data": {"can_access_all_users_group": group_id},
            },
            users,
        )
        await access.send_access_changes(ctx.conn, outbox, before)
    return True
