"""What the notification workers have done, as a server reads it for
/metrics and the operator page (docs/notifications.md): their running totals
and the notifications waiting for a batch, in PostgreSQL (the tables
`notification_counters` and `notifications`,
deploy/migrations/0024_notifications.sql), and how many published batches
wait in RabbitMQ's notification queue and its dead-letter queue.

The workers are processes of their own, so their figures live outside this
server: it reads them on a timer (server/upkeep.py, every
`NOTIFICATION_FIGURES_SECS`) and keeps the last read. A scrape or a page
load shows that copy, with when it was read, and never waits on PostgreSQL
or RabbitMQ. The database is read through the server's async pool; RabbitMQ
by a passive queue.declare (its answer carries the queue's ready messages
and consumers) on a thread of its own, pika's blocking connection being
the one way this codebase speaks to the broker outside the consumer.

The server asks RabbitMQ itself rather than have the worker store the
depth: the depth matters most when no worker consumes (none runs, or every
one is stuck), which is when a worker could not store it; and
`consumers` then says so.

A read that fails keeps the previous figures and their time; the first
failure of a run is logged as a warning, the next ones at debug level, and
the first success after them at info level.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pika
import pika.exceptions
import psycopg

from generation.publisher import blocking_parameters, close_quietly
from server.database.db import Database, DatabaseUnavailable

log = logging.getLogger("eventq.notifications")

# A count per kind, each over its partial index (notifications_email_pending,
# notifications_push_pending): the table keeps settled rows for days, and
# every server reads this every NOTIFICATION_FIGURES_SECS.
PENDING_SQL = (
    "SELECT (SELECT count(*) FROM notifications WHERE email = 'pending'),"
    " (SELECT count(*) FROM notifications WHERE push = 'pending')"
)
# RabbitMQ answering a passive declare takes well under a millisecond; past
# this, the broker or the network is in trouble and the read gives up.
BROKER_TIMEOUT_SECS = 5.0

# pika logs each channel the broker closes as a WARNING. A passive declare of
# a queue nobody declared yet (nothing published; the dead-letter queue of an
# installation whose worker never started, for good) is closed with 404 at
# every read, which is an answer here, not a problem: `_quiet_not_found`
# drops those records, only while `QueueDepths.read` runs on the thread.
_reading = threading.local()


def _quiet_not_found(record: logging.LogRecord) -> bool:
    """A logging filter: False for pika's WARNING of a channel closed with
    404 during a read. pika logs its own objects too, whose `==` raises:
    only an int is compared."""
    if not getattr(_reading, "active", False) or record.levelno != logging.WARNING:
        return True
    args = record.args
    return not (isinstance(args, tuple) and args and type(args[0]) is int and args[0] == 404)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerTotals:
    """The workers' figures in PostgreSQL, as read at `read_at`."""

    # Counter name (server/notifications/store.py COUNTERS) -> running total.
    counters: dict[str, int]
    # "email", "push" -> notifications waiting for their batch's window.
    pending: dict[str, int]
    read_at: float  # wall seconds (epoch)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueDepth:
    """The notification queue in RabbitMQ, as read at `read_at`. A queue not
    declared yet (nothing published, no worker started) holds nothing."""

    messages: int  # published batches ready for a worker (not those it holds)
    consumers: int  # workers consuming it
    dead_letters: int  # batches in its dead-letter queue
    read_at: float  # wall seconds (epoch)


class BrokerUnreadable(Exception):
    """Raised by `QueueDepths.read` when RabbitMQ did not answer."""


class QueueDepths:
    """Passive queue.declare of queues over one blocking connection, kept
    between reads. Not thread-safe: one thread calls it (`NotificationFigures`'
    own). pika's exceptions stop here."""

    def __init__(self, amqp_url: str, timeout_secs: float = BROKER_TIMEOUT_SECS):
        # Heartbeats every 30 s: the reads, every 15 s, answer them in time,
        # and a read stuck on a dead connection gives up after 35 s (pika's check).
        self._params = blocking_parameters(amqp_url, timeout_secs, 30)
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None
        logging.getLogger("pika.channel").addFilter(_quiet_not_found)  # once: the same filter

    def read(self, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Each queue's (ready messages, consumers); (0, 0) for one that does
        not exist. Raises BrokerUnreadable (then reconnects at the next call)."""
        found: dict[str, tuple[int, int]] = {}
        _reading.active = True
        try:
            for queue in queues:
                found[queue] = self._declare(queue)
        except (pika.exceptions.AMQPError, OSError) as exc:
            self.close()
            raise BrokerUnreadable(f"{type(exc).__name__}: {exc}") from exc
        finally:
            _reading.active = False
        return found

    def _declare(self, queue: str) -> tuple[int, int]:
        if self._connection is None or not self._connection.is_open:
            self._connection = pika.BlockingConnection(self._params)
            self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
        try:
            frame = self._channel.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 404:  # NOT_FOUND: no such queue yet
                raise
            self._channel = None  # the broker closed it
            return 0, 0
        return int(frame.method.message_count), int(frame.method.consumer_count)

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        close_quietly(connection)


class NotificationFigures:
    """The workers' figures as last read (`worker`, `queue`: None until a
    first read succeeds). Every method runs on the IO loop; `refresh` is
    called by the server's timer."""

    def __init__(
        self,
        db: Database,
        amqp_url: str,
        queue: str,
        dead_letter_queue: str,
        counters: Sequence[str],
    ):
        self.db = db
        self.queue = queue
        self.dead_letter_queue = dead_letter_queue
        # The counters shown, all of them (0 until a worker first counts one).
        self.names = tuple(counters)
        self._depths = QueueDepths(amqp_url)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="eventq-queue-depth")
        self.worker: WorkerTotals | None = None
        self.queue_depth: QueueDepth | None = None
        # Reads under way, by source ("database", "rabbitmq"): at most one
        # each, so that a source that does not answer piles nothing up and
        # does not hold the other back.
        self._reading: set[str] = set()
        # Reads failed since the last success, by source (what is logged).
        self.failures = {"database": 0, "rabbitmq": 0}
        self._closed = False

    async def refresh(self) -> None:
        """Read both sources again, but not one whose last read is still
        under way."""
        if self._closed:
            return
        reads = [
            read()
            for source, read in (("database", self._read_database), ("rabbitmq", self._read_queues))
            if source not in self._reading
        ]
        await asyncio.gather(*reads)

    async def _read_database(self) -> None:
        self._reading.add("database")
        try:
            async with self.db.connection() as conn:
                cur = await conn.execute("SELECT name, value FROM notification_counters")
                found = {str(name): int(value) for name, value in await cur.fetchall()}
                cur = await conn.execute(PENDING_SQL)
                row = await cur.fetchone()
        except (DatabaseUnavailable, psycopg.Error) as exc:
            self._failed("database", exc)
            return
        finally:
            self._reading.discard("database")
        assert row is not None
        self.worker = WorkerTotals(
            counters={name: found.get(name, 0) for name in self.names},
            pending={"email": int(row[0]), "push": int(row[1])},
            read_at=time.time(),
        )
        self._succeeded("database")

    async def _read_queues(self) -> None:
        self._reading.add("rabbitmq")
        queues = (self.queue, self.dead_letter_queue)
        try:
            depths = await asyncio.get_running_loop().run_in_executor(
                self._thread, self._depths.read, queues
            )
        except BrokerUnreadable as exc:
            self._failed("rabbitmq", exc)
            return
        finally:
            self._reading.discard("rabbitmq")
        messages, consumers = depths[self.queue]
        self.queue_depth = QueueDepth(
            messages, consumers, depths[self.dead_letter_queue][0], time.time()
        )
        self._succeeded("rabbitmq")

    def _failed(self, source: str, exc: Exception) -> None:
        self.failures[source] += 1
        level = logging.WARNING if self.failures[source] == 1 else logging.DEBUG
        log.log(level, "cannot read the notification figures from %s (%s)", source, exc)

    def _succeeded(self, source: str) -> None:
        if self.failures[source]:
            log.info(
                "notification figures read from %s again (%d reads failed)",
                source,
                self.failures[source],
            )
        self.failures[source] = 0

    def stats(self) -> dict[str, Any]:
        """The last reads, for the stats and the operator page (None: not read yet)."""
        worker, depth = self.worker, self.queue_depth
        return {
            "worker": None if worker is None else dataclasses.asdict(worker),
            "queue": None if depth is None else dataclasses.asdict(depth),
        }

    async def close(self, timeout_secs: float = BROKER_TIMEOUT_SECS) -> None:
        """Close the RabbitMQ connection on its thread and end the thread,
        waiting at most `timeout_secs` (a read under way may be stuck)."""
        self._closed = True
        closing = asyncio.get_running_loop().run_in_executor(self._thread, self._depths.close)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closing, timeout_secs)
        self._thread.shutdown(wait=False)
