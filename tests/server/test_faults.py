"""Faults under a steady event load, with clients checking every event id
(delivery must survive the failures of a real deployment): the broker
restarted or its connections cut, PostgreSQL restarted during registers, the
server stopped (SIGTERM) or killed (SIGKILL), clients that stop reading.
Each scenario prints what was sent, delivered, duplicated and lost per client
(`pytest -s`), and what the clients saw; nothing may be lost by a client
whose queue survived."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pytest
import requests
from psycopg import conninfo

from server.durability import persistence
from tests.faultload import Load, Watcher, report
from tests.support import ServerProcess, World, rabbitmqctl, wait_for

CLIENTS = 4


@pytest.fixture
def load_on(world: World) -> Iterator[object]:
    """`load_on(server)`: CLIENTS users of one realm, each with a watching
    client, and a load of events to all of them; stopped after the test."""
    started: list[tuple[Load, list[Watcher]]] = []

    def start(server: ServerProcess, per_sec: float = 100.0) -> tuple[Load, list[Watcher]]:
        realm = world.realm()
        users = [world.user(realm) for _ in range(CLIENTS)]
        load = Load(server.producer(), users[0].realm_id, [u.user_id for u in users], per_sec)
        watchers = [Watcher(lambda: server.url, user, load) for user in users]
        started.append((load, watchers))
        load.start()
        wait_for(lambda: load.count >= 20, 15, "the load to start")
        return load, watchers

    yield start
    for load, watchers in started:
        load.stop()
        for watcher in watchers:
            watcher.stop()


def drain(load: Load, watchers: list[Watcher], extra: int = 30) -> None:
    """Let `extra` more events go out, stop the load, and wait until every
    client has everything sent since its last registration."""
    target = load.count + extra
    wait_for(lambda: load.count >= target, 60, "the load to go on after the fault")
    load.stop()
    try:
        wait_for(lambda: all(w.has_all() for w in watchers), 60, "the clients to catch up")
    except AssertionError:
        report("did not catch up", load, watchers)
        raise


def assert_nothing_lost(rows: list[dict], *, queues_survive: bool = True) -> None:
    for row in rows:
        assert row["lost"] == 0, row
        assert row["duplicated"] == 0, row
        assert row["id_gaps"] == 0, row
        if queues_survive:
            assert row["queue_survived"], row


def _vhost(amqp_url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlparse(amqp_url).path[1:])


def test_rabbitmq_stopped_and_started_again(start_server, load_on, server: ServerProcess):
    shared = server  # the session's shared server: it must be consuming again after
    server = start_server()
    server.wait_consuming()
    load, watchers = load_on(server)
    try:
        rabbitmqctl("stop_app")
        # The producer's publishes fail meanwhile and are tried again.
        wait_for(lambda: load.publish_errors > 0, 30, "publishes to fail")
    finally:
        rabbitmqctl("start_app")
    wait_for(lambda: server.stats()["consumer"]["consuming"], 60, "the consumer to reconnect")
    drain(load, watchers)
    rows = report("RabbitMQ stop_app/start_app", load, watchers)
    assert_nothing_lost(rows)
    assert "connection to RabbitMQ lost" in server.settled_log()
    shared.wait_consuming(timeout=60)


def test_the_consumers_connection_closed(start_server, load_on, amqp_url, server: ServerProcess):
    shared = server  # in the same vhost: it loses its connection too
    server = start_server()
    server.wait_consuming()
    load, watchers = load_on(server)
    before = server.stats()["consumer"]["connections"]
    rabbitmqctl("close_all_connections", "--vhost", _vhost(amqp_url), "fault test")
    wait_for(
        lambda: server.stats()["consumer"]["connections"] > before, 30, "the consumer to reconnect"
    )
    drain(load, watchers)
    rows = report("consumer connection closed", load, watchers)
    assert_nothing_lost(rows)
    shared.wait_consuming(timeout=60)


def _pg_ctl(database_url: str, action: str) -> list[str]:
    """The command that stops or starts the PostgreSQL cluster the tests use
    (found by its port), when this process may control it."""
    port = int(conninfo.conninfo_to_dict(database_url).get("port") or 5432)
    if os.geteuid() != 0 or shutil.which("pg_lsclusters") is None:
        pytest.skip("needs root and Debian's pg_lsclusters/pg_ctlcluster to stop PostgreSQL")
    listing = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
    )
    for line in listing.stdout.splitlines():
        version, cluster, cluster_port = line.split()[:3]
        if int(cluster_port) == port:
            return ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, action]
    pytest.skip(f"no local PostgreSQL cluster on port {port} (the tests' database is elsewhere)")


def test_postgresql_stopped_and_started_during_registers(
    start_server, load_on, world, database_url
):
    stop, start = _pg_ctl(database_url, "stop"), _pg_ctl(database_url, "start")
    server = start_server()
    server.wait_consuming()
    load, watchers = load_on(server)
    registrar = world.user()
    statuses: list[str] = []
    done = threading.Event()

    def register_in_a_loop() -> None:
        with requests.Session() as session:
            session.auth = (registrar.email, registrar.api_key)
            while not done.is_set():
                try:
                    response = session.post(f"{server.url}/api/v1/register", timeout=15)
                    if response.status_code == 200:
                        statuses.append("200")
                        session.delete(
                            f"{server.url}/api/v1/events",
                            data={"queue_id": response.json()["queue_id"]},
                            timeout=15,
                        )
                    else:
                        statuses.append(f"{response.status_code} {response.json()['code']}")
                except (requests.RequestException, ValueError, KeyError) as exc:
                    # Recorded, not fatal: the assertions below say what was seen.
                    statuses.append(type(exc).__name__)

    worker = threading.Thread(target=register_in_a_loop, daemon=True)
    worker.start()
    try:
        wait_for(lambda: "200" in statuses, 15, "registers to succeed")
        stopped = time.monotonic()
        try:
            subprocess.run(stop, check=True, capture_output=True, timeout=120)
            mark = len(statuses)
            wait_for(
                lambda: "503 DATABASE_UNAVAILABLE" in statuses[mark:], 30, "a register to fail"
            )
        finally:
            subprocess.run(start, check=True, capture_output=True, timeout=120)
        outage = time.monotonic() - stopped
        mark = len(statuses)
        # Registers work again once PostgreSQL is back. The pool tries to
        # connect again after pauses that double (psycopg_pool: 1 s, 2 s,
        # 4 s, ...): its next try can come up to about the outage's length
        # after PostgreSQL is back, and the outage is longer on a slow machine.
        wait_for(lambda: "200" in statuses[mark:], outage + 30, "registers to succeed again")
    finally:
        done.set()
        worker.join(30)
    drain(load, watchers)
    rows = report("PostgreSQL stopped and started", load, watchers)
    print(f"  registers: {dict((s, statuses.count(s)) for s in set(statuses))}")
    assert_nothing_lost(rows)
    # A register failed cleanly (a retryable 503) or not at all; never a 500.
    assert set(statuses) <= {"200", "503 DATABASE_UNAVAILABLE"}, set(statuses)
    # The long-polling clients were not affected at all.
    for row in rows:
        assert set(row["saw"]) == {"200"}, row


def test_sigterm_then_start_again(start_server, load_on):
    server = start_server()
    server.wait_consuming()
    load, watchers = load_on(server)
    assert server.stop() == 0
    server.start()
    server.wait_consuming()
    drain(load, watchers)
    rows = report("SIGTERM and start", load, watchers)
    assert_nothing_lost(rows)


def test_sigkill_then_start_again(start_server, load_on):
    # Heartbeats often, so that parked clients get them between events.
    server = start_server(EVENTQ_CHECKPOINT_SECS="3", EVENTQ_HEARTBEAT_SECS="0.005")
    server.wait_consuming()
    load, watchers = load_on(server)
    state = server.state_dir
    checkpoint = persistence.checkpoint_file(state)

    def past_the_checkpoint() -> bool:
        """Every client's queue is in the checkpoint, and each client has
        acknowledged events delivered after it: the replay from the log
        must give those the ids they had, or the client loses or repeats
        them."""
        try:
            data = persistence.load(checkpoint)
        except persistence.CorruptSnapshot:
            return False  # being replaced
        saved = {
            q["queue_id"]: q["event_queue"]["next_event_id"] for q in (data or {}).get("queues", [])
        }
        return all(w.queue_id in saved and w.last > saved[w.queue_id] + 5 for w in watchers)

    wait_for(past_the_checkpoint, 30, "clients past a checkpoint with every queue")
    # Killed at any moment, a checkpoint's write included (it would leave
    # its temporary file, never a half-written checkpoint).
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    # No graceful save: only the checkpoint.
    assert persistence.load(persistence.queue_file(state)) is None
    server.start()
    server.wait_consuming()
    # Nothing left behind by the killed run.
    assert not list(state.glob(".*.tmp"))
    # The queues come back from the checkpoint, refilled from the event log:
    # clients go on long-polling with no BAD_EVENT_QUEUE_ID, nothing lost or
    # twice, and no re-register (so no burst of state fetches).
    drain(load, watchers)
    rows = report("SIGKILL and start", load, watchers)
    assert_nothing_lost(rows)
    for row in rows:
        assert not any("BAD_EVENT_QUEUE_ID" in seen for seen in row["saw"]), row
    assert all(len(w.epochs) == 1 for w in watchers)
    assert all(row["id_gaps"] == 0 for row in rows), rows
    assert "rebuilding its queues from the checkpoint" in server.settled_log()


def test_clients_that_stop_reading_do_not_hurt_the_others(start_server, load_on):
    # Small queues, so that a dead client's queue is ended early.
    server = start_server(EVENTQ_QUEUE_MAX_EVENTS="200")
    server.wait_consuming()
    load, watchers = load_on(server, per_sec=200.0)
    dead, slow, live = watchers[0], watchers[1], watchers[2:]
    dead.paused.set()
    rss_before = server.rss_kb()
    for _ in range(5):  # the slow one reads now and then
        slow.paused.set()
        target = load.count + 60
        wait_for(lambda t=target: load.count >= t, 30, "events to pile up")
        slow.paused.clear()
        wait_for(slow.has_all, 30, "the slow client to catch up")
    wait_for(lambda: load.count >= 600, 60, "600 events")
    drain(load, [*live, slow])
    rss_after = server.rss_kb()
    rows = report("dead and slow clients", load, watchers)
    assert_nothing_lost([r for r in rows if r["user"] != dead.user.user_id])
    # The dead client's queue was ended at 200 events, not grown without bound.
    assert f"queue {dead.queue_id} of user {dead.user.user_id} overflowed" in server.settled_log()
    assert rss_after - rss_before < 20 * 1024, (rss_before, rss_after)
