"""The realm's fields: created, edited, deleted and reordered by
administrators, each change sending the whole list to every active user
(see the package's docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from generation.actions.base import ActionContext, ActionError
from generation.actions.profile_fields.checks import (
    _check_field,
    _encoded_data,
    _is_default_external,
)
from generation.actions.profile_fields.common import (
    DEFAULT_EXTERNAL_ACCOUNTS,
    MAX_FIELDS,
    MAX_SUMMARY_FIELDS,
    FieldRow,
    _field,
    _lock_realm,
    _notify_fields,
    _require_administrator,
    _summary_fields,
)
from generation.events.profile_fields import SELECT


async def _saved(ctx: ActionContext, query: str, params: Mapping[str, Any]) -> int:
    """Run an INSERT or UPDATE of a field (in a savepoint, so that a name in
    use is Zulip's error, not a broken transaction); the field's id."""
    try:
        async with ctx.conn.transaction():
            cur = await ctx.conn.execute(query, params)
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation:
        raise ActionError("A field with that label already exists.") from None
    assert row is not None
    return int(row[0])


async def do_create_profile_field(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    *,
    name: str,
    field_type: int,
    hint: str = "",
    field_data: Mapping[str, Any] | None = None,
    display_in_profile_summary: bool = False,
    required: bool = False,
    editable_by_user: bool = True,
) -> int:
    """Add a field at the end of the list (its `order` is its id, as
    Zulip's); a GitHub or Twitter account field takes Zulip's name and no
    hint. Returns its id."""
    await _require_administrator(ctx, actor_id, realm_id)
    name = name.strip()
    data = dict(field_data or {})
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        if display_in_profile_summary and (
            await _summary_fields(ctx.conn, realm_id) >= MAX_SUMMARY_FIELDS
        ):
            raise ActionError(
                f"Only {MAX_SUMMARY_FIELDS} custom profile fields can be displayed"
                " in the profile summary."
            )
        _check_field(name, hint, field_type, data, display_in_profile_summary)
        if _is_default_external(field_type, data):
            subtype = str(data["subtype"])
            name, hint, data = DEFAULT_EXTERNAL_ACCOUNTS[subtype], "", {"subtype": subtype}
        cur = await ctx.conn.execute(
            "SELECT count(*) FROM custom_profile_fields WHERE realm_id = %s", (realm_id,)
        )
        row = await cur.fetchone()
        assert row is not None
        if row[0] >= MAX_FIELDS:
            raise ActionError(f"A realm has at most {MAX_FIELDS} custom profile fields.")
        field_id = await _saved(
            ctx,
            """
            INSERT INTO custom_profile_fields
                (realm_id, name, hint, field_type, field_data, "order",
                 display_in_profile_summary, required, editable_by_user)
            VALUES (%(realm)s, %(name)s, %(hint)s, %(type)s, %(data)s,
                    0,
                    %(summary)s, %(required)s, %(editable)s)
            RETURNING id
            """,
            {
                "realm": realm_id,
                "name": name,
                "hint": hint,
                "type": field_type,
                "data": _encoded_data(field_type, data),
                "summary": display_in_profile_summary,
                "required": required,
                "editable": editable_by_user,
            },
        )
        # Zulip's: a new field comes last, its order being its id.
        await ctx.conn.execute(
            'UPDATE custom_profile_fields SET "order" = id WHERE id = %s', (field_id,)
        )
        await _notify_fields(ctx, outbox, realm_id)
    return field_id


async def do_update_profile_field(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    field_id: int,
    *,
    name: str | None = None,
    hint: str | None = None,
    field_data: Mapping[str, Any] | None = None,
    display_in_profile_summary: bool | None = None,
    required: bool | None = None,
    editable_by_user: bool | None = None,
) -> None:
    """Change what is given of a field (None: unchanged); the list's event
    even when nothing changed (as Zulip). A GitHub or Twitter account
    field's name, hint and options stay Zulip's. Options removed from a
    list take the values that chose them."""
    await _require_administrator(ctx, actor_id, realm_id)
    if name is not None:
        name = name.strip()
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        field = await _field(ctx.conn, realm_id, field_id)
        if display_in_profile_summary and (
            await _summary_fields(ctx.conn, realm_id, other_than=field.id) >= MAX_SUMMARY_FIELDS
        ):
            raise ActionError(
                f"Only {MAX_SUMMARY_FIELDS} custom profile fields can be displayed"
                " in the profile summary."
            )
        old_data = field.data()
        if _is_default_external(field.field_type, old_data) and (
            (name is not None and name != field.name)
            or (hint is not None and hint != field.hint)
            or (field_data is not None and dict(field_data) != old_data)
        ):
            raise ActionError("Default custom field cannot be updated.")
        new_data = dict(field_data) if field_data is not None else old_data
        _check_field(
            field.name if name is None else name,
            field.hint if hint is None else hint,
            field.field_type,
            new_data,
            field.display_in_profile_summary
            if display_in_profile_summary is None
            else display_in_profile_summary,
        )
        if field_data is not None and field.field_type == SELECT:
            removed = sorted(set(old_data) - set(new_data))
            await _remove_values(ctx, field, removed)
        await _saved(
            ctx,
            """
            UPDATE custom_profile_fields SET
                name = coalesce(%(name)s, name),
                hint = coalesce(%(hint)s, hint),
                field_data = coalesce(%(data)s, field_data),
                display_in_profile_summary = coalesce(%(summary)s, display_in_profile_summary),
                required = coalesce(%(required)s, required),
                editable_by_user = coalesce(%(editable)s, editable_by_user)
            WHERE id = %(id)s
            RETURNING id
            """,
            {
                "name": name,
                "hint": hint,
                "data": None if field_data is None else _encoded_data(field.field_type, new_data),
                "summary": display_in_profile_summary,
                "required": required,
                "editable": editable_by_user,
                "id": field.id,
            },
        )
        await _notify_fields(ctx, outbox, realm_id)


async def _remove_values(ctx: ActionContext, field: FieldRow, options: list[str] | None) -> None:
    """Delete the values of `field` that chose one of `options` (removed
    from a list), or all of them (None). No event of their own: the list's
    event that follows tells every client, whose people lose the values of
    fields and options no longer in it (Zulip's, and
    apply_events/appliers/profile_fields.py), rather than one `realm_user`
    update per value to every user of the realm."""
    if options == []:
        return
    await ctx.conn.execute(
        "DELETE FROM custom_profile_field_values"
        " WHERE field_id = %s AND (%s::text[] IS NULL OR value = ANY(%s))",
        (field.id, options, options),
    )


async def do_delete_profile_field(
    ctx: ActionContext, actor_id: int | None, realm_id: int, field_id: int
) -> None:
    """Delete a field and every value of it; the list's event tells every
    user (Zulip's: a client drops the field's values on it)."""
    await _require_administrator(ctx, actor_id, realm_id)
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        field = await _field(ctx.conn, realm_id, field_id, lock="FOR UPDATE")
        await _remove_values(ctx, field, None)
        await ctx.conn.execute("DELETE FROM custom_profile_fields WHERE id = %s", (field.id,))
        await _notify_fields(ctx, outbox, realm_id)


async def do_reorder_profile_fields(
    ctx: ActionContext, actor_id: int | None, realm_id: int, order: Sequence[int]
) -> None:
    """Give the fields the order of their ids in `order` (Zulip's: each
    field's `order` is its position there, the last one for an id given
    twice; ids of no field are ignored; every field must be there)."""
    await _require_administrator(ctx, actor_id, realm_id)
    positions = {field_id: position for position, field_id in enumerate(order)}
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        cur = await ctx.conn.execute(
            "SELECT id FROM custom_profile_fields WHERE realm_id = %s ORDER BY id"
            " FOR NO KEY UPDATE",
            (realm_id,),
        )
        ids = [row[0] for row in await cur.fetchall()]
        if any(field_id not in positions for field_id in ids):
            raise ActionError("Invalid order mapping.")
        await ctx.conn.execute(
            """
            UPDATE custom_profile_fields f SET "order" = o.position
            FROM unnest(%s::bigint[], %s::bigint[]) AS o (id, position)
            WHERE f.id = o.id
            """,
            (ids, [positions[field_id] for field_id in ids]),
        )
        await _notify_fields(ctx, outbox, realm_id)
