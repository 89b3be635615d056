"""What the custom profile field actions share: the stored field
(`FieldRow`) and how clients see it, Zulip's bounds, the checks of who
acts, the realm's lock, and the reads the events and register's state are
built from (`realm_profile_fields`, `realm_profile_data`), so that a fresh
fetch and an event agree by construction.

Its underscored names belong to this package: its modules share them, and
nothing outside it uses them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import orjson
from psycopg.rows import class_row

from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    active_user_ids,
    get_user,
)
from generation.events.profile_fields import (
    EXTERNAL_ACCOUNT,
    LONG_TEXT,
    PRONOUNS,
    RENDERED_TYPES,
    SELECT,
    SHORT_TEXT,
    USER,
    CustomProfileField,
    FieldType,
)
from generation.markdown import render

# Zulip's CustomProfileField.NAME_MAX_LENGTH, HINT_MAX_LENGTH and
# MAX_DISPLAY_IN_PROFILE_SUMMARY_FIELDS.
MAX_NAME = 40
MAX_HINT = 80
MAX_SUMMARY_FIELDS = 2
# Zulip's check_short_string and check_long_string.
MAX_SHORT_TEXT = 50
MAX_LONG_TEXT = 500
# Django's URLValidator (Zulip's check_url).
MAX_URL = 2048
# eventq's bounds, far above any real use (Zulip has none): every change of
# a field sends the whole list to every user (at most 200 fields of 10,000
# characters of field_data: 2 MB, well within a queue's byte bound), and a
# USER value names users.
MAX_FIELDS = 200
MAX_FIELD_DATA = 10_000
MAX_USERS_IN_VALUE = 1000
_MAX_ID = 2**63 - 1

# Zulip's default external accounts: the subtype, and the field's name.
DEFAULT_EXTERNAL_ACCOUNTS: dict[str, str] = {
    "twitter": "Twitter username",
    "github": "GitHub username",
}

# The field types whose `field_data` is kept (JSON text); the others store "".
_DATA_TYPES = frozenset({SELECT, EXTERNAL_ACCOUNT})
# Zulip's: a long text does not fit a summary, USER needs client support.
_NOT_IN_SUMMARY = frozenset({LONG_TEXT, USER})
# Zulip's check_short_string types.
_SHORT_TYPES = frozenset({SHORT_TEXT, EXTERNAL_ACCOUNT, PRONOUNS})


@dataclasses.dataclass(frozen=True, slots=True)
class FieldRow:
    """A field as stored (migration 0020)."""

    id: int
    name: str
    hint: str
    field_type: int
    field_data: str
    order: int
    display_in_profile_summary: bool
    required: bool
    editable_by_user: bool

    def shown(self) -> CustomProfileField:
        """The field as clients see it (Zulip's `as_dict`)."""
        shown: CustomProfileField = {
            "id": self.id,
            "name": self.name,
            "type": cast(FieldType, self.field_type),  # the table allows only these
            "hint": self.hint,
            "field_data": self.field_data,
            "order": self.order,
            "required": self.required,
            "editable_by_user": self.editable_by_user,
        }
        if self.display_in_profile_summary:
            shown["display_in_profile_summary"] = True
        return shown

    def data(self) -> dict[str, Any]:
        """`field_data` decoded ({} for a type without it)."""
        if not self.field_data:
            return {}
        decoded = orjson.loads(self.field_data)
        assert isinstance(decoded, dict), "field_data is a JSON object (written here)"
        return decoded


_COLUMNS = (
    'id, name, hint, field_type, field_data, "order", display_in_profile_summary,'
    " required, editable_by_user"
)


async def realm_profile_fields(conn: Connection, realm_id: int) -> list[CustomProfileField]:
    """The realm's fields in their order (ties by id), as the event and
    register show them."""
    cur = conn.cursor(row_factory=class_row(FieldRow))
    await cur.execute(
        f'SELECT {_COLUMNS} FROM custom_profile_fields WHERE realm_id = %s ORDER BY "order", id',  # noqa: S608 (fixed columns)
        (realm_id,),
    )
    return [row.shown() for row in await cur.fetchall()]


def profile_data_entry(field_type: int, value: str, rendered_value: str | None) -> dict[str, Any]:
    """One value as register's `profile_data` shows it (Zulip's
    `get_custom_profile_field_values`): with `rendered_value` for the text
    types only."""
    if field_type in RENDERED_TYPES:
        return {"value": value, "rendered_value": rendered_value}
    return {"value": value}


# -- permissions and lookups -------------------------------------------------------


async def _require_administrator(ctx: ActionContext, actor_id: int | None, realm_id: int) -> None:
    if actor_id is None:
        return
    actor = await get_user(ctx.conn, actor_id, realm_id)
    if not actor.is_admin:
        raise ActionError("Must be an organization administrator", "UNAUTHORIZED", 403)


async def _lock_realm(ctx: ActionContext, realm_id: int) -> None:
    await ctx.conn.execute("SELECT 1 FROM realms WHERE id = %s FOR UPDATE", (realm_id,))


async def _field(
    conn: Connection, realm_id: int, field_id: int, *, lock: str = "FOR NO KEY UPDATE"
) -> FieldRow:
    """A field of the realm, its row locked (`lock`); Zulip's error for any
    other id."""
    if not 0 < field_id <= _MAX_ID:
        raise ActionError(f"Field id {field_id} not found.")
    cur = conn.cursor(row_factory=class_row(FieldRow))
    await cur.execute(
        f"SELECT {_COLUMNS} FROM custom_profile_fields WHERE id = %s AND realm_id = %s {lock}",  # noqa: S608 (fixed columns and lock clauses)
        (field_id, realm_id),
    )
    found = await cur.fetchone()
    if found is None:
        raise ActionError(f"Field id {field_id} not found.")
    return found


async def _summary_fields(conn: Connection, realm_id: int, other_than: int | None = None) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM custom_profile_fields"
        " WHERE realm_id = %s AND display_in_profile_summary AND id IS DISTINCT FROM %s",
        (realm_id, other_than),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _notify_fields(ctx: ActionContext, outbox: Outbox, realm_id: int) -> None:
    event = {
        "type": "custom_profile_fields",
        "fields": await realm_profile_fields(ctx.conn, realm_id),
    }
    outbox.send(realm_id, event, await active_user_ids(ctx.conn, realm_id))


def _value_event(user_id: int, field: FieldRow, value: str | None) -> dict[str, Any]:
    """The `realm_user` update of a user's value (None: removed), with its
    HTML for a text type."""
    change: dict[str, Any] = {"id": field.id, "value": value}
    if value is not None and field.field_type in RENDERED_TYPES:
        change["rendered_value"] = render(value).html
    return {
        "type": "realm_user",
        "op": "update",
        "person": {"user_id": user_id, "custom_profile_field": change},
    }


async def realm_profile_data(
    conn: Connection, realm_id: int, user_id: int | None = None
) -> dict[int, dict[str, Any]]:
    """Every user's values (or only `user_id`'s; users without any left
    out), as register's `profile_data` of each person: {user id: {field id
    (text): entry}}. One query for the realm."""
    cur = await conn.execute(
        """
        SELECT v.user_id, v.field_id, v.value, v.rendered_value, f.field_type
        FROM custom_profile_fields f JOIN custom_profile_field_values v ON v.field_id = f.id
        WHERE f.realm_id = %(realm)s AND (%(user)s::bigint IS NULL OR v.user_id = %(user)s)
        """,
        {"realm": realm_id, "user": user_id},
    )
    data: dict[int, dict[str, Any]] = {}
    for owner, field_id, value, rendered, field_type in await cur.fetchall():
        data.setdefault(owner, {})[str(field_id)] = profile_data_entry(field_type, value, rendered)
    return data
