"""The real `zulip` package from PyPI, unmodified, against the server."""

from __future__ import annotations

import json
import signal

import zulip

from tests.support import Listener, wait_for


def _client(server, user) -> zulip.Client:
    return zulip.Client(email=user.email, api_key=user.api_key, site=server.url)


def test_register_get_events_and_deregister(server, world):
    user = world.user()
    client = _client(server, user)
    registered = client.register(event_types=["test"])
    assert registered["result"] == "success"
    queue_id = registered["queue_id"]
    assert registered["last_event_id"] == -1

    server.notify({"type": "test", "payload": [1, 2]}, [user.user_id])
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert response["result"] == "success"
    assert response["events"] == [{"type": "test", "payload": [1, 2], "id": 0}]

    assert client.deregister(queue_id)["result"] == "success"
    gone = client.get_events(queue_id=queue_id, last_event_id=0)
    assert gone["result"] == "error"
    assert gone["code"] == "BAD_EVENT_QUEUE_ID"
    assert server.user_queues(user.user_id) == []


def test_call_on_each_event_survives_its_queue_being_collected(start_server, world):
    # The heartbeat answers the poll of a stopped client soon (0.2 s), and
    # its queue is collected 2 s later; an awake client polls again within
    # milliseconds of each heartbeat, far inside those 2 s even on a slow
    # machine, so its queue is collected only while it is stopped.
    server = start_server(
        EVENTQ_HEARTBEAT_SECS="0.2",
        EVENTQ_HEARTBEAT_JITTER_SECS="0",
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="2",
        EVENTQ_GC_INTERVAL_SECS="0.05",
    )
    user = world.user()
    listener = Listener(server, user, json.dumps(["test"]))
    try:

        def parked_queue():
            queues = server.user_queues(user.user_id)
            return queues[0]["queue_id"] if len(queues) == 1 and queues[0]["parked"] else None

        first_queue = wait_for(parked_queue, 30, "the client to register and poll")
        server.notify({"type": "test", "n": 1}, [user.user_id])
        assert listener.next() == {"type": "test", "n": 1, "id": 0}

        # The client goes to sleep (a laptop lid): its poll is answered by a
        # heartbeat it does not read, and its queue is collected.
        listener.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: server.user_queues(user.user_id) == [], 15, "the queue collected")

        # It wakes up, gets BAD_EVENT_QUEUE_ID, registers again and polls.
        listener.proc.send_signal(signal.SIGCONT)
        second_queue = wait_for(
            lambda: (q := parked_queue()) is not None and q != first_queue and q,
            30,
            "the client to re-register",
        )
        assert second_queue != first_queue
        server.notify({"type": "test", "n": 2}, [user.user_id])
        event = listener.next()
        assert event["type"] == "test"
        assert event["n"] == 2
        assert listener.items.empty()
    finally:
        listener.stop()
