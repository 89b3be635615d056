"""Heartbeats, disconnects, idle collection and bounded queues, against real
server processes with shortened timings."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import socket

from queues.client import ClientDescriptor, QueueOptions
from queues.event_queue import EventQueue
from server.delivery.longpoll import Heartbeats
from tests.queues.helpers import FakeWaiter, encode
from tests.support import Api, wait_for


def test_a_parked_request_gets_a_heartbeat_event(start_server, world):
    server = start_server(EVENTQ_HEARTBEAT_SECS="0.2", EVENTQ_HEARTBEAT_JITTER_SECS="0")
    client = Api(server, world.user())
    # Heartbeats bypass event_types.
    queue_id = client.register(event_types=["message"])["queue_id"]
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "result": "success",
        "msg": "",
        # A heartbeat takes no id of its own: it carries the newest
        # acknowledged one (-1 before any), which the client sends back.
        "events": [{"type": "heartbeat", "id": -1}],
        "queue_id": queue_id,
        "stream_position": body["stream_position"],
    }
    assert client.get_events(queue_id=queue_id, last_event_id=-1).json()["events"] == [
        {"type": "heartbeat", "id": -1}
    ]
    client.close()


def _raw_long_poll(server, user, queue_id: str) -> socket.socket:
    credentials = base64.b64encode(f"{user.email}:{user.api_key}".encode()).decode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        f"GET /api/v1/events?queue_id={queue_id}&last_event_id=-1 HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Basic {credentials}\r\n\r\n".encode()
    )
    return sock


def test_a_client_that_disconnects_mid_poll_leaves_its_queue(server, world):
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    sock = _raw_long_poll(server, user, queue_id)
    server.wait_parked(user.user_id, queue_id)
    sock.close()
    wait_for(lambda: not server.user_queues(user.user_id)[0]["parked"], what="request detached")
    server.notify({"type": "test"}, [user.user_id])
    assert client.events(queue_id, -1) == [{"type": "test", "id": 0}]
    client.close()


def test_idle_queues_are_collected_and_then_unknown(start_server, world):
    server = start_server(EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="0.3", EVENTQ_GC_INTERVAL_SECS="0.05")
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    wait_for(lambda: server.user_queues(user.user_id) == [], what="the queue to be collected")
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert response.status_code == 400
    assert response.json()["code"] == "BAD_EVENT_QUEUE_ID"
    assert "reason" not in response.json()
    assert "collected 1 idle queues" in server.settled_log()
    # The stats tell the sweeps and how long they took.
    sweeps = server.stats()["queue_gc"]
    assert sweeps["sweeps"] >= 1
    assert sweeps["max_ms"] >= sweeps["last_ms"] >= 0
    wait_for(lambda: server.stats()["queue_gc"]["sweeps"] > sweeps["sweeps"], what="another sweep")
    client.close()


def test_a_parked_queue_outlives_its_idle_timeout(start_server, world):
    # 2 s: the queue must not be collected between its register and the poll
    # that parks it (one request, tens of ms on a slow machine).
    server = start_server(EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="2", EVENTQ_GC_INTERVAL_SECS="0.05")
    user = world.user()
    client = Api(server, user)
    parked_q = client.register()["queue_id"]
    parked = client.park(parked_q, -1)
    canary_q = client.register()["queue_id"]
    # Once the canary, registered after the poll parked, has been collected,
    # the parked queue has been idle-eligible for longer than its timeout.
    wait_for(
        lambda: [q["queue_id"] for q in server.user_queues(user.user_id)] == [parked_q],
        what="the canary collected",
    )
    assert canary_q != parked_q
    server.notify({"type": "test"}, [user.user_id])
    assert parked.result(timeout=10).json()["events"] == [{"type": "test", "id": 0}]
    client.close()


def test_queue_lifespan_secs_sets_the_idle_timeout(start_server, world):
    server = start_server(EVENTQ_GC_INTERVAL_SECS="0.05")  # default timeout: 600 s
    user = world.user()
    client = Api(server, user)
    short_q = client.register(queue_lifespan_secs=1)["queue_id"]
    long_q = client.register()["queue_id"]
    wait_for(
        lambda: [q["queue_id"] for q in server.user_queues(user.user_id)] == [long_q],
        timeout=15,
        what="the 1 s queue collected",
    )
    assert short_q != long_q
    client.close()


def test_any_get_refreshes_the_idle_clock(start_server, world):
    # 2 s: the polled queue must outlive each turn of the loop below (two
    # requests, tens of ms on a slow machine); the canary goes after 2 s.
    server = start_server(EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="2", EVENTQ_GC_INTERVAL_SECS="0.05")
    user = world.user()
    client = Api(server, user)
    canary_q = client.register()["queue_id"]
    polled_q = client.register()["queue_id"]

    def canary_gone_while_polling() -> bool:
        # A dont_block GET (which never parks) keeps the polled queue alive.
        assert client.events(polled_q, -1) == []
        return canary_q not in [q["queue_id"] for q in server.user_queues(user.user_id)]

    wait_for(canary_gone_while_polling, what="the canary collected")
    assert [q["queue_id"] for q in server.user_queues(user.user_id)] == [polled_q]
    client.close()


def test_an_overflowing_queue_ends_with_a_reason(start_server, world):
    server = start_server(EVENTQ_QUEUE_MAX_EVENTS="5")
    owner = world.user()
    client = Api(server, owner)
    queue_id = client.register()["queue_id"]
    for n in range(5):
        server.notify({"type": "test", "n": n}, [owner.user_id])
    assert len(client.events(queue_id, -1)) == 5
    server.notify({"type": "test", "n": 5}, [owner.user_id])
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert response.status_code == 400
    assert response.json() == {
        "result": "error",
        "msg": f"Bad event queue ID: {queue_id}",
        "code": "BAD_EVENT_QUEUE_ID",
        "queue_id": queue_id,
        "reason": "overflow",
    }
    assert f"queue {queue_id} of user {owner.user_id} overflowed" in server.settled_log()
    # Another user learns nothing about it.
    stranger = Api(server, world.user())
    other = stranger.get_events(queue_id=queue_id, last_event_id=-1)
    assert "reason" not in other.json()
    client.close()
    stranger.close()


def test_a_queue_over_its_byte_budget_overflows(start_server, world):
    server = start_server(EVENTQ_QUEUE_MAX_BYTES="4096")
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    server.notify({"type": "test", "blob": "x" * 2000}, [user.user_id])
    assert len(client.events(queue_id, -1)) == 1
    server.notify({"type": "test", "blob": "y" * 3000}, [user.user_id])
    assert client.get_events(queue_id=queue_id, last_event_id=-1).json()["reason"] == "overflow"
    client.close()


def test_an_event_larger_than_any_queue_is_refused_not_delivered(start_server, world):
    server = start_server(EVENTQ_QUEUE_MAX_BYTES="1024")
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    parked = client.park(queue_id, -1)
    notice = {"event": {"type": "test", "blob": "z" * 5000}, "users": [user.user_id]}
    response = server.internal("notify_tornado", data=json.dumps(notice))
    assert response.status_code == 400
    assert response.json()["msg"].startswith("Invalid notice: the event is 5")
    # Nobody's queue was ended for it.
    server.notify({"type": "small"}, [user.user_id])
    assert parked.result(timeout=10).json()["events"] == [{"type": "small", "id": 0}]
    client.close()


def test_the_user_queue_limit_evicts_the_oldest_idle_queue(start_server, world):
    server = start_server(EVENTQ_MAX_QUEUES_PER_USER="3")
    user = world.user()
    client = Api(server, user)
    first, second, third = (client.register()["queue_id"] for _ in range(3))
    fourth = client.register()["queue_id"]
    assert sorted(q["queue_id"] for q in server.user_queues(user.user_id)) == sorted(
        [second, third, fourth]
    )
    response = client.get_events(queue_id=first, last_event_id=-1)
    assert response.json()["code"] == "BAD_EVENT_QUEUE_ID"
    assert response.json()["reason"] == "evicted"
    client.close()


def test_the_user_queue_limit_refuses_when_every_queue_is_in_use(start_server, world):
    server = start_server(EVENTQ_MAX_QUEUES_PER_USER="2")
    user = world.user()
    client = Api(server, user)
    queues = [client.register()["queue_id"] for _ in range(2)]
    parked = [client.park(queue_id, -1) for queue_id in queues]
    response = client.request("POST", "register")
    assert response.status_code == 400
    assert response.json() == {
        "result": "error",
        "msg": "Too many event queues: this user already has 2 queues in use",
        "code": "TOO_MANY_EVENT_QUEUES",
    }
    assert sorted(q["queue_id"] for q in server.user_queues(user.user_id)) == sorted(queues)
    server.notify({"type": "test"}, [user.user_id])
    assert all(p.result(timeout=10).status_code == 200 for p in parked)
    client.close()


def test_a_requested_lifespan_is_capped_at_seven_days(api, server):
    client = api()
    client.register(queue_lifespan_secs=10**9)
    client.register(queue_lifespan_secs=0)
    client.register(queue_lifespan_secs=120)
    lifespans = sorted(q["lifespan_secs"] for q in server.user_queues(client.user.user_id))
    assert lifespans == [120, 600, 7 * 24 * 3600]


def test_heartbeat_deadlines_fire_once_per_waiter_at_most_a_tick_late():
    """`Heartbeats` on its own: a deadline fires in its tick, a cancelled
    one never, and two requests of one queue due in the same tick are
    told apart (a request displaced by the next poll must not cancel that
    poll's heartbeat)."""

    tick_secs = 0.05

    async def scenario() -> tuple[list[tuple[str, float]], float, float]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []
        done = loop.create_future()
        started = loop.time()
        # queue-a's deadline in the middle of a tick (0.125-0.175 s away): its
        # two starts, a moment apart (longer on a slow or busy machine), fall
        # in the same tick unless that moment lasts half a tick (25 ms).
        a_secs = (math.floor(started / tick_secs) + 3.5) * tick_secs - started
        b_secs = a_secs + 0.1

        def fire(client: ClientDescriptor) -> None:
            fired.append((client.queue_id, loop.time() - started))
            if len(fired) == 2:
                done.set_result(None)

        def queue(queue_id: str) -> ClientDescriptor:
            return ClientDescriptor(queue_id, 1, 1, QueueOptions(), 0.0, EventQueue(encode))

        heartbeats = Heartbeats(fire, 45.0, 10.0, tick_secs=tick_secs)
        first, second, third, gone = FakeWaiter(), FakeWaiter(), FakeWaiter(), FakeWaiter()
        queue_a, queue_b = queue("queue-a"), queue("queue-b")
        queue_a.waiter, queue_b.waiter = second, third
        tick = heartbeats.start(first, queue_a, a_secs)
        assert heartbeats.start(second, queue_a, a_secs) == tick
        heartbeats.start(third, queue_b, b_secs)
        # A deadline of a waiter no longer parked on its queue (an event
        # stream between two writes keeps its own) wakes nobody.
        assert heartbeats.start(gone, queue_b, a_secs) == tick
        assert heartbeats.pending(tick, gone)
        assert len(heartbeats) == 4
        heartbeats.cancel(tick, first)
        assert not heartbeats.pending(tick, first)
        # A second cancel changes nothing.
        heartbeats.cancel(tick, first)
        await asyncio.wait_for(done, 5)
        assert len(heartbeats) == 0
        return fired, a_secs, b_secs

    fired, a_secs, b_secs = asyncio.run(scenario())
    assert [name for name, _ in fired] == ["queue-a", "queue-b"]
    (_, a_at), (_, b_at) = fired
    assert a_at >= a_secs
    assert b_at >= b_secs
