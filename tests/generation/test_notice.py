"""The notice contract: what producers may send to the server, and the
message a producer gets for each way of getting it wrong."""

from __future__ import annotations

import re

import orjson
import pytest

from generation.errors import BadNotice
from generation.notice import (
    MAX_EVENT_TYPE_LENGTH,
    Notice,
    encode_notice,
    make_notice,
    parse_notice,
    parse_notice_for,
)

MESSAGE_EVENT = {"type": "message", "message": {"id": 1, "content": "hi"}}


def test_notice_with_user_ids_is_valid():
    notice = make_notice({"type": "realm", "op": "update"}, [1, 2, 3], realm_id=4)

    assert notice == Notice({"type": "realm", "op": "update"}, [1, 2, 3], 4)


def test_notice_with_user_dicts_keeps_per_user_data():
    users = [{"id": 1, "flags": ["read"]}, {"id": 2, "flags": []}, 3]

    notice = make_notice(MESSAGE_EVENT, users)

    assert notice.users == users
    assert notice.realm_id is None


def test_notice_with_no_users_is_valid():
    assert make_notice({"type": "realm"}, []).users == []


def test_notice_copies_what_the_producer_passed():
    event = {"type": "realm", "op": "update"}
    user = {"id": 1, "flags": ["read"]}

    notice = make_notice(event, [user])
    event["op"] = "changed"
    user["id"] = 99

    assert notice.event == {"type": "realm", "op": "update"}
    assert notice.users == [{"id": 1, "flags": ["read"]}]


def test_duplicate_users_keep_the_first():
    notice = make_notice(
        MESSAGE_EVENT,
        [1, {"id": 1, "flags": ["read"]}, {"id": 2, "flags": ["starred"]}, 2, 3, 1],
    )

    assert notice.users == [1, {"id": 2, "flags": ["starred"]}, 3]


def test_notice_round_trips_through_its_wire_form():
    notice = make_notice(MESSAGE_EVENT, [1, {"id": 2, "flags": ["read"]}], realm_id=7)

    wire = encode_notice(notice)

    assert parse_notice(wire) == notice
    assert parse_notice(wire.decode()) == notice


def test_wire_form_without_realm_id_omits_it():
    notice = make_notice({"type": "realm"}, [1])

    assert encode_notice(notice) == b'{"event":{"type":"realm"},"users":[1]}'
    assert parse_notice(b'{"event":{"type":"realm"},"users":[1]}').realm_id is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[1, 2]", "notice is not an object"),
        (b'"notice"', "notice is not an object"),
        (b'{"users": [1]}', "notice needs 'event' and 'users'"),
        (b'{"event": {"type": "realm"}}', "notice needs 'event' and 'users'"),
        (b'{"event": [], "users": [1]}', "event is not an object"),
        (b'{"event": "realm", "users": [1]}', "event is not an object"),
        (b'{"event": {}, "users": [1]}', "event has no string 'type'"),
        (b'{"event": {"type": ""}, "users": [1]}', "event has no string 'type'"),
        (b'{"event": {"type": 5}, "users": [1]}', "event has no string 'type'"),
        (b'{"event": {"type": null}, "users": [1]}', "event has no string 'type'"),
        (
            b'{"event": {"type": "realm", "id": 3}, "users": [1]}',
            "event must not carry an 'id': ids are assigned per queue",
        ),
        (
            b'{"event": {"type": "message"}, "users": [1]}',
            "a message event needs a 'message' object",
        ),
        (
            b'{"event": {"type": "message", "message": "hi"}, "users": [1]}',
            "a message event needs a 'message' object",
        ),
        (b'{"event": {"type": "realm"}, "users": "1,2"}', "users is not a list"),
        (b'{"event": {"type": "realm"}, "users": {"id": 1}}', "users is not a list"),
        (b'{"event": {"type": "realm"}, "users": 1}', "users is not a list"),
        (b'{"event": {"type": "realm"}, "users": null}', "users is not a list"),
        (
            b'{"event": {"type": "realm"}, "users": [1, true]}',
            r"users\[1\] is neither a user id nor an object with 'id'",
        ),
        (
            b'{"event": {"type": "realm"}, "users": ["1"]}',
            r"users\[0\] is neither a user id nor an object with 'id'",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [1.5]}',
            r"users\[0\] is neither a user id nor an object with 'id'",
        ),
        (b'{"event": {"type": "realm"}, "users": [{}]}', r"users\[0\] has no integer 'id'"),
        (
            b'{"event": {"type": "realm"}, "users": [1, {"id": "2"}]}',
            r"users\[1\] has no integer 'id'",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [{"id": false}]}',
            r"users\[0\] has no integer 'id'",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [{"id": 1, "flags": "read"}]}',
            r"users\[0\]\.flags is not a list of strings",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [{"id": 1, "flags": ["read", 2]}]}',
            r"users\[0\]\.flags is not a list of strings",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [{"id": 1, "flags": null}]}',
            r"users\[0\]\.flags is not a list of strings",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [1], "realm_id": "1"}',
            "realm_id is not an integer",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [1], "realm_id": true}',
            "realm_id is not an integer",
        ),
        (
            b'{"event": {"type": "realm"}, "users": [1], "realm_id": 1.0}',
            "realm_id is not an integer",
        ),
        # Delivery builds a set of these (queues/specialize.py).
        (
            b'{"event": {"type": "message", "message": {},'
            b' "user_ids_without_access_to_sender": [{"id": 2}]}, "users": [1]}',
            "'user_ids_without_access_to_sender' is not a list of user ids",
        ),
        (
            b'{"event": {"type": "message", "message": {},'
            b' "user_ids_without_access_to_sender": 2}, "users": [1]}',
            "'user_ids_without_access_to_sender' is not a list of user ids",
        ),
    ],
)
def test_invalid_notice_is_rejected_with_a_clear_message(raw, message):
    with pytest.raises(BadNotice, match=message):
        parse_notice(raw)


def test_event_type_longer_than_the_limit_is_rejected():
    long_type = "x" * (MAX_EVENT_TYPE_LENGTH + 1)

    with pytest.raises(BadNotice, match=f"longer than {MAX_EVENT_TYPE_LENGTH} characters"):
        make_notice({"type": long_type}, [1])
    assert make_notice({"type": long_type[:-1]}, [1]).event["type"] == long_type[:-1]


@pytest.mark.parametrize("raw", [b"", b"{", b"{'event': 1}", b"\xff", "{nope"])
def test_invalid_json_is_rejected(raw):
    with pytest.raises(BadNotice, match=r"^notice is not valid JSON: "):
        parse_notice(raw)


def test_invalid_user_is_reported_even_after_a_duplicate():
    with pytest.raises(BadNotice, match=r"users\[2\]"):
        make_notice({"type": "realm"}, [1, 1, "x"])


def test_make_notice_rejects_a_non_mapping_event():
    with pytest.raises(BadNotice, match="event is not an object"):
        make_notice([("type", "realm")], [1])  # type: ignore[arg-type]


@pytest.mark.parametrize("realm_id", ["5", 5.0, True, [5]])
def test_make_notice_rejects_a_realm_id_that_is_not_an_int(realm_id):
    with pytest.raises(BadNotice, match="realm_id is not an integer"):
        make_notice({"type": "realm"}, [1], realm_id)


def test_bad_notice_is_a_value_error():
    assert issubclass(BadNotice, ValueError)


@pytest.mark.parametrize(
    ("user", "shadowed"),
    [
        ({"id": 1, "type": 1}, "'type'"),
        ({"id": 1, "type": "heartbeat"}, "'type'"),
        ({"id": 1, "op": "remove"}, "'op'"),
        ({"id": 1, "op": "x", "type": "y"}, "'op', 'type'"),
    ],
)
def test_user_data_may_not_override_the_event(user, shadowed):
    with pytest.raises(BadNotice, match=f"users\\[0\\] would override the event's {shadowed}"):
        make_notice({"type": "realm", "op": "update"}, [user])


def test_user_data_adds_keys_the_event_does_not_have():
    notice = make_notice({"type": "update_message"}, [{"id": 1, "flags": ["read"], "extra": 2}])
    assert notice.users == [{"id": 1, "flags": ["read"], "extra": 2}]


def test_parse_notice_for_keeps_only_the_users_own_entry_and_validates_it():
    notice = {
        "event": {"type": "message", "message": {"id": 5}},
        "users": [1, {"id": 2, "flags": ["read"]}, {"id": 2, "flags": []}, 3],
        "realm_id": 9,
    }
    raw = orjson.dumps(notice)
    full = parse_notice(raw)
    assert parse_notice_for(raw, 2, 40) == Notice(
        full.event, [{"id": 2, "flags": ["read"]}], 9, 40
    )  # the first entry of a user wins, as in parse_notice
    assert parse_notice_for(raw, 3).users == [3]
    assert parse_notice_for(raw, 4).users == []  # not named: the event alone
    # The user's own entry is validated; the others are not looked at.
    bad = orjson.dumps(notice | {"users": [{"id": 2, "flags": "read"}, {"id": "x"}]})
    with pytest.raises(BadNotice, match="flags is not a list"):
        parse_notice_for(bad, 2)
    assert parse_notice_for(bad, 4).users == []
    with pytest.raises(BadNotice, match="flags is not a list"):
        parse_notice(bad)  # the whole notice: any bad entry refuses it
    assert parse_notice_for(orjson.dumps(notice | {"users": [{"id": "x"}, 4]}), 4).users == [4]
    # The event is validated as always.
    with pytest.raises(BadNotice, match="'type'"):
        parse_notice_for(orjson.dumps({"event": {}, "users": [2]}), 2)


# -- notify: who may be notified of a message (docs/notifications.md) ---------

MESSAGE = {"type": "message", "message": {"id": 7}}


def test_notify_travels_with_a_message_and_back():
    notice = make_notice(MESSAGE, [1, {"id": 2, "flags": []}], 5, {"email": [2, 2], "push": []})
    assert notice.notify == {"email": [2], "push": []}
    again = parse_notice(encode_notice(notice))
    assert again.notify == {"email": [2], "push": []}
    assert again.users == notice.users


def test_notify_without_anyone_is_none():
    assert make_notice(MESSAGE, [1], 5, {"email": [], "push": []}).notify is None
    assert parse_notice(encode_notice(make_notice(MESSAGE, [1], 5))).notify is None


@pytest.mark.parametrize(
    ("notify", "error"),
    [
        ([1], "notify is not an object"),
        ({"sms": [1]}, "unknown kind 'sms'"),
        ({"email": "1"}, "notify.email is not a list"),
        ({"email": [True]}, "other than user ids"),
        ({"push": [3]}, "names users the notice is not for: [3]"),
    ],
)
def test_a_bad_notify_is_refused(notify, error):
    with pytest.raises(BadNotice, match=re.escape(error)):
        make_notice(MESSAGE, [1, 2], 5, notify)


def test_only_a_message_may_carry_notify():
    with pytest.raises(BadNotice, match="only a message event"):
        make_notice({"type": "typing"}, [1], 5, {"email": [1]})


def test_a_shards_part_keeps_only_its_users_in_notify():
    notice = make_notice(MESSAGE, [1, 2, 3], 5, {"email": [1, 3], "push": [3]})
    assert notice.for_users([1, 2]).notify == {"email": [1], "push": []}
    assert notice.for_users([2]).notify is None
    part = notice.for_users([{"id": 3, "flags": []}])
    assert part.notify == {"email": [3], "push": [3]}
    assert part.users == [{"id": 3, "flags": []}]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"event": 5, "users": [1], "position": -1}', "event is not an object"),
        (b'{"event": {"type": "x"}, "users": [true], "position": 0}', "users[0]"),
        (b'{"event": {"type": "x"}, "users": [1], "position": -1}', "position"),
    ],
)
def test_a_bad_position_is_reported_after_the_notices_other_faults(raw, message):
    with pytest.raises(BadNotice, match=re.escape(message)):
        parse_notice(raw)
