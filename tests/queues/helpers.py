"""Shared fakes for the pure `queues` tests: an encoder, a fake clock is just
a float passed as `now`, and a waiter that records why it was woken."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from generation.events import CLIENT_RULES
from queues.client import ClientDescriptor, QueueOptions, WakeReason
from queues.event_queue import EventQueue
from queues.payload import Payload
from queues.registry import QueueLimits, QueueRegistry


def encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class FakeWaiter:
    """A parked request: records every wake reason, in order."""

    def __init__(self) -> None:
        self.reasons: list[WakeReason] = []

    def wake(self, reason: WakeReason) -> None:
        self.reasons.append(reason)


def make_registry(**limits: Any) -> QueueRegistry:
    """A registry whose queue ids are q0, q1, ... in allocation order, with
    the capability rules the server hands over (the event types' declarations)."""
    counter = itertools.count()
    return QueueRegistry(
        encode, QueueLimits(**limits), lambda: f"q{next(counter)}", rules=CLIENT_RULES
    )


def options(**kwargs: Any) -> QueueOptions:
    if "event_types" in kwargs and kwargs["event_types"] is not None:
        kwargs["event_types"] = frozenset(kwargs["event_types"])
    return QueueOptions(**kwargs)


def payload(event: dict[str, Any]) -> Payload:
    return Payload.build(event, encode)


def push(queue: EventQueue, event: dict[str, Any]) -> int:
    return queue.push(payload(event))


def flag_event(
    flag: str,
    operation: str,
    messages: list[int],
    timestamp: int | None = None,
    *,
    all_messages: bool = False,
) -> dict[str, Any]:
    """An `update_message_flags` event as Zulip sends it (legacy `operation`
    beside `op`)."""
    event: dict[str, Any] = {
        "type": "update_message_flags",
        "op": operation,
        "operation": operation,
        "flag": flag,
        "messages": messages,
        "all": all_messages,
    }
    if timestamp is not None:
        event["timestamp"] = timestamp
    return event


def read_events(queue: EventQueue) -> list[dict[str, Any]]:
    """The queue's contents as a client sees them (this reads the queue)."""
    return [p.client_event(event_id) for event_id, p in queue.contents()]


def wire_events(queue: EventQueue) -> list[dict[str, Any]]:
    """The queue's contents decoded from the bytes a response would carry."""
    return [json.loads(b'{"id":%d,' % event_id + p.tail) for event_id, p in queue.contents()]


def ids(queue: EventQueue) -> list[int]:
    return [event_id for event_id, _ in queue.contents()]


def client_events(client: ClientDescriptor) -> list[dict[str, Any]]:
    return read_events(client.event_queue)


def round_trip(queue: EventQueue) -> EventQueue:
    """to_dict -> JSON -> from_dict, checking the saved form is stable."""
    saved = json.loads(json.dumps(queue.to_dict()))
    restored = EventQueue.from_dict(saved, encode)
    assert restored.to_dict() == queue.to_dict()
    if saved["virtual_events"]:
        # Unread collapsed parts are charged one by one; saved, they are one
        # merged event, which is never larger than its parts.
        assert 0 < restored.bytes <= queue.bytes
    else:
        assert restored.bytes == queue.bytes
    return restored


def message_event(
    message_id: int = 1,
    *,
    stream: str | None = "Denmark",
    topic: str = "hello",
    sender_email: str = "hamlet@example.com",
    content: str = "**hello**",
    rendered_content: str | None = "<p><strong>hello</strong></p>",
    invite_only: bool | None = False,
    **extra: Any,
) -> dict[str, Any]:
    """A message event in the producer contract of `queues.specialize`: a
    channel message when `stream` is given, else a direct message."""
    message: dict[str, Any] = {
        "id": message_id,
        "sender_email": sender_email,
        "content": content,
    }
    if rendered_content is not None:
        message["rendered_content"] = rendered_content
    if stream is not None:
        message.update(type="stream", display_recipient=stream, subject=topic)
    else:
        message.update(
            type="private",
            display_recipient=[{"id": 1, "email": sender_email}],
            subject="",
        )
    event: dict[str, Any] = {"type": "message", "message": message, **extra}
    if stream is not None and invite_only is not None:
        event["invite_only"] = invite_only
    return event
