"""send_event through the real RabbitMQ into real server processes."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from typing import ClassVar

import pika
import psycopg
import pyarrow.dataset as ds
import pytest
import requests

from generation import eventlog
from generation.config import ProducerConfig
from generation.errors import BadNotice
from generation.notice import NOTICE_ID_HEADER
from generation.publisher import PublishError
from generation.send import (
    close_for_thread,
    prepare_notice,
    send_event,
    send_event_on_commit,
    transaction,
)
from server.delivery.consumer import realm_of
from tests.support import REPO, Api, ServerProcess, rabbitmqctl, wait_for


def _collect(client: Api, queue_id: str, count: int, timeout: float = 30.0) -> list[dict]:
    """Poll (acknowledging as we go) until `count` non-heartbeat events arrived."""
    seen: list[dict] = []
    last = -1

    def more() -> bool:
        nonlocal last
        for event in client.events(queue_id, last):
            last = max(last, event["id"])
            if event["type"] not in ("heartbeat", "restart"):
                seen.append(event)
        return len(seen) >= count

    wait_for(more, timeout, f"{count} events")
    return seen


def test_send_event_reaches_a_parked_long_poll_with_each_users_flags(api, server):
    server.wait_consuming()
    reader, other = api(), api()
    realm_id = reader.user.realm_id
    reader_q = reader.register()["queue_id"]
    parked = reader.park(reader_q, -1)
    message = {"type": "stream", "display_recipient": "general", "subject": "hi", "content": "x"}
    send_event(
        realm_id,
        {"type": "message", "message": message},
        [{"id": reader.user.user_id, "flags": ["mentioned"]}, {"id": other.user.user_id}],
        config=server.producer(),
    )
    [event] = parked.result(timeout=15).json()["events"]
    assert event == {"type": "message", "message": message, "flags": ["mentioned"], "id": 0}


def test_order_is_preserved_per_queue(api, server):
    server.wait_consuming()
    client = api()
    queue_id = client.register()["queue_id"]
    config = server.producer()
    for n in range(200):
        send_event(
            client.user.realm_id, {"type": "seq", "n": n}, [client.user.user_id], config=config
        )
    events = _collect(client, queue_id, 200)
    assert [e["n"] for e in events] == list(range(200))
    assert [e["id"] for e in events] == list(range(200))


def _a_registered_queue(start_server, world, **env: str) -> tuple[ServerProcess, Api, str]:
    """A server started with `env`, consuming, and a new user's queue on it."""
    server = start_server(**env)
    server.wait_consuming()
    client = Api(server, world.user())
    return server, client, client.register()["queue_id"]


def _a_queue_on_a_stopped_server(start_server, world) -> tuple[ServerProcess, Api, str]:
    """`_a_registered_queue`, then the server stopped gracefully (it saved
    the queue)."""
    server, client, queue_id = _a_registered_queue(start_server, world)
    assert server.stop() == 0
    return server, client, queue_id


def test_notices_sent_while_the_server_is_down_arrive_after_it_starts(start_server, world):
    server, client, queue_id = _a_queue_on_a_stopped_server(start_server, world)
    user = client.user
    for n in range(3):
        send_event(
            user.realm_id, {"type": "later", "n": n}, [user.user_id], config=server.producer()
        )
    server.start()
    events = _collect(client, queue_id, 3)
    assert [e["n"] for e in events] == [0, 1, 2]
    # The same queue: ids continue after the restart event.
    assert [e["id"] for e in events] == [1, 2, 3]
    client.close()


def test_closing_the_brokers_connections_loses_and_duplicates_nothing(
    start_server, world, amqp_url
):
    server = start_server()
    server.wait_consuming()
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    vhost = urllib.parse.unquote(urllib.parse.urlparse(amqp_url).path[1:])
    config = server.producer()
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            send_event(user.realm_id, {"type": "seq", "n": sent}, [user.user_id], config=config)
            sent += 1

    def cut() -> None:
        rabbitmqctl("close_all_connections", "--vhost", vhost, "test: cut")

    send(100)  # before
    cut()  # the consumer and this producer both lose their connections
    send(100)  # during: the producer reconnects, the consumer is still away
    wait_for(lambda: server.stats()["consumer"]["connections"] >= 2, 30, "a reconnect")
    errors: list[BaseException] = []

    def produce_while_cut() -> None:
        try:
            send(100)
        except BaseException as exc:
            errors.append(exc)
        finally:
            close_for_thread()

    worker = threading.Thread(target=produce_while_cut)
    worker.start()
    cut()
    worker.join(60)
    assert not worker.is_alive()
    assert not errors, errors
    send(100)  # after
    events = _collect(client, queue_id, 400, timeout=60)
    assert [e["n"] for e in events] == list(range(400))
    assert "connection to RabbitMQ lost" in server.settled_log()
    assert "reconnected to RabbitMQ" in server.settled_log()
    client.close()


def _dead_letters(amqp_url: str, queue: str) -> list[tuple[dict, bytes]]:
    found = []
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        while True:
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return found
            found.append((properties.headers or {}, body))


MALFORMED = [
    (b"not json at all", "notice is not valid JSON"),
    (b"\xff\xfe\x00", "notice is not valid JSON"),
    (b'["event", "users"]', "notice is not an object"),
    (b'{"event": {"type": "x"}}', "notice needs 'event' and 'users'"),
    (b'{"event": {"type": "x"}, "users": "everyone"}', "users is not a list"),
    (b'{"event": "x", "users": [1]}', "event is not an object"),
    (b'{"event": {"kind": "x"}, "users": [1]}', "event has no string 'type'"),
    (b'{"event": {"type": "x"}, "users": [true]}', "users[0] is neither a user id"),
    (b'{"event": {"type": "x"}, "users": [true], "realm_id": 7}', "users[0] is neither"),
    (b'{"event": {"type": "x", "id": 3}, "users": [1]}', "must not carry an 'id'"),
    # Larger than EVENTQ_MAX_INTERNAL_REQUEST_BYTES (set to 20,000 below).
    (b'{"event": {"type": "x", "pad": "' + b"p" * 30_000 + b'"}, "users": [1]}', "30"),
]


def test_malformed_notices_are_dead_lettered_at_once_and_others_flow(start_server, world, tmp_path):
    logs = tmp_path / "logs"
    server, client, queue_id = _a_registered_queue(
        start_server,
        world,
        EVENTQ_MAX_INTERNAL_REQUEST_BYTES="20000",
        EVENTQ_LOG_DIR=str(logs),
        EVENTQ_LOG_FLUSH_SECS="0.05",
    )
    user = client.user
    with pika.BlockingConnection(pika.URLParameters(server.amqp_url)) as connection:
        channel = connection.channel()
        for index, (body, _) in enumerate(MALFORMED):
            channel.basic_publish(
                "",
                server.notify_queue,
                body,
                pika.BasicProperties(delivery_mode=2, message_id=f"malformed-{index}"),
            )
    for n in range(3):
        send_event(user.realm_id, {"type": "ok", "n": n}, [user.user_id], config=server.producer())
    assert [e["n"] for e in _collect(client, queue_id, 3)] == [0, 1, 2]
    wait_for(
        lambda: server.stats()["consumer"]["dead_lettered"] == len(MALFORMED),
        15,
        "the dead letters",
    )
    letters = _dead_letters(server.amqp_url, f"{server.notify_queue}.dead")
    assert [body for _, body in letters] == [body for body, _ in MALFORMED]
    for (headers, _), (_, reason) in zip(letters, MALFORMED, strict=True):
        assert headers["x-eventq-failures"] == 1  # a malformed notice is not retried
        assert headers["x-eventq-error"].startswith("BadNotice: ")
        assert reason in headers["x-eventq-error"]
    assert "more than EVENTQ_MAX_INTERNAL_REQUEST_BYTES (20000)" in letters[-1][0]["x-eventq-error"]
    assert server.stats()["consumer"]["retried"] == 0
    assert "moved to" in server.settled_log()
    client.close()
    assert server.stop() == 0
    # The delivery log has a dead letter for each, under the realm its body
    # names where it names one (the analytics count them per realm).
    table = ds.dataset(logs / "deliveries", format="parquet", partitioning="hive").to_table()
    dead = sorted(
        (row for row in table.to_pylist() if row["kind"] == "dead_letter"),
        key=lambda row: row["time"],
    )
    assert [row["notice_id"] for row in dead] == [f"malformed-{i}" for i in range(len(MALFORMED))]
    assert [row["realm_id"] for row in dead] == [
        7 if b'"realm_id": 7' in body else None for body, _ in MALFORMED
    ]
    assert all(row["failures"] == 1 and row["error"].startswith("BadNotice") for row in dead)


@pytest.mark.parametrize(
    ("body", "realm_id"),
    [
        (b'{"event": {"type": "x"}, "users": [1], "realm_id": 12}', 12),
        (b'{"realm_id": -3}', -3),
        (b'{"realm_id": true}', None),
        (b'{"realm_id": "12"}', None),
        (b'{"realm_id": 1.5}', None),
        (b'{"realm_id": 9223372036854775807}', 2**63 - 1),
        (b'{"realm_id": 9223372036854775808}', None),  # past the log's int64
        (b'{"realm_id": -9223372036854775809}', None),
        (b'{"realm_id": 3, "pad": "' + b"p" * (1 << 20) + b'"}', None),  # not read
        (b'{"event": {"type": "x"}, "users": [1]}', None),
        (b'[{"realm_id": 12}]', None),
        (b"\xff\xfe", None),
        (b"", None),
    ],
)
def test_a_dead_letter_is_counted_under_the_realm_its_body_names(body, realm_id):
    assert realm_of(body) == realm_id


def test_send_event_on_commit_sends_only_what_committed(api, server, database_url):
    server.wait_consuming()
    client = api()
    queue_id = client.register()["queue_id"]
    realm_id, user_id = client.user.realm_id, client.user.user_id
    config = server.producer()

    def note(n: int) -> None:
        send_event_on_commit(conn, realm_id, {"type": "tx", "n": n}, [user_id], config=config)

    def failing(n: int) -> None:
        with transaction(conn):
            note(n)
            raise ZeroDivisionError

    with psycopg.connect(database_url) as conn:
        with transaction(conn):
            conn.execute("SELECT 1")
            note(1)
            with pytest.raises(ZeroDivisionError):
                failing(2)  # a savepoint that rolls back
            note(3)
            # Nothing is sent before the commit.
            assert client.events(queue_id, -1) == []
        with pytest.raises(ZeroDivisionError):
            failing(4)  # a whole transaction that rolls back
        with transaction(conn):
            note(5)
        with pytest.raises(BadNotice), transaction(conn):
            send_event_on_commit(conn, realm_id, {"no": "type"}, [user_id], config=config)
        with pytest.raises(RuntimeError, match="needs an enclosing"):
            note(6)
        conn.execute("SELECT 1")  # now inside an implicit transaction
        with pytest.raises(RuntimeError, match="outside any transaction"), transaction(conn):
            pass
        conn.rollback()
    assert [e["n"] for e in _collect(client, queue_id, 3)] == [1, 3, 5]


class _Unencodable:
    pass


@pytest.mark.parametrize(
    ("realm_id", "event", "users", "message"),
    [
        (1, ["not", "a", "dict"], [1], "event is not an object"),
        (1, {"no": "type"}, [1], "event has no string 'type'"),
        (1, {"type": "x"}, [{"name": "no id"}], "users[0] has no integer 'id'"),
        (1, {"type": "x"}, [True], "users[0] is neither"),
        (1, {"type": "x"}, "1,2", "users is not a list"),
        (1, {"type": "x", "when": _Unencodable()}, [1], "notice is not JSON-encodable"),
        (1, {"type": "x", "big": 2**70}, [1], "notice is not JSON-encodable"),
        ("1", {"type": "x"}, [1], "realm_id is not an integer"),
    ],
)
def test_bad_producer_input_raises_before_the_broker_is_touched(realm_id, event, users, message):
    # An unreachable broker: reaching it would be a PublishError, not BadNotice.
    config = ProducerConfig(amqp_url="amqp://guest:guest@127.0.0.1:1/%2F")
    with pytest.raises(BadNotice, match=message.replace("[", r"\[")):
        send_event(realm_id, event, users, config=config)


def test_an_unreachable_broker_is_a_publish_error():
    config = ProducerConfig(amqp_url="amqp://guest:guest@127.0.0.1:1/%2F", event_log=False)
    with pytest.raises(PublishError, match="RabbitMQ did not take the notice"):
        send_event(1, {"type": "x"}, [1], config=config)


def test_without_a_broker_send_event_posts_to_the_server(start_server, world):
    server = start_server(EVENTQ_AMQP_URL="")
    assert "consumer" not in server.stats()
    assert "no broker (EVENTQ_AMQP_URL is empty)" in server.settled_log()
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    lean_before = server.stats()["notify_paths"]["lean"]
    send_event(
        user.realm_id, {"type": "direct"}, [user.user_id], config=server.producer(amqp_url="")
    )
    assert client.events(queue_id, -1) == [{"type": "direct", "id": 0}]
    assert server.stats()["notify_paths"]["lean"] == lean_before + 1
    wrong = server.producer(amqp_url="", configured_secret="wrong")
    with pytest.raises(PublishError, match="refused the notice \\(403\\)"):
        send_event(user.realm_id, {"type": "direct"}, [user.user_id], config=wrong)
    gone = server.producer(amqp_url="", notify_url="http://127.0.0.1:1/api/internal/notify_tornado")
    with pytest.raises(PublishError, match="unreachable"):
        send_event(user.realm_id, {"type": "direct"}, [user.user_id], config=gone)
    client.close()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Keeps each POST's headers and body, and answers the next of
    `answers` (status, extra headers): a success when none is left."""

    seen: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    answers: ClassVar[list[tuple[int, dict[str, str]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        status, extra = self.answers.pop(0) if self.answers else (200, {})
        answer = b'{"result": "success", "msg": "", "queues": 0}' if status == 200 else b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _send_to_recorder(
    secret: str, answers: list[tuple[int, dict[str, str]]] | None = None
) -> tuple[list[tuple[dict[str, str], bytes]], Exception | None]:
    """send_event without a broker to a _Recorder answering `answers`: the
    requests it took, and what send_event raised."""
    recorder = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen, _Recorder.answers = [], list(answers or [])
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    raised: Exception | None = None
    try:
        config = ProducerConfig(
            amqp_url="",
            notify_url=f"http://127.0.0.1:{recorder.server_port}/api/internal/notify_tornado",
            configured_secret=secret,
            event_log=False,
        )
        try:
            send_event(1, {"type": "x"}, [5], config=config)
        except PublishError as exc:
            raised = exc
    finally:
        recorder.shutdown()
        recorder.server_close()
        thread.join(10)
    return _Recorder.seen, raised


def _sent_as(headers: dict[str, str], body: bytes, secret: str) -> str:
    if headers["content-type"] == "application/json":
        assert headers["authorization"] == f"Bearer {secret}"
        assert json.loads(body) == {"event": {"type": "x"}, "users": [5], "realm_id": 1}
        return "json"
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert "authorization" not in headers
    form = urllib.parse.parse_qs(body.decode())
    assert form["secret"] == [secret]
    assert json.loads(form["data"][0])["users"] == [5]
    return "form"


@pytest.mark.parametrize(
    ("secret", "sent_as"),
    [("s3cret-token_x", "json"), ("two words", "json"), ("sécret", "form"), (" padded", "form")],
)
def test_without_a_broker_the_notice_is_the_body_unless_no_header_can_carry_the_secret(
    secret, sent_as
):
    [(headers, body)], raised = _send_to_recorder(secret)
    assert raised is None
    assert _sent_as(headers, body, secret) == sent_as


def test_a_server_that_takes_only_forms_gets_the_notice_again_as_one():
    """An older server (an upgrade under way) answers a JSON body 415."""
    seen, raised = _send_to_recorder("s3cret", [(415, {})])
    assert raised is None
    assert [_sent_as(headers, body, "s3cret") for headers, body in seen] == ["json", "form"]


def test_a_redirect_is_refused_not_followed_with_the_secret():
    elsewhere = {"Location": "http://127.0.0.1:1/elsewhere"}
    seen, raised = _send_to_recorder("s3cret", [(302, elsewhere)])
    assert len(seen) == 1
    assert isinstance(raised, PublishError)
    assert "refused the notice (302)" in str(raised)


def test_a_secret_no_header_carries_reaches_a_server_as_a_form(start_server, world):
    secret = "un secret partagé"
    server = start_server(EVENTQ_AMQP_URL="", EVENTQ_SHARED_SECRET=secret)
    user = world.user()
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    config = server.producer(amqp_url="", configured_secret=secret)
    send_event(user.realm_id, {"type": "direct"}, [user.user_id], config=config)
    # By hand, the secret's UTF-8 bytes in the header work too.
    notice = {"event": {"type": "by-hand"}, "users": [user.user_id]}
    by_hand = requests.post(
        f"{server.url}/api/internal/notify_tornado",
        data=json.dumps(notice),
        headers={
            "Content-Type": "application/json",
            "Authorization": ("Bearer " + secret).encode(),
        },
        timeout=10,
    )
    assert by_hand.status_code == 200, by_hand.text
    assert client.events(queue_id, -1) == [
        {"type": "direct", "id": 0},
        {"type": "by-hand", "id": 1},
    ]
    client.close()


def test_the_send_event_command(server, world):
    server.wait_consuming()
    realm = world.realm()
    user = world.user(realm)
    client = Api(server, user)
    queue_id = client.register()["queue_id"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
    env.update(
        EVENTQ_DATABASE_URL=server.database_url,
        EVENTQ_AMQP_URL=server.amqp_url,
        EVENTQ_NOTIFY_QUEUE=server.notify_queue,
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "server", "send-event", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    ok = run("--realm", realm, "--users", str(user.user_id), "--event", '{"type": "cli", "a": 1}')
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["sent"] is True
    by_id = run(
        "--realm", str(user.realm_id),
        "--users", json.dumps([{"id": user.user_id, "flags": ["read"]}]),
        "--event", '{"type": "cli", "a": 2}',
    )  # fmt: skip
    assert by_id.returncode == 0, by_id.stderr
    events = _collect(client, queue_id, 2)
    assert events == [
        {"type": "cli", "a": 1, "id": 0},
        {"type": "cli", "a": 2, "flags": ["read"], "id": 1},
    ]
    bad = run("--realm", realm, "--users", "1", "--event", "{not json")
    assert bad.returncode == 1
    assert "--event is not valid JSON" in bad.stderr
    typeless = run("--realm", realm, "--users", "1", "--event", '{"a": 1}')
    assert typeless.returncode == 1
    assert "event has no string 'type'" in typeless.stderr
    client.close()


def test_a_second_server_on_the_same_queue_is_refused_not_sharing(start_server, world):
    first = start_server()
    first.wait_consuming()
    second = ServerProcess(
        first.database_url, first.state_dir.parent / "second", {}, first.amqp_url
    )
    second.notify_queue = first.notify_queue
    second.start()
    try:
        wait_for(lambda: "another consumer holds" in second.log(), 15, "the refusal")
        assert not second.stats()["consumer"]["consuming"]
        user = world.user()
        client = Api(first, user)
        queue_id = client.register()["queue_id"]
        for n in range(10):
            send_event(
                user.realm_id, {"type": "t", "n": n}, [user.user_id], config=first.producer()
            )
        assert [e["n"] for e in _collect(client, queue_id, 10)] == list(range(10))
        assert second.stats()["consumer"]["processed"] == 0
        # When the first one stops, the second takes over (a rolling restart).
        assert first.stop() == 0
        second.wait_consuming(timeout=60)
        client.close()
    finally:
        second.kill()


def test_a_notice_published_twice_is_delivered_once(api, server):
    """A publisher retry after a lost confirmation sends the same notice id twice."""
    server.wait_consuming()
    client = api()
    queue_id = client.register()["queue_id"]
    before = server.stats()["consumer"]["duplicates"]
    body = json.dumps({"event": {"type": "once"}, "users": [client.user.user_id]}).encode()
    with pika.BlockingConnection(pika.URLParameters(server.amqp_url)) as connection:
        channel = connection.channel()
        for _ in range(2):
            channel.basic_publish(
                "",
                server.notify_queue,
                body,
                pika.BasicProperties(delivery_mode=2, headers={NOTICE_ID_HEADER: "same-id"}),
            )
    send_event(
        client.user.realm_id, {"type": "after"}, [client.user.user_id], config=server.producer()
    )
    assert [e["type"] for e in _collect(client, queue_id, 2)] == ["once", "after"]
    assert server.stats()["consumer"]["duplicates"] == before + 1
    assert (
        "notice same-id delivered again by RabbitMQ; dropped as a duplicate" in server.settled_log()
    )


def test_user_data_cannot_override_the_event(api, server):
    client = api()
    notice = {"event": {"type": "x"}, "users": [{"id": client.user.user_id, "type": "heartbeat"}]}
    response = server.internal("notify_tornado", data=json.dumps(notice))
    assert response.status_code == 400
    assert "would override the event's 'type'" in response.json()["msg"]


def test_a_producer_without_a_secret_is_told_how_to_get_one(tmp_path):
    config = ProducerConfig(amqp_url="", state_dir=tmp_path / "nothing-here", event_log=False)
    with pytest.raises(PublishError, match="no shared secret: set EVENTQ_SHARED_SECRET"):
        send_event(1, {"type": "x"}, [1], config=config)
    assert not (tmp_path / "nothing-here").exists()


def test_an_event_logged_while_the_broker_is_unreachable_still_arrives_once(api, server):
    # The event is in the event log; its notice cannot be published, and the
    # producer is told. A retry with the same notice id finds the logged row
    # instead of logging the event again; the server reads the log's tail and
    # delivers it, once.
    reader = api()
    queue_id = reader.register()["queue_id"]
    config = server.producer(amqp_url="amqp://guest:guest@127.0.0.1:1/%2F")
    for _ in range(2):
        with pytest.raises(PublishError, match="RabbitMQ did not take the notice"):
            send_event(
                reader.user.realm_id,
                {"type": "logged_only"},
                [reader.user.user_id],
                config=config,
                notice_id="logged-only-1",
            )
    # Read from the log's tail: no other notice shows the gap.
    [logged] = _collect(reader, queue_id, 1)
    assert logged["type"] == "logged_only"
    # Once: a second log row from the retry would come before an event sent
    # afterwards.
    send_event(
        reader.user.realm_id, {"type": "after"}, [reader.user.user_id], config=server.producer()
    )
    later = wait_for(
        lambda: [e for e in reader.events(queue_id, logged["id"]) if e["type"] != "heartbeat"],
        what="the next event",
    )
    assert [e["type"] for e in later] == ["after"]
    close_for_thread()


def test_a_logged_notice_is_transient_and_its_loss_is_repaired_from_the_log(start_server, world):
    # With the event log on, the log holds the event and the notice is only
    # the fast path: it is published transient (RabbitMQ keeps it off its
    # disk). A notice the broker loses (here: purged while the server is
    # down) still arrives, read from the log. Without the log the notice is
    # all there is, and it is persistent.
    server, client, queue_id = _a_queue_on_a_stopped_server(start_server, world)
    user = client.user
    params = pika.URLParameters(server.amqp_url)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()

        def take() -> tuple[int, bytes]:
            method, properties, body = channel.basic_get(server.notify_queue, auto_ack=True)
            assert method is not None, "the notice is not in the notify queue"
            return properties.delivery_mode, body

        send_event(user.realm_id, {"type": "logged"}, [user.user_id], config=server.producer())
        mode, body = take()
        assert mode == pika.DeliveryMode.Transient.value
        assert b'"position":' in body
        # Taken off the queue and acknowledged: lost, as on a broker restart.
        unlogged = server.producer(event_log=False)
        send_event(user.realm_id, {"type": "unlogged"}, [user.user_id], config=unlogged)
        mode, body = take()
        assert mode == pika.DeliveryMode.Persistent.value
        assert b'"position":' not in body
        channel.basic_publish(
            "",
            server.notify_queue,
            body,
            pika.BasicProperties(delivery_mode=mode, headers={NOTICE_ID_HEADER: "unlogged-1"}),
        )
    close_for_thread()
    server.start()
    events = _collect(client, queue_id, 2)
    assert sorted(e["type"] for e in events) == ["logged", "unlogged"]
    client.close()


def test_a_position_given_up_on_whose_notice_is_lost_is_read_from_the_log(start_server, world):
    # A writer takes a position and stalls; the server gives up waiting for
    # it (EVENTQ_GAP_TIMEOUT_SECS) and delivers what came after. The writer
    # then commits, but its notice never reaches the server (a transient
    # notice lost by a broker restart; here: never published). The server
    # finds it in the log and delivers it, late and once.
    server, client, queue_id = _a_registered_queue(
        start_server, world, EVENTQ_GAP_TIMEOUT_SECS="0.3"
    )
    user = client.user
    with psycopg.connect(server.database_url) as stalled:
        [position] = eventlog.write(
            stalled, [prepare_notice(user.realm_id, {"type": "stalled"}, [user.user_id])]
        )
        send_event(user.realm_id, {"type": "after"}, [user.user_id], config=server.producer())
        [after] = _collect(client, queue_id, 1)
        assert after["type"] == "after"
        assert f"gave up waiting for event log position {position}" in server.settled_log()
        stalled.commit()
    late = wait_for(
        lambda: [e for e in client.events(queue_id, after["id"]) if e["type"] != "heartbeat"],
        what="the stalled event",
    )
    assert [e["type"] for e in late] == ["stalled"]
    assert "given up on were found in the log" in server.settled_log()
    # Once: the next event comes alone.
    send_event(user.realm_id, {"type": "last"}, [user.user_id], config=server.producer())
    following = wait_for(
        lambda: [e for e in client.events(queue_id, late[-1]["id"]) if e["type"] != "heartbeat"],
        what="the next event",
    )
    assert [e["type"] for e in following] == ["last"]
    close_for_thread()
    client.close()
