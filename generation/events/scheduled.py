"""Events of scheduled messages (see generation/events/__init__.py): a user's
messages to be sent later, in Zulip's shapes. Each goes to the sender only:
nobody else knows of a message before it is sent.

Names of nested TypedDicts start with the area's words (ScheduledMessage...):
the OpenAPI document keys its components by class name.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from generation.events.declaration import EventType


class ScheduledMessageObject(TypedDict):
    """A scheduled message as its sender sees it (Zulip's
    `scheduled_messages` object). `to` is the channel's id (`type` stream,
    with `topic`), or the ids of a direct message's recipients: the other
    participants, or the sender alone for a message to themselves.
    `failed`: the scheduler could not send it (the sender must edit it with
    a new time, or delete it)."""

    scheduled_message_id: int
    type: Literal["stream", "private"]
    to: int | list[int]
    topic: NotRequired[str]
    content: str
    rendered_content: str
    scheduled_delivery_timestamp: int
    failed: bool


class ScheduledMessagesAddEvent(TypedDict):
    """The user scheduled a message (one per event, as Zulip sends them)."""

    id: int
    type: Literal["scheduled_messages"]
    op: Literal["add"]
    scheduled_messages: list[ScheduledMessageObject]


class ScheduledMessagesUpdateEvent(TypedDict):
    """A scheduled message was edited, or the scheduler failed to send it."""

    id: int
    type: Literal["scheduled_messages"]
    op: Literal["update"]
    scheduled_message: ScheduledMessageObject


class ScheduledMessagesRemoveEvent(TypedDict):
    """A scheduled message was deleted, or sent."""

    id: int
    type: Literal["scheduled_messages"]
    op: Literal["remove"]
    scheduled_message_id: int


TYPES: tuple[EventType, ...] = (
    EventType(
        "scheduled_messages",
        {
            "add": ScheduledMessagesAddEvent,
            "update": ScheduledMessagesUpdateEvent,
            "remove": ScheduledMessagesRemoveEvent,
        },
        state=("scheduled_messages",),
        capability=None,
    ),
)
