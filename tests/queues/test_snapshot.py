"""Registry snapshots: what a graceful restart saves and reloads.

A snapshot must bring back every queue with its ids, acknowledgement point,
options, unread collapsed events and idle age; a bad one loads nothing.
"""

from __future__ import annotations

import json
import re
import tracemalloc

import pytest

from queues.errors import BadQueueId, EventAlreadyPruned
from queues.narrow import parse_narrow
from queues.registry import SNAPSHOT_VERSION
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


def _saved(registry, now):
    """The snapshot as it would come back from disk."""
    return json.loads(json.dumps(registry.snapshot(now)))


def _queues(snapshot):
    """A snapshot's queues by id, each queue's events whole: [id, index]
    pairs (format version 2) joined with the snapshot's table of payloads."""
    table = snapshot.get("payloads", [])
    queues = {}
    for queue in snapshot["queues"]:
        saved = queue["event_queue"]
        events = [
            {**table[e[1]], "id": e[0]} if isinstance(e, list) else e for e in saved["events"]
        ]
        queues[queue["queue_id"]] = {**saved, "events": events}
    return queues


def _populated():
    """A registry at t=1000 with varied queues; returns it and its queues."""
    registry = make_registry()
    plain = registry.allocate(1, REALM, options(), 0.0)
    fancy = registry.allocate(
        2,
        REALM,
        options(
            event_types=["message", "update_message_flags", "realm"],
            narrow=parse_narrow([["stream", "denmark"], ["is", "unread"]]),
            all_public_streams=True,
            apply_markdown=True,
            client_gravatar=True,
            slim_presence=True,
            capabilities=frozenset({"bulk_message_deletion", "empty_topic_name"}),
            lifespan_secs=3600.0,
            client_name="ZulipMobile",
        ),
        100.0,
    )
    for n in range(3):
        registry.deliver({"type": "realm", "n": n}, [1, 2], REALM, 200.0 + n)
    plain.event_queue.contents()
    plain.event_queue.prune(1)
    registry.deliver(flag_event("read", "add", [7], 300), [2], REALM, 300.0)
    registry.deliver(flag_event("read", "add", [8], 301), [2], REALM, 301.0)
    registry.deliver(message_event(internal_data={"mentioned": True}), [], REALM, 302.0)
    registry.touch(plain, 900.0)
    registry.touch(fancy, 400.0)
    return registry, plain, fancy


def test_snapshot_restore_round_trip_preserves_every_queue():
    registry, plain, fancy = _populated()
    saved = _saved(registry, 1000.0)
    assert saved["version"] == SNAPSHOT_VERSION
    before = {
        client.queue_id: (client.user_id, client.realm_id, client.options)
        for client in (plain, fancy)
    }
    plain_saved = plain.event_queue.to_dict()
    fancy_saved = fancy.event_queue.to_dict()

    restored = make_registry()
    loaded, errors = restored.restore(saved, 50_000.0)

    assert errors == []
    assert {c.queue_id for c in loaded} == {plain.queue_id, fancy.queue_id}
    new_plain = restored.get(plain.queue_id, 1)
    new_fancy = restored.get(fancy.queue_id, 2)
    for client in (new_plain, new_fancy):
        assert before[client.queue_id] == (client.user_id, client.realm_id, client.options)
    assert new_plain.event_queue.to_dict() == plain_saved
    assert new_fancy.event_queue.to_dict() == fancy_saved
    assert new_plain.event_queue.newest_pruned_id == 1
    assert new_fancy.event_queue.to_dict()["virtual_events"] == {
        "flags/add/read": {**flag_event("read", "add", [7, 8], 301), "id": 4}
    }
    assert fancy_saved["events"][-1]["internal_data"] == {"mentioned": True}


def test_a_snapshot_with_embedded_encodings_is_the_same_snapshot():
    """The server's snapshots embed each queued event's encoding as it is
    (`embed=orjson.Fragment`) instead of decoding it: the file must read back
    as the decoded snapshot would, internal keys and collapsed flags included."""
    orjson = pytest.importorskip("orjson")
    registry, _, fancy = _populated()
    decoded = _saved(registry, 1000.0)
    registry.embed = orjson.Fragment
    embedded = orjson.loads(orjson.dumps(registry.snapshot(1000.0)))
    assert embedded == decoded
    assert any("internal_data" in e for q in _queues(embedded).values() for e in q["events"])
    # Payloads merged from collapsed flags, and payloads restored from a file.
    fancy.event_queue.contents()
    registry.embed = None
    decoded = _saved(registry, 1000.0)
    assert {**flag_event("read", "add", [7, 8], 301), "id": 4} in [
        e for q in _queues(decoded).values() for e in q["events"]
    ]
    restored = make_registry()
    restored.restore(decoded, 1000.0)
    restored.embed = orjson.Fragment
    again = orjson.loads(orjson.dumps(restored.snapshot(1000.0)))
    assert _queues(again) == _queues(decoded)


def test_events_many_queues_hold_come_back_once_not_once_per_queue():
    """A notice to many queues is one payload in all of them; the snapshot
    saves it in each queue, and the restore shares it again: the memory the
    restored queues hold is that of the events once, not once per queue."""
    registry = make_registry()
    users = [1, 2, 3, 4]
    for user in users:
        for _ in range(50):
            registry.allocate(user, REALM, options(), 0.0)
    for n in range(10):
        registry.deliver({"type": "test", "n": n, "body": "x" * 4000}, users, REALM, 1.0 + n)
    saved = _saved(registry, 100.0)
    held_before = [client_events(client) for client in registry]
    # Saved once each, the queues holding their ids and indexes.
    assert [event["n"] for event in saved["payloads"]] == list(range(10))
    # (Each queue's events whole in it, as format version 1 saved them: 8 MB.)
    assert len(json.dumps(saved)) < 400_000

    tracemalloc.start()
    try:
        restored = make_registry()
        loaded, errors = restored.restore(saved, 100.0)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()

    assert (len(loaded), errors) == (200, [])
    assert [client_events(client) for client in restored] == held_before
    # 200 queues x 10 events x 4 KB would be 8 MB of copies.
    assert held < 1_000_000, held
    # The payloads are the restored registry's from now on: a queue
    # acknowledging or receiving anything changes no other queue.
    first, second = list(restored)[:2]
    first.event_queue.prune(5)
    restored.deliver({"type": "test", "n": 10}, [1], REALM, 101.0)
    assert [e["n"] for e in client_events(second)] == [*range(10), 10]
    assert [e["n"] for e in client_events(first)] == [6, 7, 8, 9, 10]


def test_a_snapshot_of_format_version_1_still_restores():
    """Version 1 saved each queue's events whole in it (no table of payloads):
    a file an older eventq wrote comes back the same, its events shared."""
    registry, _, _ = _populated()
    for user in (1, 2):
        registry.allocate(user, REALM, options(), 500.0)
    registry.deliver({"type": "realm", "n": 3, "body": "x" * 4000}, [1, 2], REALM, 600.0)
    saved = _saved(registry, 1000.0)
    whole = _queues(saved)
    old = {
        "version": 1,
        "queues": [{**q, "event_queue": whole[q["queue_id"]]} for q in saved["queues"]],
        "tombstones": saved["tombstones"],
    }
    assert "payloads" not in old

    restored = make_registry()
    loaded, errors = restored.restore(old, 1000.0)

    assert (len(loaded), errors) == (4, [])
    assert _queues(_saved(restored, 1000.0)) == whole
    last = [client.event_queue.contents()[-1][1] for client in restored]
    assert all(payload is last[0] for payload in last)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ([0, 99], "no saved payload 99"),
        ([0, "0"], "payload index is not an integer"),
        ([0], r"not \[id, payload index\]"),
        (["0", 0], "no integer id"),
    ],
)
def test_a_bad_reference_to_the_payloads_costs_only_its_queue(event, message):
    registry = make_registry()
    for user in (1, 2):
        registry.allocate(user, REALM, options(), 0.0)
    registry.deliver({"type": "realm", "n": 0}, [1, 2], REALM, 1.0)
    saved = _saved(registry, 10.0)
    saved["queues"][0]["event_queue"]["events"] = [event]

    restored = make_registry()
    loaded, errors = restored.restore(saved, 10.0)

    assert [client.queue_id for client in loaded] == [saved["queues"][1]["queue_id"]]
    [error] = errors
    assert re.search(message, error), error


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "realm", "id": 7}, "saved payload 0 has an id"),
        ({"n": 1}, "saved payload 0 is not an event with a string type"),
        ("realm", "saved payload 0 is not an event"),
        # The encoder refuses it (orjson: 254 levels at most).
        ({"type": "realm", "deep": _nested(300)}, "a saved event cannot be encoded"),
    ],
)
def test_a_bad_entry_of_the_payloads_costs_only_the_queues_holding_it(entry, message):
    orjson = pytest.importorskip("orjson")
    registry = make_registry()
    holding, other = (registry.allocate(user, REALM, options(), 0.0) for user in (1, 2))
    registry.deliver({"type": "realm", "n": 0}, [1], REALM, 1.0)
    registry.deliver({"type": "realm", "n": 1}, [2], REALM, 1.0)
    saved = _saved(registry, 10.0)
    assert [e["n"] for e in saved["payloads"]] == [0, 1]
    saved["payloads"][0] = entry

    restored = make_registry()
    restored.encode = orjson.dumps  # the server's encoder
    loaded, errors = restored.restore(saved, 10.0)

    assert [client.queue_id for client in loaded] == [other.queue_id]
    [error] = errors
    assert holding.queue_id in error, error
    assert message in error, error


def test_a_table_of_payloads_that_is_not_a_list_loads_nothing():
    registry, _, _ = _populated()
    saved = _saved(registry, 1000.0)
    saved["payloads"] = {"0": {"type": "realm"}}
    with pytest.raises(ValueError, match="payloads is not a list"):
        make_registry().restore(saved, 1000.0)


def test_events_that_differ_only_in_their_internal_keys_stay_apart():
    registry = make_registry()
    mentioned = registry.allocate(1, REALM, options(), 0.0)
    other = registry.allocate(2, REALM, options(), 0.0)
    registry.deliver(message_event(internal_data={"mentioned": True}), [1], REALM, 1.0)
    registry.deliver(message_event(internal_data={"mentioned": False}), [2], REALM, 1.0)
    restored = make_registry()
    restored.restore(_saved(registry, 10.0), 10.0)
    for client, flag in ((mentioned, True), (other, False)):
        [event] = restored.get(client.queue_id, client.user_id).event_queue.to_dict()["events"]
        assert event["internal_data"] == {"mentioned": flag}


def test_restored_queue_continues_its_ids_and_acknowledgements():
    registry, plain, fancy = _populated()
    restored = make_registry()
    restored.restore(_saved(registry, 1000.0), 2000.0)
    new_plain = restored.get(plain.queue_id, 1)
    new_fancy = restored.get(fancy.queue_id, 2)

    restored.deliver(flag_event("read", "add", [9], 400), [1, 2], REALM, 2001.0)

    assert ids(new_plain.event_queue) == [2, 3]
    new_plain.event_queue.prune(1)  # re-sending the saved acknowledgement is fine
    with pytest.raises(EventAlreadyPruned):
        new_plain.event_queue.prune(0)
    # The unread collapsed event stayed unread, so the new flag change joins it.
    assert [(e["id"], e["type"]) for e in client_events(new_fancy)] == [
        (0, "realm"),
        (1, "realm"),
        (2, "realm"),
        (5, "message"),
        (6, "update_message_flags"),
    ]
    assert client_events(new_fancy)[-1]["messages"] == [7, 8, 9]


def test_restored_options_keep_filtering_and_public_delivery():
    registry, _, fancy = _populated()
    restored = make_registry()
    restored.restore(_saved(registry, 1000.0), 2000.0)
    new_fancy = restored.get(fancy.queue_id, 2)
    new_fancy.event_queue.contents()
    before = new_fancy.event_queue.next_event_id

    restored.deliver({"type": "presence"}, [2], REALM, 2001.0)  # not in event_types
    restored.deliver(message_event(stream="Verona"), [], REALM, 2002.0)  # narrow says no
    restored.deliver(message_event(stream="Denmark"), [], REALM, 2003.0)  # via all_public_streams

    assert new_fancy.event_queue.next_event_id == before + 1
    delivered = client_events(new_fancy)[-1]
    assert delivered["message"]["content_type"] == "text/html"


def test_restore_at_a_later_time_keeps_the_idle_age():
    registry, plain, fancy = _populated()
    saved = _saved(registry, 1000.0)  # plain idle 100 s of 600, fancy 600 s of 3600
    restored = make_registry()
    restored.restore(saved, 90_000.0)

    assert restored.get(plain.queue_id, 1).last_active == 89_900.0
    assert restored.get(fancy.queue_id, 2).last_active == 89_400.0
    assert restored.collect_expired(90_499.0) == []
    assert [c.queue_id for c in restored.collect_expired(90_500.0)] == [plain.queue_id]
    assert restored.collect_expired(92_999.0) == []
    assert [c.queue_id for c in restored.collect_expired(93_000.0)] == [fancy.queue_id]


def test_restore_orders_the_sweep_by_idle_age_not_by_snapshot_order():
    registry = make_registry()
    first = registry.allocate(1, REALM, options(), 0.0)
    second = registry.allocate(2, REALM, options(), 100.0)
    registry.touch(first, 400.0)
    saved = _saved(registry, 500.0)  # first idle 100 s, second idle 400 s
    assert [q["queue_id"] for q in saved["queues"]] == [first.queue_id, second.queue_id]

    restored = make_registry()
    restored.restore(saved, 10_000.0)

    assert [c.queue_id for c in restored.collect_expired(10_200.0)] == [second.queue_id]
    assert [c.queue_id for c in restored.collect_expired(10_500.0)] == [first.queue_id]


def test_parked_request_is_not_saved():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(), 0.0)
    registry.park(client, FakeWaiter(), 50.0)

    restored = make_registry()
    restored.restore(_saved(registry, 100.0), 1000.0)

    new_client = restored.get(client.queue_id, 1)
    assert new_client.waiter is None
    assert restored.parked == 0
    assert restored.collect_expired(1549.0) == []
    assert restored.collect_expired(1550.0) == [new_client]


def test_restore_caps_a_saved_lifespan_at_the_current_maximum():
    registry = make_registry()
    client = registry.allocate(1, REALM, options(lifespan_secs=86_400.0), 0.0)
    restored = make_registry(max_lifespan_secs=3600.0)

    restored.restore(_saved(registry, 0.0), 0.0)

    assert restored.get(client.queue_id, 1).options.lifespan_secs == 3600.0
    assert restored.collect_expired(3600.0)[0].queue_id == client.queue_id


def test_empty_registry_round_trips():
    saved = _saved(make_registry(), 0.0)

    assert saved == {"version": SNAPSHOT_VERSION, "payloads": [], "queues": [], "tombstones": []}
    assert make_registry().restore(saved, 0.0) == ([], [])


def _assert_nothing_loaded(registry, saved):
    assert len(registry) == 0
    assert registry.users() == 0
    for raw in saved.get("queues", []) if isinstance(saved.get("queues"), list) else []:
        if isinstance(raw, dict) and isinstance(raw.get("queue_id"), str):
            with pytest.raises(BadQueueId):
                registry.get(raw["queue_id"], raw.get("user_id"))
    # The registry is still usable and empty.
    assert registry.restore({"version": SNAPSHOT_VERSION, "queues": []}, 0.0) == ([], [])


@pytest.mark.parametrize("version", [None, 0, 3, "1", [2]])
def test_restore_rejects_unknown_versions(version):
    registry, _, _ = _populated()
    saved = _saved(registry, 1000.0)
    saved["version"] = version
    restored = make_registry()

    with pytest.raises(ValueError, match=r"unsupported queue snapshot version"):
        restored.restore(saved, 1000.0)

    _assert_nothing_loaded(restored, saved)


def test_restore_skips_a_duplicate_queue_id_and_keeps_the_first():
    registry, plain, fancy = _populated()
    saved = _saved(registry, 1000.0)
    saved["queues"].append(dict(saved["queues"][0]))
    restored = make_registry()

    loaded, errors = restored.restore(saved, 1000.0)

    assert {c.queue_id for c in loaded} == {plain.queue_id, fancy.queue_id}
    assert errors == [f"saved queue 2: queue {plain.queue_id} appears twice"]


def _break_last_queue(saved, how):
    raw = saved["queues"][-1]
    if how == "not-an-object":
        saved["queues"][-1] = ["q1"]
    elif how == "no-queue-id":
        del raw["queue_id"]
    elif how == "user-id-string":
        raw["user_id"] = "2"
    elif how == "no-event-queue":
        del raw["event_queue"]
    elif how == "events-out-of-order":
        raw["event_queue"]["events"].reverse()
    elif how == "unsupported-narrow":
        raw["options"]["narrow"] = [["search", "x"]]
    elif how == "event-types-not-list":
        raw["options"]["event_types"] = "message"
    elif how == "zero-lifespan":
        raw["options"]["lifespan_secs"] = 0
    elif how == "idle-not-number":
        raw["idle_secs"] = "600"
    elif how == "flag-not-bool":
        raw["options"]["apply_markdown"] = "yes"
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("not-an-object", "a saved queue is not an object"),
        ("no-queue-id", "queue_id is not a string"),
        ("user-id-string", "user_id or realm_id is not an integer"),
        ("no-event-queue", "options or event_queue is not an object"),
        ("events-out-of-order", "out of order"),
        ("unsupported-narrow", "Operator search not supported"),
        ("event-types-not-list", "event_types is not a list of strings"),
        ("zero-lifespan", "lifespan_secs is not a positive number"),
        ("idle-not-number", "idle_secs or age_secs is not a number"),
        ("flag-not-bool", "apply_markdown is not a boolean"),
    ],
)
def test_restore_skips_a_malformed_queue_and_loads_the_others(how, message):
    registry, plain, fancy = _populated()
    saved = _saved(registry, 1000.0)
    _break_last_queue(saved, how)
    restored = make_registry()

    loaded, errors = restored.restore(saved, 1000.0)

    assert [c.queue_id for c in loaded] == [plain.queue_id]
    assert len(errors) == 1
    assert errors[0].startswith("saved queue 1: ")
    assert message in errors[0]
    with pytest.raises(BadQueueId):
        restored.get(fancy.queue_id, 2)


def test_restore_rejects_queues_that_are_not_a_list():
    restored = make_registry()

    with pytest.raises(ValueError, match="queues is not a list"):
        restored.restore({"version": SNAPSHOT_VERSION, "queues": {}}, 0.0)

    assert len(restored) == 0


def test_restore_rejects_tombstones_that_are_not_a_list():
    registry, _, _ = _populated()
    saved = _saved(registry, 1000.0)
    saved["tombstones"] = 5
    restored = make_registry()

    with pytest.raises(ValueError, match="tombstones is not a list"):
        restored.restore(saved, 1000.0)

    _assert_nothing_loaded(restored, saved)


def test_tombstones_survive_a_restore():
    registry = make_registry(max_events=1)
    client = registry.allocate(1, REALM, options(), 0.0)
    registry.deliver({"type": "a"}, [1], REALM, 1.0)
    registry.deliver({"type": "b"}, [1], REALM, 2.0)  # overflows
    restored = make_registry()

    restored.restore(_saved(registry, 3.0), 3.0)

    with pytest.raises(BadQueueId) as raised:
        restored.get(client.queue_id, 1)
    assert raised.value.reason == "overflow"
