"""Archived channels on live events: clients with the `archived_channels`
capability keep an archived channel (`stream` update `is_archived`), the
others lose it (`stream` delete) and get back what unarchiving tells them
only (events marked `WITHOUT_ARCHIVED_CHANNELS`). Each form is built once
per notice, and an ordinary stream or subscription event once for all."""

from __future__ import annotations

from typing import Any

from generation.events import CLIENT_RULES
from generation.events.streams import WITHOUT_ARCHIVED_CHANNELS as GENERATION_MARK
from queues.client import ClientDescriptor
from queues.event_queue import EventQueue
from queues.payload import Payload
from queues.specialize import WITHOUT_ARCHIVED_CHANNELS, NoticePayloads
from tests.queues.helpers import encode, options

MODERN = frozenset({"archived_channels", "bulk_message_deletion"})
LEGACY = MODERN - {"archived_channels"}


def _client(queue_id: str, capabilities: frozenset[str]) -> ClientDescriptor:
    return ClientDescriptor(
        queue_id, 1, 1, options(capabilities=capabilities), 0.0, EventQueue(encode)
    )


def _event(payload: Payload | tuple[Payload, ...] | None) -> dict[str, Any] | None:
    if payload is None:
        return None
    assert isinstance(payload, Payload), payload
    event = payload.client_event(0)
    del event["id"]
    return event


def _both(event: dict[str, Any]) -> tuple[Any, Any, NoticePayloads]:
    """What a client with and one without `archived_channels` receive."""
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES[event["type"]])
    modern = payloads.for_client(_client("q0", MODERN), None)
    legacy = payloads.for_client(_client("q1", LEGACY), None)
    return modern, legacy, payloads


def _stream(stream_id: int, archived: bool) -> dict[str, Any]:
    return {"stream_id": stream_id, "name": f"s{stream_id}", "is_archived": archived}


def test_the_mark_is_generations():
    assert WITHOUT_ARCHIVED_CHANNELS == GENERATION_MARK == "only_without_archived_channels"


def test_archiving_is_an_update_with_the_capability_a_delete_without():
    update = {"type": "stream", "op": "update", "stream_id": 7, "name": "s7",
              "property": "is_archived", "value": True}  # fmt: skip
    modern, legacy, _ = _both(update)
    assert _event(modern) == update
    assert _event(legacy) == {
        "type": "stream",
        "op": "delete",
        "streams": [{"stream_id": 7}],
        "stream_ids": [7],
    }
    # unarchiving's update reaches only the capable clients
    modern, legacy, _ = _both({**update, "value": False})
    assert _event(modern) == {**update, "value": False}
    assert legacy is None


def test_what_was_meant_for_the_others_is_dropped_for_capable_clients_and_unmarked_for_them():
    create = {"type": "stream", "op": "create", "streams": [_stream(7, False)],
              WITHOUT_ARCHIVED_CHANNELS: True}  # fmt: skip
    modern, legacy, _ = _both(create)
    assert modern is None
    assert _event(legacy) == {"type": "stream", "op": "create", "streams": [_stream(7, False)]}
    add = {"type": "subscription", "op": "add", "subscriptions": [_stream(7, False)],
           WITHOUT_ARCHIVED_CHANNELS: True}  # fmt: skip
    modern, legacy, _ = _both(add)
    assert modern is None
    assert WITHOUT_ARCHIVED_CHANNELS not in _event(legacy)  # type: ignore[operator]


def test_a_create_shows_archived_channels_to_capable_clients_only():
    create = {"type": "stream", "op": "create", "streams": [_stream(7, True), _stream(8, False)]}
    modern, legacy, _ = _both(create)
    assert _event(modern) == create
    assert _event(legacy) == {**create, "streams": [_stream(8, False)]}
    only_archived = {**create, "streams": [_stream(7, True)]}
    modern, legacy, _ = _both(only_archived)
    assert _event(modern) == only_archived
    assert legacy is None


def test_an_ordinary_event_is_one_payload_for_every_client():
    for event in (
        {"type": "stream", "op": "update", "stream_id": 7, "name": "s7",
         "property": "name", "value": "t"},
        {"type": "stream", "op": "create", "streams": [_stream(8, False)]},
        {"type": "subscription", "op": "peer_add", "stream_ids": [7], "user_ids": [1]},
    ):  # fmt: skip
        modern, legacy, _ = _both(event)
        assert modern is legacy
        assert _event(modern) == event
