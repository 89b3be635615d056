"""Realm administration: name, description and settings (CLI and admins)."""

from __future__ import annotations

from typing import Any

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
