"""Endpoints of scheduled messages, at Zulip's paths and with Zulip's
parameters (see server/handlers/domain.py); the rules and the events are the
actions' (generation/actions/messages/scheduled.py):

- `GET scheduled_messages`: the user's, soonest first (`scheduled_messages`);
- `POST scheduled_messages`: `type` (stream or channel, private or direct),
  `to` (a channel id, or a JSON list of user ids), `topic`, `content`,
  `scheduled_delivery_timestamp`, `read_by_sender`; answers
  `scheduled_message_id`;
- `PATCH scheduled_messages/{id}`: any of those but `read_by_sender`;
- `DELETE scheduled_messages/{id}`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from apply_events.fetch.scheduled import scheduled_messages
from generation.actions import messages as actions
from generation.actions.messages.scheduled import RecipientType
from generation.topics import topic_from_client
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.handlers.messages import (
    DIRECT_TYPES,
    MAX_CONTENT_CHARS,
    MAX_RECIPIENTS,
    STREAM_TYPES,
    Subject,
    Topic,
)
from server.http.auth import AuthUser
from server.http.declared import Nothing, Param
from server.http.params import INT_MAX, decode_json


def _scheduled_id(raw: str) -> int:
    # More digits than any id has is not one (and past 4,300 int() refuses).
    value = int(raw) if len(raw) <= len(str(INT_MAX)) else 0
    if not 0 < value <= INT_MAX:
        raise ApiError("Scheduled message does not exist", status=404)
    return value


def _kind(raw: str) -> RecipientType:
    """Zulip's recipient types, and their newer names."""
    if raw in STREAM_TYPES:
        return "stream"
    if raw in DIRECT_TYPES:
        return "private"
    raise ApiError("Invalid type")


def _to(raw: str, kind: RecipientType | None) -> int | list[int]:
    """A channel's id, or the recipients' ids (Zulip's extract_stream_id and
    extract_direct_message_recipient_ids); whether it suits the type is the
    action's to say (a type-less edit keeps the message's)."""
    try:
        value = decode_json("to", raw)
    except ApiError:
        value = raw
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 < value <= INT_MAX:
            raise ApiError(f"Channel with ID '{value}' does not exist", "STREAM_DOES_NOT_EXIST")
        return value
    if not isinstance(value, list):
        if kind == "stream":
            raise ApiError("Invalid data type for channel ID")
        raise ApiError("Invalid data type for recipients")
    if len(value) > MAX_RECIPIENTS:
        raise ApiError(f"to has more than {MAX_RECIPIENTS} recipients")
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool):
            raise ApiError("Recipient list may only contain user IDs")
        if not 0 < item <= INT_MAX:
            raise ApiError(f"Invalid user ID {item}")
    return sorted(set(value))


def _read_by_sender(name: str, raw: str) -> bool:
    value = decode_json(name, raw)
    if not isinstance(value, bool):
        raise ApiError(f"{name} is not a boolean")
    return value


Type = Annotated[str, Param("stream (or channel), or private (or direct)", max_length=20)]
To = Annotated[
    str, Param("A channel's id, or a JSON list of the recipients' user ids", max_length=None)
]
Content = Annotated[str, Param("The message, in Markdown", max_length=MAX_CONTENT_CHARS)]
When = Annotated[
    int, Param("When to send it, in seconds since the epoch (in the future)", minimum=0)
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleMessage:
    type: Type
    to: To
    topic: Topic = None
    subject: Subject = None
    content: Content
    scheduled_delivery_timestamp: When
    read_by_sender: Annotated[
        bool | None,
        Param(
            "Whether the sender's copy is read (default: unless it is to the sender alone)",
            parse=_read_by_sender,
            schema={"type": "boolean"},
        ),
    ] = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EditScheduledMessage:
    type: Annotated[str | None, Param("A new type (with `to`)", max_length=20)] = None
    to: Annotated[str | None, Param("New recipients, as for scheduling", max_length=None)] = None
    topic: Topic = None
    subject: Subject = None
    content: Annotated[str | None, Param("New content", max_length=MAX_CONTENT_CHARS)] = None
    scheduled_delivery_timestamp: Annotated[
        int | None, Param("A new time (required for a failed one)", minimum=0)
    ] = None


def _topic(topic: str | None, subject: str | None) -> str | None:
    """`topic`, or its legacy name `subject`; "general chat" or "(no
    topic)" is the empty topic, as when sending (Zulip's Addressee)."""
    chosen = topic if topic is not None else subject
    return None if chosen is None else topic_from_client(chosen)


class ScheduledMessagesHandler(ActionHandler):
    """`GET scheduled_messages`, `POST scheduled_messages`."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        async with self.server.db.connection() as conn:
            found = await scheduled_messages(conn, user.user_id)
        return {"scheduled_messages": found}

    @operation(ScheduleMessage)
    async def post(self, user: AuthUser, args: ScheduleMessage) -> Body:
        kind = _kind(args.type)
        to = _to(args.to, kind)
        topic, content = _topic(args.topic, args.subject), args.content
        when, read_by_sender = args.scheduled_delivery_timestamp, args.read_by_sender
        client = self.client_of(None)
        scheduled_id = await self.act(
            lambda ctx: actions.do_schedule_message(
                ctx, user.user_id, kind, to, topic, content, when,
                read_by_sender=read_by_sender, client=client,
            )
        )  # fmt: skip
        return {"scheduled_message_id": scheduled_id}


class ScheduledMessageHandler(ActionHandler):
    """`PATCH scheduled_messages/{id}`, `DELETE scheduled_messages/{id}`."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(EditScheduledMessage)
    async def patch(self, user: AuthUser, args: EditScheduledMessage, raw_id: str) -> Body:
        scheduled_id = _scheduled_id(raw_id)
        kind = None if args.type is None else _kind(args.type)
        to = None if args.to is None else _to(args.to, kind)
        topic, content = _topic(args.topic, args.subject), args.content
        when, client = args.scheduled_delivery_timestamp, self.client_of(None)
        await self.act(
            lambda ctx: actions.do_edit_scheduled_message(
                ctx, user.user_id, scheduled_id, kind=kind, to=to, topic=topic,
                content=content, scheduled_delivery_timestamp=when, client=client,
            )
        )  # fmt: skip
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        scheduled_id = _scheduled_id(raw_id)
        await self.act(
            lambda ctx: actions.do_delete_scheduled_message(ctx, user.user_id, scheduled_id)
        )
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"scheduled_messages", ScheduledMessagesHandler),
    (r"scheduled_messages/([0-9]+)", ScheduledMessageHandler),
]
