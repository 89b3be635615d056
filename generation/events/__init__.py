"""The event contract: every event type, declared once (docs/event-types.md).

Each area module declares its types as `EventType`s (`TYPES`): the TypedDict
of each op as clients receive it (with its queue-assigned `id`), the register
state sections that apply it or why it is transient, and the capability rule
it is delivered by, if any. Everything else here derives from them:

- `CATALOGUE` maps each kind, `(type, op)` (op None for types without one),
  to its schema; `generation.schema` turns them into the strict JSON Schemas
  of the OpenAPI document, and the tests validate every event an action emits
  against them.
- `CLIENT_RULES` (event type -> its `ClientRule`s, in the order they
  apply): the server hands it to the queue registry, which filters and
  rewrites events by them.
- `TRANSIENT`: the types register's engine never applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from generation.events import (
    bots,
    groups,
    messages,
    personal,
    profile_fields,
    realm,
    realm_config,
    scheduled,
    streams,
    system,
    users,
)
from generation.events.declaration import ClientRule, EventType, Transient, client_rules, index

EventKind = tuple[str, str | None]

EVENT_TYPES: dict[str, EventType] = index(
    (
        *system.TYPES,
        *realm.TYPES,
        *realm_config.TYPES,
        *users.TYPES,
        *bots.TYPES,
        *groups.TYPES,
        *streams.TYPES,
        *messages.TYPES,
        *scheduled.TYPES,
        *personal.TYPES,
        *profile_fields.TYPES,
    )
)

CATALOGUE: dict[EventKind, type] = {
    (event_type.name, op): schema
    for event_type in EVENT_TYPES.values()
    for op, schema in event_type.schemas.items()
}

CLIENT_RULES: dict[str, tuple[ClientRule, ...]] = client_rules(EVENT_TYPES)

TRANSIENT: frozenset[str] = frozenset(
    name for name, event_type in EVENT_TYPES.items() if isinstance(event_type.state, Transient)
)


def kind_of(event: Mapping[str, Any]) -> EventKind:
    """The catalogue key of an event: its type, and its op when the type has
    ops in the catalogue."""
    event_type = str(event.get("type"))
    op = event.get("op")
    if (event_type, op) in CATALOGUE:
        return event_type, op
    return event_type, None
