"""State sections of the users area: the realm's people (`realm_user`), who
is online (`presence`), the user's settings (`user_settings`, and the legacy
top-level copies, `update_display_settings`). One query per section, whatever
the number of users; rows in id order.

Also the reads behind the users endpoints (GET /users, POST
/users/me/presence), which answer in the same shapes.

A guest of a realm that restricts guests (`can_access_all_users_group`,
generation/actions/access.py) reads only the users they may see: the others
are "Unknown user" in the people (or left out, for a client declaring
`user_list_incomplete`), and have no presence and no status. Whether the
reader is such a guest is a column of each section's own query, so that no
one else pays a statement for it; such a guest's sections cost one more
(`generation.actions.access.access_map`).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from apply_events.appliers import users as appliers
from apply_events.fetch.slices import fetch_all_sliced, sliced
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.accounts import ROLE_GUEST
from generation.actions.access import access_map, inaccessible_person
from generation.actions.profile_fields import realm_profile_data
from generation.events.users import (
    PRESENCE_HISTORY,
    ROLE_MODERATOR,
    Person,
    gravatar_url,
    person,
    role_flags,
)

Connection = psycopg.AsyncConnection[Any]


class UserGone(LookupError):
    """Raised when the registering user no longer exists."""


@dataclasses.dataclass(frozen=True, slots=True)
class _UserRow:
    id: int
    email: str
    full_name: str
    role: int
    is_active: bool
    date_joined: datetime
    timezone: str
    # Bots only (migration 0018).
    bot_type: int | None
    bot_owner_id: int | None
    # Zulip's `long_term_idle` (soft deactivation), as eventq can tell it:
    # see _LONG_TERM_IDLE.
    long_term_idle: bool
    # The realm's, the same on every row: its subdomain (the domain of
    # "Unknown user"'s address) and whether it restricts what guests see.
    realm_subdomain: str
    guests_restricted: bool


# Zulip soft-deactivates a human whose last visit is more than 28 whole days
# old (its `soft_deactivate_users --inactive-for` default, `.days > 28`), and
# register then leaves out that user's `avatar_url` for clients declaring
# `user_avatar_url_field_optional`. eventq's only record of a visit is the
# presence a client reports (`presences.last_connected_time`): a human whose
# last one is 29 days old or more counts as long-term idle, active or not;
# one who never reported any does not (Zulip, likewise, never soft-
# deactivates a user without a recorded visit), nor does a bot.
_LONG_TERM_IDLE = (
    "(NOT is_bot AND EXISTS (SELECT 1 FROM presences p WHERE p.user_id = users.id"
    " AND p.last_connected_time <= now() - interval '29 days')) AS long_term_idle"
)


async def _user_rows(conn: Connection, realm_id: int, user_id: int | None = None) -> list[_UserRow]:
    cur = conn.cursor(row_factory=class_row(_UserRow))
    query = (
        "SELECT users.id, users.email, users.full_name, users.role, users.is_active,"  # noqa: S608 (a constant)
        " users.date_joined, users.timezone, users.bot_type, users.bot_owner_id,"
        f" {_LONG_TERM_IDLE}, realms.subdomain AS realm_subdomain,"
        " NOT realms.guests_see_all_users AS guests_restricted"
        " FROM users JOIN realms ON realms.id = users.realm_id WHERE users.realm_id = %s"
    )
    if user_id is None:
        await cur.execute(query + " ORDER BY users.id", (realm_id,))
    else:
        await cur.execute(query + " AND users.id = %s", (realm_id, user_id))
    return await fetch_all_sliced(cur)


# Whether the reader (the `%(viewer)s` parameter) is a guest of a realm that
# restricts guests (migration 0022): a column of a section's query, NULL for
# no such user. Postgres evaluates it once per statement (it names no
# column of the outer query).
VIEWER_RESTRICTED = (
    "(SELECT v.role = "  # noqa: S608 (a constant)
    f"{ROLE_GUEST} AND NOT r.guests_see_all_users FROM users v"
    " JOIN realms r ON r.id = v.realm_id WHERE v.id = %(viewer)s)"
)


async def seen_by(conn: Connection, viewer_id: int, restricted: bool | None) -> set[int] | None:
    """The users `viewer_id` may see (themselves included; every bot is seen
    as well), or None when they see everyone: `restricted` is what
    `VIEWER_RESTRICTED` read. One statement, only for a restricted guest."""
    if not restricted:
        return None
    return (await access_map(conn, [viewer_id]))[viewer_id]


async def _hidden_from(conn: Connection, viewer: _UserRow, rows: list[_UserRow]) -> set[int]:
    """The humans of `rows` that `viewer` may not see."""
    seen = await seen_by(conn, viewer.id, viewer.role == ROLE_GUEST and viewer.guests_restricted)
    if seen is None:
        return set()
    return {row.id for row in rows if row.bot_type is None and row.id not in seen}


def _person(row: _UserRow, client_gravatar: bool) -> Person:
    return person(
        user_id=row.id,
        email=row.email,
        full_name=row.full_name,
        role=row.role,
        is_active=row.is_active,
        date_joined=row.date_joined,
        timezone=row.timezone,
        client_gravatar=client_gravatar,
        bot_type=row.bot_type,
        bot_owner_id=row.bot_owner_id,
    )


async def fetch_people(
    conn: Connection,
    realm_id: int,
    *,
    client_gravatar: bool,
    user_id: int | None = None,
    viewer_id: int | None = None,
    include_custom_profile_fields: bool = False,
) -> list[dict[str, Any]]:
    """Every user of the realm (or only `user_id`), active or not, in id
    order, as GET /users shows them (with `is_active`; with each human's
    `profile_data` if `include_custom_profile_fields`). For the whole realm,
    each user `viewer_id` may not see is "Unknown user" (Zulip's
    `get_members_backend`: its `get_users_for_api` call leaves
    `user_list_incomplete` false)."""
    rows = await _user_rows(conn, realm_id, user_id)
    viewer = next((row for row in rows if row.id == viewer_id), None)
    hidden = await _hidden_from(conn, viewer, rows) if viewer is not None else set()
    data = (
        await realm_profile_data(conn, realm_id, user_id) if include_custom_profile_fields else None
    )
    return [
        inaccessible_person(row.id, row.realm_subdomain)
        if row.id in hidden
        else _with_profile_data(row, _person(row, client_gravatar), data)
        async for row in sliced(rows)
    ]


def _with_profile_data(
    row: _UserRow, person: Person, data: dict[int, dict[str, Any]] | None
) -> dict[str, Any]:
    """A person with their custom profile field values (`data`: the realm's,
    by user id; None: without them), as Zulip shows a human's; a bot has none."""
    shown = dict(person)
    if data is not None and row.bot_type is None:
        shown["profile_data"] = data.get(row.id, {})
    return shown


def _avatar_optional(ctx: StateContext, row: _UserRow, shown: dict[str, Any]) -> dict[str, Any]:
    """A person in register's `realm_users`: without `avatar_url` when the
    client declared `user_avatar_url_field_optional` and the user is
    long-term idle (Zulip's `format_user_row`); register only, as Zulip. Never
    the registering user: registering is a visit (Zulip reactivates a
    soft-deactivated user as it registers)."""
    if (
        row.long_term_idle
        and row.id != ctx.user_id
        and "user_avatar_url_field_optional" in ctx.capabilities
    ):
        shown.pop("avatar_url", None)
    return shown


async def fetch_realm_users(conn: Connection, ctx: StateContext) -> State:
    """The people; for a restricted guest, each user they may not see is
    "Unknown user" (Zulip's `get_users_for_api`), or left out for a client
    declaring `user_list_incomplete`. `raw_unknown_user` (user 0's
    placeholder, popped by post-processing) is what the `realm_user` remove
    applier shows a user as later, as a fresh fetch would."""
    rows = await _user_rows(conn, ctx.realm_id)
    me = next((row for row in rows if row.id == ctx.user_id), None)
    if me is None:
        raise UserGone(ctx.user_id)
    is_admin, is_owner, is_guest = role_flags(me.role)
    hidden = await _hidden_from(conn, me, rows)
    data = await realm_profile_data(conn, ctx.realm_id)
    incomplete = "user_list_incomplete" in ctx.capabilities
    raw: dict[int, dict[str, Any]] = {}
    async for row in sliced(rows):
        if row.id not in hidden:
            shown = _with_profile_data(row, _person(row, ctx.client_gravatar), data)
            raw[row.id] = _avatar_optional(ctx, row, shown)
        elif not incomplete:
            raw[row.id] = inaccessible_person(row.id, row.realm_subdomain)
    return {
        "raw_users": raw,
        "raw_unknown_user": inaccessible_person(0, me.realm_subdomain),
        # Zulip's system bots; eventq has none.
        "cross_realm_bots": [],
        "user_id": me.id,
        "email": me.email,
        "delivery_email": me.email,
        "full_name": me.full_name,
        "is_admin": is_admin,
        "is_owner": is_owner,
        "is_moderator": me.role == ROLE_MODERATOR,
        "is_guest": is_guest,
        # The user's own avatar is always a URL (Zulip ignores client_gravatar here).
        "avatar_source": "G",
        "avatar_url": gravatar_url(me.email),
        "avatar_url_medium": gravatar_url(me.email, medium=True),
    }


async def fetch_presence(conn: Connection, ctx: StateContext) -> State:
    """Every user's presence; a user a restricted guest may not see counts as
    inactive for them (so not shown, as Zulip filters presence for guests)
    until a `realm_user` add says they may."""
    cur = await conn.execute(
        f"""
        SELECT u.id, u.email, u.is_active,
               floor(extract(epoch FROM u.date_joined))::bigint,
               floor(extract(epoch FROM p.last_active_time))::bigint,
               floor(extract(epoch FROM p.last_connected_time))::bigint,
               coalesce(p.last_connected_time >= now() - interval '{PRESENCE_HISTORY}', false),
               u.is_bot, {VIEWER_RESTRICTED}
        FROM users u LEFT JOIN presences p ON p.user_id = u.id
        WHERE u.realm_id = %(realm)s
        ORDER BY u.id
        """,  # noqa: S608 (constants)
        {"realm": ctx.realm_id, "viewer": ctx.user_id},
    )
    rows = await fetch_all_sliced(cur)
    seen = await seen_by(conn, ctx.user_id, rows[0][8] if rows else None)
    return {
        "raw_presences": {
            row[0]: appliers.presence_entry(
                row[1],
                row[2] and (seen is None or row[7] or row[0] in seen),
                row[3],
                row[4],
                row[5],
                row[6],
            )
            async for row in sliced(rows)
        }
    }


async def fetch_presences(
    conn: Connection, realm_id: int, *, slim: bool, viewer_id: int
) -> dict[str, Any]:
    """The realm's `presences` as register shows them to `viewer_id` (for
    POST /users/me/presence and GET /realm/presence)."""
    ctx = StateContext(user_id=viewer_id, realm_id=realm_id, queue_id="", slim_presence=slim)
    state = await fetch_presence(conn, ctx)
    appliers.post_process_presence(state, ctx)
    presences: dict[str, Any] = state["presences"]
    return presences


_SETTINGS_QUERY = """
    SELECT coalesce(s.twenty_four_hour_time, false), coalesce(s.enter_sends, false),
           coalesce(s.color_scheme, 1), coalesce(s.default_language, 'en'),
           coalesce(s.send_read_receipts, true),
           coalesce(s.pm_content_in_desktop_notifications, true),
           coalesce(s.send_private_typing_notifications, true),
           coalesce(s.send_stream_typing_notifications, true),
           coalesce(s.enable_drafts_synchronization, true),
           coalesce(s.enable_offline_email_notifications, true),
           coalesce(s.enable_offline_push_notifications, true),
           coalesce(s.wildcard_mentions_notify, true),
           coalesce(s.enable_stream_email_notifications, false),
           coalesce(s.enable_stream_push_notifications, false),
           coalesce(s.email_notifications_batching_period_seconds, 120), u.timezone
    FROM users u LEFT JOIN user_settings s ON s.user_id = u.id
    WHERE u.id = %s
"""
# The columns of _SETTINGS_QUERY; a missing row has the table's defaults.
_SETTINGS = (
    "twenty_four_hour_time",
    "enter_sends",
    "color_scheme",
    "default_language",
    "send_read_receipts",
    "pm_content_in_desktop_notifications",
    "send_private_typing_notifications",
    "send_stream_typing_notifications",
    "enable_drafts_synchronization",
    "enable_offline_email_notifications",
    "enable_offline_push_notifications",
    "wildcard_mentions_notify",
    "enable_stream_email_notifications",
    "enable_stream_push_notifications",
    "email_notifications_batching_period_seconds",
    "timezone",
)


async def _settings(conn: Connection, user_id: int) -> dict[str, Any]:
    cur = await conn.execute(_SETTINGS_QUERY, (user_id,))
    row = await cur.fetchone()
    if row is None:
        raise UserGone(user_id)
    return dict(zip(_SETTINGS, row, strict=True))


async def fetch_user_settings(conn: Connection, ctx: StateContext) -> State:
    return {"user_settings": await _settings(conn, ctx.user_id)}


async def fetch_legacy_notification_settings(conn: Connection, ctx: StateContext) -> State:
    """Zulip's top-level notification settings, for clients that did not
    declare `user_settings_object`."""
    if "user_settings_object" in ctx.capabilities:
        return {}
    settings = await _settings(conn, ctx.user_id)
    return {name: settings[name] for name in appliers.LEGACY_NOTIFICATION_SETTINGS}


async def fetch_legacy_display_settings(conn: Connection, ctx: StateContext) -> State:
    """Zulip's top-level display settings, for clients that did not declare
    `user_settings_object` (they read these instead of `user_settings`)."""
    if "user_settings_object" in ctx.capabilities:
        return {}
    settings = await _settings(conn, ctx.user_id)
    return {name: settings[name] for name in (*appliers.LEGACY_DISPLAY_SETTINGS, "timezone")}


SECTIONS: tuple[Section, ...] = (
    Section(
        "realm_user",
        fetch_realm_users,
        appliers.REALM_USER_APPLIERS,
        post_process=appliers.post_process_realm_users,
        state=appliers.RealmUserState,
    ),
    Section(
        "presence",
        fetch_presence,
        appliers.PRESENCE_APPLIERS,
        post_process=appliers.post_process_presence,
        state=appliers.PresenceState,
    ),
    Section(
        "user_settings",
        fetch_user_settings,
        appliers.USER_SETTINGS_APPLIERS,
        state=appliers.UserSettingsState,
    ),
    Section(
        "update_display_settings",
        fetch_legacy_display_settings,
        appliers.LEGACY_DISPLAY_APPLIERS,
        state=appliers.LegacyDisplaySettingsState,
    ),
    Section(
        "update_global_notifications",
        fetch_legacy_notification_settings,
        appliers.LEGACY_NOTIFICATION_APPLIERS,
        state=appliers.LegacyNotificationSettingsState,
    ),
)
