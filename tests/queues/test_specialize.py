"""specialize: per-client forms of one notice's event, each built once
(as Zulip's `process_message_event` builds them), and the all_public_streams
eligibility rule."""

from __future__ import annotations

import pytest

from generation.events import CLIENT_RULES
from generation.events.users import GRAVATAR_PREFIX as GENERATION_GRAVATAR_PREFIX
from generation.events.users import gravatar_url
from queues.client import ClientDescriptor, QueueOptions
from queues.event_queue import EventQueue
from queues.specialize import GRAVATAR_PREFIX, NoticePayloads, is_public_channel_message
from tests.queues.helpers import client_events, encode, make_registry, message_event, options


def _client(queue_id="q0", user_id=1, **kwargs):
    return ClientDescriptor(queue_id, user_id, 1, options(**kwargs), 0.0, EventQueue(encode))


def test_same_variant_gets_the_same_payload_object():
    payloads = NoticePayloads(message_event(), encode)
    flags = {"id": 1, "flags": ["read"]}

    first = payloads.for_client(_client("q0", 1), flags)
    second = payloads.for_client(_client("q1", 2), {"id": 2, "flags": ["read"]})

    assert first is not None
    assert first is second


def test_different_flags_get_different_payloads():
    payloads = NoticePayloads(message_event(), encode)

    read = payloads.for_client(_client("q0", 1), {"id": 1, "flags": ["read"]})
    unread = payloads.for_client(_client("q1", 2), {"id": 2, "flags": []})

    assert read is not None
    assert unread is not None
    assert read is not unread
    assert read.client_event(0)["flags"] == ["read"]
    assert unread.client_event(0)["flags"] == []


def test_message_without_user_data_has_empty_flags():
    payload = NoticePayloads(message_event(), encode).for_client(_client(), None)

    assert payload is not None
    assert payload.client_event(3)["flags"] == []


def test_apply_markdown_chooses_rendered_or_raw_content():
    payloads = NoticePayloads(message_event(), encode)

    html = payloads.for_client(_client("q0", apply_markdown=True), None)
    raw = payloads.for_client(_client("q1", apply_markdown=False), None)

    assert html is not None
    assert raw is not None
    html_message = html.client_event(0)["message"]
    raw_message = raw.client_event(0)["message"]
    assert html_message["content"] == "<p><strong>hello</strong></p>"
    assert html_message["content_type"] == "text/html"
    assert raw_message["content"] == "**hello**"
    assert raw_message["content_type"] == "text/x-markdown"
    assert "rendered_content" not in html_message
    assert "rendered_content" not in raw_message


def test_specializing_leaves_the_producers_event_untouched():
    event = message_event(local_id="l1", sender_queue_id="q0")
    original = {**event, "message": dict(event["message"])}
    payloads = NoticePayloads(event, encode)

    payloads.for_client(_client("q0", apply_markdown=True), {"id": 1, "flags": ["read"]})
    payloads.for_client(_client("q1", apply_markdown=False), None)

    assert event == original


def test_client_message_event_carries_only_client_keys():
    event = message_event(local_id="l1", sender_queue_id="q9", invite_only=False)
    payload = NoticePayloads(event, encode).for_client(_client("q0"), {"id": 1, "flags": []})

    assert payload is not None
    assert set(payload.client_event(0)) == {"id", "type", "message", "flags"}


def test_local_message_id_only_on_the_senders_queue():
    event = message_event(local_id="l1", sender_queue_id="q0")
    payloads = NoticePayloads(event, encode)

    own = payloads.for_client(_client("q0", 1), {"id": 1, "flags": ["read"]})
    other = payloads.for_client(_client("q1", 1), {"id": 1, "flags": ["read"]})

    assert own is not None
    assert other is not None
    assert own.client_event(0)["local_message_id"] == "l1"
    assert "local_message_id" not in other.client_event(0)


def test_no_local_message_id_without_local_id():
    event = message_event(sender_queue_id="q0")
    payload = NoticePayloads(event, encode).for_client(_client("q0"), None)

    assert payload is not None
    assert "local_message_id" not in payload.client_event(0)


def test_narrow_filtered_client_gets_no_payload():
    from queues.narrow import parse_narrow

    client = ClientDescriptor(
        "q0", 1, 1, QueueOptions(narrow=parse_narrow([["is", "dm"]])), 0.0, EventQueue(encode)
    )

    assert NoticePayloads(message_event(), encode).for_client(client, None) is None


def test_non_message_event_is_shared_when_users_carry_no_data():
    payloads = NoticePayloads({"type": "realm", "op": "update"}, encode)

    first = payloads.for_client(_client("q0", 1), None)
    second = payloads.for_client(_client("q1", 2), {"id": 2})

    assert first is not None
    assert first is second
    assert first.client_event(4) == {"id": 4, "type": "realm", "op": "update"}


def test_non_message_event_merges_each_users_own_data():
    payloads = NoticePayloads({"type": "update_message", "message_id": 5}, encode)

    alice = payloads.for_client(_client("q0", 1), {"id": 1, "flags": ["read"]})
    bob = payloads.for_client(_client("q1", 2), {"id": 2, "flags": []})
    carol = payloads.for_client(_client("q2", 3), {"id": 3, "flags": ["read"]})

    assert alice is not None
    assert bob is not None
    assert alice.client_event(0) == {
        "id": 0,
        "type": "update_message",
        "message_id": 5,
        "flags": ["read"],
    }
    assert bob.client_event(0)["flags"] == []
    assert carol is alice


@pytest.mark.parametrize(
    ("event", "public"),
    [
        (message_event(invite_only=False), True),
        (message_event(invite_only=True), False),
        (message_event(invite_only=None), False),
        ({**message_event(), "invite_only": 0}, False),
        (message_event(stream=None), False),
        ({"type": "update_message", "invite_only": False}, False),
        ({"type": "message", "message": "x", "invite_only": False}, False),
    ],
)
def test_only_explicitly_public_channel_messages_are_public(event, public):
    assert is_public_channel_message(event) is public


def test_presence_is_simplified_slim_or_legacy_by_client():
    legacy_form = {"type": "presence", "user_id": 5, "email": "a@b.c", "server_timestamp": 1.0}
    modern_form = {"5": {"active_timestamp": 1, "idle_timestamp": 1}}
    event = {**legacy_form, "presences": modern_form}
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES["presence"])
    slim = payloads.for_client(_client(slim_presence=True), None)
    legacy = payloads.for_client(_client("q1", slim_presence=False), None)
    simplified = frozenset({"simplified_presence_events"})
    modern = payloads.for_client(_client("q3", capabilities=simplified), None)
    assert slim.client_event(0) == {
        "type": "presence",
        "user_id": 5,
        "server_timestamp": 1.0,
        "id": 0,
    }
    assert legacy.client_event(0) == {**legacy_form, "id": 0}
    assert modern.client_event(0) == {"type": "presence", "presences": modern_form, "id": 0}
    # each form built once: slim and simplified clients share theirs
    assert payloads.for_client(_client("q2", slim_presence=True), None) is slim
    modern_slim = _client("q4", capabilities=simplified, slim_presence=True)
    assert payloads.for_client(modern_slim, None).client_event(0) == modern.client_event(0)


def test_deletions_are_one_event_per_message_without_bulk_message_deletion():
    event = {"type": "delete_message", "message_type": "private", "message_ids": [3, 4]}
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES["delete_message"])
    bulk = payloads.for_client(_client(capabilities=frozenset({"bulk_message_deletion"})), None)
    legacy = payloads.for_client(_client("q1"), None)
    assert bulk.client_event(0) == {**event, "id": 0}
    assert [p.client_event(i) for i, p in enumerate(legacy)] == [
        {"type": "delete_message", "message_type": "private", "message_id": 3, "id": 0},
        {"type": "delete_message", "message_type": "private", "message_id": 4, "id": 1},
    ]


def test_a_legacy_client_queue_gets_every_deletion_with_its_own_id():
    registry = make_registry()
    client = registry.allocate(1, 1, options(), 0.0)
    event = {"type": "delete_message", "message_type": "private", "message_ids": [3, 4]}
    registry.deliver(event, [1], 1, 0.0)
    assert [e["message_id"] for e in client_events(client)] == [3, 4]
    assert [e["id"] for e in client_events(client)] == [0, 1]


def test_the_gravatar_prefix_is_generations():
    assert GRAVATAR_PREFIX == GENERATION_GRAVATAR_PREFIX


def test_client_gravatar_clients_get_a_null_gravatar_in_messages():
    gravatar = gravatar_url("hamlet@example.com")
    event = message_event()
    event["message"]["avatar_url"] = gravatar
    payloads = NoticePayloads(event, encode)
    nulled = payloads.for_client(_client("q0", client_gravatar=True), None)
    kept = payloads.for_client(_client("q1", client_gravatar=False), None)
    assert nulled.client_event(0)["message"]["avatar_url"] is None
    assert kept.client_event(0)["message"]["avatar_url"] == gravatar
    # one variant per distinct form, not per client
    assert payloads.for_client(_client("q2", client_gravatar=True), None) is nulled


def test_client_gravatar_keeps_an_avatar_that_is_no_gravatar():
    event = message_event()
    event["message"]["avatar_url"] = "https://example.com/avatars/hamlet.png"
    payloads = NoticePayloads(event, encode)
    payload = payloads.for_client(_client(client_gravatar=True), None)
    assert payload.client_event(0)["message"]["avatar_url"] == event["message"]["avatar_url"]


def test_client_gravatar_clients_get_a_null_gravatar_for_new_people():
    gravatar = gravatar_url("iago@example.com")
    event = {
        "type": "realm_user",
        "op": "add",
        "person": {"user_id": 7, "email": "iago@example.com", "avatar_url": gravatar},
    }
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES["realm_user"])
    nulled = payloads.for_client(_client("q0", client_gravatar=True), None)
    kept = payloads.for_client(_client("q1", client_gravatar=False), None)
    assert nulled.client_event(0)["person"] == {**event["person"], "avatar_url": None}
    assert kept.client_event(0) == {**event, "id": 0}
    # an update without a person goes to both as sent
    rename = {"type": "realm_user", "op": "update", "person": {"user_id": 7, "full_name": "I"}}
    renamed = NoticePayloads(rename, encode, rules=CLIENT_RULES["realm_user"])
    assert renamed.for_client(_client(client_gravatar=True), None).client_event(0) == {
        **rename,
        "id": 0,
    }
