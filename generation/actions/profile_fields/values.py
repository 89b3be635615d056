"""A user's values of the realm's fields: set and removed by the user (of
the fields they may edit) or by an administrator (see the package's
docstring). Each change goes to the active users who may see the user
(generation/actions/access.py: everyone, unless the realm restricts its
guests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from psycopg.rows import class_row

from generation.actions import access
from generation.actions.base import ActionContext, ActionError, Connection, get_user
from generation.actions.profile_fields.checks import _stored_value
from generation.actions.profile_fields.common import (
    _COLUMNS,
    _MAX_ID,
    FieldRow,
    _require_administrator,
    _value_event,
)


async def _target(ctx: ActionContext, actor_id: int | None, realm_id: int, user_id: int) -> bool:
    """Check that `actor_id` may change `user_id`'s values; whether the actor
    is an administrator (who may change any field)."""
    if actor_id == user_id:
        actor = await get_user(ctx.conn, user_id, realm_id)
        is_admin = actor.is_admin
    else:
        await _require_administrator(ctx, actor_id, realm_id)
        is_admin = True
    cur = await ctx.conn.execute(
        "SELECT bot_type IS NOT NULL FROM users WHERE id = %s AND realm_id = %s",
        (user_id, realm_id),
    )
    row = await cur.fetchone()
    if row is None:
        raise ActionError("No such user")
    if row[0]:
        raise ActionError("This endpoint does not accept bot requests.")
    return is_admin


async def _fields_of_values(
    conn: Connection, realm_id: int, field_ids: Sequence[int]
) -> dict[int, FieldRow]:
    """The realm's fields among `field_ids`, by id. Their rows are held FOR
    SHARE, taken in id order as a reorder takes them, so that the two
    cannot deadlock."""
    cur = conn.cursor(row_factory=class_row(FieldRow))
    await cur.execute(
        f"SELECT {_COLUMNS} FROM custom_profile_fields WHERE realm_id = %s AND id = ANY(%s)"  # noqa: S608 (fixed columns)
        " ORDER BY id FOR SHARE",
        (realm_id, [i for i in field_ids if 0 < i <= _MAX_ID]),
    )
    return {row.id: row for row in await cur.fetchall()}


def _changeable(fields: Mapping[int, FieldRow], field_id: int, is_admin: bool) -> FieldRow:
    """The field `field_id` of `fields`, if the actor may change its values;
    Zulip's errors otherwise."""
    field = fields.get(field_id)
    if field is None:
        raise ActionError(f"Field id {field_id} not found.")
    if not is_admin and not field.editable_by_user:
        raise ActionError(
            "You are not allowed to change this field. Contact an administrator to update it."
        )
    return field


async def do_update_profile_data(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    user_id: int,
    data: Sequence[tuple[int, object]],
) -> list[int]:
    """Set a user's values, `data` being (field id, value) pairs in order:
    the user's own of fields they may edit, or anyone's as an
    administrator. One `realm_user` update per value that changed; returns
    the ids of their fields. A field given more than once takes its last
    value: one change, one event, however often a request repeats it."""
    changed: list[int] = []
    latest = dict(data)
    async with ctx.transaction() as outbox:
        is_admin = await _target(ctx, actor_id, realm_id, user_id)
        fields = await _fields_of_values(ctx.conn, realm_id, list(latest))
        checked: list[tuple[FieldRow, str]] = []
        for field_id, value in latest.items():  # every value checked before any is written
            field = _changeable(fields, field_id, is_admin)
            checked.append((field, await _stored_value(ctx.conn, realm_id, field, value)))
        users = await access.users_who_can_access(ctx.conn, realm_id, user_id)
        for field, stored in checked:
            event = _value_event(user_id, field, stored)
            rendered = event["person"]["custom_profile_field"].get("rendered_value")
            cur = await ctx.conn.execute(
                """
                INSERT INTO custom_profile_field_values (user_id, field_id, value, rendered_value)
                VALUES (%(user)s, %(field)s, %(value)s, %(rendered)s)
                ON CONFLICT (user_id, field_id) DO UPDATE
                    SET value = excluded.value, rendered_value = excluded.rendered_value
                    WHERE custom_profile_field_values.value <> excluded.value
                RETURNING 1
                """,
                {"user": user_id, "field": field.id, "value": stored, "rendered": rendered},
            )
            if await cur.fetchone() is None:
                continue  # the same value: nothing to tell
            changed.append(field.id)
            outbox.send(realm_id, event, users)
    return changed


async def do_remove_profile_data(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    user_id: int,
    field_ids: Sequence[int],
) -> list[int]:
    """Remove a user's values of these fields (one they do not have is no
    error, as Zulip's); one `realm_user` update (value null) per removed
    value. Returns the ids of their fields."""
    removed: list[int] = []
    async with ctx.transaction() as outbox:
        is_admin = await _target(ctx, actor_id, realm_id, user_id)
        fields = await _fields_of_values(ctx.conn, realm_id, field_ids)
        users = await access.users_who_can_access(ctx.conn, realm_id, user_id)
        for field_id in field_ids:
            field = _changeable(fields, field_id, is_admin)
            cur = await ctx.conn.execute(
                "DELETE FROM custom_profile_field_values WHERE user_id = %s AND field_id = %s"
                " RETURNING 1",
                (user_id, field.id),
            )
            if await cur.fetchone() is None:
                continue
            removed.append(field.id)
            outbox.send(realm_id, _value_event(user_id, field, None), users)
    return removed
