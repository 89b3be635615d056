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
# - "without_email": the event without its `email` key (slim presence).
Form = Literal["as_sent", "dropped", "one_per_message", "without_email"]


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


@dataclasses.dataclass(frozen=True)
class EventType:
    """One event type, every fact about it in one place. Every field is
    required: a declaration says each fact, even "none".

    - `schemas`: op -> the TypedDict clients receive (op None for a type
      without ops).
    - `state`: the names of register's state sections (`apply_events`) whose
      appliers apply it, or `Transient` with the reason it changes no state.
    - `capability`: None when every client receives it as sent, else the rule.
    """

    name: str
    schemas: Mapping[str | None, type]
    state: tuple[str, ...] | Transient
    capability: ClientRule | None

    def governs(self) -> tuple[str, ...]:
        """The event types this type's capability rule applies to."""
        if self.capability is None:
            return ()
        return self.capability.legacy_types or (self.name,)


def index(types: tuple[EventType, ...]) -> dict[str, EventType]:
    """Declarations by name; a name declared twice is an error."""
    found: dict[str, EventType] = {}
    for event_type in types:
        if event_type.name in found:
            raise ValueError(f"event type {event_type.name!r} is declared twice")
        found[event_type.name] = event_type
    return found


def client_rules(types: Mapping[str, EventType]) -> dict[str, ClientRule]:
    """event type -> the capability rule it is delivered by; a type governed
    by two rules is an error."""
    rules: dict[str, ClientRule] = {}
    for event_type in types.values():
        for governed in event_type.governs():
            if governed in rules:
                raise ValueError(f"event type {governed!r} is governed by two capability rules")
            assert event_type.capability is not None
            rules[governed] = event_type.capability
    return rules
