"""Events of bots (`realm_bot`): a bot created, changed, deactivated or
reactivated, or gone from the list of a user who no longer administers it.
Shapes are Zulip's (zerver/lib/event_types.py) at the feature level eventq
advertises: since feature level 222 a deactivation or reactivation is an
`update` of `is_active`, so Zulip's old `remove` op is never sent.

Who receives them: the bot's owner and the realm's active human
administrators (Zulip's `bot_owner_user_ids`; eventq models no default
streams, so no bot is a "private" bot seen by its owner alone). Every
active user also learns of a bot as a person, through `realm_user`.

A deliberate difference: Zulip sends each bot's `api_key` in `add` (and in
`update` when the key is regenerated) and keeps it in register's
`realm_bots`. eventq stores only a keyed hash of every API key, so a key is
shown once, in the answer of the request that made it, and never in an
event or in register's state (docs/behaviour.md, "Bots").
"""

from __future__ import annotations

from typing import Literal, TypedDict

from generation.events.declaration import EventType
from generation.events.users import gravatar_url

# Zulip's bot types (UserProfile.DEFAULT_BOT, ...).
BOT_GENERIC = 1
BOT_INCOMING_WEBHOOK = 2
BOT_OUTGOING_WEBHOOK = 3
BOT_EMBEDDED = 4


class BotService(TypedDict):
    """Zulip's service of an outgoing webhook or embedded bot; eventq creates
    neither kind, so a bot's `services` is always empty."""

    service_name: str


class Bot(TypedDict):
    """A bot as `realm_bot` add and register's `realm_bots` show it (Zulip's
    `Bot` without `api_key`, see the module's docstring)."""

    user_id: int
    email: str
    full_name: str
    bot_type: int
    is_active: bool
    owner_id: int
    # Always the Gravatar URL (Zulip's bot objects ignore client_gravatar).
    avatar_url: str
    # eventq models no default streams for bots: always null, null, false.
    default_sending_stream: None
    default_events_register_stream: None
    default_all_public_streams: bool
    services: list[BotService]


class RealmBotAddEvent(TypedDict):
    """A bot its receivers may administer: created, or now theirs."""

    id: int
    type: Literal["realm_bot"]
    op: Literal["add"]
    bot: Bot


class BotFullName(TypedDict):
    user_id: int
    full_name: str


class BotOwner(TypedDict):
    user_id: int
    owner_id: int


class BotActive(TypedDict):
    user_id: int
    is_active: bool


class RealmBotUpdateEvent(TypedDict):
    """A bot's name, owner or activity changed."""

    id: int
    type: Literal["realm_bot"]
    op: Literal["update"]
    bot: BotFullName | BotOwner | BotActive


class BotUserId(TypedDict):
    user_id: int


class RealmBotDeleteEvent(TypedDict):
    """The bot left the receiver's list: its owner changed and they are no
    longer the owner (an administrator gets `update` instead)."""

    id: int
    type: Literal["realm_bot"]
    op: Literal["delete"]
    bot: BotUserId


TYPES: tuple[EventType, ...] = (
    EventType(
        "realm_bot",
        {"add": RealmBotAddEvent, "update": RealmBotUpdateEvent, "delete": RealmBotDeleteEvent},
        state=("realm_bot",),
        capability=None,
    ),
)


def bot_entry(
    *, user_id: int, email: str, full_name: str, bot_type: int, is_active: bool, owner_id: int
) -> Bot:
    """A bot as clients see it (shared by the actions, register's fetch and
    its appliers, so that the three agree)."""
    return {
        "user_id": user_id,
        "email": email,
        "full_name": full_name,
        "bot_type": bot_type,
        "is_active": is_active,
        "owner_id": owner_id,
        "avatar_url": gravatar_url(email),
        "default_sending_stream": None,
        "default_events_register_stream": None,
        "default_all_public_streams": False,
        "services": [],
    }
