"""Appliers of the `realm` section."""

from __future__ import annotations

from typing import TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext


class RealmState(TypedDict, total=False):
    """The `realm` section of register's response."""

    realm_name: str
    realm_description: str
    realm_allow_message_editing: bool
    realm_mandatory_topics: bool
    realm_message_content_edit_limit_seconds: int | None
    # Zulip's setting, a system group's id (generation/actions/access.py).
    realm_can_access_all_users_group: int
    # What clients without the `empty_topic_name` capability get for the
    # empty topic "", and what the others show for it.
    realm_empty_topic_display_name: str
    event_queue_longpoll_timeout_seconds: int
    server_generation: int
    realm_message_retention_days: int


# Realm properties a `realm` update event may carry, and the state key of each.
REALM_PROPERTIES = {
    "name": "realm_name",
    "description": "realm_description",
    "allow_message_editing": "realm_allow_message_editing",
    "mandatory_topics": "realm_mandatory_topics",
    "message_content_edit_limit_seconds": "realm_message_content_edit_limit_seconds",
    "can_access_all_users_group": "realm_can_access_all_users_group",
}


def apply_realm(state: State, event: Event, ctx: StateContext) -> None:
    op = event.get("op")
    if op == "deactivated":
        # Nothing of the state changes (Zulip's apply_event passes too): the
        # queue ends right after this event and every request is refused
        # from then on, so the client shows the deactivation instead.
        return
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
            for name, value in data.items():
                key = REALM_PROPERTIES.get(name)
                if key is not None and key in state:
                    state[key] = value


APPLIERS: dict[str, Applier] = {"realm": apply_realm}
