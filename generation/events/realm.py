"""Events of the realm (organization) itself."""

from __future__ import annotations

from typing import Literal, TypedDict

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


class RealmUpdateDictEvent(TypedDict):
    """Several realm settings changed together (op `update_dict`)."""

    id: int
    type: Literal["realm"]
    op: Literal["update_dict"]
    property: Literal["default"]
    data: RealmUpdateDictData


TYPES: tuple[EventType, ...] = (
    EventType(
        "realm",
        {"update": RealmUpdateEvent, "update_dict": RealmUpdateDictEvent},
        state=("realm",),
        capability=None,
    ),
)
