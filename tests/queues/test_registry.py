"""QueueRegistry: allocation and lookup, delivery and fan-out, long-poll
parking and waking, idle expiry, bounds and per-user limits.

Time is a float passed as `now`; a FakeWaiter records why it was woken.
"""

from __future__ import annotations

import pytest

from queues import registry as registry_module
from queues.errors import BadQueueId, TooManyQueues
from queues.narrow import parse_narrow
from queues.registry import NoticeUser
from tests.queues.helpers import (
    FakeWaiter,
    client_events,
    flag_event,
    ids,
    make_registry,
    message_event,
    options,
)

REALM = 1


class EndLog:
    """An end hook recording (queue id, reason, last_for_user)."""

    def __init__(self):
        self.calls = []

    def __call__(self, client, reason, last_for_user):
        self.calls.append((client.queue_id, reason, last_for_user))


def _registry_with_log(**limits):
    registry = make_registry(**limits)
    log = EndLog()
    registry.end_hooks.append(log)
    return registry, log


# -- allocation and lookup --------------------------------------------------


def test_allocate_then_get_returns_the_queue():
    registry = make_registry()

    client = registry.allocate(7, REALM, options(client_name="website"), 10.0)

    assert client.queue_id == "q0"
    assert registry.get("q0", 7) is client
    assert (client.user_id, client.realm_id) == (7, REALM)
    assert client.options.client_name == "website"
    assert client.created_at == client.last_active == 10.0
    assert len(registry) == 1
    assert registry.user_queues(7) == [client]
    assert registry.users() == 1
    assert client.event_queue.empty()


def test_queues_with_equal_options_share_one_options_object():
    # Memory per parked client: the options' frozensets once per distinct value.
    registry = make_registry()
    asked = [options(event_types=["message"], client_name="website") for _ in range(3)]
    clients = [registry.allocate(user, REALM, ask, 1.0) for user, ask in enumerate(asked)]
    other = registry.allocate(9, REALM, options(event_types=["typing"]), 1.0)

    assert clients[1].options is clients[0].options
    assert clients[2].options is clients[0].options
    assert other.options is not clients[0].options
    assert other.options.event_types == frozenset({"typing"})
    # Nothing else about the queue changes: it still filters by its own options.
    assert clients[0].covered is clients[1].covered == frozenset()


def test_shared_options_table_is_bounded(monkeypatch):
    monkeypatch.setattr(registry_module, "SHARED_OPTIONS", 3)
    registry = make_registry(max_queues_per_user=100)
    first = registry.allocate(1, REALM, options(client_name="app0"), 1.0)
    for n in range(1, 5):  # the table starts again after three distinct values
        registry.allocate(1, REALM, options(client_name=f"app{n}"), 1.0)

    assert len(registry._options) <= 3
    again = registry.allocate(1, REALM, options(client_name="app0"), 1.0)
    assert again.options == first.options
    assert again.options.client_name == "app0"


def test_unknown_queue_id_is_a_bad_queue_id():
    registry = make_registry()

    with pytest.raises(BadQueueId) as info:
        registry.get("hamster", 7)

    assert str(info.value) == "Bad event queue ID: hamster"
    assert info.value.queue_id == "hamster"
    assert info.value.reason is None
    assert not info.value.wrong_owner


def test_other_users_queue_looks_like_an_unknown_one():
    registry = make_registry()
    client = registry.allocate(7, REALM, options(), 0.0)

    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 8)

    assert str(info.value) == f"Bad event queue ID: {client.queue_id}"
    assert info.value.reason is None
    assert info.value.wrong_owner
    assert registry.get(client.queue_id, 7) is client


def test_other_user_cannot_delete_a_queue():
    registry, log = _registry_with_log()
    client = registry.allocate(7, REALM, options(), 0.0)

    with pytest.raises(BadQueueId) as info:
        registry.delete(client.queue_id, 8, 1.0)

    assert info.value.wrong_owner
    assert registry.get(client.queue_id, 7) is client
    assert log.calls == []


# -- filtering --------------------------------------------------------------


def test_event_types_filter_what_a_queue_receives():
    registry = make_registry()
    messages_only = registry.allocate(1, REALM, options(event_types=["message"]), 0.0)
    everything = registry.allocate(1, REALM, options(), 0.0)

    realm_report = registry.deliver({"type": "realm", "op": "update"}, [1], REALM, 1.0)
    message_report = registry.deliver(message_event(), [1], REALM, 2.0)

    assert (realm_report.queues, message_report.queues) == (1, 2)
    assert [e["type"] for e in client_events(messages_only)] == ["message"]
    assert [e["type"] for e in client_events(everything)] == ["realm", "message"]


def test_empty_event_types_accept_nothing():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(event_types=[]), 0.0)

    assert registry.deliver({"type": "realm"}, [1], REALM, 1.0).queues == 0
    assert client.event_queue.empty()


def test_heartbeat_bypasses_event_types_and_wakes_the_request():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(event_types=["message"]), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    registry.wake_for_heartbeat(client, 46.0)

    assert waiter.reasons == ["heartbeat"]
    assert client.waiter is None
    # The heartbeat takes no id: the queue holds nothing, and the answer
    # carries the newest acknowledged id.
    assert client_events(client) == []
    assert [p.client_event(i) for i, p in registry.heartbeat_items(client)] == [
        {"id": -1, "type": "heartbeat"}
    ]


def test_heartbeat_for_an_ended_queue_is_ignored():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)
    registry.delete(client.queue_id, 1, 1.0)

    registry.wake_for_heartbeat(client, 46.0)

    assert waiter.reasons == ["deleted"]
    assert client.event_queue.empty()


def test_channel_typing_only_for_clients_that_declared_it():
    registry = make_registry()
    plain = registry.allocate(1, REALM, options(), 0.0)
    capable = registry.allocate(
        1, REALM, options(capabilities=frozenset({"stream_typing_notifications"})), 0.0
    )

    registry.deliver({"type": "typing", "op": "start", "stream_id": 3}, [1], REALM, 1.0)
    registry.deliver({"type": "typing", "op": "start", "recipients": []}, [1], REALM, 2.0)

    assert ids(plain.event_queue) == [0]
    assert "stream_id" not in client_events(plain)[0]
    assert ids(capable.event_queue) == [0, 1]


def test_other_realms_queues_are_counted_foreign_and_skipped():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)

    report = registry.deliver({"type": "realm"}, [1], 2, 1.0)

    assert (report.queues, report.foreign) == (0, 1)
    assert client.event_queue.empty()
    assert registry.deliver({"type": "realm"}, [1], None, 2.0).queues == 1
    assert registry.deliver({"type": "realm"}, [1], REALM, 3.0).foreign == 0


def test_users_without_queues_are_skipped():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)

    report = registry.deliver({"type": "realm"}, [2, {"id": 3}, 1], REALM, 1.0)

    assert report.queues == 1
    assert ids(client.event_queue) == [0]


# -- message specialisation and fan-out -------------------------------------


def test_message_events_carry_each_users_own_flags():
    registry = make_registry()
    alice = registry.allocate(1, REALM, options(), 0.0)
    bob = registry.allocate(2, REALM, options(), 0.0)

    registry.deliver(
        message_event(),
        [{"id": 1, "flags": ["read"]}, {"id": 2, "flags": ["mentioned"]}],
        REALM,
        1.0,
    )

    assert client_events(alice)[0]["flags"] == ["read"]
    assert client_events(bob)[0]["flags"] == ["mentioned"]


def test_local_message_id_only_on_the_senders_queue():
    # Scenario 59.
    registry = make_registry()
    sender_queue = registry.allocate(1, REALM, options(), 0.0)
    sender_other_tab = registry.allocate(1, REALM, options(), 0.0)
    recipient = registry.allocate(2, REALM, options(), 0.0)
    event = message_event(stream=None, sender_queue_id=sender_queue.queue_id, local_id="0.01")

    registry.deliver(event, [{"id": 1, "flags": ["read"]}, {"id": 2, "flags": []}], REALM, 1.0)

    own = client_events(sender_queue)
    assert own[0]["local_message_id"] == "0.01"
    for client in (sender_other_tab, recipient):
        delivered = client_events(client)[0]
        assert "local_message_id" not in delivered
        assert "sender_queue_id" not in delivered
        assert "local_id" not in delivered
    assert client_events(sender_other_tab)[0]["flags"] == ["read"]


def test_apply_markdown_chooses_rendered_or_raw_content():
    # Scenarios 60 and 65.
    registry = make_registry()
    html = registry.allocate(1, REALM, options(apply_markdown=True), 0.0)
    raw = registry.allocate(1, REALM, options(apply_markdown=False), 0.0)

    registry.deliver(message_event(), [1], REALM, 1.0)

    html_message = client_events(html)[0]["message"]
    raw_message = client_events(raw)[0]["message"]
    assert (html_message["content"], html_message["content_type"]) == (
        "<p><strong>hello</strong></p>",
        "text/html",
    )
    assert (raw_message["content"], raw_message["content_type"]) == ("**hello**", "text/x-markdown")
    assert "rendered_content" not in html_message
    assert "rendered_content" not in raw_message


def test_fan_out_shares_one_payload_per_variant():
    # The performance contract: one encoding per distinct variant, not per queue.
    registry = make_registry()
    plain = [registry.allocate(user, REALM, options(), 0.0) for user in (1, 2, 3)]
    rendered = [
        registry.allocate(user, REALM, options(apply_markdown=True), 0.0) for user in (1, 2)
    ]
    starred = registry.allocate(4, REALM, options(), 0.0)
    users: list[NoticeUser] = [
        {"id": 1, "flags": []},
        {"id": 2, "flags": []},
        3,
        {"id": 4, "flags": ["starred"]},
    ]

    report = registry.deliver(message_event(), users, REALM, 1.0)

    assert report.queues == 6

    def stored(client):
        ((_, payload),) = client.event_queue.contents()
        return payload

    assert stored(plain[0]) is stored(plain[1]) is stored(plain[2])
    assert stored(rendered[0]) is stored(rendered[1])
    assert stored(rendered[0]) is not stored(plain[0])
    assert stored(starred) is not stored(plain[0])


def test_fan_out_of_a_generic_event_shares_one_payload():
    registry = make_registry()
    clients = [registry.allocate(user, REALM, options(), 0.0) for user in range(1, 6)]

    registry.deliver({"type": "realm", "op": "update"}, list(range(1, 6)), REALM, 1.0)

    payloads = {id(client.event_queue.contents()[0][1]) for client in clients}
    assert len(payloads) == 1


def test_fan_out_to_all_public_streams_queues_shares_one_payload():
    registry = make_registry()
    watchers = [
        registry.allocate(user, REALM, options(all_public_streams=True), 0.0) for user in (5, 6, 7)
    ]

    registry.deliver(message_event(), [], REALM, 1.0)

    payloads = {id(client.event_queue.contents()[0][1]) for client in watchers}
    assert len(payloads) == 1


# -- all_public_streams -----------------------------------------------------


def test_public_channel_message_reaches_a_non_recipient_watcher_with_empty_flags():
    # Scenario 11.
    registry = make_registry()
    recipient = registry.allocate(1, REALM, options(), 0.0)
    watcher = registry.allocate(9, REALM, options(all_public_streams=True), 0.0)
    ordinary = registry.allocate(8, REALM, options(), 0.0)

    report = registry.deliver(
        message_event(invite_only=False), [{"id": 1, "flags": ["read"]}], REALM, 1.0
    )

    assert report.queues == 2
    assert [(e["id"], e["flags"]) for e in client_events(watcher)] == [(0, [])]
    assert client_events(recipient)[0]["flags"] == ["read"]
    assert client_events(ordinary) == []


@pytest.mark.parametrize(
    "event",
    [
        message_event(invite_only=True),
        message_event(invite_only=None),
        message_event(stream=None),
        {"type": "realm", "invite_only": False},
    ],
    ids=["private-channel", "no-invite_only", "direct-message", "not-a-message"],
)
def test_watcher_does_not_get_what_is_not_a_public_channel_message(event):
    registry = make_registry()
    watcher = registry.allocate(9, REALM, options(all_public_streams=True), 0.0)

    report = registry.deliver(event, [1], REALM, 1.0)

    assert report.queues == 0
    assert watcher.event_queue.empty()


def test_watcher_that_sent_the_message_gets_its_local_message_id():
    # Scenario 64: users=[], the sending queue is an all_public_streams queue.
    registry = make_registry()
    sender = registry.allocate(9, REALM, options(all_public_streams=True), 0.0)
    other = registry.allocate(10, REALM, options(all_public_streams=True), 0.0)
    event = message_event(sender_queue_id=sender.queue_id, local_id="9.5")

    assert registry.deliver(event, [], REALM, 1.0).queues == 2

    assert client_events(sender)[0]["local_message_id"] == "9.5"
    assert client_events(sender)[0]["flags"] == []
    assert "local_message_id" not in client_events(other)[0]


def test_watcher_of_another_realm_does_not_get_the_message():
    registry = make_registry()
    watcher = registry.allocate(9, 2, options(all_public_streams=True), 0.0)

    assert registry.deliver(message_event(), [], REALM, 1.0).queues == 0
    assert registry.deliver(message_event(), [], None, 2.0).queues == 0
    assert watcher.event_queue.empty()


def test_watcher_who_is_a_recipient_gets_the_message_once_with_own_flags():
    registry = make_registry()
    watcher = registry.allocate(9, REALM, options(all_public_streams=True), 0.0)

    report = registry.deliver(message_event(), [{"id": 9, "flags": ["mentioned"]}], REALM, 1.0)

    assert report.queues == 1
    assert [e["flags"] for e in client_events(watcher)] == [["mentioned"]]


def test_watcher_respects_event_types_and_narrow():
    registry = make_registry()
    no_messages = registry.allocate(
        9, REALM, options(all_public_streams=True, event_types=["realm"]), 0.0
    )
    verona_only = registry.allocate(
        9, REALM, options(all_public_streams=True, narrow=parse_narrow([["stream", "verona"]])), 0.0
    )

    assert registry.deliver(message_event(stream="Denmark"), [], REALM, 1.0).queues == 0
    assert no_messages.event_queue.empty()
    assert verona_only.event_queue.empty()


def test_recipient_watcher_whose_narrow_rejects_the_message_does_not_get_it_with_empty_flags():
    # The sender's own message is read for them; their is:unread narrow must
    # filter it out, and not let it through the all_public_streams path with
    # flags [] (as if unread).
    registry = make_registry()
    unread_watcher = registry.allocate(
        1, REALM, options(all_public_streams=True, narrow=parse_narrow([["is", "unread"]])), 0.0
    )

    report = registry.deliver(message_event(), [{"id": 1, "flags": ["read"]}], REALM, 1.0)

    assert client_events(unread_watcher) == []
    assert report.queues == 0


def test_internal_data_is_stored_but_never_shown_to_clients():
    # Scenario 9: three message events with internal_data to a watcher queue.
    registry = make_registry()
    log = []
    registry.end_hooks.append(
        lambda client, reason, last: log.append(
            [p.stored_event(i)["internal_data"] for i, p in client.event_queue.contents()]
        )
    )
    watcher = registry.allocate(9, REALM, options(all_public_streams=True), 0.0)
    hints = [{"mentioned": True}, {"wildcard_mentioned": True}, {"dm": True}]
    for n, hint in enumerate(hints):
        registry.deliver(message_event(n, internal_data=hint), [], REALM, 1.0)

    assert watcher.to_dict(2.0)["event_queue"]["events"][0]["internal_data"] == hints[0]
    for event_id, payload in watcher.event_queue.contents():
        assert "internal_data" not in payload.client_event(event_id)
        assert b"internal_data" not in payload.tail
    assert all("internal_data" not in e for e in client_events(watcher))

    registry.collect_expired(601.0)
    assert log == [hints]


# -- parking and waking -----------------------------------------------------


def test_event_wakes_the_parked_request():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)
    parked = client.waiter
    assert parked is waiter
    assert registry.parked == 1

    registry.deliver({"type": "realm"}, [1], REALM, 2.0)

    assert waiter.reasons == ["events"]
    assert client.waiter is None
    assert registry.parked == 0
    assert ids(client.event_queue) == [0]


def test_event_not_accepted_does_not_wake_the_request():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(event_types=["message"]), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    registry.deliver({"type": "realm"}, [1], REALM, 2.0)

    assert waiter.reasons == []
    assert client.waiter is waiter


def test_newer_request_displaces_the_parked_one():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    first, second = FakeWaiter(), FakeWaiter()
    registry.park(client, first, 1.0)

    registry.displace(client, 2.0)
    assert first.reasons == ["displaced"]
    assert registry.parked == 0
    registry.park(client, second, 2.0)
    registry.deliver({"type": "realm"}, [1], REALM, 3.0)

    assert first.reasons == ["displaced"]
    assert second.reasons == ["events"]
    assert ids(client.event_queue) == [0]


def test_displace_without_a_parked_request_does_nothing():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)

    registry.displace(client, 1.0)

    assert client.waiter is None
    assert registry.parked == 0


def test_disconnect_unparks_and_keeps_the_queue_and_its_events():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    assert registry.unpark(client, waiter, 2.0)
    registry.deliver({"type": "realm"}, [1], REALM, 3.0)

    assert waiter.reasons == []
    assert registry.get(client.queue_id, 1) is client
    assert ids(client.event_queue) == [0]
    assert registry.parked == 0
    assert not registry.unpark(client, waiter, 4.0)


def test_disconnect_of_a_displaced_request_leaves_the_new_one_parked():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    old, new = FakeWaiter(), FakeWaiter()
    registry.park(client, old, 1.0)
    registry.displace(client, 2.0)
    registry.park(client, new, 2.0)

    assert not registry.unpark(client, old, 3.0)

    assert client.waiter is new
    assert registry.parked == 1


def test_delete_wakes_the_parked_request_and_ends_the_queue():
    registry, log = _registry_with_log()
    client = registry.allocate(1, REALM, options(), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    assert registry.delete(client.queue_id, 1, 2.0) is client

    assert waiter.reasons == ["deleted"]
    assert registry.parked == 0
    assert log.calls == [(client.queue_id, "deleted", True)]
    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 1)
    assert info.value.reason is None
    assert len(registry) == 0
    assert registry.users() == 0


def test_a_heartbeat_takes_no_id_so_the_next_event_gets_the_one_it_would_have():
    """What shutdown does to every parked request, and why a queue rebuilt
    from the event log after a crash numbers its events as before."""
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    registry.deliver({"type": "realm"}, [1], REALM, 1.0)
    client.event_queue.prune(0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    registry.wake_for_heartbeat(client, 2.0)

    assert waiter.reasons == ["heartbeat"]
    assert registry.parked == 0
    assert [p.client_event(i) for i, p in registry.heartbeat_items(client)] == [
        {"type": "heartbeat", "id": 0}
    ]
    client.event_queue.prune(0)  # acknowledging it again changes nothing
    registry.deliver({"type": "realm"}, [1], REALM, 3.0)
    assert [i for i, _ in client.event_queue.contents()] == [1]


def test_restart_event_goes_to_every_accepting_queue():
    registry = make_registry()
    everything = registry.allocate(1, REALM, options(), 0.0)
    restarts = registry.allocate(2, 2, options(event_types=["restart"]), 0.0)
    messages = registry.allocate(3, REALM, options(event_types=["message"]), 0.0)
    waiter = FakeWaiter()
    registry.park(restarts, waiter, 1.0)
    restart = {"type": "restart", "server_generation": 5}

    assert registry.push_to_accepting(restart, 2.0) == 2

    assert client_events(everything) == [{"id": 0, **restart}]
    assert client_events(restarts) == [{"id": 0, **restart}]
    assert messages.event_queue.empty()
    assert waiter.reasons == ["events"]


# -- idle expiry ------------------------------------------------------------


def test_idle_queue_expires_after_its_lifespan():
    registry, log = _registry_with_log()
    client = registry.allocate(1, REALM, options(lifespan_secs=600.0), 0.0)

    assert registry.collect_expired(599.9) == []
    assert registry.collect_expired(600.0) == [client]

    assert log.calls == [(client.queue_id, "expired", True)]
    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 1)
    assert info.value.reason is None
    assert len(registry) == 0


def test_parked_queue_never_expires_and_its_clock_restarts_when_unparked():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(lifespan_secs=600.0), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    assert registry.collect_expired(100_000.0) == []
    registry.unpark(client, waiter, 100_000.0)
    assert registry.collect_expired(100_599.0) == []
    assert registry.collect_expired(100_600.0) == [client]
    assert waiter.reasons == []


def test_woken_queue_idles_from_the_moment_it_was_woken():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(lifespan_secs=600.0), 0.0)
    registry.park(client, FakeWaiter(), 0.0)
    registry.deliver({"type": "realm"}, [1], REALM, 500.0)

    assert registry.collect_expired(1099.0) == []
    assert registry.collect_expired(1100.0) == [client]


def test_any_touch_resets_the_idle_clock():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(lifespan_secs=600.0), 0.0)

    registry.touch(client, 500.0)

    assert registry.collect_expired(1099.0) == []
    assert registry.collect_expired(1100.0) == [client]


def test_touch_reorders_the_sweep_so_an_older_idle_queue_still_expires():
    registry = make_registry()
    touched = registry.allocate(1, REALM, options(), 0.0)
    untouched = registry.allocate(2, REALM, options(), 100.0)
    registry.touch(touched, 200.0)

    assert registry.collect_expired(700.0) == [untouched]
    assert registry.collect_expired(800.0) == [touched]


def test_queues_with_different_lifespans_expire_independently():
    registry, log = _registry_with_log()
    short = registry.allocate(1, REALM, options(lifespan_secs=60.0), 0.0)
    long_ = registry.allocate(1, REALM, options(lifespan_secs=600.0), 0.0)
    longer = registry.allocate(1, REALM, options(lifespan_secs=3600.0), 10.0)

    assert registry.collect_expired(59.0) == []
    assert registry.collect_expired(60.0) == [short]
    assert registry.collect_expired(600.0) == [long_]
    assert registry.collect_expired(3609.0) == []
    assert registry.collect_expired(3610.0) == [longer]

    assert log.calls == [
        (short.queue_id, "expired", False),
        (long_.queue_id, "expired", False),
        (longer.queue_id, "expired", True),
    ]


def test_end_hooks_are_told_whether_it_was_the_users_last_queue():
    registry, log = _registry_with_log()
    alice_1 = registry.allocate(1, REALM, options(), 0.0)
    bob = registry.allocate(2, REALM, options(), 0.0)
    alice_2 = registry.allocate(1, REALM, options(), 100.0)

    registry.collect_expired(600.0)
    registry.delete(alice_2.queue_id, 1, 650.0)

    assert log.calls == [
        (alice_1.queue_id, "expired", False),
        (bob.queue_id, "expired", True),
        (alice_2.queue_id, "deleted", True),
    ]
    assert registry.users() == 0


@pytest.mark.parametrize(
    ("requested", "effective"),
    [
        (0, 600.0),
        (-5, 600.0),
        (1, 1.0),
        (86_400, 86_400.0),
        (604_800, 604_800.0),
        (10**9, 604_800.0),
    ],
)
def test_effective_lifespan_zero_means_default_and_is_capped(requested, effective):
    assert make_registry().effective_lifespan(requested) == effective


def test_effective_lifespan_follows_configured_limits():
    registry = make_registry(default_lifespan_secs=30.0, max_lifespan_secs=120.0)

    assert registry.effective_lifespan(0) == 30.0
    assert registry.effective_lifespan(500) == 120.0


# -- bounds -----------------------------------------------------------------


def test_exceeding_max_events_ends_the_queue_with_overflow():
    registry, log = _registry_with_log(max_events=2)
    client = registry.allocate(1, REALM, options(), 0.0)
    other = registry.allocate(2, REALM, options(), 0.0)

    registry.deliver({"type": "a"}, [1, 2], REALM, 1.0)
    registry.deliver({"type": "b"}, [1, 2], REALM, 2.0)
    assert registry.get(client.queue_id, 1) is client
    report = registry.deliver({"type": "c"}, [1], REALM, 3.0)

    assert (report.queues, report.overflowed) == (1, 1)
    assert log.calls == [(client.queue_id, "overflow", True)]
    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 1)
    assert info.value.reason == "overflow"
    assert str(info.value) == f"Bad event queue ID: {client.queue_id}"
    assert registry.get(other.queue_id, 2) is other


def test_overflow_reason_is_told_only_to_the_owner():
    registry = make_registry(max_events=0)
    client = registry.allocate(1, REALM, options(), 0.0)
    registry.deliver({"type": "a"}, [1], REALM, 1.0)

    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 2)

    assert info.value.reason is None
    assert info.value.wrong_owner
    assert str(info.value) == f"Bad event queue ID: {client.queue_id}"


def test_exceeding_max_bytes_ends_the_queue_and_wakes_its_request_with_overflow():
    registry, log = _registry_with_log(max_bytes=500)
    client = registry.allocate(1, REALM, options(), 0.0)
    small = registry.allocate(2, REALM, options(), 0.0)
    waiter = FakeWaiter()
    registry.park(client, waiter, 1.0)

    report = registry.deliver({"type": "big", "data": "x" * 1000}, [1], REALM, 2.0)
    registry.deliver({"type": "small"}, [2], REALM, 3.0)

    assert report.overflowed == 1
    assert waiter.reasons == ["overflow"]
    assert registry.parked == 0
    assert log.calls == [(client.queue_id, "overflow", True)]
    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 1)
    assert info.value.reason == "overflow"
    assert ids(small.event_queue) == [0]


def test_collapsed_flag_events_count_against_the_byte_budget():
    registry = make_registry(max_bytes=400)
    client = registry.allocate(1, REALM, options(), 0.0)

    for n in range(20):
        registry.deliver(flag_event("read", "add", [1000 + n] * 5), [1], REALM, float(n))

    with pytest.raises(BadQueueId) as info:
        registry.get(client.queue_id, 1)
    assert info.value.reason == "overflow"


def test_a_heartbeat_never_overflows_a_queue():
    registry = make_registry(max_events=1)
    client = registry.allocate(1, REALM, options(), 0.0)
    registry.deliver({"type": "a"}, [1], REALM, 1.0)
    client.event_queue.prune(0)
    registry.park(client, FakeWaiter(), 2.0)

    registry.wake_for_heartbeat(client, 50.0)

    assert registry.get(client.queue_id, 1) is client


def test_oldest_tombstones_are_forgotten():
    registry = make_registry(max_events=0, max_tombstones=1)
    first = registry.allocate(1, REALM, options(), 0.0)
    second = registry.allocate(1, REALM, options(), 0.0)
    registry.deliver({"type": "a"}, [1], REALM, 1.0)

    with pytest.raises(BadQueueId) as forgotten:
        registry.get(first.queue_id, 1)
    with pytest.raises(BadQueueId) as remembered:
        registry.get(second.queue_id, 1)

    assert forgotten.value.reason is None
    assert remembered.value.reason == "overflow"


# -- per-user limit ---------------------------------------------------------


def test_queue_limit_evicts_the_least_recently_active_idle_queue():
    registry, log = _registry_with_log(max_queues_per_user=3)
    parked = registry.allocate(1, REALM, options(), 0.0)
    registry.park(parked, FakeWaiter(), 0.0)  # the oldest, but a request is parked
    touched = registry.allocate(1, REALM, options(), 5.0)
    least_recent = registry.allocate(1, REALM, options(), 10.0)
    registry.allocate(2, REALM, options(), 20.0)  # another user's queues do not count
    registry.touch(touched, 30.0)

    newest = registry.allocate(1, REALM, options(), 40.0)

    assert log.calls == [(least_recent.queue_id, "evicted", False)]
    with pytest.raises(BadQueueId) as info:
        registry.get(least_recent.queue_id, 1)
    assert info.value.reason == "evicted"
    assert {c.queue_id for c in registry.user_queues(1)} == {
        touched.queue_id,
        parked.queue_id,
        newest.queue_id,
    }


def test_queue_limit_with_every_queue_parked_raises_too_many_queues():
    registry, log = _registry_with_log(max_queues_per_user=2)
    for now in (0.0, 1.0):
        registry.park(registry.allocate(1, REALM, options(), now), FakeWaiter(), now)

    with pytest.raises(TooManyQueues) as info:
        registry.allocate(1, REALM, options(), 2.0)

    assert str(info.value) == "Too many event queues: this user already has 2 queues in use"
    assert info.value.limit == 2
    assert len(registry.user_queues(1)) == 2
    assert log.calls == []


# -- a queue filled before it is adopted (a resume) ------------------------------


def test_a_detached_queue_gets_no_delivery_until_adopted_and_keeps_its_order():
    registry, log = _registry_with_log(max_queues_per_user=1, max_events=3)
    other = registry.allocate(7, REALM, options(), 1.0)
    client = registry.detached(7, REALM, options(), 2.0)
    assert len(registry) == 1
    assert client not in registry
    # A live delivery meanwhile reaches the adopted queues only.
    registry.deliver({"type": "live", "n": 0}, [7], REALM, 3.0)
    assert client.event_queue.empty()
    for n in (1, 2):
        payload = registry.payload_for(client, {"type": "old", "n": n}, [7], REALM)
        assert payload is not None
        assert registry.fill(client, payload)
    # Not a recipient, another realm: nothing to put.
    assert registry.payload_for(client, {"type": "old"}, [8], REALM) is None
    assert registry.payload_for(client, {"type": "old"}, [7], REALM + 1) is None
    # Adopting evicts at the per-user limit, as allocating does.
    registry.adopt(client, 4.0)
    assert log.calls == [(other.queue_id, "evicted", True)]  # as allocate: then it comes
    assert registry.get(client.queue_id, 7) is client
    assert client.last_active == 4.0
    registry.deliver({"type": "live", "n": 3}, [7], REALM, 5.0)
    assert [p.event["n"] for _, p in client.event_queue.contents()] == [1, 2, 3]


def test_filling_a_detached_queue_past_its_bound_says_so():
    registry = make_registry(max_events=2)
    client = registry.detached(7, REALM, options(), 1.0)
    fills = []
    for n in range(3):
        payload = registry.payload_for(client, {"type": "old", "n": n}, [7], REALM)
        assert payload is not None
        fills.append(registry.fill(client, payload))
    assert fills == [True, True, False]
    assert len(registry) == 0
