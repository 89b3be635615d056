"""Scheduled messages over HTTP against real servers: Zulip's endpoints and
their refusals on the shared server (whose scheduler is off: tests/support.py),
and the scheduler itself on servers of their own: a message a couple of
seconds ahead reaches a long poll, one scheduled before a restart is sent
after it, and two servers send each message once."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest

from tests.domain.harness import Domain
from tests.support import Api, ServerProcess, error, ok, wait_for

SCHEDULER_ON = {"EVENTQ_SCHEDULED_MESSAGES": "1"}


def schedule(api: Api, domain: Domain, content: str, at: int, **params) -> int:
    body = ok(
        api.request(
            "POST",
            "scheduled_messages",
            type="stream",
            to=domain.streams["Denmark"],
            topic="later",
            content=content,
            scheduled_delivery_timestamp=at,
            **params,
        )
    )
    return int(body["scheduled_message_id"])


def count_sent(domain: Domain, content: str) -> int:
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM messages WHERE content = %s", (content,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def waiting(domain: Domain, content: str) -> int:
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM scheduled_messages WHERE content = %s", (content,)
        ).fetchone()
    assert row is not None
    return int(row[0])


# -- the endpoints (shared server) -------------------------------------------------


def test_schedule_list_edit_and_delete_tell_the_senders_queue(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    mine = hamlet.register(event_types=["scheduled_messages"])["queue_id"]
    theirs = othello.register(event_types=["scheduled_messages"])["queue_id"]
    at = int(time.time()) + 3600
    scheduled_id = schedule(hamlet, domain, "**later**", at)
    direct = ok(
        hamlet.request(
            "POST",
            "scheduled_messages",
            type="direct",
            to=[domain.id("othello")],
            content="psst",
            scheduled_delivery_timestamp=at + 60,
            read_by_sender=False,
        )
    )["scheduled_message_id"]
    listed = ok(hamlet.request("GET", "scheduled_messages"))["scheduled_messages"]
    assert listed == [
        {
            "scheduled_message_id": scheduled_id,
            "type": "stream",
            "to": domain.streams["Denmark"],
            "topic": "later",
            "content": "**later**",
            "rendered_content": "<p><strong>later</strong></p>",
            "scheduled_delivery_timestamp": at,
            "failed": False,
        },
        {
            "scheduled_message_id": direct,
            "type": "private",
            "to": [domain.id("othello")],
            "content": "psst",
            "rendered_content": "<p>psst</p>",
            "scheduled_delivery_timestamp": at + 60,
            "failed": False,
        },
    ]
    ok(
        hamlet.request(
            "PATCH",
            f"scheduled_messages/{scheduled_id}",
            content="sooner",
            scheduled_delivery_timestamp=at - 60,
        )
    )
    ok(
        hamlet.request(
            "PATCH",
            f"scheduled_messages/{direct}",
            type="channel",
            to=domain.streams["Verona"],
            topic="moved",
        )
    )
    ok(hamlet.request("DELETE", f"scheduled_messages/{scheduled_id}"))
    events = wait_for(
        lambda: (found := hamlet.events(mine, -1)) and len(found) >= 5 and found,
        what="five scheduled_messages events",
    )
    assert [e["op"] for e in events] == ["add", "add", "update", "update", "remove"]
    assert events[2]["scheduled_message"]["content"] == "sooner"
    assert events[3]["scheduled_message"]["to"] == domain.streams["Verona"]
    assert events[4]["scheduled_message_id"] == scheduled_id
    # Nobody else hears of them.
    assert othello.events(theirs, -1) == []
    state = hamlet.register(fetch_event_types=["scheduled_messages"])
    assert [m["scheduled_message_id"] for m in state["scheduled_messages"]] == [direct]
    assert othello.register(fetch_event_types=["scheduled_messages"])["scheduled_messages"] == []


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"scheduled_delivery_timestamp": 1}, "Scheduled delivery time must be in the future."),
        ({"type": "mail"}, "Invalid type"),
        ({"to": '"Denmark"'}, "Invalid data type for channel ID"),
        ({"type": "direct", "to": "5"}, "Invalid data type for recipients"),
        ({"type": "direct", "to": '["a@b.c"]'}, "Recipient list may only contain user IDs"),
        ({"scheduled_delivery_timestamp": "soon"}, 'Argument "scheduled_delivery_timestamp"'),
        ({"read_by_sender": "maybe"}, 'Argument "read_by_sender" is not valid JSON.'),
        ({"content": ""}, "Message must not be empty"),
    ],
)
def test_scheduling_refusals_are_json_400s(apis, domain, params, msg):
    fields = {
        "type": "stream",
        "to": domain.streams["Denmark"],
        "topic": "t",
        "content": "x",
        "scheduled_delivery_timestamp": int(time.time()) + 3600,
    } | params
    body = error(apis["hamlet"].request("POST", "scheduled_messages", **fields))
    assert body["msg"].startswith(msg), body


def test_general_chat_is_the_empty_topic_when_scheduling_and_editing(apis, domain):
    hamlet = apis["hamlet"]
    at = int(time.time()) + 3600
    first = int(
        ok(
            hamlet.request(
                "POST",
                "scheduled_messages",
                type="stream",
                to=domain.streams["Denmark"],
                topic="general chat",
                content="to the empty topic",
                scheduled_delivery_timestamp=at,
            )
        )["scheduled_message_id"]
    )
    second = schedule(hamlet, domain, "also empty", at)
    ok(hamlet.request("PATCH", f"scheduled_messages/{second}", topic=" (no topic) "))
    listed = ok(hamlet.request("GET", "scheduled_messages"))["scheduled_messages"]
    topics = {m["scheduled_message_id"]: m["topic"] for m in listed}
    assert (topics[first], topics[second]) == ("", "")


def test_edit_and_delete_refusals(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    scheduled_id = schedule(hamlet, domain, "mine", int(time.time()) + 3600)
    for response in (
        othello.request("DELETE", f"scheduled_messages/{scheduled_id}"),
        othello.request("PATCH", f"scheduled_messages/{scheduled_id}", content="x"),
        hamlet.request("DELETE", "scheduled_messages/0"),
        hamlet.request("DELETE", f"scheduled_messages/{'9' * 30}"),
    ):
        assert error(response, 404)["msg"] == "Scheduled message does not exist"
    path = f"scheduled_messages/{scheduled_id}"
    for params, msg in (
        ({}, "Nothing to change"),
        ({"type": "direct"}, "Recipient required when updating type of scheduled message."),
        (
            {"type": "stream", "to": domain.streams["Verona"]},
            "Topic required when updating scheduled message type to stream.",
        ),
        ({"to": "[1, 2]"}, "Invalid data type for channel ID"),
        ({"scheduled_delivery_timestamp": 5}, "Scheduled delivery time must be in the future."),
    ):
        assert error(hamlet.request("PATCH", path, **params))["msg"] == msg
    assert [
        m["content"] for m in ok(hamlet.request("GET", "scheduled_messages"))["scheduled_messages"]
    ] == ["mine"]


# -- the scheduler (servers of their own) -----------------------------------------


def test_a_message_scheduled_a_couple_of_seconds_ahead_reaches_a_long_poll(start_server, domain):
    server = start_server(**SCHEDULER_ON)
    hamlet = Api(server, domain.accounts["hamlet"])
    othello = Api(server, domain.accounts["othello"])
    try:
        mine = hamlet.register(event_types=["scheduled_messages"])["queue_id"]
        theirs = othello.register(event_types=["message"])["queue_id"]
        parked = othello.park(theirs, -1)
        scheduled_id = schedule(hamlet, domain, "two seconds later", int(time.time()) + 2)
        answer = parked.result(timeout=30)
        assert answer.status_code == 200, answer.text
        [event] = answer.json()["events"]
        assert event["message"]["content"] == "two seconds later"
        assert event["message"]["sender_id"] == domain.id("hamlet")
        events = wait_for(
            lambda: (found := hamlet.events(mine, -1)) and len(found) >= 2 and found,
            what="the sender's add and remove",
        )
        assert [(e["op"], e.get("scheduled_message_id")) for e in events] == [
            ("add", None),
            ("remove", scheduled_id),
        ]
        assert "scheduled message" in server.settled_log()
    finally:
        hamlet.close()
        othello.close()


def test_a_message_scheduled_before_a_restart_is_sent_after_it(start_server, domain, tmp_path):
    server = start_server(tmp_path / "state", **SCHEDULER_ON)
    hamlet = Api(server, domain.accounts["hamlet"])
    othello = Api(server, domain.accounts["othello"])
    try:
        queue_id = othello.register(event_types=["message"])["queue_id"]
        # 5 s: far longer than a stop takes, so it is still waiting when
        # the server is gone.
        due = int(time.time()) + 5
        schedule(hamlet, domain, "across the restart", due)
        assert server.stop(signal.SIGTERM) == 0, server.log()
        # Its time passes while no server runs: nothing sends it.
        wait_for(lambda: time.time() > due + 1, what="the due time to pass")
        assert count_sent(domain, "across the restart") == 0
        server.start()
        events = wait_for(
            lambda: [e for e in othello.events(queue_id, -1) if e["type"] == "message"],
            what="the message on the restored queue",
        )
        assert [e["message"]["content"] for e in events] == ["across the restart"]
        assert count_sent(domain, "across the restart") == 1
        assert waiting(domain, "across the restart") == 0
    finally:
        hamlet.close()
        othello.close()


def test_two_servers_send_each_message_once(start_server, domain, tmp_path):
    first = start_server(tmp_path / "first", **SCHEDULER_ON)
    second = start_server(tmp_path / "second", **SCHEDULER_ON)
    hamlet = Api(first, domain.accounts["hamlet"])
    othello = Api(second, domain.accounts["othello"])
    try:
        queue_id = othello.register(event_types=["message"])["queue_id"]
        due = int(time.time()) + 2
        contents = [f"race {n}" for n in range(20)]
        for content in contents:
            schedule(hamlet, domain, content, due)
        wait_for(
            lambda: all(waiting(domain, content) == 0 for content in contents),
            what="every scheduled message to be sent",
        )
        assert [count_sent(domain, content) for content in contents] == [1] * 20
        # The receiving client got each once, whichever server sent it.
        received = wait_for(
            lambda: (found := othello.events(queue_id, -1)) and len(found) >= 20 and found,
            what="twenty messages on othello's queue",
        )
        assert sorted(e["message"]["content"] for e in received) == sorted(contents)
        sent_by = [server.settled_log().count("sent as message") for server in (first, second)]
        assert sum(sent_by) == 20
    finally:
        hamlet.close()
        othello.close()


def test_a_message_that_cannot_be_sent_fails_and_both_outcomes_are_counted(start_server, domain):
    server: ServerProcess = start_server(**SCHEDULER_ON)
    hamlet = Api(server, domain.accounts["hamlet"])
    othello = Api(server, domain.accounts["othello"])
    try:
        queue_id = othello.register(event_types=["scheduled_messages"])["queue_id"]
        at = int(time.time()) + 2
        schedule(hamlet, domain, "counted", at)
        scotland = domain.streams["Scotland"]
        doomed = ok(
            othello.request(
                "POST",
                "scheduled_messages",
                type="stream",
                to=scotland,
                topic="t",
                content="doomed",
                scheduled_delivery_timestamp=at,
            )
        )["scheduled_message_id"]
        # Othello leaves the private channel before the message is due.
        with psycopg.connect(domain.database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE subscriptions SET active = false WHERE user_id = %s AND stream_id = %s",
                (domain.id("othello"), scotland),
            )
        events = wait_for(
            lambda: (found := othello.events(queue_id, -1)) and len(found) >= 2 and found,
            what="the failure's update",
        )
        assert events[1]["op"] == "update"
        assert events[1]["scheduled_message"]["scheduled_message_id"] == doomed
        assert events[1]["scheduled_message"]["failed"] is True
        assert (
            f"scheduled message {doomed} of user {domain.id('othello')} not sent"
            in server.settled_log()
        )
        # Counted once its transaction has committed and its events are out.
        metrics = wait_for(
            lambda: (
                'eventq_scheduled_messages_total{outcome="sent"} 1.0'
                in (text := hamlet.session.get(f"{server.url}/metrics", timeout=10).text)
                and text
            ),
            what="the other message to be counted as sent",
        )
        assert 'eventq_scheduled_messages_total{outcome="failed"} 1.0' in metrics
        # Still listed, failed, for its sender to fix.
        [listed] = ok(othello.request("GET", "scheduled_messages"))["scheduled_messages"]
        assert (listed["scheduled_message_id"], listed["failed"]) == (doomed, True)
    finally:
        hamlet.close()
        othello.close()
