"""Events of a realm's custom profile fields: the fields themselves
(`custom_profile_fields`, the whole list on every change, as Zulip sends it)
and, declared with the `realm_user` type (generation/events/users.py), a
user's value of one of them (`PersonCustomProfileField`). Shapes are Zulip's
(zulip.yaml, GET /events); the facts both the actions and register's
sections read about the types are here too."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from generation.events.declaration import ClientRule, EventType

# Zulip's field types (CustomProfileField.field_type).
FieldType = Literal[1, 2, 3, 4, 5, 6, 7, 8]
SHORT_TEXT, LONG_TEXT, SELECT, DATE, URL, USER, EXTERNAL_ACCOUNT, PRONOUNS = range(1, 9)

# Zulip's `custom_profile_field_types` of register: each type's keyword, its
# number and its name, in Zulip's order (by name).
FIELD_TYPES: tuple[tuple[str, int, str], ...] = (
    ("DATE", DATE, "Date"),
    ("EXTERNAL_ACCOUNT", EXTERNAL_ACCOUNT, "External account"),
    ("URL", URL, "Link"),
    ("SELECT", SELECT, "List of options"),
    ("PRONOUNS", PRONOUNS, "Pronouns"),
    ("LONG_TEXT", LONG_TEXT, "Text (long)"),
    ("SHORT_TEXT", SHORT_TEXT, "Text (short)"),
    ("USER", USER, "Users"),
)

# The types whose values Zulip renders to HTML (`is_renderable`): a value
# of these carries `rendered_value`.
RENDERED_TYPES = frozenset({SHORT_TEXT, LONG_TEXT})


class CustomProfileField(TypedDict):
    """A field as Zulip shows it (`CustomProfileField.as_dict`)."""

    id: int
    name: str
    type: FieldType
    hint: str
    # JSON text: the options of a SELECT field ({"id": {"text", "order"}}),
    # the subtype (and URL pattern) of an EXTERNAL_ACCOUNT one; "" for the
    # other types.
    field_data: str
    order: int
    required: bool
    editable_by_user: bool
    # Only when true (Zulip leaves it out otherwise).
    display_in_profile_summary: NotRequired[bool]


class CustomProfileFieldsEvent(TypedDict):
    """The realm's fields changed (one created, edited, reordered or
    deleted): all of them, in their order; sent to every active user of the
    realm. Clients without `pronouns_field_type_supported` get PRONOUNS
    fields as SHORT_TEXT."""

    id: int
    type: Literal["custom_profile_fields"]
    fields: list[CustomProfileField]


class ProfileFieldValue(TypedDict):
    """A user's new value of a field; `value` null: the value was removed.
    `rendered_value` comes with every value of a text field (eventq sends
    it with an empty one too, where Zulip leaves it out, so that register's
    state from the event equals a fresh fetch)."""

    id: int
    value: str | None
    rendered_value: NotRequired[str]


class PersonCustomProfileField(TypedDict):
    """A `realm_user` update's person: a user's value of a custom profile
    field changed."""

    user_id: int
    custom_profile_field: ProfileFieldValue


TYPES: tuple[EventType, ...] = (
    EventType(
        "custom_profile_fields",
        {None: CustomProfileFieldsEvent},
        # the list, and the people's values (a deleted field's go with it)
        state=("custom_profile_fields", "realm_user"),
        # Zulip's clients from before the PRONOUNS type see such fields as
        # short text.
        capability=ClientRule("pronouns_field_type_supported", without_it="pronouns_as_short_text"),
    ),
)
