"""From real traffic to the report: a real server with a delivery log, real
clients, events through RabbitMQ (`send_event`) and the internal endpoint,
then the job run the way an operator runs it (`eventq analytics run`), and its
numbers checked against what the clients sent and received (and the one
notification a direct message to a user without a queue caused).

Every long-poll response is classified here exactly as the server logs it
(server/handlers/longpoll_flow.py `poll_outcome`,
server/observability/deliverylog.py `responded`): a
response of heartbeats only is a "heartbeat" poll and no delivery; each other
event in a response is one delivery; a refused GET is an "error" poll. The
counts are taken from the responses themselves, so a heartbeat that beats an
event to a parked request (1 s heartbeats) changes the expected numbers, not
the verdict.
"""

from __future__ import annotations

import html
import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pika
import pyarrow.parquet as pq
import requests

from analytics import extract
from generation.send import send_event
from tests.analytics.jvm import JVM_ENV
from tests.support import REPO, Api, ServerProcess, ok, wait_for

SHARD = "e2e-shard_7"
MAX_EVENTS = 6  # EVENTQ_QUEUE_MAX_EVENTS: a queue holding 7 events overflows
TASK, BUILD = "e2e_task", "e2e_build"
MOBILE = "ZulipMobile/27.1 (Android 14)"  # the client "ZulipMobile"
OUTCOMES = ("events", "heartbeat", "displaced", "empty", "deleted", "error")
LATENCY_BOUND = 5.0  # seconds: every delivery here is read at once
# A parked request nothing wakes is answered after this. 1 s: a displaced poll
# (below) needs the test to see the first GET parked (polling the stats) and
# send a second before the heartbeat answers the first, milliseconds here,
# which a machine a few times slower could take 0.3 s (the value before) for.
HEARTBEAT_SECS = "1"


class Reader:
    """One user's client with one queue, and what it got, counted as the
    server's delivery log counts it."""

    def __init__(self, api: Api, user_agent: str | None = None):
        self.api = api
        # The server names the client after the User-Agent's first word;
        # requests says "python-requests/<version>".
        self.client_name = "python-requests"
        if user_agent is not None:
            api.session.headers["User-Agent"] = user_agent
            self.client_name = user_agent.split("/", 1)[0]
        self.queue_id = ""
        self.last = -1
        self.got: list[dict[str, Any]] = []  # events other than heartbeats, as received
        self.outcomes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.last_error: dict[str, Any] = {}
        self.response_bytes = 0  # bodies of the answered (not refused) polls
        self.registers = 0

    @property
    def user_id(self) -> int:
        return self.api.user.user_id

    @property
    def realm_id(self) -> int:
        return self.api.user.realm_id

    @property
    def polls(self) -> int:
        return sum(self.outcomes.values())

    def register(self, **params: Any) -> None:
        self.queue_id = self.api.register(**params)["queue_id"]
        self.registers += 1

    def account(self, response: requests.Response) -> str:
        """Count one GET /events answer; returns the outcome the server logged."""
        body = response.json()
        if response.status_code != 200:
            assert body["result"] == "error", body
            self.errors[body["code"]] += 1
            self.last_error = body
            outcome = "error"
        else:
            events = body["events"]
            self.response_bytes += len(response.content)
            if body.get("displaced"):
                assert events == []
                outcome = "displaced"
            elif not events:
                outcome = "empty"
            elif all(event["type"] == "heartbeat" for event in events):
                outcome = "heartbeat"
            else:
                outcome = "events"
            for event in events:
                self.last = max(self.last, event["id"])
                if event["type"] != "heartbeat":
                    self.got.append(event)
        self.outcomes[outcome] += 1
        return outcome

    def poll(self, **params: Any) -> str:
        """A long-poll acknowledging everything received so far."""
        return self.account(
            self.api.get_events(queue_id=self.queue_id, last_event_id=self.last, **params)
        )

    def park(self) -> Future[requests.Response]:
        return self.api.park(self.queue_id, self.last)

    def receive(self, count: int) -> None:
        """Long-poll until `count` events (heartbeats aside) have arrived in all."""
        wait_for(lambda: self.poll() and len(self.got) >= count, 20, f"{count} events")
        assert len(self.got) == count, self.got


def publish_poison(server: ServerProcess, realm_id: int) -> None:
    """A malformed notice of realm `realm_id`: dead-lettered at once."""
    body = {"event": {"type": "x"}, "users": "everyone", "realm_id": realm_id}
    with pika.BlockingConnection(pika.URLParameters(server.amqp_url)) as connection:
        connection.channel().basic_publish(
            "",
            server.notify_queue,
            json.dumps(body).encode(),
            pika.BasicProperties(delivery_mode=2, message_id="poison-e2e"),
        )


def run_job(logs: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`eventq analytics run`, as an operator types it."""
    return subprocess.run(
        [sys.executable, "-m", "server", "analytics", "run", "--logs", str(logs),
         "--out", str(out)],
        cwd=REPO, env={**os.environ, **JVM_ENV}, capture_output=True, text=True, check=False,
        timeout=170,
    )  # fmt: skip


def table(out: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(out / "overall" / name).to_pylist()
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def pct(share: float) -> str:
    return f"{share * 100:.1f} %"


def test_real_traffic_through_the_job_and_report(start_server, api, world, tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    server = start_server(
        EVENTQ_LOG_DIR=str(logs),
        EVENTQ_SHARD=SHARD,
        EVENTQ_LOG_FLUSH_SECS="0.05",
        EVENTQ_HEARTBEAT_SECS=HEARTBEAT_SECS,
        EVENTQ_HEARTBEAT_JITTER_SECS="0",
        EVENTQ_QUEUE_MAX_EVENTS=str(MAX_EVENTS),
    )
    server.wait_consuming()
    first_realm, second_realm = world.realm(), world.realm()
    alice = Reader(api(first_realm, on=server))
    bob = Reader(api(first_realm, on=server), MOBILE)
    carol = Reader(api(first_realm, on=server))  # stops reading: overflows
    erin = Reader(api(second_realm, on=server), MOBILE)  # deletes her queue
    dave = Reader(api(second_realm, on=server))  # goes away: expired by the idle GC
    readers = [alice, bob, carol, erin, dave]
    for reader in (alice, bob, carol):
        reader.register(event_types=[TASK, BUILD], apply_markdown=True)
        [queue] = server.user_queues(reader.user_id)
        assert queue["client_name"] == reader.client_name
    numbers = itertools.count()
    sent: dict[int, list[int]] = {reader.user_id: [] for reader in readers}
    producer = server.producer()

    def send(via: str, event_type: str, *to: Reader) -> int:
        """Send one event to `to` (one realm); returns how many queues took it
        (the internal endpoint says; through RabbitMQ the caller waits)."""
        event: dict[str, Any] = {"type": event_type, "n": next(numbers), "via": via}
        realm_id = to[0].realm_id
        for reader in to:
            sent[reader.user_id].append(event["n"])
        users = [reader.user_id for reader in to]
        if via == "amqp":
            send_event(realm_id, event, users, config=producer)
            return len(to)
        queues: int = server.notify(event, users, realm_id)["queues"]
        return queues

    # Events through RabbitMQ, read by long-polls (a GET parks while its queue is empty).
    send("amqp", TASK, alice, bob)
    send("amqp", BUILD, alice)
    send("amqp", BUILD, bob)
    alice.receive(2)
    bob.receive(2)

    # Parked requests woken by events, from both paths.
    parked = [alice.park(), bob.park()]
    send("amqp", BUILD, alice, bob)
    for reader, future in zip((alice, bob), parked, strict=True):
        reader.account(future.result(timeout=15))
    parked = [alice.park(), bob.park()]
    send("notify", TASK, alice, bob)
    for reader, future in zip((alice, bob), parked, strict=True):
        reader.account(future.result(timeout=15))
    send("notify", TASK, alice)
    send("notify", BUILD, bob)
    alice.receive(5)
    bob.receive(5)

    # A queue deleted with one event it never delivered; an empty poll before.
    erin.register(event_types=[TASK, BUILD])
    send("notify", TASK, erin)
    send("amqp", BUILD, erin)
    erin.receive(2)
    assert erin.poll(dont_block=True) == "empty"  # acknowledges both: the queue is empty
    assert send("notify", TASK, erin) == 1
    ok(erin.api.request("DELETE", "events", queue_id=erin.queue_id))
    sent[erin.user_id].pop()  # never received
    erin_lost = 1

    # A parked request that nothing wakes gets a heartbeat: a poll, no delivery.
    assert alice.account(alice.park().result(timeout=15)) == "heartbeat"

    # A second GET on a parked queue displaces the first (unless a heartbeat
    # answered the first meanwhile: then try again).
    def displaced() -> bool:
        first = alice.park()
        alice.poll(dont_block=True)
        return alice.account(first.result(timeout=15)) == "displaced"

    wait_for(displaced, 20, "a displaced poll")

    # Refused polls: an unknown queue (BAD_EVENT_QUEUE_ID), a missing argument.
    alice.account(alice.api.get_events(queue_id="no-such-queue", last_event_id=-1))
    bob.account(bob.api.get_events(queue_id=bob.queue_id))
    assert (alice.errors, bob.errors) == ({"BAD_EVENT_QUEUE_ID": 1}, {"BAD_REQUEST": 1})

    # A queue whose client stopped reading overflows at MAX_EVENTS + 1 events.
    for index in range(MAX_EVENTS + 1):
        send(("amqp", "notify")[index % 2], (TASK, BUILD)[index % 2], carol)
    wait_for(lambda: not server.user_queues(carol.user_id), 20, "the overflow")
    assert carol.poll() == "error"
    assert carol.errors == {"BAD_EVENT_QUEUE_ID": 1}
    assert carol.last_error["reason"] == "overflow"
    sent[carol.user_id].clear()
    carol_lost = MAX_EVENTS + 1

    # A queue nobody polls expires after its lifespan (1 s), with what it held.
    dave.register(event_types=[TASK], queue_lifespan_secs=1)
    dave_lost = send("notify", TASK, dave)  # 0 only if the GC was faster
    assert send("notify", BUILD, dave) == 0  # not a type the queue takes
    wait_for(lambda: not server.user_queues(dave.user_id), 20, "the idle GC")
    sent[dave.user_id].clear()

    # A notice that fails every try ends in the dead-letter queue.
    publish_poison(server, erin.realm_id)
    wait_for(lambda: server.stats()["consumer"]["dead_lettered"] == 1, 20, "the dead letter")

    # A direct message to a user with no queue: a notification, enqueued at
    # delivery, of both kinds (their settings' defaults).
    frank = api(first_realm, on=server)
    ok(
        alice.api.request(
            "POST", "messages", type="direct", to=[frank.user.user_id], content="still there?"
        )
    )
    wait_for(
        lambda: server.stats()["notifications"]["enqueued"] == {"delivery": 1, "gc": 0},
        20,
        "frank's notification",
    )

    assert server.stats()["parked"] == 0  # shutdown would answer a parked one: a poll more
    assert server.stop() == 0  # SIGTERM: the log is written and compacted into Parquet
    assert list((logs / "spool").glob("date=*/hour=*/*")) == []
    hours = len(extract.list_partitions(logs))
    assert hours in (1, 2)  # 2 if the test ran across the hour

    # What the clients got is exactly what was sent to them, each event once.
    for reader in readers:
        assert sorted(event["n"] for event in reader.got) == sorted(sent[reader.user_id])

    # The expected numbers, from the clients' side.
    delivered = [event for reader in readers for event in reader.got]
    deliveries = len(delivered)
    from_broker = sum(event["via"] == "amqp" for event in delivered)
    assert 0 < from_broker < deliveries
    outcomes = Counter[str]()
    for reader in readers:
        outcomes.update(reader.outcomes)
    polls = sum(outcomes.values())
    assert all(outcomes[o] >= 1 for o in ("events", "heartbeat", "displaced", "empty", "error"))
    bad_queue = sum(reader.errors["BAD_EVENT_QUEUE_ID"] for reader in readers)
    registers = sum(reader.registers for reader in readers)
    ends = {"expired": 1, "deleted": 1, "overflow": 1, "evicted": 0, "deactivated": 0,
            "role_changed": 0}  # fmt: skip
    lost = carol_lost + dave_lost + erin_lost
    # + the dead letter and the notification
    records = deliveries + polls + registers + sum(ends.values()) + 2
    assert (bad_queue, registers) == (2, 5)

    completed = run_job(logs, out)
    assert completed.returncode == 0, completed.stderr[-3000:]

    # The overall tables.
    volumes = {(r["dimension"], r["key"]): r["deliveries"] for r in table(out, "volumes")}
    assert volumes == {
        ("event_type", TASK): sum(event["type"] == TASK for event in delivered),
        ("event_type", BUILD): sum(event["type"] == BUILD for event in delivered),
        ("client", "python-requests"): len(alice.got),
        ("client", "ZulipMobile"): len(bob.got) + len(erin.got),
        ("realm", str(alice.realm_id)): len(alice.got) + len(bob.got),
        ("realm", str(erin.realm_id)): len(erin.got),
    }
    [poll_row] = table(out, "poll_outcomes")
    assert {k: poll_row[k] for k in ("polls", *OUTCOMES, "bad_event_queue_id")} == {
        "polls": polls, **{o: outcomes[o] for o in OUTCOMES}, "bad_event_queue_id": bad_queue
    }  # fmt: skip
    for outcome in OUTCOMES:
        assert poll_row[f"{outcome}_share"] == outcomes[outcome] / polls
    assert poll_row["bad_event_queue_id_rate"] == bad_queue / polls
    [lifecycle] = table(out, "queue_lifecycle")
    assert lifecycle == {
        "registers": registers, "ended": 3, **ends, "events_unacked": lost, "dead_letters": 1
    }  # fmt: skip
    assert table(out, "notifications") == [
        {"enqueued": 1, "delivery": 1, "gc": 0, "email": 1, "push": 1}
    ]
    assert table(out, "shard_load") == [
        {
            "shard": SHARD, "records": records, "deliveries": deliveries, "polls": polls,
            "response_bytes": sum(reader.response_bytes for reader in readers),
            "registers": registers,
        }
    ]  # fmt: skip
    [imbalance] = table(out, "shard_imbalance")
    assert (imbalance["shards"], imbalance["imbalance"], imbalance["busiest_shard"]) == (
        1, 1.0, SHARD
    )  # fmt: skip

    latency = {(r["measure"], r["dimension"], r["key"]): r for r in table(out, "latency")}
    counts = {key: row["count"] for key, row in latency.items()}
    by_type = Counter(event["type"] for event in delivered)
    for measure in ("enqueued_latency", "queue_depth"):
        assert counts[(measure, "all", "all")] == deliveries
        assert counts[(measure, "shard", SHARD)] == deliveries
        for event_type, count in by_type.items():
            assert counts[(measure, "event_type", event_type)] == count
    # Only what came through RabbitMQ carries the producer's stamp.
    assert counts[("published_latency", "all", "all")] == from_broker
    assert counts[("published_latency", "event_type", TASK)] == sum(
        event["via"] == "amqp" and event["type"] == TASK for event in delivered
    )
    assert counts[("queue_lifetime", "all", "all")] == 3
    assert latency[("queue_lifetime", "reason", "expired")]["max"] >= 1.0  # its lifespan
    for measure in ("enqueued_latency", "published_latency"):
        row = latency[(measure, "all", "all")]
        assert 0 < row["p50"] <= row["p95"] <= row["p99"] < LATENCY_BOUND, row
        assert 0 < row["mean"] <= row["max"] < LATENCY_BOUND, row

    users = table(out, "busiest_users")
    ranked = sorted(readers, key=lambda r: (-len(r.got), -r.polls, r.realm_id, r.user_id))
    assert users == [
        {
            "rank": rank, "realm_id": reader.realm_id, "user_id": reader.user_id,
            "deliveries": len(reader.got), "polls": reader.polls, "registers": reader.registers,
        }
        for rank, reader in enumerate(ranked, 1)
    ]  # fmt: skip

    # Per realm: deliveries, the dead letter (its notice named the second
    # realm), the queues ended by reason and what they held; the latency of
    # each realm's deliveries.
    no_ends = dict.fromkeys(ends, 0)
    first_deliveries = len(alice.got) + len(bob.got)
    assert table(out, "top_realms") == [
        {"rank": 1, "realm_id": alice.realm_id, "deliveries": first_deliveries,
         "dead_letters": 0, "ended": 1, **no_ends, "overflow": 1, "events_unacked": carol_lost},
        {"rank": 2, "realm_id": erin.realm_id, "deliveries": len(erin.got), "dead_letters": 1,
         "ended": 2, **no_ends, "deleted": 1, "expired": 1,
         "events_unacked": erin_lost + dave_lost},
    ]  # fmt: skip
    first_latency = latency[("enqueued_latency", "realm", str(alice.realm_id))]
    assert first_latency["count"] == first_deliveries
    assert counts[("enqueued_latency", "realm", str(erin.realm_id))] == len(erin.got)
    assert not any(d == "realm" for m, d, _ in latency if m != "enqueued_latency")

    # The queues that were read, each with its owner, client name and answered
    # polls (a refused poll counts for no queue, not even one it named).
    queues = {r["queue_id"]: r for r in table(out, "busiest_queues")}
    assert "no-such-queue" not in queues
    for reader, polls_on_queue in ((alice, alice.polls - 1), (bob, bob.polls - 1),
                                   (erin, erin.polls)):  # fmt: skip
        row = queues[reader.queue_id]
        assert (row["user_id"], row["client"], row["deliveries"], row["polls"]) == (
            reader.user_id, reader.client_name, len(reader.got), polls_on_queue
        )  # fmt: skip

    # The console summary and the report say the same.
    enqueued, published = (latency[(m, "all", "all")] for m in ("enqueued_latency",
                                                                "published_latency"))  # fmt: skip
    shares = ", ".join(f"{o} {pct(outcomes[o] / polls)}" for o in OUTCOMES)
    expected_lines = [
        f"hours: {hours}  records: {records}  deliveries: {deliveries}  polls: {polls}",
        f"poll outcomes: {shares}",
        f"BAD_EVENT_QUEUE_ID: {bad_queue} ({pct(bad_queue / polls)} of polls)  "
        f"registers: {registers}",
        "queue ends: expired 1, deleted 1, overflow 1, evicted 0, deactivated 0, role_changed 0  "
        f"unacknowledged events: {lost}",
        "notifications enqueued: 1 (delivery 1, gc 0; email 1, push 1)",
        *(
            f"{name}: p50 {ms(row['p50'])}  p95 {ms(row['p95'])}  p99 {ms(row['p99'])}"
            for name, row in (("enqueued_latency", enqueued), ("published_latency", published))
        ),
        f"shards: 1  imbalance (max/mean deliveries): 1.00  busiest: {SHARD}",
    ]
    console = completed.stdout.splitlines()
    assert console[0].startswith(f"processed {hours} of {hours} hours in ")
    assert console[0].endswith(f"; tables and report in {out}")
    assert console[1:] == expected_lines
    report = out / "report"
    assert (report / "summary.txt").read_text() == "\n".join(expected_lines) + "\n"
    page = (report / "report.html").read_text()
    assert f"<pre id='summary'>{html.escape(chr(10).join(expected_lines))}</pre>" in page
    assert f"<td>{SHARD}</td>" in page
    assert (
        f"<tr><td>1</td><td>{alice.realm_id}</td><td>{first_deliveries}</td>"
        f"<td>{first_latency['p50'] * 1000:.1f}</td>"
    ) in page
    # The realm of the dead letter, first by dead letters.
    dead_table = page[page.index("<table id='dead-letter-realms'>") :]
    assert f"<tr><td>1</td><td>{erin.realm_id}</td><td>{len(erin.got)}</td>" in dead_table
    for image in (*(f"{chart}_by_{unit}" for chart in ("deliveries", "latency", "notifications")
                    for unit in ("hour", "day", "week")),
                  "latency_by_event_type", "poll_outcomes", "queue_ends",
                  "shard_load"):  # fmt: skip
        assert f"src='{image}.png'" in page
        assert (report / f"{image}.png").read_bytes().startswith(b"\x89PNG\r\n")
