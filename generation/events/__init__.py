"""The event contract: one TypedDict per event type (and op), as clients
receive it (with its queue-assigned `id`).

`CATALOGUE` maps each kind, `(type, op)` (op None for types without one), to
its schema; `generation.schema` turns them into the strict JSON Schemas of the
OpenAPI document, and the tests validate every event an action emits against
them. Each area module declares its own `EVENTS`; adding an event type means
adding its TypedDict there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from generation.events import messages, realm, streams, system, users

EventKind = tuple[str, str | None]

CATALOGUE: dict[EventKind, type] = {
    **system.EVENTS,
    **realm.EVENTS,
    **users.EVENTS,
    **streams.EVENTS,
    **messages.EVENTS,
}


def kind_of(event: Mapping[str, Any]) -> EventKind:
    """The catalogue key of an event: its type, and its op when the type has
    ops in the catalogue."""
    event_type = str(event.get("type"))
    op = event.get("op")
    if (event_type, op) in CATALOGUE:
        return event_type, op
    return event_type, None
