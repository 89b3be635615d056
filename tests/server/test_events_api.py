"""GET and DELETE /events over HTTP against the real server, with Zulip's
answers (as its test_tornado.py and test_event_system.py check them)."""

from __future__ import annotations

import json

import requests

from tests.support import wait_for


def test_dont_block_get_without_queue_id_creates_a_queue(api):
    for prefix in ("/api/v1", "/json"):
        client = api(prefix=prefix)
        response = client.get_events(dont_block=True)
        assert response.status_code == 200
        body = response.json()
        assert body["result"] == "success"
        assert body["events"] == []
        queue_id = body["queue_id"]
        # The queue now exists: polling it answers, empty.
        assert client.events(queue_id, -1) == []
        assert [q["queue_id"] for q in client.server.user_queues(client.user.user_id)] == [queue_id]


def test_parked_get_is_answered_when_an_event_arrives(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    parked = client.park(queue_id, -1)
    server.notify({"type": "test", "data": "test data"}, [client.user.user_id])
    response = parked.result(timeout=10)
    assert response.status_code == 200
    assert response.headers["Vary"] == "Accept-Language, Cookie"
    body = response.json()
    # eventq's addition: the event log position the answer is complete to.
    assert isinstance(body.pop("stream_position"), int)
    assert body == {
        "result": "success",
        "msg": "",
        "events": [{"type": "test", "data": "test data", "id": 0}],
        "queue_id": queue_id,
    }


def test_immediate_answer_has_no_queue_id_key(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    server.notify({"type": "test"}, [client.user.user_id])
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert response.status_code == 200
    assert "queue_id" not in response.json()
    assert response.json()["events"] == [{"type": "test", "id": 0}]


def test_acknowledging_prunes_and_returns_only_newer_events(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    for n in range(3):
        server.notify({"type": "test", "n": n}, [client.user.user_id])
    assert [e["id"] for e in client.events(queue_id, -1)] == [0, 1, 2]
    # Re-sending the same id (a retry) gives the unacknowledged events again.
    assert [e["id"] for e in client.events(queue_id, -1)] == [0, 1, 2]
    assert [e["n"] for e in client.events(queue_id, 1)] == [2]
    assert client.events(queue_id, 2) == []


def test_pruned_and_unknown_event_ids_are_rejected_without_changing_the_queue(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    for n in range(3):
        server.notify({"type": "test", "n": n}, [client.user.user_id])
    client.events(queue_id, 0)  # acknowledges event 0

    older = client.get_events(queue_id=queue_id, last_event_id=-1, dont_block=True)
    assert older.status_code == 400
    assert older.json() == {
        "result": "error",
        "msg": "An event newer than -1 has already been pruned!",
        "code": "BAD_REQUEST",
    }
    never = client.get_events(queue_id=queue_id, last_event_id=7, dont_block=True)
    assert never.status_code == 400
    assert never.json() == {
        "result": "error",
        "msg": "Event 7 was not in this queue",
        "code": "BAD_REQUEST",
    }
    # Unlike Zulip, the rejected acknowledgement pruned nothing.
    assert [e["id"] for e in client.events(queue_id, 0)] == [1, 2]


def test_missing_queue_id_or_last_event_id(api):
    client = api()
    response = client.get_events()
    assert response.status_code == 400
    assert response.json() == {
        "result": "error",
        "msg": "Missing 'queue_id' argument",
        "code": "BAD_REQUEST",
    }
    queue_id = client.register()["queue_id"]
    response = client.get_events(queue_id=queue_id)
    assert response.status_code == 400
    assert response.json()["msg"] == "Missing 'last_event_id' argument"


def test_bogus_queue_id_is_bad_event_queue_id(api):
    client = api()
    response = client.get_events(queue_id="hamster", last_event_id=-1)
    assert response.status_code == 400
    assert response.json() == {
        "result": "error",
        "msg": "Bad event queue ID: hamster",
        "code": "BAD_EVENT_QUEUE_ID",
        "queue_id": "hamster",
    }


def test_another_users_queue_looks_unknown_and_is_logged(api, server):
    owner = api()
    intruder = api(realm=None)
    queue_id = owner.register()["queue_id"]
    server.notify({"type": "secret"}, [owner.user.user_id])
    for method in ("GET", "DELETE"):
        if method == "GET":
            response = intruder.get_events(queue_id=queue_id, last_event_id=-1, dont_block=True)
        else:
            response = intruder.request("DELETE", "events", queue_id=queue_id)
        assert response.status_code == 400
        assert response.json() == {
            "result": "error",
            "msg": f"Bad event queue ID: {queue_id}",
            "code": "BAD_EVENT_QUEUE_ID",
            "queue_id": queue_id,
        }
    assert (
        f"User {intruder.user.user_id} is not authorized for queue {queue_id}"
        in server.settled_log()
    )
    # The owner's queue is untouched.
    assert [e["type"] for e in owner.events(queue_id, -1)] == ["secret"]


def test_delete_answers_the_parked_request_then_removes_the_queue(api):
    client = api()
    queue_id = client.register()["queue_id"]
    parked = client.park(queue_id, -1)
    response = client.request("DELETE", "events", queue_id=queue_id)
    assert response.status_code == 200
    assert response.json() == {"result": "success", "msg": ""}
    answered = parked.result(timeout=10)
    assert answered.status_code == 200
    assert answered.json()["events"] == []
    gone = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert gone.json()["code"] == "BAD_EVENT_QUEUE_ID"


def test_delete_without_queue_id(api):
    response = api().request("DELETE", "events")
    assert response.status_code == 400
    assert response.json() == {
        "result": "error",
        "msg": "Missing 'queue_id' argument",
        "code": "REQUEST_VARIABLE_MISSING",
        "var_name": "queue_id",
    }


def test_json_paths_route_get_and_delete(api, server):
    client = api(prefix="/json")
    queue_id = client.get_events(dont_block=True).json()["queue_id"]
    server.notify({"type": "test"}, [client.user.user_id])
    assert [e["type"] for e in client.events(queue_id, -1)] == ["test"]
    assert client.request("DELETE", "events", queue_id=queue_id).status_code == 200
    assert server.user_queues(client.user.user_id) == []


def test_json_paths_without_credentials_want_a_session(server):
    response = requests.get(f"{server.url}/json/events", params={"dont_block": "true"}, timeout=10)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Session realm="zulip"'
    assert response.json() == {
        "result": "error",
        "msg": "Not logged in: API authentication or user session required",
        "code": "UNAUTHORIZED",
    }


def test_a_newer_get_displaces_the_parked_one(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    first = client.park(queue_id, -1)
    second = client._pool.submit(client.get_events, queue_id=queue_id, last_event_id=-1)
    displaced = first.result(timeout=10)
    assert displaced.status_code == 200
    # No stream_position: the answer carries none of the queue's events.
    assert displaced.json() == {
        "result": "success",
        "msg": "",
        "events": [],
        "queue_id": queue_id,
        "displaced": True,
    }
    # The newer request is the one now parked, and it gets the next event.
    wait_for(lambda: server.stats()["parked"] >= 1 and not second.done(), what="second parked")
    server.notify({"type": "test"}, [client.user.user_id])
    assert second.result(timeout=10).json()["events"] == [{"type": "test", "id": 0}]


def test_event_types_filter_what_a_queue_receives(api, server):
    client = api()
    queue_id = client.register(event_types=["wanted"])["queue_id"]
    server.notify({"type": "unwanted"}, [client.user.user_id])
    server.notify({"type": "wanted"}, [client.user.user_id])
    assert client.events(queue_id, -1) == [{"type": "wanted", "id": 0}]


def test_events_reach_only_the_users_named(api, server):
    alice, bob = api(), api()
    alice_q = alice.register()["queue_id"]
    bob_q = bob.register()["queue_id"]
    report = server.notify({"type": "test"}, [alice.user.user_id])
    assert report["queues"] == 1
    assert len(alice.events(alice_q, -1)) == 1
    assert bob.events(bob_q, -1) == []


def _message(stream: str | None, content: str = "hello") -> dict:
    if stream is None:
        return {"type": "private", "content": content, "sender_email": "x@example.com"}
    return {
        "type": "stream",
        "display_recipient": stream,
        "subject": "topic",
        "content": content,
        "sender_email": "x@example.com",
    }


def test_narrow_keeps_only_matching_messages(api, server):
    client = api()
    queue_id = client.register(narrow=[["stream", "denmark"]])["queue_id"]
    user = {"id": client.user.user_id, "flags": []}
    server.notify({"type": "message", "message": _message(None)}, [user])
    server.notify({"type": "message", "message": _message("Denmark")}, [user])
    server.notify({"type": "message", "message": _message("Sweden")}, [user])
    events = client.events(queue_id, -1)
    assert [e["message"]["display_recipient"] for e in events] == ["Denmark"]


def test_message_events_carry_each_users_flags_and_the_senders_local_id(api, server):
    realm = None
    sender = api(realm)
    recipient = api()
    sender_q = sender.register()["queue_id"]
    recipient_q = recipient.register()["queue_id"]
    event = {
        "type": "message",
        "message": _message(None),
        "sender_queue_id": sender_q,
        "local_id": "1.01",
        "internal_data": {"mentioned": False},
    }
    server.notify(
        event,
        [
            {"id": sender.user.user_id, "flags": ["read"]},
            {"id": recipient.user.user_id, "flags": ["mentioned"]},
        ],
    )
    [mine] = sender.events(sender_q, -1)
    [theirs] = recipient.events(recipient_q, -1)
    assert mine["flags"] == ["read"]
    assert mine["local_message_id"] == "1.01"
    assert theirs["flags"] == ["mentioned"]
    assert "local_message_id" not in theirs
    for delivered in (mine, theirs):
        assert "internal_data" not in delivered
        assert "sender_queue_id" not in delivered


def test_all_public_streams_queue_gets_public_channel_messages(api, server, world):
    realm = world.realm()
    watcher = api(realm)
    member = api(realm)
    watcher_q = watcher.register(all_public_streams=True)["queue_id"]
    member_q = member.register()["queue_id"]
    realm_id = watcher.user.realm_id
    recipients = [{"id": member.user.user_id, "flags": []}]
    public = {"type": "message", "message": _message("general"), "invite_only": False}
    private = {"type": "message", "message": _message("secret"), "invite_only": True}
    server.notify(public, recipients, realm_id=realm_id)
    server.notify(private, recipients, realm_id=realm_id)
    assert [e["message"]["display_recipient"] for e in watcher.events(watcher_q, -1)] == ["general"]
    assert watcher.events(watcher_q, -1)[0]["flags"] == []
    assert len(member.events(member_q, -1)) == 2


def test_guest_cannot_ask_for_all_public_streams(api):
    guest = api(role="guest")
    for response in (
        guest.request("POST", "register", all_public_streams=True),
        guest.get_events(dont_block=True, all_public_streams=True),
    ):
        assert response.status_code == 400
        assert response.json()["msg"] == "User not authorized for this query"
    assert guest.server.user_queues(guest.user.user_id) == []


def test_cors_preflight_and_405_carry_allow(server):
    preflight = requests.options(f"{server.url}/api/v1/events", timeout=10)
    assert preflight.status_code == 204
    assert preflight.headers["Allow"] == "OPTIONS, GET, DELETE"
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    wrong = requests.put(f"{server.url}/api/v1/events", timeout=10)
    assert wrong.status_code == 405
    assert set(wrong.headers["Allow"].split(", ")) == {"GET", "DELETE", "OPTIONS"}
    assert wrong.json()["result"] == "error"


def test_unknown_path_is_a_json_404(server):
    response = requests.get(f"{server.url}/api/v1/nowhere", timeout=10)
    assert response.status_code == 404
    assert response.json() == {
        "result": "error",
        "msg": "Invalid API path: /api/v1/nowhere",
        "code": "NOT_FOUND",
    }


def test_server_settings_needs_no_auth(server):
    for prefix in ("/api/v1", "/json"):
        response = requests.get(f"{server.url}{prefix}/server_settings", timeout=10)
        assert response.status_code == 200
        body = response.json()
        assert body["result"] == "success"
        assert body["zulip_version"]
        assert isinstance(body["zulip_feature_level"], int)
        assert "authentication_methods" in body


def test_responses_are_never_cached(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    server.notify({"type": "test"}, [client.user.user_id])
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert "Etag" not in response.headers
    assert response.headers["Cache-Control"] == "no-store"
    assert json.loads(response.content)["events"]


def _flags(op: str, flag: str, messages: list[int], timestamp: float) -> dict:
    return {
        "type": "update_message_flags",
        "op": op,
        "operation": op,
        "flag": flag,
        "messages": messages,
        "all": False,
        "timestamp": timestamp,
    }


def test_unread_flag_changes_collapse_into_one_event(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    user = [client.user.user_id]
    server.notify(_flags("add", "read", [1], 1.0), user)
    server.notify({"type": "test"}, user)
    server.notify(_flags("add", "read", [2, 3], 2.0), user)
    server.notify(_flags("remove", "read", [4], 3.0), user)  # never collapses
    events = client.events(queue_id, -1)
    assert events == [
        {"type": "test", "id": 1},
        {**_flags("add", "read", [1, 2, 3], 2.0), "id": 2},
        {**_flags("remove", "read", [4], 3.0), "id": 3},
    ]
    # Once read, a later change of the same kind is a new event.
    server.notify(_flags("add", "read", [5], 4.0), user)
    assert [e["id"] for e in client.events(queue_id, 3)] == [4]


def test_register_cannot_replay_another_users_queue(api, server):
    """Register takes no queue id: one naming another user's queue gets a
    fresh queue of its own, and none of the other queue's events."""
    owner = api()
    intruder = api(realm=None)
    queue_id = owner.register()["queue_id"]
    server.notify({"type": "secret", "n": 1}, [owner.user.user_id])
    body = intruder.register(queue_id=queue_id, last_event_id=-1)
    assert body["queue_id"] != queue_id
    assert body["ignored_parameters_unsupported"] == ["last_event_id", "queue_id"]
    assert intruder.events(body["queue_id"], -1) == []
    assert [e["type"] for e in owner.events(queue_id, -1)] == ["secret"]
