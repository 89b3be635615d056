"""The empty topic on live events: clients without the `empty_topic_name`
capability get "general chat" wherever an event names the empty topic "" (as
Zulip's event_queue.py rewrites them); the others get "". Each form is built
once per notice, and a notice naming no empty topic is built once for all."""

from __future__ import annotations

from typing import Any

from generation.events import CLIENT_RULES
from generation.topics import EMPTY_TOPIC_CAPABILITY as GENERATION_CAPABILITY
from generation.topics import EMPTY_TOPIC_DISPLAY_NAME as GENERATION_NAME
from queues.client import ClientDescriptor
from queues.event_queue import EventQueue
from queues.payload import Payload
from queues.specialize import EMPTY_TOPIC_CAPABILITY, EMPTY_TOPIC_DISPLAY_NAME, NoticePayloads
from tests.queues.helpers import client_events, encode, make_registry, message_event, options

MODERN = frozenset({"empty_topic_name", "bulk_message_deletion", "stream_typing_notifications"})
LEGACY = MODERN - {"empty_topic_name"}


def _client(queue_id: str, capabilities: frozenset[str], **kwargs: Any) -> ClientDescriptor:
    return ClientDescriptor(
        queue_id, 1, 1, options(capabilities=capabilities, **kwargs), 0.0, EventQueue(encode)
    )


def _one(payload: Payload | tuple[Payload, ...] | None) -> dict[str, Any]:
    assert isinstance(payload, Payload), payload
    event = payload.client_event(0)
    del event["id"]
    return event


def _both(
    event: dict[str, Any], user_data: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any], NoticePayloads]:
    """What a client with and one without `empty_topic_name` receive."""
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES.get(event["type"], ()))
    modern = _one(payloads.for_client(_client("q0", MODERN), user_data))
    legacy = _one(payloads.for_client(_client("q1", LEGACY), user_data))
    return modern, legacy, payloads


def test_the_display_name_and_capability_are_generations():
    assert EMPTY_TOPIC_DISPLAY_NAME == GENERATION_NAME == "general chat"
    assert EMPTY_TOPIC_CAPABILITY == GENERATION_CAPABILITY


def test_a_message_to_the_empty_topic_is_named_for_clients_without_the_capability():
    event = message_event(topic="")
    modern, legacy, _ = _both(event)
    assert modern["message"]["subject"] == ""
    assert legacy["message"]["subject"] == "general chat"
    assert {k: v for k, v in legacy["message"].items() if k != "subject"} == {
        k: v for k, v in modern["message"].items() if k != "subject"
    }
    # the producer's event is untouched
    assert event["message"]["subject"] == ""


def test_a_message_with_a_topic_is_one_payload_for_both_kinds_of_client():
    payloads = NoticePayloads(message_event(topic="hello"), encode)
    modern = payloads.for_client(_client("q0", MODERN), None)
    legacy = payloads.for_client(_client("q1", LEGACY), None)
    assert modern is legacy
    assert _one(legacy)["message"]["subject"] == "hello"


def test_a_direct_message_keeps_its_empty_subject():
    modern, legacy, _ = _both(message_event(stream=None, topic=""))
    assert modern["message"]["subject"] == legacy["message"]["subject"] == ""


def test_each_message_form_is_built_once():
    payloads = NoticePayloads(message_event(topic=""), encode)
    first = payloads.for_client(_client("q0", LEGACY), None)
    assert payloads.for_client(_client("q1", LEGACY), None) is first
    assert payloads.for_client(_client("q2", frozenset()), None) is first
    assert payloads.for_client(_client("q3", MODERN), None) is not first


def test_a_deletion_in_the_empty_topic_is_named_then_split_for_legacy_clients():
    event = {
        "type": "delete_message",
        "message_type": "stream",
        "stream_id": 7,
        "topic": "",
        "message_ids": [3, 4],
    }
    modern, legacy, _ = _both(event)
    assert modern == event
    assert legacy == {**event, "topic": "general chat"}
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES["delete_message"])
    split = payloads.for_client(_client("q2", frozenset()), None)
    assert isinstance(split, tuple)
    assert [p.client_event(i) for i, p in enumerate(split)] == [
        {**{k: v for k, v in event.items() if k != "message_ids"}, "topic": "general chat",
         "message_id": message_id, "id": i}
        for i, message_id in enumerate([3, 4])
    ]  # fmt: skip


def test_a_topic_edit_names_both_topics_and_keeps_each_users_flags():
    event = {
        "type": "update_message",
        "user_id": 2,
        "rendering_only": False,
        "message_id": 5,
        "message_ids": [5],
        "edit_timestamp": 1,
        "stream_name": "Denmark",
        "stream_id": 7,
        "propagate_mode": "change_one",
        "orig_subject": "",
        "subject": "moved",
        "topic_links": [],
    }
    modern, legacy, _ = _both(event, {"id": 1, "flags": ["read"]})
    assert modern == {**event, "flags": ["read"]}
    assert legacy == {**event, "flags": ["read"], "orig_subject": "general chat"}
    back = {**event, "orig_subject": "moved", "subject": ""}
    modern, legacy, _ = _both(back, {"id": 1, "flags": []})
    assert modern["subject"] == ""
    assert legacy["subject"] == "general chat"
    assert legacy["orig_subject"] == "moved"


def test_a_content_edit_is_one_payload_for_both_kinds_of_client():
    event = {
        "type": "update_message",
        "user_id": 2,
        "rendering_only": False,
        "message_id": 5,
        "message_ids": [5],
        "edit_timestamp": 1,
        "content": "new",
        "rendered_content": "<p>new</p>",
    }
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES["update_message"])
    data = {"id": 1, "flags": ["read"]}
    assert payloads.for_client(_client("q0", MODERN), data) is payloads.for_client(
        _client("q1", LEGACY), data
    )


def test_a_user_topic_policy_for_the_empty_topic_is_named():
    event = {
        "type": "user_topic",
        "stream_id": 7,
        "topic_name": "",
        "last_updated": 1,
        "visibility_policy": 1,
    }
    modern, legacy, _ = _both(event)
    assert modern == event
    assert legacy == {**event, "topic_name": "general chat"}


def test_a_user_topic_policy_for_another_topic_is_shared():
    event = {
        "type": "user_topic",
        "stream_id": 7,
        "topic_name": "lunch",
        "last_updated": 1,
        "visibility_policy": 1,
    }
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES["user_topic"])
    modern = payloads.for_client(_client("q0", MODERN), None)
    assert payloads.for_client(_client("q1", LEGACY), None) is modern


def test_channel_typing_in_the_empty_topic_is_named():
    event = {
        "type": "typing",
        "op": "start",
        "message_type": "stream",
        "sender": {"user_id": 2, "email": "b@example.com"},
        "stream_id": 7,
        "topic": "",
    }
    modern, legacy, payloads = _both(event)
    assert modern == event
    assert legacy == {**event, "topic": "general chat"}
    # stream_typing_notifications still drops it for clients without that
    assert payloads.for_client(_client("q2", frozenset({"empty_topic_name"})), None) is None


def test_marking_unread_names_the_empty_topic_of_channel_messages_only():
    event = {
        "type": "update_message_flags",
        "op": "remove",
        "operation": "remove",
        "flag": "read",
        "messages": [3, 4, 5],
        "all": False,
        "message_details": {
            "3": {"type": "stream", "stream_id": 7, "topic": "", "unmuted_stream_msg": True},
            "4": {"type": "stream", "stream_id": 7, "topic": "lunch", "unmuted_stream_msg": True},
            "5": {"type": "private", "user_ids": [2]},
        },
    }
    modern, legacy, _ = _both(event)
    assert modern == event
    details = event["message_details"]
    assert legacy == {
        **event,
        "message_details": {**details, "3": {**details["3"], "topic": "general chat"}},
    }
    assert details["3"]["topic"] == ""


def test_registry_delivers_each_client_its_form():
    registry = make_registry()
    modern = registry.allocate(1, 1, options(capabilities=MODERN), 0.0)
    legacy = registry.allocate(1, 1, options(capabilities=LEGACY), 0.0)
    registry.deliver(message_event(topic=""), [{"id": 1, "flags": []}], 1, 0.0)
    registry.deliver(
        {"type": "user_topic", "stream_id": 7, "topic_name": "", "last_updated": 1,
         "visibility_policy": 3},
        [1], 1, 0.0,
    )  # fmt: skip
    assert [_topic_of(e) for e in client_events(modern)] == ["", ""]
    assert [_topic_of(e) for e in client_events(legacy)] == ["general chat", "general chat"]


def _topic_of(event: dict[str, Any]) -> str:
    if event["type"] == "message":
        return str(event["message"]["subject"])
    return str(event["topic_name"])
