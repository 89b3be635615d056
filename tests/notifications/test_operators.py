"""What operators see of the notifications (docs/notifications.md,
docs/operating.md): /metrics and the operator page's /operator/stats of a
real server, whose own counters move as it enqueues, and whose copy of the
worker's figures (PostgreSQL: totals, what waits for a batch; RabbitMQ: the
queue's depth, consumers, dead letters) follows a real worker within one
read (server/observability/notification_figures.py, every 15 s).

The worker's totals are shared by every test of the session's database:
they are compared with a baseline, never as absolute numbers."""

from __future__ import annotations

from typing import Any

import pika
import requests
from prometheus_client.parser import text_string_to_metric_families

from server.notifications.store import COUNTERS
from tests.notifications.site import mark_read, send_dm
from tests.support import ServerProcess, wait_for

# The figures are read every 15 s (server/upkeep.py): one read, with room.
READ_WAIT_SECS = 45

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server: ServerProcess) -> tuple[Samples, dict[str, str]]:
    """The samples of /metrics, and each family's HELP text."""
    response = requests.get(f"{server.url}/metrics", timeout=10)
    assert response.status_code == 200
    samples: Samples = {}
    docs: dict[str, str] = {}
    for family in text_string_to_metric_families(response.text):
        docs[family.name] = family.documentation
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, docs


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def worker_totals(samples: Samples) -> dict[str, float | None]:
    return {name: value(samples, f"eventq_notifications_{name}_total") for name in COUNTERS}


def operator_stats(server: ServerProcess) -> dict[str, Any]:
    response = requests.get(f"{server.url}/operator/stats", timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def publish_unreadable_batch(server: ServerProcess) -> None:
    """A published batch the worker cannot read: it dead-letters it at once."""
    with pika.BlockingConnection(pika.URLParameters(server.amqp_url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue=server.notification_queue, durable=True)
        channel.basic_publish(
            "", server.notification_queue, b"not json", pika.BasicProperties(delivery_mode=2)
        )


def test_metrics_and_the_operator_page_follow_notifications_to_the_worker(make_site):
    site = make_site()
    server = site.server
    alice = site.user("Alice Sender")
    bob, carol, dave = site.user("Bob Away"), site.user("Carol Reads"), site.user("Dave Refused")
    # One try per batch: a refused email is given up at once.
    site.worker(delay=2.0, EVENTQ_NOTIFICATION_MAX_ATTEMPTS="1")

    # The server read the worker's figures as it started: the baseline.
    before, docs = wait_for(
        lambda: (
            (found := scrape(server))
            and value(found[0], "eventq_notifications_read_timestamp_seconds", source="database")
            and found
        ),
        READ_WAIT_SECS,
        "the server's first read of the worker's figures",
    )
    totals_before = worker_totals(before)
    assert None not in totals_before.values()
    for name in COUNTERS:
        assert (
            "as of eventq_notifications_read_timestamp_seconds"
            in docs[f"eventq_notifications_{name}"]
        ), name
    assert value(before, "eventq_notifications_enqueued_total", path="delivery") == 0
    assert value(before, "eventq_notifications_enqueued_total", path="gc") == 0

    # Each way a notification ends, and a dead letter.
    publish_unreadable_batch(server)
    site.mailbox.refuse_next(1)
    send_dm(alice, dave, "refused by the SMTP server")
    site.wait_rows(dave, lambda rows: rows[0]["email"] == "failed", "dave's email given up")
    carols = send_dm(alice, carol, "read within the window")
    site.wait_rows(carol, lambda rows: len(rows) == 1, "carol's notification recorded")
    mark_read(carol, carols)
    send_dm(alice, bob, "sent")
    site.mailbox.wait_for(bob.user.email)
    site.wait_rows(carol, lambda rows: rows[0]["email"] == "read", "carol's skipped as read")
    site.wait_rows(bob, lambda rows: rows[0]["email"] == "sent", "bob's email settled as sent")

    # The server's own counters, read at the scrape.
    now, _ = scrape(server)
    assert value(now, "eventq_notifications_enqueued_total", path="delivery") == 3
    assert value(now, "eventq_notifications_enqueued_total", path="gc") == 0
    assert value(now, "eventq_notifications_published_total") == 3
    assert value(now, "eventq_notifications_unpublished") == 0
    assert value(now, "eventq_notifications_dropped_total") == 0

    # The worker's, once the server has read them again.
    expected = {
        "recorded": 3,
        "duplicates": 0,
        "email_sent": 1,
        "push_sent": 0,
        "skipped_read": 1,
        "skipped_deleted": 0,
        "failed": 1,
        "retried": 0,
        "dead_lettered": 1,
        "removed": 0,
    }

    def changes(samples: Samples) -> dict[str, float]:
        return {
            name: (total or 0) - (totals_before[name] or 0)
            for name, total in worker_totals(samples).items()
        }

    after, _ = wait_for(
        lambda: (
            (found := scrape(server))
            and changes(found[0]) == expected
            and value(found[0], "eventq_notifications_queue_consumers") == 1
            and found
        ),
        READ_WAIT_SECS,
        f"the worker's figures read again; expected changes {expected}",
    )
    assert value(after, "eventq_notifications_queue_messages") == 0
    assert value(after, "eventq_notifications_dead_letters") == 1
    for kind in ("email", "push"):
        assert value(after, "eventq_notifications_pending", kind=kind) == value(
            before, "eventq_notifications_pending", kind=kind
        )

    # The operator page's figures: the same copy.
    stats = operator_stats(server)
    notifications = stats["notifications"]
    assert notifications["enqueued"] == {"delivery": 3, "gc": 0}
    assert (notifications["published"], notifications["unpublished"]) == (3, 0)
    worker = notifications["worker"]
    assert worker["counters"] == {
        name: value(after, f"eventq_notifications_{name}_total") for name in COUNTERS
    }
    assert worker["pending"] == {
        kind: value(after, "eventq_notifications_pending", kind=kind) for kind in ("email", "push")
    }
    assert worker["read_at"] == value(
        after, "eventq_notifications_read_timestamp_seconds", source="database"
    )
    queue = notifications["queue"]
    assert (queue["messages"], queue["consumers"], queue["dead_letters"]) == (0, 1, 1)
    assert queue["read_at"] <= stats["at"]


def test_a_queue_nobody_declared_yet_reads_as_empty_and_unconsumed(start_server):
    """No notification published, no worker started: neither queue exists in
    RabbitMQ. Each read (a passive declare the broker refuses) says so
    quietly: nothing waits, nobody consumes, nothing in the server's log."""
    server = start_server()
    samples, _ = wait_for(
        lambda: (
            (found := scrape(server))
            and value(found[0], "eventq_notifications_read_timestamp_seconds", source="rabbitmq")
            and found
        ),
        READ_WAIT_SECS,
        "the server's first read of the queue",
    )
    for name in ("queue_messages", "queue_consumers", "dead_letters"):
        assert value(samples, f"eventq_notifications_{name}") == 0, name
    queue = operator_stats(server)["notifications"]["queue"]
    assert (queue["messages"], queue["consumers"], queue["dead_letters"]) == (0, 0, 0)
    # (The test servers log pika's DEBUG lines, which tell of the closed
    # channels: only the levels an installation shows matter.)
    shown = [
        line
        for line in server.settled_log().splitlines()
        if " WARNING " in line or " ERROR " in line
    ]
    assert not [line for line in shown if "NOT_FOUND" in line], shown
    assert not [line for line in shown if "notification figures" in line], shown


def test_a_server_without_notifications_shows_none(start_server):
    server = start_server(EVENTQ_NOTIFICATIONS="0")
    _, docs = scrape(server)
    assert not [name for name in docs if name.startswith("eventq_notifications_")]
    assert operator_stats(server)["notifications"] is None
    assert "notifications" not in server.stats()
