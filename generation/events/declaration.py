"""What an event type is, declared once (docs/event-types.md): its schema per
op, whether it carries register's state (and then which sections apply it) or
is transient, and how a client's capability changes what it receives.

Each area module of `generation.events` declares its types with `EventType`;
the package derives from them the catalogue (the OpenAPI document and the
schema tests), the capability rules the server hands to `queues`, and the
transient types register's engine skips. `tests/test_event_types.py` checks
every declaration against the schemas, the state sections and the
capabilities `queues` knows.

Plain data only: `generation` imports neither `queues` nor `apply_events`, so
section, capability and form names are strings that the test checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

# What a client receives of an event under a `ClientRule` (the forms
# `queues.specialize.FORMS` knows how to build):
# - "as_sent": the event as the producer sent it;
# - "dropped": nothing;
# - "one_per_message": one event per id of `message_ids`, each with
#   `message_id` instead (Zulip's form for clients without bulk deletions);
# - "without_email": the event without its `email` key (slim presence);
# - "deactivation_as_remove": a `user_group` update that deactivates a group
#   becomes Zulip's `remove` of it (clients without
#   `include_deactivated_groups`); any other event as sent;
# - "gravatar_null": the event's `person` with a null `avatar_url` where it
#   was a Gravatar URL (client_gravatar);
# - "modern_presence", "legacy_presence": of a presence event carrying both
#   of Zulip's forms, only `presences` (simplified_presence_events), or
#   everything but it.
# - "pronouns_as_short_text": a `custom_profile_fields` event whose PRONOUNS
#   fields (type 8) are SHORT_TEXT (type 1), for clients without
#   `pronouns_field_type_supported`.
# - "empty_topic_display": each channel topic of the event that is the empty
#   topic "" carries Zulip's display name, "general chat", instead (clients
#   without `empty_topic_name`; generation/topics.py); an event without one
#   goes as sent and costs its clients nothing more.
# - "archived_kept", "archived_hidden": Zulip's `archived_channels` on the
#   stream and subscription events: what a producer meant only for clients
#   without it (generation.events.streams.WITHOUT_ARCHIVED_CHANNELS) dropped,
#   or given without that mark; for the latter also an archived channel as
#   `stream` delete and never in a `stream` create. Other events go as sent.
# - "inaccessible_dropped", "inaccessible_unmarked": Zulip's
#   `user_list_incomplete` on `realm_user` add: an add of a user the client
#   may not see (generation.events.users.INACCESSIBLE_USER) is dropped, or
#   given without that mark. Other events go as sent.
Form = Literal[
    "as_sent",
    "dropped",
    "one_per_message",
    "without_email",
    "deactivation_as_remove",
    "gravatar_null",
    "modern_presence",
    "legacy_presence",
    "pronouns_as_short_text",
    "empty_topic_display",
    "archived_kept",
    "archived_hidden",
    "inaccessible_dropped",
    "inaccessible_unmarked",
]


@dataclasses.dataclass(frozen=True)
class Transient:
    """An event type that changes none of register's state, and why."""

    reason: str


@dataclasses.dataclass(frozen=True)
class ClientRule:
    """How one client capability (or one boolean register option) changes
    what a client receives of an event type: clients that declared `name` get
    the `with_it` form, the others the `without_it` form.

    `name` is a capability of `queues.client.CAPABILITIES`, or with `option`
    a boolean register option (a field of `queues.client.QueueOptions`). With
    `when_key`, the rule applies only to events carrying that key; the others
    go to every client as sent. With `legacy_types`, the rule governs those
    types (Zulip's older forms of this one, which eventq never sends but a
    backend may) instead of this one.
    """

    name: str
    with_it: Form = "as_sent"
    without_it: Form = "as_sent"
    when_key: str | None = None
    option: bool = False
    legacy_types: tuple[str, ...] = ()


def empty_topic_rule(when_key: str) -> ClientRule:
    """The rule of an event type that names a channel topic (Zulip's
    event_queue.py rewrites those of `delete_message`, `update_message`,
    `user_topic`, channel `typing` and a `read` removal's
    `message_details`; a `message` event's topic is rewritten by the queue
    itself): clients without `empty_topic_name` get the empty topic under
    its display name (generation/topics.py). Only events carrying
    `when_key` are concerned, and of those only the ones naming "" change."""
    return ClientRule("empty_topic_name", without_it="empty_topic_display", when_key=when_key)


@dataclasses.dataclass(frozen=True)
class EventType:
    """One event type, every fact about it in one place. Every field is
    required: a declaration says each fact, even "none".

    - `schemas`: op -> the TypedDict clients receive (op None for a type
      without ops).
    - `state`: the names of register's state sections (`apply_events`) whose
      appliers apply it, or `Transient` with the reason it changes no state.
    - `capability`: None when every client receives it as sent, else the
      rule, or several rules applied in turn (each rewrites what the one
      before it gave; a client that any of them drops gets nothing).
    """

    name: str
    schemas: Mapping[str | None, type]
    state: tuple[str, ...] | Transient
    capability: ClientRule | tuple[ClientRule, ...] | None

    def rules(self) -> tuple[ClientRule, ...]:
        """This type's capability rules, in the order they apply."""
        if self.capability is None:
            return ()
        if isinstance(self.capability, ClientRule):
            return (self.capability,)
        return self.capability

    def governs(self, rule: ClientRule) -> tuple[str, ...]:
        """The event types one of this type's rules applies to."""
        return rule.legacy_types or (self.name,)


def index(types: tuple[EventType, ...]) -> dict[str, EventType]:
    """Declarations by name; a name declared twice is an error."""
    found: dict[str, EventType] = {}
    for event_type in types:
        if event_type.name in found:
            raise ValueError(f"event type {event_type.name!r} is declared twice")
        found[event_type.name] = event_type
    return found


def client_rules(types: Mapping[str, EventType]) -> dict[str, tuple[ClientRule, ...]]:
    """event type -> the capability rules it is delivered by, in order; a
    type governed by the rules of two declarations is an error."""
    rules: dict[str, tuple[ClientRule, ...]] = {}
    declared_by: dict[str, str] = {}
    for event_type in types.values():
        for rule in event_type.rules():
            for governed in event_type.governs(rule):
                if declared_by.setdefault(governed, event_type.name) != event_type.name:
                    raise ValueError(
                        f"event type {governed!r} is governed by two declarations' rules"
                    )
                rules[governed] = (*rules.get(governed, ()), rule)
    return rules
