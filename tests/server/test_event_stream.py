"""Server-Sent Events on the long poll's queues (server/handlers/stream.py),
as a client reads them on the wire: each event as it arrives, in the long
poll's shape; heartbeats as comments; nothing lost when a connection is cut
between a write and the client's read; one reader at a time; the queue's
end; the bound on what a stream leaves unacknowledged; errors before the
stream as the API's JSON."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.support import Api, EventStream, ServerProcess, make_guest, wait_for


@pytest.fixture
def streams() -> Iterator[list[EventStream]]:
    opened: list[EventStream] = []
    yield opened
    for each in opened:
        each.conn.close()


def _open(
    opened: list[EventStream], server: ServerProcess, *args: Any, **kwargs: Any
) -> EventStream:
    stream = EventStream(server.url, *args, **kwargs)
    opened.append(stream)
    return stream


def _streaming(
    server: ServerProcess, world: Any, event_types: tuple[str, ...] | None = ("test",)
) -> tuple[Api, str, EventStream]:
    """A new user of a new realm, a queue of `event_types` (None: every
    type) and a stream of it, opened."""
    alice = Api(server, world.user(world.realm()))
    params = {} if event_types is None else {"event_types": list(event_types)}
    queue_id = alice.register(**params)["queue_id"]
    return alice, queue_id, EventStream(server.url, alice, queue_id)


def _queue(server: ServerProcess, client: Api, queue_id: str) -> dict[str, Any]:
    return next(q for q in server.user_queues(client.user.user_id) if q["queue_id"] == queue_id)


def test_a_stream_writes_each_event_as_it_arrives_as_the_long_poll_gives_it(api, server, streams):
    alice = api()
    queue_id = alice.register(event_types=["test"])["queue_id"]
    stream = _open(streams, server, alice, queue_id)
    assert stream.response.status == 200
    assert stream.response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
    assert stream.response.getheader("Cache-Control") == "no-cache"
    assert stream.message() == {"retry": "500"}
    server.wait_parked(alice.user.user_id, queue_id)
    positions = []
    for n in range(3):
        server.notify({"type": "test", "n": n}, [alice.user.user_id])
        assert stream.message() == {"id": str(n), "data": {"type": "test", "n": n, "id": n}}
        # Each write's events, then the position the client is complete to.
        position = stream.message()
        assert position["event"] == "position"
        positions.append(position["data"]["stream_position"])
    assert positions == sorted(positions)
    assert positions[-1] <= server.stats()["stream"]["position"]
    # Written is not acknowledged: the long poll of the same queue (which
    # displaces the stream) still gets them, in the same shape.
    polled = alice.events(queue_id, -1)
    assert polled == [{"type": "test", "n": n, "id": n} for n in range(3)]
    assert stream.message() == {"event": "displaced", "data": {}}
    assert stream.message() == {}


def test_a_connection_cut_mid_stream_loses_nothing_and_repeats_nothing(api, server, streams):
    alice = api()
    queue_id = alice.register(event_types=["test"])["queue_id"]
    first = _open(streams, server, alice, queue_id)
    server.wait_parked(alice.user.user_id, queue_id)
    for n in range(3):
        server.notify({"type": "test", "n": n}, [alice.user.user_id])
    read = first.events(1)
    assert read[0]["id"] == "0"
    # Events 1 and 2 were written; the client read only the first.
    first.cut()
    wait_for(lambda: not _queue(server, alice, queue_id)["parked"], what="the stream to end")
    for n in range(3, 5):
        server.notify({"type": "test", "n": n}, [alice.user.user_id])
    # An EventSource reconnects with the id it read last, whatever its URL says.
    second = _open(streams, server, alice, queue_id, last_event_id=-1, header_id="0")
    again = second.events(4)
    assert [m["data"]["n"] for m in again] == [1, 2, 3, 4]
    assert [m["id"] for m in again] == ["1", "2", "3", "4"]
    # Acknowledged through 0 by the reconnection: the queue holds 1-4.
    assert _queue(server, alice, queue_id)["events"] == 4


def test_a_stream_sends_heartbeats_as_comments(start_server, world):
    server = start_server(EVENTQ_HEARTBEAT_SECS="0.3", EVENTQ_HEARTBEAT_JITTER_SECS="0")
    alice, _, stream = _streaming(server, world)
    try:
        assert stream.message() == {"retry": "500"}
        assert stream.message() == {"comment": "heartbeat"}
        assert stream.message() == {"comment": "heartbeat"}
        server.notify({"type": "test"}, [alice.user.user_id])
        assert stream.events(1)[0]["data"] == {"type": "test", "id": 0}
    finally:
        stream.conn.close()
        alice.close()


def test_a_busy_stream_still_gets_its_heartbeats(start_server, world):
    """A stream written to more often than the heartbeat period keeps its
    heartbeat deadline (it is not restarted at each write): the comment
    comes on time between events, and no event is lost or repeated."""
    server = start_server(EVENTQ_HEARTBEAT_SECS="0.5", EVENTQ_HEARTBEAT_JITTER_SECS="0")
    alice, queue_id, stream = _streaming(server, world)
    try:
        assert stream.message() == {"retry": "500"}
        server.wait_parked(alice.user.user_id, queue_id)
        ids: list[int] = []
        deadline = time.monotonic() + 20
        heartbeat_after: int | None = None
        while heartbeat_after is None:
            assert time.monotonic() < deadline, f"no heartbeat after {len(ids)} events"
            # An event every 50 ms: ten times the heartbeat period's rate,
            # and far from the events that end a stream (stream.py's
            # MAX_UNACKNOWLEDGED) before the heartbeat's time.
            time.sleep(0.05)
            server.notify({"type": "test", "n": len(ids)}, [alice.user.user_id])
            while True:
                message = stream.message()
                assert message, f"the stream ended after {len(ids)} events"
                if message == {"comment": "heartbeat"}:
                    heartbeat_after = len(ids)
                elif "id" in message:
                    ids.append(int(message["id"]))
                elif message.get("event") == "position":
                    break
        # Events kept coming while the heartbeat did: well within 0.5 s each.
        assert heartbeat_after >= 2
        assert ids == list(range(len(ids)))
    finally:
        stream.conn.close()
        alice.close()


def test_a_newer_stream_displaces_the_older_one(api, server, streams):
    alice = api()
    queue_id = alice.register(event_types=["test"])["queue_id"]
    older = _open(streams, server, alice, queue_id)
    server.wait_parked(alice.user.user_id, queue_id)
    newer = _open(streams, server, alice, queue_id)
    assert older.message() == {"retry": "500"}
    assert older.message() == {"event": "displaced", "data": {}}
    assert older.message() == {}
    server.wait_parked(alice.user.user_id, queue_id)
    server.notify({"type": "test"}, [alice.user.user_id])
    assert newer.events(1)[0]["data"] == {"type": "test", "id": 0}


def test_a_deleted_queue_ends_its_stream_and_cannot_be_streamed_again(api, server, streams):
    alice = api()
    queue_id = alice.register(event_types=["test"])["queue_id"]
    stream = _open(streams, server, alice, queue_id)
    server.wait_parked(alice.user.user_id, queue_id)
    assert alice.request("DELETE", "events", queue_id=queue_id).status_code == 200
    assert stream.message() == {"retry": "500"}
    assert stream.message() == {"event": "deleted", "data": {}}
    assert stream.message() == {}
    again = _open(streams, server, alice, queue_id)
    assert again.response.status == 400
    body = json.loads(again.response.read())
    assert body["code"] == "BAD_EVENT_QUEUE_ID"


def test_a_stream_ends_once_its_unacknowledged_events_reach_half_a_queue(start_server, world):
    # Queues of 20 events: a stream writes 10, ends, and the reconnection
    # acknowledges them.
    server = start_server(EVENTQ_QUEUE_MAX_EVENTS="20")
    alice = Api(server, world.user(world.realm()))
    queue_id = alice.register(event_types=["test"])["queue_id"]
    user_id = alice.user.user_id
    for n in range(10):
        server.notify({"type": "test", "n": n}, [user_id])
    first = EventStream(server.url, alice, queue_id)
    try:
        got = first.events(10)
        assert [m["data"]["n"] for m in got] == list(range(10))
        assert first.message()["event"] == "position"
        assert first.message() == {}  # ended by the server
        assert _queue(server, alice, queue_id)["events"] == 10  # none acknowledged yet
        for n in range(10, 13):
            server.notify({"type": "test", "n": n}, [user_id])
        second = EventStream(server.url, alice, queue_id, header_id=got[-1]["id"])
        assert [m["data"]["n"] for m in second.events(3)] == [10, 11, 12]
        assert _queue(server, alice, queue_id)["events"] == 3
        second.conn.close()
    finally:
        first.conn.close()
        alice.close()


@pytest.mark.parametrize(
    ("query_id", "header_id", "code", "msg"),
    [
        (-1, "x", "BAD_REQUEST", "Invalid Last-Event-ID header: 'x'"),
        (-1, "5", "BAD_REQUEST", "5"),  # never delivered
        (None, None, "BAD_REQUEST", "Missing 'last_event_id' argument"),
    ],
)
def test_a_stream_refused_gets_the_apis_json_error(
    api, server, streams, query_id, header_id, code, msg
):
    alice = api()
    queue_id = alice.register(event_types=["test"])["queue_id"]
    stream = _open(streams, server, alice, queue_id, last_event_id=query_id, header_id=header_id)
    assert stream.response.status == 400
    assert stream.response.getheader("Content-Type").startswith("application/json")
    body = json.loads(stream.response.read())
    assert body["result"] == "error"
    assert body["code"] == code
    assert msg in body["msg"]


def test_a_dont_block_poll_with_the_stream_type_is_a_poll(api, server):
    alice = api()
    queue_id = alice.register(event_types=["test"])["queue_id"]
    server.notify({"type": "test"}, [alice.user.user_id])
    response = alice.session.get(
        f"{server.url}/api/v1/events",
        params={"queue_id": queue_id, "last_event_id": -1, "dont_block": "true"},
        headers={"Accept": "text/event-stream"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.json()["events"] == [{"type": "test", "id": 0}]


def test_a_restart_ends_the_stream_and_the_next_one_goes_on_with_the_restart_event(
    start_server, world
):
    server = start_server()
    alice, queue_id, stream = _streaming(server, world, event_types=None)
    try:
        server.wait_parked(alice.user.user_id, queue_id)
        server.notify({"type": "test", "n": 0}, [alice.user.user_id])
        [before] = stream.events(1)
        assert server.stop(signal.SIGTERM) == 0, server.log()
        # Ended at shutdown (after a heartbeat, as parked polls are answered).
        rest = []
        while message := stream.message():
            rest.append(message)
        assert {"comment": "heartbeat"} in rest
        assert all("id" not in m for m in rest), "no event after the one read"
        stream.conn.close()
        server.start()
        stream = EventStream(server.url, alice, queue_id, header_id=before["id"])
        [restart] = stream.events(1)
        assert restart["id"] == "1"
        assert restart["data"]["type"] == "restart"
    finally:
        stream.conn.close()
        alice.close()


def test_an_overflowed_queue_ends_its_stream_with_the_apis_error(start_server, world):
    # Queues of at most 4,000 bytes. The first event (about 1,900 with its
    # overhead) is written and held, unacknowledged, below half of that; the
    # second overflows the queue while the stream is parked on it.
    server = start_server(EVENTQ_QUEUE_MAX_BYTES="4000")
    alice, queue_id, stream = _streaming(server, world)
    try:
        server.wait_parked(alice.user.user_id, queue_id)
        server.notify({"type": "test", "blob": "x" * 1800}, [alice.user.user_id])
        assert stream.events(1)[0]["id"] == "0"
        assert stream.message()["event"] == "position"
        server.wait_parked(alice.user.user_id, queue_id)
        server.notify({"type": "test", "blob": "y" * 2100}, [alice.user.user_id])
        error = stream.message()
        assert error["event"] == "error"
        assert error["data"]["code"] == "BAD_EVENT_QUEUE_ID"
        assert error["data"]["queue_id"] == queue_id
        assert stream.message() == {}
        assert server.user_queues(alice.user.user_id) == []
    finally:
        stream.conn.close()
        alice.close()


def test_a_queue_is_not_collected_while_its_stream_is_open(start_server, world):
    # Idle queues expire after 1 s; a heartbeat every 3 s on the stream.
    server = start_server(
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="1",
        EVENTQ_HEARTBEAT_SECS="3",
        EVENTQ_HEARTBEAT_JITTER_SECS="0",
    )
    alice, queue_id, stream = _streaming(server, world)
    try:
        assert stream.message() == {"retry": "500"}
        # Three times the idle timeout later, the queue is there.
        assert stream.message() == {"comment": "heartbeat"}
        assert [q["queue_id"] for q in server.user_queues(alice.user.user_id)] == [queue_id]
        stream.conn.close()
        wait_for(lambda: server.user_queues(alice.user.user_id) == [], what="the queue to expire")
    finally:
        stream.conn.close()
        alice.close()


def test_the_delivery_log_records_each_event_a_stream_writes(start_server, world, tmp_path):
    logs = tmp_path / "logs"
    server = start_server(EVENTQ_LOG_DIR=str(logs), EVENTQ_LOG_FLUSH_SECS="0.05")
    alice, queue_id, stream = _streaming(server, world)
    try:
        server.wait_parked(alice.user.user_id, queue_id)
        for n in range(3):
            server.notify({"type": "test", "n": n}, [alice.user.user_id])
            stream.events(1)
    finally:
        stream.conn.close()
        alice.close()
    assert server.stop() == 0  # the log written and compacted into Parquet
    table = ds.dataset(logs / "deliveries", format="parquet", partitioning="hive").to_table()
    records = [
        row
        for row in table.to_pylist()
        if row["kind"] == "delivery" and row["queue_id"] == queue_id
    ]
    assert sorted(row["event_id"] for row in records) == [0, 1, 2]
    assert {row["user_id"] for row in records} == {alice.user.user_id}


def test_a_member_made_a_guest_has_their_all_public_streams_stream_ended_with_the_reason(
    server, world
):
    server.wait_consuming()
    realm = world.realm()
    admin, member = world.user(realm, "administrator"), world.user(realm)
    client = Api(server, member)
    queue_id = client.register(all_public_streams=True, event_types=["message"])["queue_id"]
    stream = EventStream(server.url, client, queue_id)
    try:
        assert stream.message() == {"retry": "500"}
        server.wait_parked(member.user_id, queue_id)
        make_guest(server.url, admin, member.user_id)
        error = stream.message()
        assert error["event"] == "error"
        assert error["data"]["code"] == "BAD_EVENT_QUEUE_ID"
        assert error["data"]["reason"] == "role_changed"
        assert stream.message() == {}
    finally:
        stream.conn.close()
        client.close()
