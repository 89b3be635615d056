"""Events of the users area: people joining, changing and leaving a realm
(`realm_user`), who is online (`presence`) and a user's own settings
(`user_settings`). Shapes are Zulip's (zulip.yaml, GET /events) for what we
model; see generation/events/__init__.py for how the catalogue uses them."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, NotRequired, TypedDict, cast

from generation.events.declaration import ClientRule, EventType
from generation.events.profile_fields import PersonCustomProfileField

# Zulip's role numbers (generation.accounts.ROLES).
Role = Literal[100, 200, 300, 400, 600]


class Person(TypedDict):
    """A user as Zulip's `User` object, for what we model: no custom profile
    fields, avatars from Gravatar only. A bot also has `bot_type` and
    `bot_owner_id` (generation/events/bots.py); a human has neither."""

    user_id: int
    email: str
    # The real address; Zulip sends null to those not allowed to see it. Every
    # member of a realm may see every address here (Zulip's "everyone").
    delivery_email: str | None
    full_name: str
    role: Role
    is_admin: bool
    is_owner: bool
    is_guest: bool
    is_bot: bool
    is_active: bool
    # ISO 8601 with the UTC offset, as Python's `datetime.isoformat()`.
    date_joined: str
    timezone: str
    avatar_version: int
    # Always a URL in the event; register's state has null instead for
    # `client_gravatar` clients (they compute Gravatar URLs themselves).
    avatar_url: str | None
    # Bots only: Zulip's bot type (1 generic, 2 incoming webhook, ...) and
    # the user who owns the bot.
    bot_type: NotRequired[int]
    bot_owner_id: NotRequired[int]
    # A human's custom profile field values, by field id: only in the
    # `realm_user` add a guest gets for a user they can now see
    # (generation/actions/access.py); a new user has none.
    profile_data: NotRequired[dict[str, Any]]


class InaccessiblePerson(TypedDict):
    """A user the client may not see (Zulip's `get_data_for_inaccessible_user`,
    generation/actions/access.py): "Unknown user", a member, active, joined
    at the epoch, with the unknown-user picture."""

    user_id: int
    email: str
    delivery_email: None
    full_name: Literal["Unknown user"]
    role: Literal[400]
    is_admin: Literal[False]
    is_owner: Literal[False]
    is_guest: Literal[False]
    is_bot: Literal[False]
    is_active: Literal[True]
    date_joined: str
    timezone: Literal[""]
    avatar_version: int
    avatar_url: str
    profile_data: dict[str, Any]


# The key of a `realm_user` add whose person is a user the recipient may not
# see (Zulip's `inaccessible_user` flag): the queues drop the event for
# clients with `user_list_incomplete` and remove the key for the others
# (`queues/specialize.py` forms "inaccessible_dropped" and
# "inaccessible_unmarked", which hold the same text).
INACCESSIBLE_USER = "inaccessible_user"


class RealmUserAddEvent(TypedDict):
    """A user joined the realm, or a guest can now see a user (Zulip's
    restricted access, generation/actions/access.py); sent to those who may
    see the user, and, as "Unknown user" (`InaccessiblePerson`), to the
    guests who may not, unless their client declared `user_list_incomplete`."""

    id: int
    type: Literal["realm_user"]
    op: Literal["add"]
    person: Person | InaccessiblePerson


class PersonRemoved(TypedDict):
    """A user the recipient may no longer see."""

    user_id: int
    full_name: Literal["Unknown user"]


class RealmUserRemoveEvent(TypedDict):
    """A guest may no longer see a user (they share no channel or group
    conversation any more; Zulip's feature level 228): the client shows the
    user as "Unknown user", or forgets them with `user_list_incomplete`."""

    id: int
    type: Literal["realm_user"]
    op: Literal["remove"]
    person: PersonRemoved


class PersonFullName(TypedDict):
    """A user's name changed."""

    user_id: int
    full_name: str


class PersonRole(TypedDict):
    """A user's role changed."""

    user_id: int
    role: Role


class PersonActive(TypedDict):
    """A user was deactivated or reactivated (Zulip's form since feature
    level 222, which replaced `remove` and `add` for these)."""

    user_id: int
    is_active: bool


class PersonBotOwner(TypedDict):
    """A bot has another owner."""

    user_id: int
    bot_owner_id: int


class RealmUserUpdateEvent(TypedDict):
    """Something about a user changed; sent to every active user of the realm
    who may see them (generation/actions/access.py)."""

    id: int
    type: Literal["realm_user"]
    op: Literal["update"]
    person: PersonFullName | PersonRole | PersonActive | PersonBotOwner | PersonCustomProfileField


class PresenceInfo(TypedDict):
    """Zulip's legacy presence of one client; since feature level 178 always
    the single client `website`, with `pushable` false."""

    client: Literal["website"]
    status: Literal["active", "idle"]
    # Whole seconds since the epoch: when the user was last active (status
    # active) or last connected (status idle).
    timestamp: int
    pushable: bool


class ModernPresence(TypedDict):
    """Zulip's modern presence of a user: when they were last active and
    last connected (idle), whole seconds since the epoch."""

    active_timestamp: int
    idle_timestamp: int


class PresenceEvent(TypedDict):
    """A user's presence changed; sent to every active user of the realm.
    Producers send both of Zulip's forms; clients with the
    `simplified_presence_events` capability get only `presences` (the
    modern form, by user id), the others everything else (the legacy form:
    `user_id`, `server_timestamp`, `presence`, and `email` unless they
    registered with `slim_presence`)."""

    id: int
    type: Literal["presence"]
    user_id: NotRequired[int]
    email: NotRequired[str]
    # When the server took the update, seconds since the epoch.
    server_timestamp: NotRequired[float]
    presence: NotRequired[dict[str, PresenceInfo]]
    presences: NotRequired[dict[str, ModernPresence]]


UserSetting = Literal[
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
]


class UserSettingsUpdateEvent(TypedDict):
    """One of the user's own settings changed; sent to that user only."""

    id: int
    type: Literal["user_settings"]
    op: Literal["update"]
    property: UserSetting
    value: bool | int | str
    # Only with `default_language`: the language's English name (deprecated
    # by Zulip, still sent).
    language_name: NotRequired[str]


TYPES: tuple[EventType, ...] = (
    EventType(
        "realm_user",
        {"add": RealmUserAddEvent, "update": RealmUserUpdateEvent, "remove": RealmUserRemoveEvent},
        # the people, who is active for presence, and the bots (a bot is a
        # person too) with who administers them, and whose status is shown
        state=("realm_user", "presence", "realm_bot", "user_status"),
        capability=(
            # Zulip's client_gravatar (the register option): a person's
            # Gravatar `avatar_url` is null, as in register's `realm_users`.
            ClientRule("client_gravatar", option=True, with_it="gravatar_null", when_key="person"),
            # Zulip's user_list_incomplete: no "Unknown user" for a user
            # the client may not see (INACCESSIBLE_USER; any other event
            # goes as sent, at no cost: queues/specialize.py `_CHANGES`).
            ClientRule(
                "user_list_incomplete",
                with_it="inaccessible_dropped",
                without_it="inaccessible_unmarked",
            ),
        ),
    ),
    EventType(
        "presence",
        {None: PresenceEvent},
        state=("presence",),
        # Zulip's two forms (the capability), then slim presence: no `email`
        # in the legacy form (the register option, not a capability).
        capability=(
            ClientRule(
                "simplified_presence_events",
                with_it="modern_presence",
                without_it="legacy_presence",
            ),
            ClientRule("slim_presence", option=True, with_it="without_email"),
        ),
    ),
    EventType(
        "user_settings",
        {"update": UserSettingsUpdateEvent},
        # the settings object, the legacy top-level copies, and the drafts
        # (deleted when their synchronization is turned off)
        state=(
            "user_settings",
            "update_display_settings",
            "update_global_notifications",
            "drafts",
        ),
        # Zulip's legacy settings events (eventq never sends them, a backend
        # may) reach only clients without the settings object: the others get
        # `user_settings` events instead.
        capability=ClientRule(
            "user_settings_object",
            with_it="dropped",
            legacy_types=("update_display_settings", "update_global_notifications"),
        ),
    ),
)


# -- how the derived fields are computed (shared by actions, fetch and apply) --

AVATAR_VERSION = 1
GRAVATAR_PREFIX = "https://secure.gravatar.com/avatar/"
ROLE_OWNER = 100
ROLE_ADMINISTRATOR = 200
ROLE_MODERATOR = 300
ROLE_GUEST = 600

# Zulip's PRESENCE_LEGACY_EVENT_OFFSET_FOR_ACTIVITY_SECONDS: a user last active
# at most this long before they last connected is reported as `active`.
LEGACY_ACTIVE_OFFSET_SECS = 70


def gravatar_url(email: str, *, medium: bool = False) -> str:
    """The Gravatar URL Zulip gives a user who uploaded no avatar: the MD5 of
    the lowercased address (Gravatar's key, not a secret), `identicon` as the
    fallback image, 500 px for the medium size."""
    digest = hashlib.md5(email.lower().encode("utf-8"), usedforsecurity=False).hexdigest()
    size = "&s=500" if medium else ""
    return f"{GRAVATAR_PREFIX}{digest}?d=identicon{size}&version={AVATAR_VERSION}"


def role_flags(role: int) -> tuple[bool, bool, bool]:
    """(is_admin, is_owner, is_guest) of a role, as Zulip derives them (an
    owner is also an administrator)."""
    return role <= ROLE_ADMINISTRATOR, role == ROLE_OWNER, role == ROLE_GUEST


def legacy_presence(active: int, connected: int) -> PresenceInfo:
    """Zulip's legacy form of a presence row (`format_legacy_presence_dict`):
    active if the user was active within `LEGACY_ACTIVE_OFFSET_SECS` of last
    connecting, with that time; otherwise idle since the last connection."""
    if active + LEGACY_ACTIVE_OFFSET_SECS >= connected:
        return {"client": "website", "status": "active", "timestamp": active, "pushable": False}
    return {"client": "website", "status": "idle", "timestamp": connected, "pushable": False}


# Zulip shows the presence of users connected within the last two weeks.
PRESENCE_HISTORY = "14 days"


def presence_event(user_id: int, email: str, active: int, connected: int) -> dict[str, Any]:
    """A `presence` event for a user last active at `active` and last
    connected at `connected` (seconds since the epoch), in both of Zulip's
    forms (the queues give each client one)."""
    return {
        "type": "presence",
        "user_id": user_id,
        "email": email,
        # The time of the update (the new `last_connected_time`, which
        # register's appliers take from here).
        "server_timestamp": float(connected),
        "presence": {"website": legacy_presence(active, connected)},
        # The modern form, for clients with simplified_presence_events.
        "presences": {str(user_id): {"active_timestamp": active, "idle_timestamp": connected}},
    }


def iso_datetime(moment: datetime) -> str:
    """`date_joined` as Zulip writes it: ISO 8601 in UTC with its offset."""
    return moment.astimezone(UTC).isoformat()


def person(
    *,
    user_id: int,
    email: str,
    full_name: str,
    role: int,
    is_active: bool,
    date_joined: datetime,
    timezone: str,
    client_gravatar: bool = False,
    bot_type: int | None = None,
    bot_owner_id: int | None = None,
) -> Person:
    """A user as clients see them; `client_gravatar` leaves `avatar_url` null
    (every avatar here is a Gravatar, which such clients compute). A bot is
    a user with a `bot_type` (and then an owner)."""
    is_admin, is_owner, is_guest = role_flags(role)
    shown: Person = {
        "user_id": user_id,
        "email": email,
        "delivery_email": email,
        "full_name": full_name,
        "role": cast(Role, role),  # the users table allows only these
        "is_admin": is_admin,
        "is_owner": is_owner,
        "is_guest": is_guest,
        "is_bot": bot_type is not None,
        "is_active": is_active,
        "date_joined": iso_datetime(date_joined),
        "timezone": timezone,
        "avatar_version": AVATAR_VERSION,
        "avatar_url": None if client_gravatar else gravatar_url(email),
    }
    if bot_type is not None:
        assert bot_owner_id is not None, "a bot always has an owner (migration 0018)"
        shown["bot_type"] = bot_type
        shown["bot_owner_id"] = bot_owner_id
    return shown


def deactivated_user_id(event: Mapping[str, Any]) -> int | None:
    """The user an event says was deactivated, or None: the server ends that
    user's queues on seeing it (their credentials no longer work)."""
    change = access_change(event)
    return change.user_id if change is not None and change.deactivated else None


# Not an event any client receives: a notice that a user's credentials
# changed (a logout ended their browser sessions, their API key was
# replaced), so that every shard forgets what it cached of them
# (`access_change`). Sent to every shard, delivered to no queue, never
# replayed. The dot keeps it apart from every Zulip event type.
CREDENTIALS_CHANGED = "eventq.credentials_changed"


def credentials_changed(user_id: int) -> dict[str, Any]:
    """The notice event telling every shard that `user_id`'s credentials changed."""
    return {"type": CREDENTIALS_CHANGED, "user_id": user_id}


def is_control(event: Mapping[str, Any]) -> bool:
    """Whether an event is for the servers only, never for a queue."""
    return event.get("type") == CREDENTIALS_CHANGED


@dataclasses.dataclass(frozen=True, slots=True)
class AccessChange:
    """What changed of one user's access, for every shard to act on (the
    "Security" of docs/behaviour.md says what each does to live queues): deactivated;
    a new `role`; or only their credentials (logout, a new API key)."""

    user_id: int
    deactivated: bool = False
    role: int | None = None


# The only event types `access_change` reports a change for (and
# `is_control` is one): the delivery path asks it of these alone.
ACCESS_EVENT_TYPES = frozenset({CREDENTIALS_CHANGED, "realm_user"})


def access_change(event: Mapping[str, Any]) -> AccessChange | None:
    """The change of a user's access an event reports, or None."""
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in ACCESS_EVENT_TYPES:
        return None
    if kind == CREDENTIALS_CHANGED:
        user_id = event.get("user_id")
        valid = isinstance(user_id, int) and not isinstance(user_id, bool)
        return AccessChange(cast(int, user_id)) if valid else None
    if kind != "realm_user" or event.get("op") != "update":
        return None
    person = event.get("person")
    if not isinstance(person, Mapping):
        return None
    user_id = person.get("user_id")
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        return None
    if person.get("is_active") is False:
        return AccessChange(user_id, deactivated=True)
    role = person.get("role")
    if isinstance(role, int) and not isinstance(role, bool):
        return AccessChange(user_id, role=role)
    return None
