"""`apply_events`: bring fetched state up to date with events, purely.

Register fetches state non-atomically after creating the queue, so an event may
already be reflected in the state it is applied to: every applier must give the
right result when its change is already there (replacement, not increments).
Event types no section cares about (including `heartbeat`, `restart` and
producers' own types) leave the state unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from apply_events.state import Event, State, StateContext, Want

Applier = Callable[[State, Event, StateContext], None]

# Realm properties a `realm` update event may carry, and the state key of each.
REALM_PROPERTIES = {"name": "realm_name", "description": "realm_description"}


def _apply_realm(state: State, event: Event, ctx: StateContext) -> None:
    op = event.get("op")
    prop = event.get("property")
    if not isinstance(prop, str):
        return  # malformed: nothing of ours to update
    if op == "update":
        key = REALM_PROPERTIES.get(prop)
        if key is not None and key in state:
            state[key] = event.get("value")
    elif op == "update_dict" and prop == "default":
        data = event.get("data")
        if isinstance(data, dict):
            for prop, value in data.items():
                key = REALM_PROPERTIES.get(prop)
                if key is not None and key in state:
                    state[key] = value


APPLIERS: dict[str, Applier] = {
    "realm": _apply_realm,
}


def apply_events(state: State, events: Iterable[Event], want: Want, ctx: StateContext) -> None:
    """Apply, in order, each event whose type was asked for."""
    for event in events:
        event_type = event.get("type")
        if not isinstance(event_type, str) or not want(event_type):
            continue
        applier = APPLIERS.get(event_type)
        if applier is not None:
            applier(state, event, ctx)
