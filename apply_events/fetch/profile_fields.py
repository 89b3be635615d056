"""The state section of custom profile fields (`custom_profile_fields`):
the realm's fields in their order, and Zulip's table of field types. One
query. The people's values are in the `realm_user` section
(apply_events/fetch/users.py reads them with `realm_profile_data`).

The list is read by the function the actions build their event with
(`generation.actions.profile_fields.realm_profile_fields`), so that a fresh
fetch and an event agree by construction.
"""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import profile_fields as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.actions.profile_fields import realm_profile_fields

Connection = psycopg.AsyncConnection[Any]


async def fetch_custom_profile_fields(conn: Connection, ctx: StateContext) -> State:
    fields = await realm_profile_fields(conn, ctx.realm_id)
    return {
        "custom_profile_fields": appliers.shown_fields(fields, ctx),
        "custom_profile_field_types": appliers.field_types(ctx),
    }


SECTIONS: tuple[Section, ...] = (
    Section(
        "custom_profile_fields",
        fetch_custom_profile_fields,
        appliers.CUSTOM_PROFILE_FIELDS_APPLIERS,
        state=appliers.CustomProfileFieldsState,
    ),
)
