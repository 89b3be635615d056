"""What the delivery log's observer hooks are called with, built the way the
server builds it: queue descriptors, payloads stamped with their notice's
Origin, and queued items. Shared by the writer's tests and the contract test."""

from __future__ import annotations

from typing import Any

from queues.client import ClientDescriptor, QueueOptions
from queues.event_queue import EventQueue, Item
from queues.payload import Payload
from server.http.responses import encode
from server.observability.observe import Origin


def queue_client(queue_id: str, user_id: int, realm_id: int, **options: Any) -> ClientDescriptor:
    """A queue of `user_id` with `options` (QueueOptions' fields), created at 0."""
    return ClientDescriptor(
        queue_id, user_id, realm_id, QueueOptions(**options), 0.0, EventQueue(encode)
    )


def payload(event_type: str, origin: Origin | None = None) -> Payload:
    """An event of `event_type`, from a notice with `origin` (None: restored)."""
    built = Payload.build({"type": event_type}, encode)
    built.origin = origin
    return built


def push(client: ClientDescriptor, *payloads: Payload) -> list[Item]:
    """Queue `payloads` for `client`; returns everything its queue holds."""
    for item in payloads:
        client.event_queue.push(item)
    return client.event_queue.contents()
