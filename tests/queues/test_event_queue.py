"""EventQueue: ids, acknowledgement (prune), flag collapsing, saved form.

Zulip's queue mechanics as its test_event_queue.py checks them, with the
semantics of its current code (`restart` events no longer collapse).
"""

from __future__ import annotations

import gc
import json

import pytest

from queues.errors import EventAlreadyPruned, EventNotInQueue
from queues.event_queue import EventQueue
from queues.payload import Payload, collapse_key
from tests.queues.helpers import (
    encode,
    flag_event,
    ids,
    message_event,
    payload,
    push,
    read_events,
    round_trip,
    wire_events,
)

ARBITRARY = {"type": "arbitrary", "x": "foo", "y": 42, "z": False, "timestamp": "1"}


def test_one_event_is_delivered_with_id_zero():
    queue = EventQueue(encode)
    assert queue.empty()

    assert push(queue, dict(ARBITRARY)) == 0

    assert not queue.empty()
    assert len(queue) == 1
    assert read_events(queue) == [{"id": 0, **ARBITRARY}]
    assert wire_events(queue) == [{"id": 0, **ARBITRARY}]


def test_one_event_round_trips_through_dict():
    queue = EventQueue(encode)
    push(queue, dict(ARBITRARY))

    restored = round_trip(queue)

    assert read_events(restored) == [{"id": 0, **ARBITRARY}]
    assert restored.next_event_id == 1
    assert restored.newest_pruned_id == -1


def test_round_trip_without_newest_pruned_id_defaults_to_minus_one():
    queue = EventQueue(encode)
    push(queue, dict(ARBITRARY))
    saved = queue.to_dict()
    del saved["newest_pruned_id"]

    restored = EventQueue.from_dict(saved, encode)

    assert restored.newest_pruned_id == -1
    assert restored.to_dict() == queue.to_dict()
    assert read_events(restored) == [{"id": 0, **ARBITRARY}]
    # The default -1 is a real acknowledgement point: re-sending it is fine.
    restored.prune(-1)
    assert ids(restored) == [0]


def test_restarts_are_ordinary_events_and_read_flags_collapse():
    # Scenario 5 with current semantics: restarts no longer collapse.
    queue = EventQueue(encode)
    pushed = [
        push(queue, flag_event("read", "add", [101], 1)),
        push(queue, flag_event("read", "add", [201, 202], 2)),
        push(queue, {"type": "unknown"}),
        push(queue, {"type": "restart", "server_generation": "1"}),
        push(queue, flag_event("read", "add", [301, 302, 303], 3)),
        push(queue, {"type": "restart", "server_generation": "2"}),
        push(queue, flag_event("read", "add", [401, 402, 403, 404], 4)),
    ]
    assert pushed == [0, 1, 2, 3, 4, 5, 6]
    assert len(queue) == 4

    assert read_events(queue) == [
        {"id": 2, "type": "unknown"},
        {"id": 3, "type": "restart", "server_generation": "1"},
        {"id": 5, "type": "restart", "server_generation": "2"},
        {
            **flag_event(
                "read", "add", [101, 201, 202, 301, 302, 303, 401, 402, 403, 404], timestamp=4
            ),
            "id": 6,
        },
    ]


def test_flag_event_after_read_becomes_a_new_event():
    queue = EventQueue(encode)
    push(queue, {"type": "unknown"})
    push(queue, flag_event("read", "add", [101], 1))
    push(queue, flag_event("read", "add", [102], 2))
    assert ids(queue) == [0, 2]  # reading materializes the collapsed event at id 2

    assert push(queue, flag_event("read", "add", [103], 3)) == 3

    assert read_events(queue) == [
        {"id": 0, "type": "unknown"},
        {**flag_event("read", "add", [101, 102], 2), "id": 2},
        {**flag_event("read", "add", [103], 3), "id": 3},
    ]


def test_flag_add_events_collapse_into_newest_id():
    # Scenario 6.
    queue = EventQueue(encode)
    push(queue, flag_event("read", "add", [1, 2, 3], 1))
    push(queue, flag_event("read", "add", [4, 5, 6], 2))
    saved = round_trip(queue)  # the collapsed event survives the saved form unread

    for q in (queue, saved):
        assert read_events(q) == [{**flag_event("read", "add", [1, 2, 3, 4, 5, 6], 2), "id": 1}]
    assert round_trip(queue).to_dict()["virtual_events"] == {}


def test_flag_remove_of_other_flag_collapses():
    # Scenario 7: removing a flag other than "read" collapses.
    queue = EventQueue(encode)
    push(queue, flag_event("collapsed", "remove", [1, 2, 3], 1))
    push(queue, flag_event("collapsed", "remove", [4, 5, 6], 2))

    assert read_events(queue) == [
        {**flag_event("collapsed", "remove", [1, 2, 3, 4, 5, 6], 2), "id": 1}
    ]


def test_collapsed_messages_are_concatenated_without_dedup():
    queue = EventQueue(encode)
    push(queue, flag_event("starred", "add", [1, 2]))
    push(queue, flag_event("starred", "add", [2, 3]))

    assert read_events(queue) == [{**flag_event("starred", "add", [1, 2, 2, 3]), "id": 1}]


def test_mark_unread_never_collapses():
    queue = EventQueue(encode)
    push(queue, flag_event("read", "remove", [1], 1))
    push(queue, flag_event("read", "remove", [2], 2))

    assert read_events(queue) == [
        {**flag_event("read", "remove", [1], 1), "id": 0},
        {**flag_event("read", "remove", [2], 2), "id": 1},
    ]


def test_all_messages_flag_events_never_collapse():
    queue = EventQueue(encode)
    push(queue, flag_event("read", "add", [], 1, all_messages=True))
    push(queue, flag_event("read", "add", [], 2, all_messages=True))

    assert ids(queue) == [0, 1]


def test_different_full_types_collapse_separately():
    queue = EventQueue(encode)
    push(queue, flag_event("read", "add", [1], 1))
    push(queue, flag_event("starred", "add", [2], 2))
    push(queue, flag_event("read", "add", [3], 3))
    # Unstarring settles the pending stars (and the rest) before it ...
    push(queue, flag_event("starred", "remove", [4], 4))
    # ... and starring again settles the pending unstar: no reordering of
    # opposite changes of one flag (unlike Zulip).
    push(queue, flag_event("starred", "add", [5], 5))

    assert read_events(queue) == [
        {**flag_event("starred", "add", [2], 2), "id": 1},
        {**flag_event("read", "add", [1, 3], 3), "id": 2},
        {**flag_event("starred", "remove", [4], 4), "id": 3},
        {**flag_event("starred", "add", [5], 5), "id": 4},
    ]


@pytest.mark.parametrize(
    ("event", "key"),
    [
        (flag_event("read", "add", [1]), "flags/add/read"),
        (flag_event("starred", "remove", [1]), "flags/remove/starred"),
        (flag_event("read", "remove", [1]), None),
        (flag_event("read", "add", [1], all_messages=True), None),
        ({"type": "restart", "server_generation": 1}, None),
        (
            {"type": "update_message_flags", "op": "add", "flag": "read", "messages": [1]},
            "flags/add/read",
        ),
        ({**flag_event("read", "add", [1]), "messages": None}, None),
        ({"type": "update_message_flags", "op": "add", "messages": [1]}, None),
    ],
)
def test_collapse_key_names_only_collapsible_flag_events(event, key):
    assert collapse_key(event) == key


def test_collapse_key_prefers_legacy_operation_over_op():
    event = {**flag_event("read", "add", [1]), "op": "remove"}

    assert collapse_key(event) == "flags/add/read"


def test_collapsed_event_is_held_apart_until_read_then_pruned():
    # Scenario 8, retargeted from restart to flags/add/starred.
    queue = EventQueue(encode)
    starred = flag_event("starred", "add", [7], 1)
    push(queue, starred)
    assert queue.to_dict() == {
        "next_event_id": 1,
        "newest_pruned_id": -1,
        "events": [],
        "virtual_events": {"flags/add/starred": {**starred, "id": 0}},
    }
    round_trip(queue)

    push(queue, {"type": "unknown", "timestamp": "1"})
    saved = round_trip(queue).to_dict()
    assert saved["events"] == [{"id": 1, "type": "unknown", "timestamp": "1"}]
    assert saved["virtual_events"] == {"flags/add/starred": {**starred, "id": 0}}

    assert read_events(queue) == [
        {**starred, "id": 0},
        {"id": 1, "type": "unknown", "timestamp": "1"},
    ]
    assert round_trip(queue).to_dict()["virtual_events"] == {}

    queue.prune(0)
    assert ids(queue) == [1]
    assert round_trip(queue).to_dict()["newest_pruned_id"] == 0

    queue.prune(1)
    assert read_events(queue) == []
    assert round_trip(queue).to_dict() == {
        "next_event_id": 2,
        "newest_pruned_id": 1,
        "events": [],
        "virtual_events": {},
    }


def test_merging_does_not_mutate_a_payload_shared_with_another_queue():
    first, second = EventQueue(encode), EventQueue(encode)
    shared = payload(flag_event("read", "add", [1], 1))
    first.push(shared)
    second.push(shared)

    push(first, flag_event("read", "add", [2], 2))

    assert shared.event["messages"] == [1]
    assert json.loads(b"{" + shared.tail)["messages"] == [1]
    assert [e["messages"] for e in read_events(first)] == [[1, 2]]
    assert [e["messages"] for e in read_events(second)] == [[1]]
    assert wire_events(first)[0]["messages"] == [1, 2]


def test_byte_budget_follows_push_merge_and_prune():
    queue = EventQueue(encode)
    a = payload({"type": "a", "data": "x" * 100})
    queue.push(a)
    assert queue.bytes == a.size
    push(queue, flag_event("read", "add", [1], 1))
    push(queue, flag_event("read", "add", [2], 2))
    merged = queue.contents()[1][1]
    assert queue.bytes == a.size + merged.size

    queue.prune(0)
    assert queue.bytes == merged.size
    queue.prune(2)
    assert queue.bytes == 0


def test_last_id_sees_unread_collapsed_events_without_reading_them():
    queue = EventQueue(encode)
    push(queue, {"type": "a"})
    push(queue, flag_event("read", "add", [1]))

    assert queue.last_id() == 1
    assert queue.to_dict()["virtual_events"] != {}  # still unread
    assert EventQueue(encode).last_id() is None


# -- prune ------------------------------------------------------------------


def _queue_with(count: int) -> EventQueue:
    queue = EventQueue(encode)
    for n in range(count):
        push(queue, {"type": "n", "n": n})
    return queue


def test_prune_drops_acknowledged_events():
    queue = _queue_with(3)

    queue.prune(1)

    assert ids(queue) == [2]
    assert queue.newest_pruned_id == 1


def test_partial_prune_keeps_the_rest_in_order_with_their_bytes():
    queue = EventQueue(encode)
    sizes = [payload({"type": "n", "data": "x" * (10 * n)}) for n in range(5)]
    for each in sizes:
        queue.push(each)

    queue.prune(2)

    assert ids(queue) == [3, 4]
    assert queue.bytes == sizes[3].size + sizes[4].size
    queue.push(payload({"type": "n"}))
    queue.prune(3)
    assert ids(queue) == [4, 5]


def test_prune_minus_one_on_a_new_queue_is_accepted():
    queue = _queue_with(2)

    queue.prune(-1)

    assert ids(queue) == [0, 1]
    assert queue.newest_pruned_id == -1


def test_resending_last_acknowledged_id_redelivers():
    queue = _queue_with(3)
    queue.prune(0)
    assert ids(queue) == [1, 2]

    queue.prune(0)

    assert ids(queue) == [1, 2]
    assert queue.newest_pruned_id == 0


def test_resending_last_acknowledged_id_on_an_emptied_queue_is_accepted():
    queue = _queue_with(2)
    queue.prune(1)

    queue.prune(1)

    assert ids(queue) == []
    assert push(queue, {"type": "later"}) == 2


def test_prune_then_fetch_rejects_older_id():
    queue = _queue_with(3)
    queue.prune(1)

    with pytest.raises(
        EventAlreadyPruned, match=r"^An event newer than 0 has already been pruned!$"
    ):
        queue.prune(0)

    assert ids(queue) == [2]
    assert queue.newest_pruned_id == 1


def test_minus_one_after_a_prune_is_rejected_as_already_pruned():
    queue = _queue_with(2)
    queue.prune(0)

    with pytest.raises(EventAlreadyPruned) as info:
        queue.prune(-1)

    assert str(info.value) == "An event newer than -1 has already been pruned!"
    assert info.value.last_event_id == -1


@pytest.mark.parametrize("last_event_id", [3, 4, 1000])
def test_ack_of_id_not_yet_issued_is_rejected_and_changes_nothing(last_event_id):
    queue = _queue_with(3)  # ids 0, 1, 2; next is 3

    with pytest.raises(EventNotInQueue) as info:
        queue.prune(last_event_id)

    assert str(info.value) == f"Event {last_event_id} was not in this queue"
    assert info.value.last_event_id == last_event_id
    assert ids(queue) == [0, 1, 2]
    assert queue.newest_pruned_id == -1


def test_ack_of_id_skipped_by_collapsing_is_rejected_and_changes_nothing():
    queue = EventQueue(encode)
    push(queue, {"type": "first"})  # 0
    push(queue, flag_event("read", "add", [1], 1))  # 1, folded into 2
    push(queue, flag_event("read", "add", [2], 2))  # 2
    push(queue, {"type": "last"})  # 3
    assert ids(queue) == [0, 2, 3]

    # Zulip would have pruned event 0 as a side effect; we keep everything.
    with pytest.raises(EventNotInQueue, match=r"^Event 1 was not in this queue$"):
        queue.prune(1)

    assert ids(queue) == [0, 2, 3]
    assert queue.newest_pruned_id == -1
    queue.prune(2)
    assert ids(queue) == [3]


def test_ack_of_an_already_dropped_gap_id_is_rejected_as_pruned():
    queue = EventQueue(encode)
    push(queue, flag_event("read", "add", [1], 1))  # 0, folded into 1
    push(queue, flag_event("read", "add", [2], 2))  # 1
    push(queue, {"type": "x"})  # 2
    assert ids(queue) == [1, 2]
    queue.prune(1)

    with pytest.raises(EventAlreadyPruned, match="newer than 0"):
        queue.prune(0)
    assert ids(queue) == [2]


# -- saved form -------------------------------------------------------------


def test_round_trip_keeps_internal_data_but_clients_never_see_it():
    queue = EventQueue(encode)
    push(queue, {"type": "message", "message": {"id": 1}, "internal_data": {"mentioned": True}})

    saved = round_trip(queue).to_dict()

    assert saved["events"][0]["internal_data"] == {"mentioned": True}
    assert "internal_data" not in read_events(queue)[0]
    assert "internal_data" not in wire_events(queue)[0]


@pytest.mark.parametrize(
    ("saved", "message"),
    [
        ({"events": []}, "next_event_id is not an integer"),
        ({"next_event_id": True}, "next_event_id is not an integer"),
        ({"next_event_id": 1, "newest_pruned_id": "0"}, "newest_pruned_id is not an integer"),
        ({"next_event_id": 1, "events": {}}, "events is not a list"),
        ({"next_event_id": 1, "events": ["x"]}, "a stored event is not an object"),
        ({"next_event_id": 1, "events": [{"type": "a"}]}, "no integer id"),
        ({"next_event_id": 1, "events": [{"id": 0}]}, "no string type"),
        (
            {"next_event_id": 3, "events": [{"id": 1, "type": "a"}, {"id": 1, "type": "b"}]},
            "out of order at 1",
        ),
        (
            {"next_event_id": 3, "newest_pruned_id": 1, "events": [{"id": 1, "type": "a"}]},
            "out of order at 1",
        ),
        ({"next_event_id": 1, "events": [{"id": 1, "type": "a"}]}, "next_event_id is not above"),
        ({"next_event_id": 1, "newest_pruned_id": 1}, "newest_pruned_id is not below"),
        ({"next_event_id": 1, "virtual_events": []}, "virtual_events is not an object"),
        (
            {
                "next_event_id": 1,
                "virtual_events": {"flags/add/read": {"id": 0, "type": "restart"}},
            },
            "has another type",
        ),
        (
            {
                "next_event_id": 1,
                "virtual_events": {
                    "flags/add/starred": {**flag_event("read", "add", [1]), "id": 0}
                },
            },
            "has another type",
        ),
        (
            {
                "next_event_id": 1,
                "virtual_events": {"flags/add/read": {**flag_event("read", "add", [1]), "id": 5}},
            },
            "next_event_id is not above",
        ),
    ],
)
def test_from_dict_rejects_inconsistent_data(saved, message):
    with pytest.raises(ValueError, match=message):
        EventQueue.from_dict(saved, encode)


def test_from_dict_rejects_a_collapsed_event_sharing_an_id_with_a_held_event():
    saved = {
        "next_event_id": 2,
        "newest_pruned_id": -1,
        "events": [{"id": 1, "type": "a"}],
        "virtual_events": {"flags/add/read": {**flag_event("read", "add", [1]), "id": 1}},
    }

    # Two events with id 1 would be delivered; ids must be unique in a queue.
    with pytest.raises(ValueError, match="1"):
        EventQueue.from_dict(saved, encode)


def test_payload_is_encoded_once_and_spliced_with_each_queue_id():
    shared = payload({"type": "a", "internal_data": {"k": 1}, "v": [1, 2]})
    assert isinstance(shared, Payload)
    first, second = EventQueue(encode), EventQueue(encode)
    push(first, {"type": "filler"})
    first.push(shared)
    second.push(shared)

    assert wire_events(first)[1] == {"id": 1, "type": "a", "v": [1, 2]}
    assert wire_events(second)[0] == {"id": 0, "type": "a", "v": [1, 2]}
    assert shared.stored_event(5) == {"id": 5, "type": "a", "internal_data": {"k": 1}, "v": [1, 2]}
    assert shared.size == len(shared.tail) + 64


def test_acknowledging_past_an_unread_collapsed_event_drops_it_too():
    queue = EventQueue(encode)
    push(queue, flag_event("read", "add", [1]))  # id 0, held collapsed
    push(queue, {"type": "other"})  # id 1
    queue.prune(1)
    assert queue.empty()
    assert queue.bytes == 0
    assert read_events(queue) == []


def test_an_opposite_flag_change_stops_the_collapse_before_it():
    queue = EventQueue(encode)
    push(queue, flag_event("starred", "add", [1], 1))  # id 0
    push(queue, flag_event("starred", "remove", [1], 2))  # id 1: settles id 0 first
    push(queue, flag_event("starred", "add", [2], 3))  # id 2: settles id 1 first
    push(queue, {"type": "other"})  # id 3
    push(queue, flag_event("starred", "add", [3], 4))  # id 4: folds into id 2
    events = read_events(queue)
    assert [(e["id"], e.get("op"), e.get("messages")) for e in events] == [
        (0, "add", [1]),
        (1, "remove", [1]),
        (3, None, None),
        (4, "add", [2, 3]),
    ]


def test_a_queued_message_is_one_object_for_the_gc():
    """A queue may hold thousands of events (a resume fills one with a
    thousand): each must add at most its payload for Python's cyclic GC to
    scan, not the decoded event's dicts and lists, nor a tuple per event."""
    event = message_event(internal_data={"mentioned": True}) | {"flags": ["read"]}
    built = Payload.build(event, encode)
    built.origin = (1.0, None, 3)
    queue = EventQueue(encode)
    queue.push(built)
    queue.push(built)
    gc.collect()
    # (Its class aside: one object for all payloads.)
    tracked = [r for r in gc.get_referents(built) if gc.is_tracked(r) and r is not Payload]
    assert tracked == []
    # The queue's own storage: ids (not tracked) and the shared payload.
    assert [r for r in gc.get_referents(queue._flat) if gc.is_tracked(r)] == [built, built]
    # What it held is all still there for a client and a snapshot.
    assert built.client_event(5) == {k: v for k, v in event.items() if k != "internal_data"} | {
        "id": 5
    }
    assert json.loads(built.stored_json(5)) == built.stored_event(5) == event | {"id": 5}


def test_after_gives_the_events_above_an_id_in_order():
    """What an event stream writes next (`after`): every event above the
    id it has written, from an empty queue, one event, or many, whether
    it is up to date, one behind or further."""
    queue = EventQueue(encode)
    assert queue.after(-1) == []
    for count in range(1, 6):
        push(queue, dict(ARBITRARY, y=count))
        held = queue.contents()
        for written in range(-1, count + 1):
            after = queue.after(written)
            assert [event_id for event_id, _ in after] == list(range(written + 1, count))
            assert after == [item for item in held if item[0] > written]
    queue.prune(2)
    assert [event_id for event_id, _ in queue.after(0)] == [3, 4]
    assert [event_id for event_id, _ in queue.after(3)] == [4]
