"""Widgets over HTTP against the real server: a `/poll` message carries its
widget in its event and in history, `POST submessage` adds a vote that
everyone who may see the message is told of, and bad input is a JSON 400."""

from __future__ import annotations

import json

import pytest

from tests.support import error, ok, wait_for

POLL = "/poll Lunch?\nPizza\n- Salad"
WIDGET = (
    '{"widget_type": "poll", "extra_data": {"question": "Lunch?", "options": ["Pizza", "Salad"]}}'
)


def events_of(api, queue_id, count):
    return wait_for(
        lambda: (found := api.events(queue_id, -1)) and len(found) >= count and found,
        what=f"{count} events",
    )


def test_a_poll_is_voted_on_and_everyone_who_may_see_it_is_told(apis, domain):
    hamlet, othello, polonius = apis["hamlet"], apis["othello"], apis["polonius"]
    theirs = othello.register(event_types=["message", "submessage"])["queue_id"]
    outsider = polonius.register(event_types=["message", "submessage"])["queue_id"]
    message_id = ok(
        hamlet.request("POST", "messages", type="stream", to="Denmark", topic="t", content=POLL)
    )["id"]
    [event] = events_of(othello, theirs, 1)
    [widget] = event["message"]["submessages"]
    assert (widget["msg_type"], widget["content"], widget["sender_id"]) == (
        "widget",
        WIDGET,
        domain.id("hamlet"),
    )
    vote = json.dumps({"type": "vote", "key": "canned,1", "vote": 1})
    ok(
        othello.request(
            "POST", "submessage", message_id=message_id, msg_type="widget", content=vote
        )
    )
    submessage = events_of(othello, theirs, 2)[1]
    assert submessage == {
        "id": submessage["id"],
        "type": "submessage",
        "msg_type": "widget",
        "content": vote,
        "message_id": message_id,
        "sender_id": domain.id("othello"),
        "submessage_id": submessage["submessage_id"],
    }
    # Polonius (a guest outside Denmark) hears of neither.
    assert polonius.events(outsider, -1) == []
    # History carries the whole log, oldest first.
    fetched = ok(hamlet.request("GET", f"messages/{message_id}"))["message"]
    assert [(s["id"], s["content"]) for s in fetched["submessages"]] == [
        (widget["id"], WIDGET),
        (submessage["submessage_id"], vote),
    ]
    page = ok(
        hamlet.request("GET", "messages", anchor=message_id, num_before=0, num_after=0, narrow=[])
    )["messages"]
    assert [len(m["submessages"]) for m in page] == [2]


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"content": "{not json"}, "Invalid json for submessage"),
        (
            {"content": '{"type": "vote", "key": "canned,0", "vote": 5}'},
            'Invalid poll data["vote"]',
        ),
        (
            {"content": '{"type": "question", "question": "Mine"}'},
            "You can't edit a question unless you are the author.",
        ),
        ({"msg_type": "chess"}, "Invalid msg_type"),
        ({"message_id": 10**15}, "Invalid message(s)"),
        ({"message_id": "x"}, 'Argument "message_id" is not valid JSON.'),
        ({"content": None}, "Missing 'content' argument"),
    ],
)
def test_submessage_refusals_are_json_400s(apis, params, msg):
    message_id = ok(
        apis["hamlet"].request(
            "POST", "messages", type="stream", to="Denmark", topic="t", content=POLL
        )
    )["id"]
    fields = {"message_id": message_id, "msg_type": "widget", "content": "{}"} | params
    fields = {k: v for k, v in fields.items() if v is not None}
    body = error(apis["othello"].request("POST", "submessage", **fields))
    assert body["msg"].startswith(msg), body


def test_only_the_sender_starts_the_log_of_a_plain_message(apis):
    message_id = ok(
        apis["hamlet"].request(
            "POST", "messages", type="stream", to="Denmark", topic="t", content="plain"
        )
    )["id"]
    body = error(
        apis["othello"].request(
            "POST", "submessage", message_id=message_id, msg_type="widget", content="{}"
        )
    )
    assert body["msg"] == "You cannot attach a submessage to this message."
    # The message of a private channel is hidden from those outside it.
    secret = ok(
        apis["iago"].request(
            "POST", "messages", type="stream", to="Scotland", topic="t", content=POLL
        )
    )["id"]
    body = error(
        apis["hamlet"].request(
            "POST", "submessage", message_id=secret, msg_type="widget", content="{}"
        )
    )
    assert body["msg"] == "Invalid message(s)"
