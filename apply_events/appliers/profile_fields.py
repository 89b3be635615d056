"""Appliers of custom profile fields: the realm's list of fields (the
`custom_profile_fields` section) and the people's values of them (each
human's `profile_data` in the `realm_user` section's people; those appliers
are registered there, in apply_events/appliers/users.py).

Every applier is correct when the event's change is already in the fetched
state: it sets values, never adds to them. Pure: no database, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NotRequired, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext, event_int
from generation.events.profile_fields import (
    FIELD_TYPES,
    PRONOUNS,
    SELECT,
    SHORT_TEXT,
    CustomProfileField,
)

# -- state shapes (register's response) -------------------------------------------


class CustomProfileFieldType(TypedDict):
    """One of Zulip's field types, under its keyword."""

    id: int
    name: str


class CustomProfileFieldsState(TypedDict, total=False):
    """The `custom_profile_fields` section: the realm's fields in their
    order, and Zulip's table of field types (without PRONOUNS, and PRONOUNS
    fields shown as SHORT_TEXT, for clients without
    `pronouns_field_type_supported`)."""

    custom_profile_fields: list[CustomProfileField]
    custom_profile_field_types: dict[str, CustomProfileFieldType]


class ProfileDataEntry(TypedDict):
    """A user's value of a field in their `profile_data`, keyed by the
    field's id (a string); `rendered_value` (its HTML) for the text types."""

    value: str
    rendered_value: NotRequired[str | None]


# -- the list of fields ---------------------------------------------------------------


def _pronouns_supported(ctx: StateContext) -> bool:
    return "pronouns_field_type_supported" in ctx.capabilities


def field_types(ctx: StateContext) -> dict[str, CustomProfileFieldType]:
    """Zulip's `custom_profile_field_types` for this client."""
    supported = _pronouns_supported(ctx)
    return {
        keyword: {"id": number, "name": name}
        for keyword, number, name in FIELD_TYPES
        if supported or number != PRONOUNS
    }


def shown_fields(fields: Iterable[Mapping[str, Any]], ctx: StateContext) -> list[dict[str, Any]]:
    """The fields as this client sees them (copies): PRONOUNS as SHORT_TEXT
    without `pronouns_field_type_supported`, as the live event's form."""
    supported = _pronouns_supported(ctx)
    return [
        {**field, "type": SHORT_TEXT}
        if not supported and field.get("type") == PRONOUNS
        else dict(field)
        for field in fields
    ]


def apply_custom_profile_fields(state: State, event: Event, ctx: StateContext) -> None:
    """The event carries the whole list, in order."""
    fields = event.get("fields")
    if isinstance(fields, list) and "custom_profile_fields" in state:
        state["custom_profile_fields"] = shown_fields(
            (field for field in fields if isinstance(field, Mapping)), ctx
        )


# -- the people's values --------------------------------------------------------------


def _options(field: Mapping[str, Any]) -> frozenset[str] | None:
    """A list field's option keys (None: any value is kept)."""
    if field.get("type") != SELECT or not isinstance(field.get("field_data"), str):
        return None
    try:
        decoded = json.loads(field["field_data"])
    except ValueError:
        return None
    return frozenset(decoded) if isinstance(decoded, dict) else None


def apply_fields_to_people(state: State, event: Event, ctx: StateContext) -> None:
    """The `realm_user` section's people lose their values of the fields no
    longer in the list (a deleted field's, as Zulip's apply_event) and of
    the options no longer in a list field (the action deleted them with no
    event of their own)."""
    fields = event.get("fields")
    raw = state.get("raw_users")
    if not isinstance(fields, list) or not isinstance(raw, dict):
        return
    kept = {
        str(field_id): _options(field)
        for field in fields
        if isinstance(field, Mapping) and (field_id := event_int(field.get("id"))) is not None
    }
    for person in raw.values():
        data = person.get("profile_data") if isinstance(person, dict) else None
        if isinstance(data, dict):
            for field_id in [key for key in data if _dropped(kept, key, data[key])]:
                del data[field_id]


def _dropped(kept: Mapping[str, frozenset[str] | None], field_id: str, entry: object) -> bool:
    if field_id not in kept:
        return True
    options = kept[field_id]
    value = entry.get("value") if isinstance(entry, Mapping) else None
    return options is not None and value not in options


def apply_profile_value(person: dict[str, Any], change: Mapping[str, Any]) -> None:
    """A `realm_user` update's `custom_profile_field` on the person it
    names (a human: bots have no `profile_data`): the new value, or none."""
    data = person.get("profile_data")
    field_id = event_int(change.get("id"))
    if not isinstance(data, dict) or field_id is None:
        return
    value = change.get("value")
    if value is None:
        data.pop(str(field_id), None)
    elif "rendered_value" in change:
        data[str(field_id)] = {"value": value, "rendered_value": change["rendered_value"]}
    else:
        data[str(field_id)] = {"value": value}


CUSTOM_PROFILE_FIELDS_APPLIERS: dict[str, Applier] = {
    "custom_profile_fields": apply_custom_profile_fields
}
