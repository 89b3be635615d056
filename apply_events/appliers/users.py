"""Appliers and post-processing of the users area's sections: people
(`realm_user`), presence (`presence`), the user's settings (`user_settings`,
and Zulip's legacy top-level copies for clients without the
`user_settings_object` capability).

Every applier is correct when the event's change is already in the fetched
state: it sets values, never adds to them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypedDict

from apply_events.appliers.profile_fields import (
    ProfileDataEntry,
    apply_fields_to_people,
    apply_profile_value,
)
from apply_events.section import Applier
from apply_events.state import Event, State, StateContext, event_int
from generation.events.users import (
    GRAVATAR_PREFIX,
    ROLE_MODERATOR,
    PresenceInfo,
    Role,
    legacy_presence,
    role_flags,
)

# -- state shapes (register's response, after post-processing) -----------------


class User(TypedDict, total=False):
    """A user in `realm_users` / `realm_non_active_users`: Zulip's `User`
    without `is_active` (implied by the list, as Zulip removes it)."""

    user_id: int
    email: str
    delivery_email: str | None
    full_name: str
    role: Role
    is_admin: bool
    is_owner: bool
    is_guest: bool
    is_bot: bool
    date_joined: str
    timezone: str
    avatar_version: int
    avatar_url: str | None
    # Bots only (generation.events.users.Person).
    bot_type: int
    bot_owner_id: int
    # Humans only: their values of the realm's custom profile fields, by
    # field id (apply_events/appliers/profile_fields.py).
    profile_data: dict[str, ProfileDataEntry]


class RealmUserState(TypedDict, total=False):
    """The `realm_user` section: the realm's people, and the registering
    user's own identity and role."""

    realm_users: list[User]
    realm_non_active_users: list[User]
    cross_realm_bots: list[User]
    user_id: int
    email: str
    delivery_email: str
    full_name: str
    is_admin: bool
    is_owner: bool
    is_moderator: bool
    is_guest: bool
    avatar_source: Literal["G"]
    avatar_url: str
    avatar_url_medium: str


class SlimPresence(TypedDict):
    """Zulip's modern presence of a user (`slim_presence`): whole seconds."""

    active_timestamp: int
    idle_timestamp: int


class AggregatedPresence(TypedDict):
    client: Literal["website"]
    status: Literal["active", "idle"]
    timestamp: int


class LegacyPresence(TypedDict):
    """Zulip's legacy presence of a user (keyed by email): the single client
    `website`, and the same as `aggregated`."""

    aggregated: AggregatedPresence
    website: PresenceInfo


class PresenceState(TypedDict, total=False):
    """The `presence` section: active users connected in the last 14 days,
    keyed by user id (a string) with `slim_presence`, else by email.
    `server_timestamp` (the server's clock, for comparing the timestamps) is
    added by register, as it is not state that events change."""

    presences: dict[str, SlimPresence | LegacyPresence]
    server_timestamp: float


class UserSettings(TypedDict, total=False):
    """The settings we model of Zulip's `user_settings` object."""

    twenty_four_hour_time: bool
    enter_sends: bool
    color_scheme: int
    default_language: str
    send_read_receipts: bool
    pm_content_in_desktop_notifications: bool
    send_private_typing_notifications: bool
    send_stream_typing_notifications: bool
    enable_drafts_synchronization: bool
    enable_offline_email_notifications: bool
    enable_offline_push_notifications: bool
    wildcard_mentions_notify: bool
    enable_stream_email_notifications: bool
    enable_stream_push_notifications: bool
    # Seconds, 1 to a week.
    email_notifications_batching_period_seconds: int
    timezone: str


class UserSettingsState(TypedDict, total=False):
    """The `user_settings` section."""

    user_settings: UserSettings


class LegacyDisplaySettingsState(TypedDict, total=False):
    """The `update_display_settings` section: Zulip's top-level copies of the
    display settings, only for clients without the `user_settings_object`
    capability. Kept current by `user_settings` events."""

    twenty_four_hour_time: bool
    enter_sends: bool
    color_scheme: int
    default_language: str
    timezone: str


class LegacyNotificationSettingsState(TypedDict, total=False):
    """The `update_global_notifications` section: Zulip's top-level copies
    of the notification settings, only for clients without the
    `user_settings_object` capability. Kept current by `user_settings`
    events."""

    pm_content_in_desktop_notifications: bool
    enable_offline_email_notifications: bool
    enable_offline_push_notifications: bool
    wildcard_mentions_notify: bool
    enable_stream_email_notifications: bool
    enable_stream_push_notifications: bool
    email_notifications_batching_period_seconds: int


# Settings that Zulip also keeps at the top level for legacy clients.
LEGACY_DISPLAY_SETTINGS = (
    "twenty_four_hour_time",
    "enter_sends",
    "color_scheme",
    "default_language",
)

# Notification settings Zulip also keeps at the top level for legacy clients
# (those of its `notification_settings_legacy` that we model).
LEGACY_NOTIFICATION_SETTINGS = (
    "pm_content_in_desktop_notifications",
    "enable_offline_email_notifications",
    "enable_offline_push_notifications",
    "wildcard_mentions_notify",
    "enable_stream_email_notifications",
    "enable_stream_push_notifications",
    "email_notifications_batching_period_seconds",
)

# The lists of streams whose entries carry `subscribers` (the streams area's
# sections), from which a deactivated user disappears.
_SUBSCRIBER_LISTS = ("subscriptions", "unsubscribed", "never_subscribed")


# -- realm_user ------------------------------------------------------------------


def apply_realm_user(state: State, event: Event, ctx: StateContext) -> None:
    """`raw_users` is {user_id: person with `is_active`}; see post-processing."""
    person = event.get("person")
    raw = state.get("raw_users")
    if not isinstance(person, dict) or not isinstance(raw, dict):
        return  # malformed: nothing of ours to change
    user_id = event_int(person.get("user_id"))
    if user_id is None:
        return
    op = event.get("op")
    if op == "add":
        added = dict(person)
        url = added.get("avatar_url")
        if ctx.client_gravatar and isinstance(url, str) and url.startswith(GRAVATAR_PREFIX):
            added["avatar_url"] = None
        # A guest may come to see a deactivated user (generation/actions/access.py).
        added["is_active"] = person.get("is_active") is not False
        if not added.get("is_bot") and not isinstance(person.get("profile_data"), dict):
            # A new person has no values (Zulip's apply_event); one replayed
            # over a fresh fetch keeps those it has. A user one comes to see
            # comes with theirs, as does "Unknown user" (none).
            known = raw.get(user_id)
            data = known.get("profile_data") if isinstance(known, dict) else None
            added["profile_data"] = data if isinstance(data, dict) else {}
        raw[user_id] = added
    elif op == "update":
        _update_person(state, raw, user_id, person, ctx)
    elif op == "remove":
        # Zulip (feature level 228+): the user lost access to this person.
        if "user_list_incomplete" in ctx.capabilities:
            raw.pop(user_id, None)
        elif user_id in raw:
            raw[user_id] = _unknown_user(user_id, state.get("raw_unknown_user"))
        _drop_subscriber(state, user_id)
        _hide_status(state, user_id)


def _update_person(
    state: State, raw: dict[int, Any], user_id: int, person: dict[str, Any], ctx: StateContext
) -> None:
    entry = raw.get(user_id)
    role = event_int(person.get("role"))
    if isinstance(entry, dict):
        for key, value in person.items():
            if key != "user_id" and key in entry:
                entry[key] = value
        if role is not None:
            entry["is_admin"], entry["is_owner"], entry["is_guest"] = role_flags(role)
        change = person.get("custom_profile_field")
        if isinstance(change, dict):
            apply_profile_value(entry, change)
    if user_id == ctx.user_id:
        if isinstance(person.get("full_name"), str) and "full_name" in state:
            state["full_name"] = person["full_name"]
        if role is not None and "is_admin" in state:
            state["is_admin"], state["is_owner"], state["is_guest"] = role_flags(role)
            state["is_moderator"] = role == ROLE_MODERATOR
    if person.get("is_active") is False:
        _drop_subscriber(state, user_id)


def _drop_subscriber(state: State, user_id: int) -> None:
    """Subscriber lists name active users only (Zulip's apply_event does the
    same on deactivation)."""
    for key in _SUBSCRIBER_LISTS:
        streams = state.get(key)
        if not isinstance(streams, list):
            continue
        for stream in streams:
            if isinstance(stream, dict) and isinstance(stream.get("subscribers"), list):
                stream["subscribers"] = [uid for uid in stream["subscribers"] if uid != user_id]


def _hide_status(state: State, user_id: int) -> None:
    """A user one may no longer see has no status for one (the `user_status`
    section's entries, apply_events/appliers/personal.py; as a fresh fetch,
    apply_events/fetch/personal.py)."""
    statuses = state.get("raw_user_status")
    entry = statuses.get(user_id) if isinstance(statuses, dict) else None
    if isinstance(entry, dict):
        entry["active"] = False


def _unknown_user(user_id: int, template: object) -> dict[str, Any]:
    """Zulip's placeholder for a user one may no longer see, as a fresh fetch
    shows them: the fetch's `template` (generation.actions.access's
    `inaccessible_person` for user 0) with this user's id and address."""
    if not isinstance(template, dict) or not isinstance(template.get("email"), str):
        return {"user_id": user_id, "full_name": "Unknown user", "is_active": True}
    _, _, domain = template["email"].partition("@")
    return {
        **template,
        "user_id": user_id,
        "email": f"user{user_id}@{domain}",
        "profile_data": {},
    }


def post_process_realm_users(state: State, ctx: StateContext) -> None:
    """`raw_users` -> `realm_users` (active) and `realm_non_active_users`, each
    sorted by id, without `is_active` (Zulip's post_process_state)."""
    raw = state.pop("raw_users", None)
    state.pop("raw_unknown_user", None)
    if not isinstance(raw, dict):
        return
    active: list[dict[str, Any]] = []
    inactive: list[dict[str, Any]] = []
    for user_id in sorted(raw):
        entry = raw[user_id]
        shown = {key: value for key, value in entry.items() if key != "is_active"}
        (active if entry.get("is_active") else inactive).append(shown)
    state["realm_users"] = active
    state["realm_non_active_users"] = inactive


# -- presence --------------------------------------------------------------------
#
# `raw_presences` is {user_id: {"email", "is_active", "date_joined", "active",
# "connected", "recent"}} for every user of the realm: the stored timestamps
# (whole seconds or None), whether the user connected in the last 14 days
# when fetched, and what post-processing needs. Keeping every user (not only
# those shown) lets a presence event or a reactivation be applied exactly.


def presence_entry(
    email: str,
    is_active: bool,
    date_joined: int | None,
    active: int | None = None,
    connected: int | None = None,
    recent: bool = False,
) -> dict[str, Any]:
    return {
        "email": email,
        "is_active": is_active,
        "date_joined": date_joined,
        "active": active,
        "connected": connected,
        "recent": recent,
    }


def apply_presence(state: State, event: Event, ctx: StateContext) -> None:
    """The event's `server_timestamp` is the user's new last-connected time;
    an `active` status carries the last-active time (an `idle` one leaves it:
    idle updates do not change it)."""
    raw = state.get("raw_presences")
    if (
        isinstance(raw, dict)
        and isinstance(event.get("presences"), dict)
        and ("presence" not in event)
    ):
        _apply_modern_presence(raw, event["presences"])
        return
    user_id = event_int(event.get("user_id"))
    stamp = event.get("server_timestamp")
    clients = event.get("presence")
    if (
        not isinstance(raw, dict)
        or user_id is None
        or not isinstance(stamp, int | float)
        or not isinstance(clients, dict)
    ):
        return
    info = clients.get("website")
    if not isinstance(info, dict):
        return
    entry = raw.get(user_id)
    if entry is None:
        email = event.get("email")
        entry = presence_entry(email if isinstance(email, str) else "", True, None)
        raw[user_id] = entry
    entry["connected"] = int(stamp)
    timestamp = event_int(info.get("timestamp"))
    if info.get("status") == "active" and timestamp is not None:
        entry["active"] = timestamp
    entry["recent"] = True


def _apply_modern_presence(raw: dict[int, Any], presences: dict[str, Any]) -> None:
    """A presence event in the modern form (simplified_presence_events):
    each user's last active and last connected times."""
    for key, modern in presences.items():
        user_id = int(key) if isinstance(key, str) and key.isdigit() else None
        if user_id is None or not isinstance(modern, dict):
            continue
        active = event_int(modern.get("active_timestamp"))
        connected = event_int(modern.get("idle_timestamp"))
        if connected is None:
            continue
        entry = raw.get(user_id)
        if entry is None:
            entry = presence_entry("", True, None)
            raw[user_id] = entry
        entry["connected"] = connected
        if active is not None:
            entry["active"] = active
        entry["recent"] = True


def apply_presence_people(state: State, event: Event, ctx: StateContext) -> None:
    """`realm_user` events as the presence section sees them: who exists and
    is active (only active users' presence is shown; a user a restricted
    guest may not see counts as inactive for them, apply_events/fetch/users.py)."""
    raw = state.get("raw_presences")
    person = event.get("person")
    if not isinstance(raw, dict) or not isinstance(person, dict):
        return
    user_id = event_int(person.get("user_id"))
    if user_id is None:
        return
    if event.get("op") == "add" and isinstance(person.get("email"), str):
        entry = raw.get(user_id)
        joined = _timestamp(person.get("date_joined"))
        # A guest may come to see a deactivated user (access.py).
        active = person.get("is_active") is not False
        if entry is None:
            raw[user_id] = presence_entry(person["email"], active, joined)
        else:
            entry.update(email=person["email"], is_active=active, date_joined=joined)
    elif event.get("op") == "update" and isinstance(person.get("is_active"), bool):
        entry = raw.get(user_id)
        if entry is not None:
            entry["is_active"] = person["is_active"]
    elif event.get("op") == "remove" and user_id in raw:
        # One may no longer see them: no presence shown, as a fresh fetch.
        raw[user_id]["is_active"] = False


def _timestamp(iso: object) -> int | None:
    if not isinstance(iso, str):
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return None


def post_process_presence(state: State, ctx: StateContext) -> None:
    """`raw_presences` -> `presences` in the client's form (Zulip's
    `get_presence_dicts_for_rows`): a never-active user counts as active
    when they joined."""
    raw = state.pop("raw_presences", None)
    if not isinstance(raw, dict):
        return
    presences: dict[str, Any] = {}
    for user_id in sorted(raw):
        entry = raw[user_id]
        connected = entry["connected"]
        if not entry["is_active"] or not entry["recent"] or connected is None:
            continue
        active = entry["active"]
        if active is None:
            # Unknown only for a user created after the fetch whose
            # `realm_user` event was not asked for; their join time is close.
            active = entry["date_joined"] if entry["date_joined"] is not None else connected
        if ctx.slim_presence:
            presences[str(user_id)] = {"active_timestamp": active, "idle_timestamp": connected}
        else:
            info = legacy_presence(active, connected)
            aggregated = {
                "client": info["client"],
                "status": info["status"],
                "timestamp": info["timestamp"],
            }
            presences[entry["email"]] = {"aggregated": aggregated, "website": info}
    state["presences"] = presences


# -- user settings ---------------------------------------------------------------


def apply_user_settings(state: State, event: Event, ctx: StateContext) -> None:
    settings = state.get("user_settings")
    prop = event.get("property")
    if event.get("op") == "update" and isinstance(settings, dict) and prop in settings:
        settings[prop] = event.get("value")


def apply_legacy_display_settings(state: State, event: Event, ctx: StateContext) -> None:
    """The top-level copies follow the `user_settings` events."""
    prop = event.get("property")
    if event.get("op") == "update" and prop in LEGACY_DISPLAY_SETTINGS and prop in state:
        state[prop] = event.get("value")


def apply_legacy_notification_settings(state: State, event: Event, ctx: StateContext) -> None:
    """The top-level copies follow the `user_settings` events."""
    prop = event.get("property")
    if event.get("op") == "update" and prop in LEGACY_NOTIFICATION_SETTINGS and prop in state:
        state[prop] = event.get("value")


REALM_USER_APPLIERS: dict[str, Applier] = {
    "realm_user": apply_realm_user,
    # a deleted field's values leave the people's `profile_data`
    "custom_profile_fields": apply_fields_to_people,
}
PRESENCE_APPLIERS: dict[str, Applier] = {
    "presence": apply_presence,
    "realm_user": apply_presence_people,
}
USER_SETTINGS_APPLIERS: dict[str, Applier] = {"user_settings": apply_user_settings}
LEGACY_DISPLAY_APPLIERS: dict[str, Applier] = {"user_settings": apply_legacy_display_settings}
LEGACY_NOTIFICATION_APPLIERS: dict[str, Applier] = {
    "user_settings": apply_legacy_notification_settings
}
