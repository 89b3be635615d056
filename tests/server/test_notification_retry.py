"""The notification worker's RabbitMQ retry path (server/notifications/worker.py):
a published batch whose recording fails is republished with its try count,
and dead-lettered with its error after the last try; one that fails twice
and then succeeds is recorded once. The failures are the real database's:
a trigger in a database of the test's own raises, as a constraint or a
lock timeout would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pika
import psycopg
import pytest

from generation import accounts
from server.notifications import store
from tests.support import API_KEY_SECRET, REPO, wait_for

FAIL_TWICE = """
CREATE SEQUENCE injected_failures;
CREATE FUNCTION fail_notifications() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A sequence is not rolled back with the failed transaction: it counts tries.
    IF NEW.message_id = 666 OR nextval('injected_failures') <= 2 THEN
        RAISE EXCEPTION 'injected failure for message %', NEW.message_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail_notifications BEFORE INSERT ON notifications
    FOR EACH ROW EXECUTE FUNCTION fail_notifications();
"""


@pytest.fixture
def worker(own_db: str, amqp_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A worker on a queue of its own, sending email to a port nobody
    listens on (so that it records, and its sends fail harmlessly)."""
    queue = f"eventq.notifications.{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
    env.update(
        EVENTQ_DATABASE_URL=own_db,
        EVENTQ_AMQP_URL=amqp_url,
        EVENTQ_NOTIFICATION_QUEUE=queue,
        EVENTQ_SMTP_URL="smtp://127.0.0.1:9",
        EVENTQ_NOTIFICATION_DELAY_SECS="3600",
        EVENTQ_API_KEY_SECRET=API_KEY_SECRET,
        EVENTQ_STATE_DIR=str(tmp_path),
    )
    with psycopg.connect(own_db, autocommit=True) as conn:
        accounts.create_realm(conn, "retry", "Retry")
        user = accounts.create_user(conn, "retry", "u@example.com", "U", "member")
        conn.execute(FAIL_TWICE)
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "server", "notifications", "run"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    try:
        yield {"queue": queue, "channel": channel, "user": user, "db": own_db, "proc": proc}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        for name in (queue, f"{queue}.dead"):
            channel.queue_delete(name)
        connection.close()


def publish(worker: dict[str, Any], message_id: int) -> None:
    user = worker["user"]
    body = {
        "notifications": [
            {
                "user_id": user.user_id,
                "realm_id": user.realm_id,
                "message_id": message_id,
                "kinds": ["email"],
                "via": "delivery",
                "at": time.time(),
            }
        ]
    }
    worker["channel"].queue_declare(queue=worker["queue"], durable=True)
    worker["channel"].basic_publish(
        exchange="",
        routing_key=worker["queue"],
        body=orjson.dumps(body),
        properties=pika.BasicProperties(delivery_mode=2, message_id=f"batch-{message_id}"),
    )


def counters(db: str) -> dict[str, int]:
    with psycopg.connect(db, autocommit=True) as conn:
        return store.counters(conn)


def recorded(db: str) -> list[int]:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute("SELECT message_id FROM notifications ORDER BY message_id")
        return [row[0] for row in rows.fetchall()]


def test_a_batch_failing_twice_is_recorded_once_on_its_third_try(worker):
    publish(worker, 101)
    wait_for(lambda: recorded(worker["db"]) == [101], 30, "the batch recorded")
    with psycopg.connect(worker["db"], autocommit=True) as conn:
        tries = conn.execute("SELECT last_value FROM injected_failures").fetchone()
    assert tries == (3,)  # two failures, then the one that went in
    assert counters(worker["db"])["recorded"] == 1
    assert counters(worker["db"])["dead_lettered"] == 0
    # Published again (a second shard, a replay): a duplicate, not a second row.
    publish(worker, 101)
    wait_for(lambda: counters(worker["db"])["duplicates"] == 1, 30, "the duplicate counted")
    assert recorded(worker["db"]) == [101]


def test_a_batch_failing_every_time_is_dead_lettered_with_its_error(worker):
    publish(worker, 666)
    publish(worker, 102)
    channel = worker["channel"]
    dead = f"{worker['queue']}.dead"

    def dead_letter() -> Any:
        channel.queue_declare(queue=dead, durable=True)
        method, properties, body = channel.basic_get(dead, auto_ack=True)
        return (properties, body) if method is not None else None

    properties, body = wait_for(dead_letter, 60, "the dead letter")
    assert orjson.loads(body)["notifications"][0]["message_id"] == 666
    assert properties.headers["x-eventq-failures"] == 4  # the first try and 3 retries
    assert "injected failure for message 666" in properties.headers["x-eventq-error"]
    # The batch behind it was not held up.
    wait_for(lambda: 102 in recorded(worker["db"]), 30, "the next batch recorded")
    assert 666 not in recorded(worker["db"])
    wait_for(lambda: counters(worker["db"])["dead_lettered"] == 1, 30, "the dead letter counted")
