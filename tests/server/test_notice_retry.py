"""The notify consumer's retry path (server/delivery/consumer.py) and what it
does to order (server/delivery/eventlog.py): a notice whose delivery fails
is republished behind the notices that came after it; with an event-log
position the stream stops at it until its retry, so its user's queue still
gets the events in order; its last failed try dead-letters it and lets the
ones behind it through; without a position its retry comes after them.

First the event log reader driven step by step with a delivery that fails
on demand; then real servers and the real RabbitMQ, whose deliveries of one
event type fail as a bug would (tests/server/delivery_fault/sitecustomize.py:
delivering a valid notice does no I/O, so nothing from outside makes it fail
a few times and then succeed)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pika
import psycopg
import pytest

from generation import eventlog
from generation.notice import NOTICE_ID_HEADER, Notice
from generation.send import close_for_thread, prepare_notice, send_event
from server.delivery.eventlog import EventLogReader
from tests.server.test_rabbitmq import _a_registered_queue, _collect, _dead_letters
from tests.support import Api, ServerProcess, wait_for

# Its sitecustomize makes a server's deliveries fail as TEST_DELIVERY_FAULT says.
FAULT_DIR = Path(__file__).parent / "delivery_fault"

# -- the event log reader, step by step ----------------------------------------


class _Delivery:
    """Delivers into one list of positions; the first `failing[p]` tries of
    position p raise."""

    def __init__(self, failing: dict[int, int]):
        self.delivered: list[int | None] = []
        self.failing = failing
        # Set at each delivery (made on the scenario's loop).
        self.arrived: asyncio.Event | None = None

    def __call__(self, notice: Notice, published_at: float | None) -> None:
        position = notice.position
        if position is not None and self.failing.get(position, 0) > 0:
            self.failing[position] -= 1
            raise RuntimeError(f"delivering {position} failed")
        self.delivered.append(position)
        if self.arrived is not None:
            self.arrived.set()


def _reader(delivery: _Delivery, gap_timeout_secs: float = 3600) -> EventLogReader:
    # No gap opens in these scenarios: the log (None) is never looked at.
    return EventLogReader(None, delivery, gap_timeout_secs=gap_timeout_secs)  # type: ignore[arg-type]


def _at(position: int | None) -> Notice:
    return Notice({"type": "note"}, [1], 1, position)


def test_an_event_that_fails_twice_holds_the_ones_behind_it_until_its_retry():
    async def scenario() -> None:
        delivery = _Delivery({2: 2})
        stream = _reader(delivery)
        stream.offer(_at(1), will_retry=True)
        with pytest.raises(RuntimeError, match="delivering 2 failed"):
            stream.offer(_at(2), will_retry=True)
        # Stopped at 2: what comes behind it waits.
        assert (stream.position, stream.handed) == (1, 1)
        assert stream.offer(_at(3), will_retry=True) is None
        assert stream.offer(_at(4)) is None
        assert delivery.delivered == [1]
        assert stream.position == 1
        # A notice without a position has no place to keep: it goes at once.
        stream.offer(_at(None))
        assert delivery.delivered == [1, None]
        with pytest.raises(RuntimeError):
            stream.offer(_at(2), will_retry=True)  # the first retry fails too
        assert delivery.delivered == [1, None]
        assert stream.position == 1
        stream.offer(_at(2), will_retry=True)  # the second succeeds: 2, then 3 and 4
        assert delivery.delivered == [1, None, 2, 3, 4]
        assert stream.position == 4
        stats = stream.stats()
        assert (stats["retry_stops"], stats["waited_for_retry"]) == (1, 2)
        # A copy of it afterwards (RabbitMQ redelivering) is a duplicate.
        assert stream.offer(_at(2), will_retry=True) is None
        stream.offer(_at(5))
        assert delivery.delivered == [1, None, 2, 3, 4, 5]

    asyncio.run(scenario())


def test_an_event_whose_last_try_fails_is_skipped_and_the_ones_behind_it_go_on():
    async def scenario() -> None:
        delivery = _Delivery({2: 99})
        stream = _reader(delivery)
        stream.offer(_at(1))
        for behind in (3, 4, 5):  # the first try and two retries, each followed by one
            with pytest.raises(RuntimeError):
                stream.offer(_at(2), will_retry=True)
            stream.offer(_at(behind))
        assert delivery.delivered == [1]
        assert stream.position == 1
        with pytest.raises(RuntimeError):
            stream.offer(_at(2), will_retry=False)  # the last: dead-lettered
        assert delivery.delivered == [1, 3, 4, 5]
        assert stream.position == 5
        # Skipped for good: not accepted late.
        assert 2 not in stream.reader.late()
        assert stream.offer(_at(2)) is None
        stream.offer(_at(6))
        assert delivery.delivered == [1, 3, 4, 5, 6]

    asyncio.run(scenario())


def test_a_retry_that_does_not_come_in_time_is_given_up_on_and_accepted_late():
    async def scenario() -> None:
        delivery = _Delivery({2: 1})
        stream = _reader(delivery, gap_timeout_secs=0.05)
        stream.offer(_at(1))
        with pytest.raises(RuntimeError):
            stream.offer(_at(2), will_retry=True)
        stream.offer(_at(3))
        assert delivery.delivered == [1]
        delivery.arrived = asyncio.Event()
        await asyncio.wait_for(delivery.arrived.wait(), 30)  # the stop's end
        assert delivery.delivered == [1, 3]
        assert stream.position == 3
        assert stream.reader.late() == [2]
        stream.offer(_at(2), will_retry=True)  # it comes after all: late
        assert delivery.delivered == [1, 3, 2]

    asyncio.run(scenario())


def test_too_many_events_behind_a_failed_one_end_the_stop():
    async def scenario() -> None:
        delivery = _Delivery({2: 1})
        stream = _reader(delivery)
        stream.reader.max_held = 2
        stream.offer(_at(1))
        with pytest.raises(RuntimeError):
            stream.offer(_at(2), will_retry=True)
        stream.offer(_at(3))
        stream.offer(_at(4))
        assert delivery.delivered == [1]
        stream.offer(_at(5))  # a third behind it: more than max_held
        assert delivery.delivered == [1, 3, 4, 5]
        assert stream.reader.late() == [2]

    asyncio.run(scenario())


def test_a_failure_with_no_retry_to_come_does_not_stop_the_stream():
    async def scenario() -> None:
        delivery = _Delivery({2: 1})
        stream = _reader(delivery)
        stream.offer(_at(1))
        # The internal endpoint, the server's own actions: raised to the caller.
        with pytest.raises(RuntimeError):
            stream.offer(_at(2))
        stream.offer(_at(3))
        assert delivery.delivered == [1, 3]
        assert stream.position == 3
        assert stream.stats()["retry_stops"] == 0

    asyncio.run(scenario())


# -- real servers, the real RabbitMQ -------------------------------------------


def _publish_at_once(
    server: ServerProcess, client: Api, events: Sequence[dict[str, Any]], *, logged: bool = True
) -> None:
    """Write `events` for `client`'s user to the event log and publish their
    notices in one AMQP transaction: all of them are in the notify queue
    before the server takes the first, so a retry of one is republished
    behind the others. The log's transaction commits afterwards, else the
    log's tail (read every second) could deliver them first, which is not
    the path under test. `logged` False: no log, no positions, as with
    EVENTQ_EVENT_LOG=0."""
    user = client.user
    entries = [prepare_notice(user.realm_id, event, [user.user_id]) for event in events]
    with psycopg.connect(server.database_url) as conn:
        bodies = [body for _, body in entries]
        if logged:
            positions = eventlog.write(conn, entries)
            bodies = [eventlog.with_position(b, p) for b, p in zip(bodies, positions, strict=True)]
        with pika.BlockingConnection(pika.URLParameters(server.amqp_url)) as connection:
            channel = connection.channel()
            channel.tx_select()
            for body in bodies:
                notice_id = uuid.uuid4().hex
                channel.basic_publish(
                    "",
                    server.notify_queue,
                    body,
                    pika.BasicProperties(
                        delivery_mode=pika.DeliveryMode.Persistent,
                        message_id=notice_id,
                        headers={NOTICE_ID_HEADER: notice_id},
                    ),
                )
            channel.tx_commit()
        conn.commit()


def _started(start_server: Any, world: Any, fault: str) -> tuple[ServerProcess, Api, str]:
    """A server failing deliveries as `fault` says, and a queue on it that has
    had one event (so the stream's position is the log's newest: the
    notices published next are in order, and delivered from their notices)."""
    # A stop that outlived its retries would end after 60 s, past the waits below.
    server, client, queue_id = _a_registered_queue(
        start_server,
        world,
        PYTHONPATH=os.pathsep.join(filter(None, [str(FAULT_DIR), os.environ.get("PYTHONPATH")])),
        TEST_DELIVERY_FAULT=fault,
        EVENTQ_GAP_TIMEOUT_SECS="60",
    )
    user = client.user
    send_event(user.realm_id, {"type": "seq", "n": 0}, [user.user_id], config=server.producer())
    assert [e["n"] for e in _collect(client, queue_id, 1)] == [0]
    close_for_thread()
    return server, client, queue_id


def _alone_after(client: Api, server: ServerProcess, queue_id: str, last_id: int) -> list[str]:
    """Send one more event; the types of what the queue got after `last_id`."""
    user = client.user
    send_event(user.realm_id, {"type": "last"}, [user.user_id], config=server.producer())
    close_for_thread()
    later = wait_for(
        lambda: [e for e in client.events(queue_id, last_id) if e["type"] != "heartbeat"],
        what="the last event",
    )
    return [e["type"] for e in later]


def test_a_notice_that_fails_twice_is_delivered_once_and_in_order(start_server, world):
    server, client, queue_id = _started(start_server, world, "test_flaky:2")
    events = [
        {"type": "test_flaky", "n": 1},
        *({"type": "seq", "n": n} for n in range(2, 6)),
    ]
    _publish_at_once(server, client, events)
    got = _collect(client, queue_id, 6)  # with the first event, seq 0
    assert [(e["type"], e["n"]) for e in got] == [
        ("seq", 0),
        *((e["type"], e["n"]) for e in events),
    ]
    consumer = server.stats()["consumer"]
    assert (consumer["retried"], consumer["dead_lettered"]) == (2, 0)
    # Its retries came behind the four others, which waited for it.
    stream = server.stats()["stream"]
    assert (stream["retry_stops"], stream["waited_for_retry"]) == (1, 4)
    log = server.settled_log()
    assert "retry 1 of 3" in log
    assert "retry 2 of 3" in log
    # Once: the next event comes alone.
    assert _alone_after(client, server, queue_id, got[-1]["id"]) == ["last"]
    client.close()


def test_a_notice_that_always_fails_is_dead_lettered_and_the_ones_behind_it_flow(
    start_server, world
):
    server, client, queue_id = _started(start_server, world, "test_doomed:1000")
    events = [
        {"type": "test_doomed", "n": 1},
        *({"type": "seq", "n": n} for n in range(2, 5)),
    ]
    _publish_at_once(server, client, events)
    # At once after its last try, not after the 60 s a stop may last.
    got = _collect(client, queue_id, 4)
    assert [(e["type"], e["n"]) for e in got] == [("seq", 0), ("seq", 2), ("seq", 3), ("seq", 4)]
    wait_for(lambda: server.stats()["consumer"]["dead_lettered"] == 1, what="the dead letter")
    [(headers, body)] = _dead_letters(server.amqp_url, f"{server.notify_queue}.dead")
    assert b'"test_doomed"' in body
    assert headers["x-eventq-failures"] == 4
    assert headers["x-eventq-error"] == (
        "InjectedFault: injected failure of a test_doomed event (TEST_DELIVERY_FAULT)"
    )
    assert server.stats()["consumer"]["retried"] == 3
    assert server.stats()["stream"]["retry_stops"] == 1
    log = server.settled_log()
    assert "failed its last try" in log
    assert "moved to" in log
    # Skipped for good: not delivered late by the log's tail either.
    assert _alone_after(client, server, queue_id, got[-1]["id"]) == ["last"]
    client.close()


def test_without_a_position_a_retried_notice_comes_after_the_ones_behind_it(start_server, world):
    # The documented rule for EVENTQ_EVENT_LOG=0: no position, no place kept.
    server, client, queue_id = _started(start_server, world, "test_flaky:2")
    events = [{"type": "test_flaky", "n": 1}, *({"type": "seq", "n": n} for n in range(2, 5))]
    _publish_at_once(server, client, events, logged=False)
    got = _collect(client, queue_id, 5)
    assert [e["n"] for e in got] == [0, 2, 3, 4, 1]
    assert server.stats()["consumer"]["retried"] == 2
    assert server.stats()["stream"]["retry_stops"] == 0
    client.close()
