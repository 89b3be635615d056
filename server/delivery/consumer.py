"""Consuming the notify queue on Tornado's own asyncio loop (pika's
AsyncioConnection; not a thread, not the deprecated Tornado adapter).

Lifecycle, as a chain of small `_on_*` steps: connect -> open a channel ->
declare the notify queue and its dead-letter queue -> set the prefetch ->
consume with manual acknowledgement. Each notice is handed to `process`
(synchronous: when it returns, the event is in every target queue, or waits
its turn in the event log's order) and then acknowledged. A notice whose
processing raises is republished with its try count, up to `MAX_RETRIES`
times, then moved to the dead-letter queue with the error (a malformed one,
`BadNotice`, at once: it would fail the same way again).

Order under retry: a retried notice is republished to the back of the
queue, behind the notices that arrived after it. One with an event-log
position keeps its place all the same: `process` is told whether a retry is
to come (`will_retry`), and the event log's order stops at the failed event
until it (server/delivery/eventlog.py), so no queue gets the events behind
it first; when its last try fails, it is skipped and they go on at once.
The stop lasts at most EVENTQ_GAP_TIMEOUT_SECS (5 s), or 10,000 events
behind it, like a gap; the event is then accepted late. A notice without a
position (EVENTQ_EVENT_LOG=0) has no place to keep: its retry is delivered
after the notices behind it, as Zulip's are. The consumer itself never waits
for a retry: the notices behind a failing one are processed (and
acknowledged) as they come. A lost connection is re-established
with a capped backoff (1 s doubling to 30 s); unacknowledged notices are
redelivered by RabbitMQ, and one already processed (its acknowledgement, or
the publisher's confirmation, was lost) is recognised by its notice id (the
`x-eventq-notice-id` header that `send_event` sets) and not delivered twice;
the recent ids are saved with the queues, so this holds across a restart too.
The consumer is exclusive: a second server on the same queue is refused (and
says so in its log) instead of silently taking half of the notices.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson
import pika
import pika.exceptions
from pika.adapters.asyncio_connection import AsyncioConnection

from generation.errors import BadNotice
from generation.notice import NOTICE_ID_HEADER, PUBLISHED_HEADER
from server.observability.observe import Observer

log = logging.getLogger("eventq.consumer")

# Zulip's MAX_REQUEST_RETRIES: a failing notice is republished this many
# times (so processed at most 4 times) before it is dead-lettered.
MAX_RETRIES = 3
# How many times the notice has failed so far.
FAILURES_HEADER = "x-eventq-failures"
# Notices RabbitMQ may hand us before we acknowledge. Zulip uses 100; with
# acknowledgements batched per loop iteration, 1,000 let one process take
# 28% more small notices per second (tests/benchmarks/rabbitmq.py), with
# pika's buffer as the only cost.
PREFETCH = 1000
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MAX_SECS = 30.0
# Notice ids remembered to drop redelivered duplicates: far more than the
# prefetch window that can be redelivered at once.
REMEMBERED_IDS = 50_000
# Of those, how many are saved with the queues (the newest): enough to cover
# every notice that can be unacknowledged when the process stops.
SAVED_IDS = 2 * PREFETCH


def dead_letter_queue(queue: str) -> str:
    return f"{queue}.dead"


class Process(Protocol):
    """What the consumer hands each notice to (`Delivery.process_notice`), on
    the IO loop: `published_at` is the producer's stamp (wall-clock seconds);
    `will_retry`, whether the notice comes again if this raises. Raising
    `BadNotice` dead-letters it at once, anything else retries it."""

    def __call__(self, body: bytes, published_at: float | None, *, will_retry: bool) -> object: ...


# A dead letter's body is read for its realm only up to this size: it runs
# on the loop, and a notice refused for its size was refused unread.
REALM_SCAN_BYTES = 1 << 20
_INT64 = range(-(2**63), 2**63)


def realm_of(body: bytes) -> int | None:
    """The realm a notice's body names (generation/notice.py's wire form),
    or None when it names none, cannot be read, is larger than
    REALM_SCAN_BYTES or names one the log's int64 column cannot hold: what
    a dead letter is counted under in the delivery log."""
    if len(body) > REALM_SCAN_BYTES:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    realm_id = data.get("realm_id") if isinstance(data, dict) else None
    if isinstance(realm_id, int) and not isinstance(realm_id, bool) and realm_id in _INT64:
        return realm_id
    return None


def failures_of(headers: Mapping[str, object]) -> int:
    """How many times the notice with these AMQP headers has failed so far."""
    raw = headers.get(FAILURES_HEADER, 0)
    return raw if isinstance(raw, int) and raw >= 0 else 0


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """What `republish_failed` did with a message."""

    failures: int  # its failed tries, this one included
    error: str  # "<exception type>: <message>"
    dead: bool  # moved to the dead-letter queue (else back to its own)
    target: str  # the queue it went to


def republish_failed(
    channel: Any, queue: str, properties: Any, body: bytes, exc: Exception, *, retry: bool = True
) -> Failure:
    """The retry rule both consumers of a durable queue follow (this one and
    the notification worker, server/notifications/worker.py): the message
    that failed with `exc` goes back to the end of `queue` with its try count
    (FAILURES_HEADER), up to MAX_RETRIES times, else (or at once without
    `retry`) to `queue`'s dead-letter queue with its error. The caller
    acknowledges the original afterwards."""
    headers = dict(properties.headers or {})
    failures = failures_of(headers) + 1
    headers[FAILURES_HEADER] = failures
    error = f"{type(exc).__name__}: {exc}"
    dead = not retry or failures > MAX_RETRIES
    if dead:
        headers["x-eventq-error"] = error[:1000]
        headers["x-eventq-dead-lettered-us"] = time.time_ns() // 1000
    target = dead_letter_queue(queue) if dead else queue
    channel.basic_publish(
        exchange="",
        routing_key=target,
        body=body,
        properties=pika.BasicProperties(
            content_type=properties.content_type,
            delivery_mode=pika.DeliveryMode.Persistent,
            message_id=properties.message_id,
            headers=headers,
        ),
    )
    return Failure(failures, error, dead, target)


class NoticeConsumer:
    """Consumes one durable notify queue. Every method runs on the IO loop."""

    def __init__(
        self,
        url: str,
        queue: str,
        process: Process,
        observers: Sequence[Observer] = (),
        *,
        prefetch: int = PREFETCH,
    ):
        self.url = url
        self.queue = queue
        self.dead_queue = dead_letter_queue(queue)
        self._process = process
        self._observers = observers
        self._prefetch = prefetch
        self._params = pika.URLParameters(url)
        self._connection: Any = None
        self._channel: Any = None
        self._consumer_tag: str | None = None
        self._stopping = False
        self._closed: asyncio.Future[None] | None = None
        self._reconnect: asyncio.TimerHandle | None = None
        self._backoff = BACKOFF_FIRST_SECS
        self._failures = 0
        # Acknowledgements are batched: one `multiple` ack per loop iteration.
        self._ack_tag: int | None = None
        self._ack_scheduled = False
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.consuming = asyncio.Event()
        # Counters for stats and tests.
        self.processed = 0
        self.duplicates = 0
        self.retried = 0
        self.dead_lettered = 0
        self.connections = 0

    def stats(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "consuming": self.consuming.is_set(),
            "processed": self.processed,
            "duplicates": self.duplicates,
            "retried": self.retried,
            "dead_lettered": self.dead_lettered,
            "connections": self.connections,
        }

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._connect()

    async def stop(self, wait_secs: float = 5.0) -> None:
        """Stop consuming, acknowledge what was processed, close the connection."""
        self._stopping = True
        if self._reconnect is not None:
            self._reconnect.cancel()
            self._reconnect = None
        connection = self._connection
        if connection is None or connection.is_closed:
            return
        self._closed = asyncio.get_running_loop().create_future()
        if self._channel is not None and self._channel.is_open and self._consumer_tag:
            self._channel.basic_cancel(self._consumer_tag, callback=self._on_cancelled)
        elif not connection.is_closing:
            connection.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), wait_secs)
        except TimeoutError:
            log.warning(
                "RabbitMQ did not confirm the cancel within %.0f s; closing the connection",
                wait_secs,
            )
            if not (connection.is_closing or connection.is_closed):
                connection.close()

    def _connect(self) -> None:
        self._reconnect = None
        self._connection = AsyncioConnection(
            self._params,
            on_open_callback=self._on_connection_open,
            on_open_error_callback=self._on_connection_failed,
            on_close_callback=self._on_connection_closed,
            custom_ioloop=asyncio.get_running_loop(),
        )

    def _on_connection_open(self, connection: Any) -> None:
        self.connections += 1
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.queue_declare(self.queue, durable=True, callback=self._on_queue_declared)

    def _on_queue_declared(self, _frame: Any) -> None:
        self._channel.queue_declare(
            self.dead_queue, durable=True, callback=self._on_dead_queue_declared
        )

    def _on_dead_queue_declared(self, _frame: Any) -> None:
        self._channel.basic_qos(prefetch_count=self._prefetch, callback=self._on_qos)

    def _on_qos(self, _frame: Any) -> None:
        self._channel.add_on_cancel_callback(self._on_broker_cancel)
        self._consumer_tag = self._channel.basic_consume(
            self.queue, self._on_message, auto_ack=False, exclusive=True
        )
        if self._failures:
            log.info("reconnected to RabbitMQ after %d failed attempts", self._failures)
        log.info("consuming %s", self.queue)
        self._backoff = BACKOFF_FIRST_SECS
        self._failures = 0
        self.consuming.set()

    def _on_cancelled(self, _frame: Any) -> None:
        self._flush_ack()
        self._channel.close()

    def _on_broker_cancel(self, _frame: Any) -> None:
        """RabbitMQ cancelled the consumer (queue deleted, node failover)."""
        log.warning("RabbitMQ cancelled the consumer of %s; reconnecting", self.queue)
        self.consuming.clear()
        if self._channel is not None and self._channel.is_open:
            self._channel.close()

    def _on_channel_closed(self, channel: Any, reason: Exception) -> None:
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker) and reason.reply_code == 403:
            log.error(
                "another consumer holds %s (is a second server running with the same"
                " EVENTQ_NOTIFY_QUEUE?); this one will keep trying: %s",
                self.queue,
                reason.reply_text,
            )
        self.consuming.clear()
        self._channel = None
        self._consumer_tag = None
        self._ack_tag = None
        connection = self._connection
        if connection is not None and not (connection.is_closing or connection.is_closed):
            if not self._stopping:
                log.warning("RabbitMQ closed the channel (%s); reconnecting", reason)
            connection.close()

    def _on_connection_failed(self, _connection: Any, error: BaseException) -> None:
        self._retry_later(f"cannot connect to RabbitMQ: {error!r}")

    def _on_connection_closed(self, _connection: Any, reason: BaseException) -> None:
        self.consuming.clear()
        self._channel = None
        self._consumer_tag = None
        self._ack_tag = None
        self._retry_later(f"connection to RabbitMQ lost: {reason!r}")

    def _retry_later(self, why: str) -> None:
        self._connection = None
        if self._stopping:
            if self._closed is not None and not self._closed.done():
                self._closed.set_result(None)
            return
        self._failures += 1
        delay = self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_SECS)
        log.warning("%s; retrying in %.0f s (attempt %d)", why, delay, self._failures)
        self._reconnect = asyncio.get_running_loop().call_later(delay, self._connect)

    # -- messages -----------------------------------------------------------

    def _on_message(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        if self._stopping:
            # Cancelling: the queues may be saved at any moment now; leave the
            # notice to RabbitMQ for the next start.
            channel.basic_nack(method.delivery_tag, requeue=True)
            return
        headers = properties.headers or {}
        notice_id = headers.get(NOTICE_ID_HEADER)
        if isinstance(notice_id, bytes):
            notice_id = notice_id.decode("ascii", "replace")
        if notice_id is not None and notice_id in self._seen:
            # Processed before: its acknowledgement (or the publisher's
            # confirmation) was lost and RabbitMQ delivered it again.
            self.duplicates += 1
            log.info("notice %s delivered again by RabbitMQ; dropped as a duplicate", notice_id)
            self._ack(method.delivery_tag)
            return
        published_us = headers.get(PUBLISHED_HEADER)
        published_at = published_us / 1e6 if isinstance(published_us, int) else None
        try:
            self._process(body, published_at, will_retry=failures_of(headers) < MAX_RETRIES)
        except BadNotice as exc:
            # Malformed: it would fail the same way every time.
            self._failed(channel, properties, body, exc, retry=False)
        except Exception as exc:
            self._failed(channel, properties, body, exc)
        else:
            self.processed += 1
            if notice_id is not None:
                self._remember(str(notice_id))
        self._ack(method.delivery_tag)

    def _remember(self, notice_id: str) -> None:
        self._seen[notice_id] = None
        if len(self._seen) > REMEMBERED_IDS:
            self._seen.popitem(last=False)

    def recent_ids(self) -> list[str]:
        """The newest processed notice ids, oldest first (saved with queues)."""
        ids = list(self._seen)
        return ids[-SAVED_IDS:]

    def remember(self, notice_ids: object) -> None:
        """Restore ids saved by `recent_ids` (ignores anything malformed)."""
        if isinstance(notice_ids, list):
            for notice_id in notice_ids[-SAVED_IDS:]:
                if isinstance(notice_id, str):
                    self._remember(notice_id)

    def _failed(
        self, channel: Any, properties: Any, body: bytes, exc: Exception, retry: bool = True
    ) -> None:
        failure = republish_failed(channel, self.queue, properties, body, exc, retry=retry)
        raw_id = (properties.headers or {}).get(NOTICE_ID_HEADER)
        notice_id = raw_id if isinstance(raw_id, str) else properties.message_id
        if not failure.dead:
            self.retried += 1
            for observer in self._observers:
                observer.notice_retried(notice_id, failure.failures, failure.error)
            log.warning(
                "notice %s failed (%s); retry %d of %d",
                properties.message_id,
                failure.error,
                failure.failures,
                MAX_RETRIES,
            )
        else:
            self.dead_lettered += 1
            realm_id = realm_of(body)
            for observer in self._observers:
                observer.notice_dead_lettered(
                    notice_id, failure.failures, failure.error, time.time(), realm_id
                )
            log.error(
                "notice %s failed %d times (%s); moved to %s for inspection",
                properties.message_id,
                failure.failures,
                failure.error,
                failure.target,
            )

    def _ack(self, delivery_tag: int) -> None:
        self._ack_tag = delivery_tag
        if not self._ack_scheduled:
            self._ack_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_ack)

    def _flush_ack(self) -> None:
        self._ack_scheduled = False
        tag, self._ack_tag = self._ack_tag, None
        if tag is not None and self._channel is not None and self._channel.is_open:
            self._channel.basic_ack(tag, multiple=True)
