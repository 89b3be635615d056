"""Stream positions as a client sees them: `stream_position` on every answer,
`resume_from` after a lost queue, and the event log's retention
(docs/behaviour.md, "Stream positions, checkpoints and crashes")."""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from generation.send import close_for_thread, send_event
from tests.conftest import scratch_database
from tests.support import Api, ServerProcess, World, wait_for


@pytest.fixture
def send(server: ServerProcess) -> Iterator[Any]:
    """Send a logged event (its own transaction, then RabbitMQ) to users."""

    def sending(realm_id: int, event: dict[str, Any], users: list[Any]) -> None:
        send_event(realm_id, event, users, config=server.producer())

    yield sending
    close_for_thread()


def _collect(client: Api, queue_id: str, count: int) -> tuple[list[dict[str, Any]], int]:
    """Poll until `count` events other than heartbeats came; returns them and
    the last answer's stream_position."""
    seen: list[dict[str, Any]] = []
    last = -1
    position = -1

    def more() -> bool:
        nonlocal last, position
        response = client.get_events(queue_id=queue_id, last_event_id=last, dont_block=True)
        assert response.status_code == 200, response.text
        body = response.json()
        position = body["stream_position"]
        for event in body["events"]:
            last = max(last, event["id"])
            if event["type"] != "heartbeat":
                seen.append(event)
        return len(seen) >= count

    wait_for(more, 30, f"{count} events")
    return seen, position


def test_a_client_resumes_from_its_last_position_with_exactly_what_it_missed(api, world, send):
    realm_name = world.realm()
    alice = api(realm_name)
    bob = api(realm_name)
    realm = alice.user.realm_id
    queue_id = alice.register(event_types=["note", "other"])["queue_id"]
    for n in range(3):
        send(realm, {"type": "note", "n": n}, [alice.user.user_id])
    events, seen_at = _collect(alice, queue_id, 3)
    assert [e["n"] for e in events] == [0, 1, 2]
    assert seen_at > 0
    # The queue is lost (here: deleted); events keep coming meanwhile.
    assert alice.request("DELETE", "events", queue_id=queue_id).status_code == 200
    send(realm, {"type": "note", "n": 3}, [alice.user.user_id])
    send(realm, {"type": "note", "n": 99}, [bob.user.user_id])  # not hers
    send(realm, {"type": "unwanted", "n": 98}, [alice.user.user_id])  # not a type she takes
    send(realm, {"type": "other", "n": 4}, [{"id": alice.user.user_id, "flags": ["x"]}])
    # Wait until the server has them all (its stream passed them).
    with psycopg.connect(alice.server.database_url) as conn:
        row = conn.execute("SELECT max(position) FROM event_log").fetchone()
    assert row is not None
    wait_for(lambda: alice.server.stats()["stream"]["position"] >= row[0], 10, "the stream")

    resumed = alice.register(event_types=["note", "other"], resume_from=seen_at)
    assert resumed["resumed_from"] == seen_at
    assert resumed["last_event_id"] == -1
    assert resumed["stream_position"] >= seen_at
    assert "realm_users" not in resumed  # no state: the client has its own
    events, _ = _collect(alice, resumed["queue_id"], 2)
    assert [(e["id"], e["type"], e["n"]) for e in events] == [(0, "note", 3), (1, "other", 4)]
    # The per-user data is hers, as a live delivery would have it.
    assert events[1].get("flags") == ["x"]
    # Live events follow the replayed ones, in the same queue.
    send(realm, {"type": "note", "n": 5}, [alice.user.user_id])
    # send_event returns once RabbitMQ has the notice, not once it is delivered.
    live = wait_for(lambda: alice.events(resumed["queue_id"], 1), what="the live event")
    assert [(e["id"], e["n"]) for e in live] == [(2, 5)]

    # From before everything, she gets everything.
    again = alice.register(event_types=["note"], resume_from=seen_at - 3)
    events, _ = _collect(alice, again["queue_id"], 5)
    assert [e["n"] for e in events][:5] == [0, 1, 2, 3, 5]


def test_resume_refuses_what_it_cannot_do(api):
    client = api()
    for params, message in [
        ({"resume_from": -1}, "resume_from is too small"),
        ({"resume_from": "x"}, 'Argument "resume_from" is not valid JSON.'),
        (
            {"resume_from": 0, "fetch_event_types": ["realm"]},
            "resume_from fetches no state: leave out fetch_event_types",
        ),
    ]:
        response = client.request("POST", "register", **params)
        assert response.status_code == 400, response.text
        assert response.json()["msg"].startswith(message), response.json()


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of this test's own: retention prunes the whole log."""
    with scratch_database(f"eventq_test_{uuid.uuid4().hex[:8]}") as url:
        yield url


def _log(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM event_log), (SELECT through FROM event_log_pruned)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _floors(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT reader, floor FROM stream_readers").fetchall()
    return {reader: int(floor) for reader, floor in rows}


def _newest(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT coalesce(max(position), 0) FROM event_log").fetchone()
    assert row is not None
    return int(row[0])


def test_retention_prunes_the_log_in_batches_and_resume_says_when_it_is_too_late(
    own_database: str, amqp_url: str, tmp_path: Path
):
    server = ServerProcess(
        own_database,
        tmp_path / "state",
        {
            # About two notices' worth of bytes: all but the newest go.
            "EVENTQ_EVENT_LOG_RETENTION_BYTES": "600",
            "EVENTQ_EVENT_LOG_PRUNE_SECS": "0.2",
            "EVENTQ_CHECKPOINT_SECS": "0.2",
            # This server runs the retention update, 3 rows in the first batch.
            "EVENTQ_BACKGROUND_TASKS": "on",
            "EVENTQ_BACKGROUND_IDLE_SECS": "0.05",
            "EVENTQ_MODULES": "tests.server.background_module",
        },
        amqp_url,
    )
    # A reader that needs the whole log (floor 0) holds pruning back until
    # the 20 events are all logged, so that one run finds them all: runs
    # come every 0.2 s, and sends slower than a few per run would be pruned
    # a batch or less at a time.
    World(own_database).execute(b"INSERT INTO stream_readers (reader, floor) VALUES ('hold', 0)")
    server.start()
    try:
        world = World(own_database)
        user = world.user()
        client = Api(server, user)
        queue_id = client.register(event_types=["note"])["queue_id"]
        config = server.producer()
        for n in range(20):
            send_event(user.realm_id, {"type": "note", "n": n, "pad": "x" * 100}, [user.user_id],
                       config=config)  # fmt: skip
        close_for_thread()
        events, position = _collect(client, queue_id, 20)
        assert [e["n"] for e in events] == list(range(20))
        # The server's own floor (its last checkpoint's position) past them
        # too, then the hold let go.
        newest = _newest(own_database)

        def floor_past_them() -> bool:
            floors = _floors(own_database)
            return any(floor >= newest for reader, floor in floors.items() if reader != "hold")

        wait_for(floor_past_them, 30, "the server's floor past the events")
        World(own_database).execute(b"DELETE FROM stream_readers WHERE reader = 'hold'")
        # Pruned down to the size limit, in batches.
        finished = r"background update event_log_retention finished: (\d+) items in (\d+) batches"

        def pruned() -> int:
            return sum(int(items) for items, _ in re.findall(finished, server.log()))

        wait_for(lambda: _log(own_database)[0] <= 5 and pruned() >= 15, 30, "the log pruned")
        rows, through = _log(own_database)
        assert rows <= 5
        assert through >= position - 5
        runs = re.findall(finished, server.log())
        assert any(int(batches) > 1 for items, batches in runs if int(items) > 3), runs

        # A client that last saw the first events cannot resume: told so.
        refused = client.request("POST", "register", event_types=["note"], resume_from=1)
        assert refused.status_code == 400
        body = refused.json()
        assert body["code"] == "RESUME_EXPIRED"
        assert body["pruned_through"] >= through
        assert "fetch the state afresh" in body["msg"]
        # One that saw everything can.
        resumed = client.register(event_types=["note"], resume_from=position)
        assert client.events(resumed["queue_id"], -1, dont_block=True) == []
        client.close()
    finally:
        server.stop()


def _journaled(server: ServerProcess) -> set[str]:
    """The queues this server has in the journal (other servers share the database)."""
    with psycopg.connect(server.database_url) as conn:
        rows = conn.execute(
            "SELECT queue_id FROM queue_journal WHERE shard LIKE %s",
            (f"%:{server.state_dir.resolve()}",),
        )
        return {row[0] for row in rows}


def test_a_queue_registered_after_the_last_checkpoint_survives_a_crash(start_server, world):
    # Checkpoints only at start: the queues below exist only in the journal.
    server = start_server(EVENTQ_CHECKPOINT_SECS="3600")
    server.wait_consuming()
    user = world.user()
    client = Api(server, user)
    kept = client.register(event_types=["note"])["queue_id"]
    gone = client.register(event_types=["note"])["queue_id"]
    assert client.request("DELETE", "events", queue_id=gone).status_code == 200
    config = server.producer()
    for n in range(3):
        send_event(user.realm_id, {"type": "note", "n": n}, [user.user_id], config=config)
    events, _ = _collect(client, kept, 3)
    assert [(e["id"], e["n"]) for e in events] == [(0, 0), (1, 1), (2, 2)]
    client.events(kept, 1)  # acknowledges 0 and 1
    # The deleted one's row is gone: the journal keeps the order of operations.
    wait_for(lambda: _journaled(server) == {kept}, 10, "the journal rows")

    server.stop(signal.SIGKILL)
    for n in range(3, 5):  # sent while it is down
        send_event(user.realm_id, {"type": "note", "n": n}, [user.user_id], config=config)
    close_for_thread()
    server.start()

    # The same ids as before the crash: the client's acknowledgement holds.
    events = wait_for(lambda: client.events(kept, 1) if len(client.events(kept, 1)) >= 3 else None)
    assert [(e["id"], e["n"]) for e in events] == [(2, 2), (3, 3), (4, 4)]
    assert "come back from the queue journal" in server.settled_log()
    response = client.get_events(queue_id=gone, last_event_id=-1, dont_block=True)
    assert response.json()["code"] == "BAD_EVENT_QUEUE_ID"
    client.close()


def _refused(client: Api, resume_from: int) -> str:
    response = client.request("POST", "register", resume_from=resume_from)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["result"] == "error"
    assert body["code"] == "RESUME_POSITION_UNKNOWN", body
    return str(body["msg"])


def test_a_position_this_server_never_gave_the_user_is_refused(api, world, send):
    newcomer = api()
    # Never registered with state: no position was ever given to them.
    assert "not a position this server gave you" in _refused(newcomer, 1)
    given = newcomer.register(event_types=["note"])["stream_position"]
    send(newcomer.user.realm_id, {"type": "note", "n": 1}, [newcomer.user.user_id])
    # Below the first position they were given (0: the whole log), refused;
    # ahead of the stream, refused; from what they were given, resumed.
    assert "not a position this server gave you" in _refused(newcomer, given - 1)
    assert "not a position this server gave you" in _refused(newcomer, 0)
    assert "ahead of this server's stream" in _refused(newcomer, 2**62)
    resumed = newcomer.register(event_types=["note"], resume_from=given)
    events, _ = _collect(newcomer, resumed["queue_id"], 1)
    assert [e["n"] for e in events] == [1]
    # Another user's position is not theirs: an older user's first register
    # came before this one's.
    older = api()
    older.register(event_types=["note"])
    later = api()
    first = later.register(event_types=["note"])["stream_position"]
    assert first >= given
    assert "not a position this server gave you" in _refused(later, given - 1)


def test_an_event_type_no_event_can_have_resumes_to_nothing(api):
    client = api()
    position = client.register(event_types=["note"])["stream_position"]
    resumed = client.register(event_types=["a\x00b"], resume_from=position)
    assert client.events(resumed["queue_id"], -1) == []


def test_queues_saved_against_another_database_are_set_aside(
    start_server, world, own_database: str, amqp_url: str, tmp_path: Path
):
    first = start_server(state_dir=tmp_path / "state")
    user = world.user()
    client = Api(first, user)
    client.register(event_types=["note"])
    send_event(user.realm_id, {"type": "note"}, [user.user_id], config=first.producer())
    close_for_thread()
    wait_for(lambda: first.stats()["stream"]["position"] > 0, 10, "the event")
    first.stop()
    client.close()

    # The same state directory, a new database: its log starts again at 1.
    second = ServerProcess(own_database, tmp_path / "state", amqp_url=amqp_url)
    second.start()
    try:
        assert "the state directory belongs to another database" in second.settled_log()
        other = World(own_database).user()
        fresh = Api(second, other)
        queue_id = fresh.register(event_types=["note"])["queue_id"]
        send_event(other.realm_id, {"type": "note", "n": 1}, [other.user_id],
                   config=second.producer())  # fmt: skip
        close_for_thread()
        events, _ = _collect(fresh, queue_id, 1)
        assert events[0]["n"] == 1
        fresh.close()
    finally:
        second.stop()


# -- what a resumed queue may hold now -----------------------------------------


def _caught_up(server: ServerProcess) -> None:
    """Wait until the server's stream has passed every logged event."""
    with psycopg.connect(server.database_url) as conn:
        row = conn.execute("SELECT max(position) FROM event_log").fetchone()
    assert row is not None
    wait_for(lambda: server.stats()["stream"]["position"] >= row[0], what="the stream")


def _post(api: Api, **params: Any) -> int:
    response = api.request("POST", "messages", **params)
    assert response.status_code == 200, response.text
    return int(response.json()["id"])


def _replayed(api: Api, resume_from: int, **params: Any) -> list[dict[str, Any]]:
    """What a queue resumed from `resume_from` holds (no live event comes)."""
    resumed = api.register(resume_from=resume_from, **params)
    return api.events(resumed["queue_id"], -1)


def test_a_resume_replays_only_what_the_user_may_see_now(server, apis, domain):
    hamlet, othello, iago = apis["hamlet"], apis["othello"], apis["iago"]
    # Hamlet makes Rome, public: Othello is not subscribed, his
    # all_public_streams queue takes its messages.
    rome = hamlet.request("POST", "users/me/subscriptions", subscriptions=[{"name": "Rome"}])
    assert rome.status_code == 200, rome.text
    watching = othello.register(all_public_streams=True, event_types=["message"])
    subscribed = hamlet.register(event_types=["message", "delete_message"])
    for lost in (watching, subscribed):
        assert lost["stream_position"] > 0
    kept = _post(hamlet, type="stream", to="Rome", topic="t", content="kept")
    deleted = _post(hamlet, type="stream", to="Rome", topic="t", content="deleted")
    danish = _post(iago, type="stream", to="Denmark", topic="t", content="danish")
    direct = _post(hamlet, type="private", to=[domain.id("othello")], content="unread")
    ok_delete = iago.request("DELETE", f"messages/{deleted}")
    assert ok_delete.status_code == 200, ok_delete.text
    assert hamlet.request("DELETE", f"messages/{direct}").status_code == 200  # his own
    _caught_up(server)

    # As the log had it: every message; all from Othello's position.
    assert {e["message"]["id"] for e in _replayed(
        othello, watching["stream_position"], all_public_streams=True, event_types=["message"]
    )} == {kept, danish}  # fmt: skip
    # Rome made private: no longer his to see (he is not subscribed).
    with psycopg.connect(server.database_url) as conn:
        row = conn.execute(
            "SELECT id FROM streams WHERE realm_id = %s AND name = 'Rome'",
            (hamlet.user.realm_id,),
        ).fetchone()
    assert row is not None
    private = iago.request("PATCH", f"streams/{row[0]}", is_private=True)
    assert private.status_code == 200, private.text
    _caught_up(server)
    replay = _replayed(
        othello, watching["stream_position"], all_public_streams=True, event_types=["message"]
    )
    assert [e["message"]["id"] for e in replay] == [danish]
    # Hamlet is subscribed: Rome's kept message is still his; the deleted
    # one is not replayed, its deletion is.
    replay = _replayed(
        hamlet, subscribed["stream_position"], event_types=["message", "delete_message"]
    )
    assert [e["message"]["id"] for e in replay if e["type"] == "message"] == [kept, danish]
    # (One message per deletion event: a client without bulk_message_deletion.)
    deletions = [e["message_id"] for e in replay if e["type"] == "delete_message"]
    assert deletions == [deleted, direct]
    # The direct message deleted before it was read is not Othello's to
    # recover either.
    replay = _replayed(othello, watching["stream_position"], event_types=["message"])
    assert [e["message"]["id"] for e in replay] == [danish]


def test_a_member_who_left_a_private_channel_is_not_replayed_its_messages(server, apis, domain):
    othello, iago = apis["othello"], apis["iago"]
    position = othello.register(event_types=["message"])["stream_position"]
    secret = _post(iago, type="stream", to="Scotland", topic="t", content="before he left")
    danish = _post(iago, type="stream", to="Denmark", topic="t", content="still public")
    response = othello.request("DELETE", "users/me/subscriptions", subscriptions=["Scotland"])
    assert response.status_code == 200, response.text
    _caught_up(server)
    replay = _replayed(othello, position, event_types=["message"])
    assert [e["message"]["id"] for e in replay] == [danish]
    assert secret != danish


def _log_rows(url: str, realm_id: int, user_id: int, count: int, *, known: bool) -> None:
    """`count` logged notes to `user_id`, written as this version writes
    them (`known`: recipients recorded) or as the one before did."""
    notice = f'{{"event":{{"type":"note","n":7}},"users":[{user_id}],"realm_id":{realm_id}}}'
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO event_log (position, realm_id, event_type, notice, recipients,"
            " public_message)"
            " SELECT nextval('event_log_position'), %s, 'note', convert_to(%s, 'UTF8'),"
            " CASE WHEN %s THEN ARRAY[%s]::bigint[] END, CASE WHEN %s THEN false END"
            " FROM generate_series(1, %s)",
            (realm_id, notice, known, user_id, known, count),
        )


def test_a_resume_reads_the_users_rows_only_and_at_most_a_bounded_number(start_server, world):
    # Queues of 100 events: a resume reads at most 200 rows.
    server = start_server(EVENTQ_QUEUE_MAX_EVENTS="100")
    realm = world.realm()
    alice, bob = Api(server, world.user(realm)), Api(server, world.user(realm))
    position = alice.register(event_types=["note"])["stream_position"]
    url = server.database_url
    realm_id = alice.user.realm_id
    # Bob's, recorded as his: never read for Alice, however many.
    _log_rows(url, realm_id, bob.user.user_id, 1_000, known=True)
    # One of hers written by the version before (no recipients): parsed, hers.
    _log_rows(url, realm_id, alice.user.user_id, 1, known=False)
    _caught_up(server)
    replay = _replayed(alice, position, event_types=["note"])
    assert [e["n"] for e in replay] == [7]
    # Rows of the version before that are not hers must be read to tell: past
    # 200 the resume gives up, and the client registers with its state.
    _log_rows(url, realm_id, bob.user.user_id, 200, known=False)
    _caught_up(server)
    response = alice.request("POST", "register", event_types=["note"], resume_from=position)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "RESUME_EXPIRED"
    assert "More than 200 logged events to read" in body["msg"]


def test_a_resume_of_many_pages_replays_every_event_once_in_order(start_server, world):
    # More than a page of the log read for one resume (server/durability/
    # resume.py, RESUME_PAGE): hers numbered, between them rows the version
    # before wrote without recipients (read, parsed, not hers).
    server = start_server()
    realm = world.realm()
    alice, bob = Api(server, world.user(realm)), Api(server, world.user(realm))
    position = alice.register(event_types=["note"])["stream_position"]
    realm_id, user_id = alice.user.realm_id, alice.user.user_id
    hers = f'{{"event":{{"type":"note","n":%s}},"users":[{user_id}],"realm_id":{realm_id}}}'
    his = f'{{"event":{{"type":"note","n":-1}},"users":[{bob.user.user_id}],"realm_id":{realm_id}}}'
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO event_log (position, realm_id, event_type, notice, recipients,"
            " public_message)"
            " SELECT nextval('event_log_position'), %(realm)s, 'note',"
            " convert_to(CASE WHEN mod(n, 3) = 2 THEN %(his)s ELSE format(%(hers)s, n) END,"
            " 'UTF8'),"
            " CASE WHEN mod(n, 3) = 2 THEN NULL ELSE ARRAY[%(user)s]::bigint[] END,"
            " CASE WHEN mod(n, 3) = 2 THEN NULL ELSE false END"
            " FROM generate_series(0, 899) n ORDER BY n",
            {"realm": realm_id, "his": his, "hers": hers, "user": user_id},
        )
    _caught_up(server)
    replay = _replayed(alice, position, event_types=["note"])
    assert [e["n"] for e in replay] == [n for n in range(900) if n % 3 != 2]
    assert [e["id"] for e in replay] == list(range(len(replay)))


def test_a_resume_replays_at_most_resume_max_events(start_server, world):
    # Queues of 100 events, resumes of at most 30: 30 replayed, 31 refused.
    server = start_server(EVENTQ_QUEUE_MAX_EVENTS="100", EVENTQ_RESUME_MAX_EVENTS="30")
    alice = Api(server, world.user(world.realm()))
    position = alice.register(event_types=["note"])["stream_position"]
    realm_id, user_id = alice.user.realm_id, alice.user.user_id
    _log_rows(server.database_url, realm_id, user_id, 30, known=True)
    _caught_up(server)
    assert len(_replayed(alice, position, event_types=["note"])) == 30
    _log_rows(server.database_url, realm_id, user_id, 1, known=True)
    _caught_up(server)
    response = alice.request("POST", "register", event_types=["note"], resume_from=position)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "RESUME_EXPIRED"
    assert "More than 30 events since position" in body["msg"]
    # The operator's line (logged before the answer is written).
    assert (
        f"user {user_id}: resume_from {position} expired (More than 30 events"
        in server.settled_log()
    )


def test_a_resume_while_events_keep_coming_misses_none_and_repeats_none(server, api, world):
    import threading

    from generation.send import close_for_thread, send_event

    alice = api(world.realm())
    queue_id = alice.register(event_types=["seq"])["queue_id"]
    config = server.producer()
    resumed = threading.Event()
    sent: list[int] = []

    def send(n: int) -> None:
        send_event(alice.user.realm_id, {"type": "seq", "n": n}, [alice.user.user_id],
                   config=config)  # fmt: skip
        sent.append(n)

    def keep_sending() -> None:
        # Until the resume has answered, then 20 more: the log grows all the
        # time the resume reads it, and its queue must take what came meanwhile.
        try:
            while not resumed.is_set() and len(sent) < 20_000:
                send(len(sent))
            for _ in range(20):
                send(len(sent))
        finally:
            close_for_thread()

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        # Her last answer's position: every event up to it she has applied.
        applied, position = _collect(alice, queue_id, 20)
        assert alice.request("DELETE", "events", queue_id=queue_id).status_code == 200
        answer = alice.register(event_types=["seq"], resume_from=position)
    finally:
        resumed.set()
        sender.join(120)
    assert not sender.is_alive()
    got: list[int] = []

    def all_in() -> bool:
        got.extend(e["n"] for e in alice.events(answer["queue_id"], len(got) - 1))
        return bool(got) and got[-1] == sent[-1]

    wait_for(all_in, what="every event sent after her position")
    first = max(e["n"] for e in applied) + 1
    assert got == list(range(first, sent[-1] + 1)), "nothing missing, nothing twice"


def test_a_users_floor_stays_the_lowest_they_were_given_whatever_was_pruned(own_database):
    import asyncio

    from server.database.db import Database

    user = World(own_database).user()

    async def floors() -> list[int | None]:
        db = Database(own_database)
        await db.open()
        try:
            seen = [await db.stream_floor(user.user_id)]
            await db.record_stream_floors({user.user_id: 100})  # a laptop, yesterday
            with psycopg.connect(own_database, autocommit=True) as conn:
                conn.execute("UPDATE event_log_pruned SET through = 500")
            # A phone registers this morning: the laptop's tab may still
            # resume from 600, given to it last night and still kept.
            await db.record_stream_floors({user.user_id: 900})
            seen.append(await db.stream_floor(user.user_id))
            return seen
        finally:
            await db.close()

    assert asyncio.run(floors()) == [None, 100]


def test_a_floor_written_while_a_resume_reads_the_floors_is_not_missed(own_database):
    """A register's floor is written after its answer (server/durability/
    floors.py); a resume right after it reads the table while that write
    runs. The read started before the write committed, and the write was
    done when the read came back: the floor was in neither place, and the
    resume was refused as RESUME_POSITION_UNKNOWN (seen once in CI)."""
    import asyncio

    from server.database.db import Database
    from server.durability.floors import StreamFloors

    user = World(own_database).user()

    async def lowest() -> int | None:
        db = Database(own_database)
        await db.open()
        floors = StreamFloors(db)
        read = db.stream_floor
        with psycopg.connect(own_database) as lock:
            try:
                # The writer's INSERT waits behind this lock; reads do not.
                lock.execute("LOCK TABLE user_stream_floors IN EXCLUSIVE MODE")

                async def read_then_the_write_commits(user_id: int) -> int | None:
                    found = await read(user_id)  # before the write commits
                    lock.commit()
                    await floors.drain()
                    return found

                db.stream_floor = read_then_the_write_commits  # type: ignore[method-assign]
                floors.record(user.user_id, 42)
                await asyncio.sleep(0)  # the writer starts, and waits on the lock
                return await floors.lowest(user.user_id)
            finally:
                lock.rollback()
                await floors.drain()
                await db.close()

    assert asyncio.run(lowest()) == 42


def test_what_a_resume_replays_is_judged_by_every_message_and_channel_an_event_names():
    from server.durability.resume import ReplayFacts, replayable

    # Channel 1 the user sees, 2 they do not, 3 the domain does not know (a
    # producer's own); message 10 was deleted since, 11 is in channel 2.
    facts = ReplayFacts(
        deleted=frozenset({10}),
        channel_of={11: 2, 12: 1},
        knows=frozenset({1, 2}),
        sees=frozenset({1}),
    )
    kept = [
        {"type": "message", "message": {"id": 12, "type": "stream", "stream_id": 1}},
        {"type": "message", "message": {"id": 13, "type": "stream", "stream_id": 3}},
        {"type": "update_message", "message_id": 12, "message_ids": [12], "stream_id": 1},
        {"type": "submessage", "message_id": 12, "content": "{}"},
        {"type": "task_done", "task": 7},
        # Deletions and the news of a change are replayed whatever is true now.
        {"type": "delete_message", "message_ids": [10, 11], "stream_id": 2},
        {"type": "stream", "op": "update", "stream_id": 2, "property": "invite_only"},
        {"type": "subscription", "op": "remove", "subscriptions": [{"stream_id": 2}]},
        {"type": "update_message_flags", "op": "add", "flag": "read", "messages": [11]},
    ]
    withheld = [
        {"type": "message", "message": {"id": 10, "type": "private"}},
        {"type": "message", "message": {"id": 11, "type": "stream", "stream_id": 2}},
        {"type": "reaction", "op": "add", "message_id": 11},
        {"type": "submessage", "message_id": 11, "content": "{}"},
        {"type": "update_message", "message_id": 12, "message_ids": [12], "stream_id": 1,
         "new_stream_id": 2},
        {"type": "typing", "op": "start", "stream_id": 2},
        {"type": "update_message", "message_id": 12, "message_ids": [10, 12]},
    ]  # fmt: skip
    assert [replayable(e, facts) for e in kept] == [True] * len(kept)
    assert [replayable(e, facts) for e in withheld] == [False] * len(withheld)
