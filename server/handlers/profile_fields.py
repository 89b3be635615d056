"""Endpoints of custom profile fields, at Zulip's paths (see
server/handlers/domain.py):

- `GET realm/profile_fields`: the realm's fields (`custom_fields`);
- administrators: `POST realm/profile_fields` (create; answers `id`),
  `PATCH realm/profile_fields` (reorder: `order`), `PATCH` and `DELETE
  realm/profile_fields/{id}`;
- `PATCH users/me/profile_data` (`data`: `{id, value}` objects) and `DELETE
  users/me/profile_data` (`data`: field ids): the user's own values.
  Administrators set anyone's with `PATCH users/{id}` `profile_data`
  (server/handlers/users.py, with `profile_data_updates` from here).

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules and the events are the actions'
(`generation/actions/profile_fields/`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from generation.actions import profile_fields as actions
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, decode_json, optional_boolean

# Bounds of what a request may carry, checked before any action runs: far
# above any real request, low enough that none makes the server work long.
MAX_TEXT_CHARS = 1000
MAX_ITEMS = 1000
_ID: JsonSchema = {"type": "integer", "minimum": 1, "maximum": INT_MAX}
_VALUE: JsonSchema = {
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]
}


def _field_data(name: str, raw: str) -> dict[str, Any]:
    """Zulip's ProfileFieldData: a JSON object whose values are strings or
    objects of strings (the action checks what each type takes)."""
    value = decode_json(name, raw)
    if not isinstance(value, dict):
        raise ApiError(f"{name} is not a dict")
    if len(value) > MAX_ITEMS:
        raise ApiError(f"{name} has more than {MAX_ITEMS} items")
    for key, item in value.items():
        if isinstance(item, dict):
            if not all(isinstance(text, str) for text in item.values()):
                raise ApiError(f'{name}["{key}"] is not a dict of strings')
        elif not isinstance(item, str):
            raise ApiError(f'{name}["{key}"] is not a string or a dict')
    return value


_FIELD_DATA_SCHEMA: JsonSchema = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [
            {"type": "string"},
            {"type": "object", "additionalProperties": {"type": "string"}},
        ]
    },
}


def _int_list(name: str, raw: str) -> list[int]:
    """A JSON list of integers (ids)."""
    value = decode_json(name, raw)
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > MAX_ITEMS:
        raise ApiError(f"{name} has more than {MAX_ITEMS} items")
    for index, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool):
            raise ApiError(f"{name}[{index}] is not an integer")
    return value


def _updates(name: str, raw: str, *, nullable: bool) -> list[tuple[int, object]]:
    """Zulip's list of `{"id": field id, "value": ...}` objects, as (id,
    value) pairs; a value is a string or a list of user ids (the action
    checks which the field takes), or with `nullable` also null."""
    value = decode_json(name, raw)
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > MAX_ITEMS:
        raise ApiError(f"{name} has more than {MAX_ITEMS} items")
    updates: list[tuple[int, object]] = []
    for index, item in enumerate(value):
        where = f"{name}[{index}]"
        if not isinstance(item, dict):
            raise ApiError(f"{where} is not a dict")
        for key in ("id", "value"):
            if key not in item:
                raise ApiError(f"{key} key is missing from {where}")
        for key in sorted(set(item) - {"id", "value"}):
            raise ApiError(f"Unexpected arguments: {key}")
        field_id, field_value = item["id"], item["value"]
        if not isinstance(field_id, int) or isinstance(field_id, bool):
            raise ApiError(f'{where}["id"] is not an integer')
        if not (isinstance(field_value, str | list) or (nullable and field_value is None)):
            raise ApiError(f'{where}["value"] is not a string or a list')
        updates.append((field_id, field_value))
    return updates


def profile_data_updates(name: str, raw: str) -> list[tuple[int, object]]:
    """`PATCH users/{id}`'s `profile_data`: a null or empty value removes
    the user's value (Zulip's update_user_backend)."""
    return _updates(name, raw, nullable=True)


def _own_updates(name: str, raw: str) -> list[tuple[int, object]]:
    return _updates(name, raw, nullable=False)


def _update_schema(nullable: bool) -> JsonSchema:
    value: JsonSchema = {"anyOf": [{"type": "null"}, *_VALUE["anyOf"]]} if nullable else _VALUE
    return {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"id": _ID, "value": value},
            "required": ["id", "value"],
            "additionalProperties": False,
        },
    }


PROFILE_DATA_SCHEMA = _update_schema(nullable=True)


class ProfileFieldsAreaHandler(ActionHandler):
    """The base of this area's endpoints."""


def _field_id(raw: str) -> int:
    return ActionHandler.path_id(raw, f"Field id {raw} not found.")


# -- the fields ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CreateField:
    name: Annotated[
        str,
        Param(
            f"The field's label (at most {actions.MAX_NAME} characters once stripped;"
            " a GitHub or Twitter account field takes Zulip's)",
            max_length=MAX_TEXT_CHARS,
        ),
    ] = ""
    hint: Annotated[
        str,
        Param(
            f"The field's hint (at most {actions.MAX_HINT} characters)", max_length=MAX_TEXT_CHARS
        ),
    ] = ""
    field_type: Annotated[
        int,
        Param(
            "1 short text, 2 long text, 3 list of options, 4 date, 5 link, 6 users,"
            " 7 external account, 8 pronouns"
        ),
    ]
    field_data: Annotated[
        dict[str, Any] | None,
        Param(
            "A list's options ({id: {text, order}}), an external account's subtype"
            " (github, twitter, custom) and URL pattern",
            parse=_field_data,
            schema=_FIELD_DATA_SCHEMA,
        ),
    ] = None
    display_in_profile_summary: Annotated[
        bool, Param(f"Shown on user cards (at most {actions.MAX_SUMMARY_FIELDS} fields)")
    ] = False
    required: Annotated[bool, Param("Users are asked to fill it in")] = False
    editable_by_user: Annotated[bool, Param("Users may change their own value")] = True


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReorderFields:
    order: Annotated[
        list[int],
        Param(
            f"Every field's id, in the new order (at most {MAX_ITEMS:,})",
            parse=_int_list,
            schema={"type": "array", "items": {"type": "integer"}},
        ),
    ]


class ProfileFieldsHandler(ProfileFieldsAreaHandler):
    """`GET realm/profile_fields` (any user: `custom_fields`); administrators:
    `POST` creates a field (answers its `id`), `PATCH` reorders them."""

    SUPPORTED_METHODS = ("GET", "POST", "PATCH")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        fields = await self.act(lambda ctx: actions.realm_profile_fields(ctx.conn, user.realm_id))
        return {"custom_fields": fields}

    @operation(CreateField)
    async def post(self, user: AuthUser, args: CreateField) -> Body:
        field_id = await self.act(
            lambda ctx: actions.do_create_profile_field(
                ctx,
                user.user_id,
                user.realm_id,
                name=args.name,
                field_type=args.field_type,
                hint=args.hint,
                field_data=args.field_data,
                display_in_profile_summary=args.display_in_profile_summary,
                required=args.required,
                editable_by_user=args.editable_by_user,
            )
        )
        return {"id": field_id}

    @operation(ReorderFields)
    async def patch(self, user: AuthUser, args: ReorderFields) -> Body:
        await self.act(
            lambda ctx: actions.do_reorder_profile_fields(
                ctx, user.user_id, user.realm_id, args.order
            )
        )
        return None


_OptionalBool = Param(parse=optional_boolean, schema={"type": ["boolean", "null"]})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateField:
    name: Annotated[
        str | None,
        Param(
            f"The new label (at most {actions.MAX_NAME} characters once stripped)",
            max_length=MAX_TEXT_CHARS,
        ),
    ] = None
    hint: Annotated[
        str | None,
        Param(f"The new hint (at most {actions.MAX_HINT} characters)", max_length=MAX_TEXT_CHARS),
    ] = None
    field_data: Annotated[
        dict[str, Any] | None,
        Param(
            "A list's options (removing one removes the values that chose it),"
            " an external account's subtype and URL pattern",
            parse=_field_data,
            schema=_FIELD_DATA_SCHEMA,
        ),
    ] = None
    display_in_profile_summary: Annotated[
        bool | None, dataclasses.replace(_OptionalBool, description="Shown on user cards")
    ] = None
    required: Annotated[
        bool | None,
        dataclasses.replace(_OptionalBool, description="Users are asked to fill it in"),
    ] = None
    editable_by_user: Annotated[
        bool | None,
        dataclasses.replace(_OptionalBool, description="Users may change their own value"),
    ] = None


class ProfileFieldHandler(ProfileFieldsAreaHandler):
    """Administrators: `PATCH realm/profile_fields/{id}` changes what is
    given of a field, `DELETE` deletes it with its values."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(UpdateField)
    async def patch(self, user: AuthUser, args: UpdateField, raw_id: str) -> Body:
        field_id = _field_id(raw_id)
        await self.act(
            lambda ctx: actions.do_update_profile_field(
                ctx,
                user.user_id,
                user.realm_id,
                field_id,
                name=args.name,
                hint=args.hint,
                field_data=args.field_data,
                display_in_profile_summary=args.display_in_profile_summary,
                required=args.required,
                editable_by_user=args.editable_by_user,
            )
        )
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        field_id = _field_id(raw_id)
        await self.act(
            lambda ctx: actions.do_delete_profile_field(ctx, user.user_id, user.realm_id, field_id)
        )
        return None


# -- the user's own values -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateOwnData:
    data: Annotated[
        list[tuple[int, object]],
        Param(
            f"The values to set: {{id, value}} objects, a string or (USER fields) a list"
            f" of user ids (at most {MAX_ITEMS:,})",
            parse=_own_updates,
            schema=_update_schema(nullable=False),
        ),
    ]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RemoveOwnData:
    data: Annotated[
        list[int],
        Param(
            f"The ids of the fields whose values to remove (at most {MAX_ITEMS:,})",
            parse=_int_list,
            schema={"type": "array", "items": {"type": "integer"}},
        ),
    ]


class OwnProfileDataHandler(ProfileFieldsAreaHandler):
    """`PATCH users/me/profile_data` sets the user's values, `DELETE`
    removes them; of fields the user may edit (administrators: any)."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(UpdateOwnData)
    async def patch(self, user: AuthUser, args: UpdateOwnData) -> Body:
        await self.act(
            lambda ctx: actions.do_update_profile_data(
                ctx, user.user_id, user.realm_id, user.user_id, args.data
            )
        )
        return None

    @operation(RemoveOwnData)
    async def delete(self, user: AuthUser, args: RemoveOwnData) -> Body:
        await self.act(
            lambda ctx: actions.do_remove_profile_data(
                ctx, user.user_id, user.realm_id, user.user_id, args.data
            )
        )
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"realm/profile_fields", ProfileFieldsHandler),
    (r"realm/profile_fields/([0-9]+)", ProfileFieldHandler),
    (r"users/me/profile_data", OwnProfileDataHandler),
]
