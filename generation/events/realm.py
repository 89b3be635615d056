"""Events of the realm (organization) itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from generation.events.declaration import EventType


class RealmUpdateEvent(TypedDict):
    """One realm property changed (Zulip's `realm` op `update`)."""

    id: int
    type: Literal["realm"]
    op: Literal["update"]
    property: Literal["name", "description", "allow_message_editing", "mandatory_topics"]
    value: str | bool


class RealmUpdateDictData(TypedDict, total=False):
    message_content_edit_limit_seconds: int | None
    # The id of the realm's role:everyone or role:members system group
    # (generation/actions/access.py).
    can_access_all_users_group: int


class RealmUpdateDictEvent(TypedDict):
    """Several realm settings changed together (op `update_dict`)."""

    id: int
    type: Literal["realm"]
    op: Literal["update_dict"]
    property: Literal["default"]
    data: RealmUpdateDictData


class RealmDeactivatedEvent(TypedDict):
    """The realm was deactivated (op `deactivated`); sent to every active
    user of the realm, whose queues then end on every shard and whose
    requests are refused from then on (REALM_DEACTIVATED)."""

    id: int
    type: Literal["realm"]
    op: Literal["deactivated"]
    realm_id: int


TYPES: tuple[EventType, ...] = (
    EventType(
        "realm",
        {
            "update": RealmUpdateEvent,
            "update_dict": RealmUpdateDictEvent,
            "deactivated": RealmDeactivatedEvent,
        },
        state=("realm",),
        capability=None,
    ),
)


# The type of the events `deactivated_realm_id` looks at.
REALM_EVENT_TYPE = "realm"


def deactivated_realm_id(event: Mapping[str, Any]) -> int | None:
    """The realm an event says was deactivated, or None: every shard forgets
    what it cached of the realm's users and ends their queues on seeing it."""
    if event.get("type") != REALM_EVENT_TYPE or event.get("op") != "deactivated":
        return None
    realm_id = event.get("realm_id")
    return realm_id if isinstance(realm_id, int) and not isinstance(realm_id, bool) else None
