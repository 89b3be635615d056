"""Queues survive restarts of a real server process, with Zulip's `restart` event."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import uuid

import orjson
import psycopg
from psycopg import conninfo

from server.version import ZULIP_FEATURE_LEVEL, ZULIP_VERSION
from tests.support import Api, ServerProcess


def _restart(server: ServerProcess, sig: int = signal.SIGTERM) -> None:
    assert server.stop(sig) == 0, server.log()
    server.start()


def test_queues_and_their_events_survive_a_restart(start_server, world, tmp_path):
    state = tmp_path / "state"
    server = start_server(state)
    user = world.user()
    client = Api(server, user)
    everything_q = client.register()["queue_id"]
    filtered_q = client.register(event_types=["test"])["queue_id"]
    for n in range(3):
        server.notify({"type": "test", "n": n}, [user.user_id])
    assert [e["id"] for e in client.events(everything_q, 0)] == [1, 2]  # 0 acknowledged
    generation_before = server.stats()["server_generation"]

    _restart(server)

    assert (state / "event_queues.json.last").exists()
    assert not (state / "event_queues.json").exists()
    events = client.events(everything_q, 0)
    assert [e["id"] for e in events] == [1, 2, 3]
    assert [e.get("n") for e in events[:2]] == [1, 2]
    restart = events[2]
    assert restart["type"] == "restart"
    assert restart["zulip_version"] == ZULIP_VERSION
    assert restart["zulip_feature_level"] == ZULIP_FEATURE_LEVEL
    assert restart["server_generation"] >= generation_before
    # A queue whose event_types exclude "restart" does not get one.
    assert [e["type"] for e in client.events(filtered_q, -1)] == ["test"] * 3
    # The pruning point survived too.
    assert (
        client.get_events(queue_id=everything_q, last_event_id=-1, dont_block=True).json()["code"]
        == "BAD_REQUEST"
    )
    client.close()


def test_events_many_queues_hold_take_their_memory_once_after_a_restart(
    start_server, world, tmp_path
):
    """A notice to many queues is held once, however many queues hold it,
    and saved once (200 queues x 20 events of 16 KB: 64 MB, were each
    queue's events saved whole in it). After the restart the server holds
    the events once again, and the memory the file was read into is given
    back."""
    server = start_server(tmp_path / "state")
    users = [world.user() for _ in range(4)]
    clients = [Api(server, user) for user in users]
    queues = [
        client.register(event_types=["test"])["queue_id"] for client in clients for _ in range(50)
    ]
    body = "x" * 16_000
    for n in range(20):
        server.notify({"type": "test", "n": n, "body": body}, [u.user_id for u in users])
    assert server.stats()["queues"] == 200
    rss_before = server.rss_kb()

    assert server.stop() == 0
    # Each event once in the file, not once per queue (64 MB).
    assert (tmp_path / "state" / "event_queues.json").stat().st_size < 1_000_000
    server.start()

    assert server.stats()["queues"] == 200
    rss_after = server.rss_kb()
    # Copies of every event in every queue would be 64 MB more.
    assert rss_after - rss_before < 24 * 1024, (rss_before, rss_after)
    for client, queue_id in ((clients[0], queues[0]), (clients[-1], queues[-1])):
        events = client.events(queue_id, -1)
        assert [e.get("n") for e in events] == list(range(20))
        assert all(e["body"] == body for e in events)
    for client in clients:
        client.close()


def test_sigint_saves_too_and_parked_requests_are_answered_first(start_server, world):
    server = start_server()
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    parked = client.park(queue_id, -1)
    assert server.stop(signal.SIGINT) == 0
    answered = parked.result(timeout=10)
    assert answered.status_code == 200
    assert answered.json()["events"] == [{"type": "heartbeat", "id": -1}]
    server.start()
    events = client.events(queue_id, -1)
    assert [e["type"] for e in events] == ["restart"]
    client.close()


def test_the_saved_file_is_versioned_and_complete(start_server, world, tmp_path):
    state = tmp_path / "state"
    server = start_server(state)
    user = world.user()
    client = Api(server, user)
    queue_id = client.register(narrow=[["stream", "denmark"]], queue_lifespan_secs=3600)["queue_id"]
    server.notify({"type": "test", "internal_data": {"kept": True}}, [user.user_id])
    assert server.stop() == 0
    saved = orjson.loads((state / "event_queues.json").read_bytes())
    assert saved["format"] == "eventq-queues"
    assert saved["version"] == 2
    [queue] = [q for q in saved["queues"] if q["queue_id"] == queue_id]
    assert queue["user_id"] == user.user_id
    assert queue["options"]["narrow"] == [["stream", "denmark"]]
    assert queue["options"]["lifespan_secs"] == 3600
    # An event is its id and its payload's index in the file's table.
    [[event_id, index]] = queue["event_queue"]["events"]
    assert event_id == 0
    assert saved["payloads"][index] == {"type": "test", "internal_data": {"kept": True}}
    assert not list(state.glob(".*.tmp"))
    client.close()


def test_a_corrupt_file_is_kept_aside_and_the_server_starts_empty(start_server, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "event_queues.json").write_bytes(b'{"format": "eventq-queues", "vers')
    server = start_server(state)
    assert server.stats()["queues"] == 0
    kept = list(state.glob("event_queues.json.corrupt-*"))
    assert len(kept) == 1
    assert kept[0].read_bytes().startswith(b'{"format"')
    assert "is not valid JSON" in server.settled_log()
    assert "starting with no queues" in server.settled_log()


def test_a_file_of_an_unknown_version_is_refused_the_same_way(start_server, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "event_queues.json").write_bytes(
        orjson.dumps({"format": "eventq-queues", "version": 99, "queues": []})
    )
    server = start_server(state)
    assert server.stats()["queues"] == 0
    assert "unsupported queue snapshot version 99" in server.settled_log()
    assert list(state.glob("event_queues.json.corrupt-*"))


def test_no_file_means_no_queues(start_server, tmp_path):
    server = start_server(tmp_path / "fresh")
    assert server.stats()["queues"] == 0
    assert "no saved queues" in server.settled_log()


def test_a_taken_port_fails_cleanly_and_keeps_the_saved_queues(start_server, world, tmp_path):
    state = tmp_path / "state"
    server = start_server(state)
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    port = server.port
    assert server.stop() == 0
    with socket.socket() as blocker:
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        result = subprocess.run(
            [sys.executable, "-m", "server", "serve", "--port", str(port)],
            env=server.env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert f"eventq: cannot start: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert (state / "event_queues.json").exists()
    server.start()
    assert client.events(queue_id, -1)[0]["type"] == "restart"
    client.close()


def test_a_database_without_the_schema_is_refused_at_start(start_server, database_url, tmp_path):
    name = f"eventq_empty_{uuid.uuid4().hex[:8]}"
    admin = conninfo.make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        env = ServerProcess(database_url, tmp_path / "s").env()
        env["EVENTQ_DATABASE_URL"] = conninfo.make_conninfo(database_url, dbname=name)
        result = subprocess.run(
            [sys.executable, "-m", "server", "serve", "--port", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)'.encode())
    assert result.returncode == 1
    assert "the database schema is not up to date" in result.stderr
    assert "run `eventq db migrate`" in result.stderr


def test_one_bad_saved_queue_costs_only_itself(start_server, world, tmp_path):
    state = tmp_path / "state"
    server = start_server(state)
    user = world.user()
    client = Api(server, user)
    good_q = client.register()["queue_id"]
    bad_q = client.register()["queue_id"]
    assert server.stop() == 0
    path = state / "event_queues.json"
    saved = orjson.loads(path.read_bytes())
    for queue in saved["queues"]:
        if queue["queue_id"] == bad_q:
            queue["event_queue"]["next_event_id"] = "seven"
    path.write_bytes(orjson.dumps(saved))
    server.start()
    assert [e["type"] for e in client.events(good_q, -1)] == ["restart"]
    assert client.get_events(queue_id=bad_q, last_event_id=-1).json()["code"] == (
        "BAD_EVENT_QUEUE_ID"
    )
    assert "saved queue" in server.settled_log()
    assert "1 saved queues could not be restored" in server.settled_log()
    assert list(state.glob("event_queues.json.partial-*"))
    client.close()
