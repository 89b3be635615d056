"""Publishing notices to RabbitMQ: the only producer-side module that imports pika.

One blocking connection per process and thread, reused across calls, with
publisher confirms: `publish` returns once the broker has taken the message
(on a durable queue; persistent unless the caller says the event is kept
elsewhere) and raises `PublishError` if it cannot, after
reconnecting and trying once more. pika's exceptions stop here.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
import weakref

import pika
import pika.exceptions

from generation.notice import NOTICE_ID_HEADER, PUBLISHED_HEADER

log = logging.getLogger("eventq.publisher")


class PublishError(RuntimeError):
    """Raised by `Publisher.publish` (and so `send_event`) when the broker did
    not confirm a notice after one reconnect-and-retry."""


def blocking_parameters(url: str, timeout_secs: float, heartbeat_secs: int) -> pika.URLParameters:
    """`url`'s parameters for a pika blocking connection that gives up: one
    connection attempt, `timeout_secs` for the socket and for a broker that
    blocks publishers (under a resource alarm). A blocking connection
    answers AMQP heartbeats only while it is in a call: `heartbeat_secs` 0
    for one that may idle for minutes."""
    params = pika.URLParameters(url)
    params.blocked_connection_timeout = timeout_secs
    params.socket_timeout = timeout_secs
    params.connection_attempts = 1
    params.heartbeat = heartbeat_secs
    return params


def close_quietly(connection: pika.BlockingConnection | None) -> None:
    """Close a blocking connection if it is open; an error doing so (it was
    broken already) is logged at debug level, not raised."""
    if connection is not None and connection.is_open:
        try:
            connection.close()
        except pika.exceptions.AMQPError:
            log.debug("error while closing a broken RabbitMQ connection", exc_info=True)


class Publisher:
    """A confirmed-publish connection. Not thread-safe: use `for_thread`."""

    def __init__(self, url: str, confirm_timeout_secs: float = 10.0):
        self.url = url
        self.pid = os.getpid()
        # No heartbeats: an idle producer would be dropped by the broker every
        # few minutes and pay a reconnect on its next publish. Without them, a
        # dead connection is found by the next publish, which reconnects.
        self._params = blocking_parameters(url, confirm_timeout_secs, 0)
        self._connection: pika.BlockingConnection | None = None
        self._channel: pika.adapters.blocking_connection.BlockingChannel | None = None
        self._declared: set[str] = set()

    def _open(self) -> pika.adapters.blocking_connection.BlockingChannel:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        self.close()
        self._connection = pika.BlockingConnection(self._params)
        channel = self._connection.channel()
        channel.confirm_delivery()
        self._channel = channel
        self._declared.clear()
        return channel

    def _publish_once(self, queue: str, body: bytes, message_id: str, persistent: bool) -> None:
        channel = self._open()
        if queue not in self._declared:
            channel.queue_declare(queue=queue, durable=True)
            self._declared.add(queue)
        channel.basic_publish(
            exchange="",
            routing_key=queue,
            body=body,
            properties=pika.BasicProperties(
                content_type="application/json",
                delivery_mode=(
                    pika.DeliveryMode.Persistent if persistent else pika.DeliveryMode.Transient
                ),
                message_id=message_id,
                headers={
                    # What the consumer deduplicates on (message_id is any
                    # producer's to use).
                    NOTICE_ID_HEADER: message_id,
                    PUBLISHED_HEADER: time.time_ns() // 1000,
                },
            ),
            mandatory=True,
        )

    def publish(
        self, queue: str, body: bytes, message_id: str | None = None, *, persistent: bool = True
    ) -> str:
        """Publish `body` to the durable `queue`; returns the message id (new
        unless given). A retry after a lost confirmation may deliver twice:
        the consumer drops the second copy by its message id; a caller that
        retries a failed publish passes the same id for the same effect."""
        message_id = message_id or uuid.uuid4().hex
        try:
            self._publish_once(queue, body, message_id, persistent)
        except pika.exceptions.AMQPError as first:
            log.warning("publish to %s failed (%r); reconnecting to retry once", queue, first)
            self.close()
            try:
                self._publish_once(queue, body, message_id, persistent)
            except pika.exceptions.AMQPError as exc:
                self.close()
                raise PublishError(f"RabbitMQ did not take the notice: {exc!r}") from exc
        return message_id

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        close_quietly(connection)


_local = threading.local()
# Every publisher of this process, closed at exit so the broker sees a clean
# close rather than a dropped connection.
_all: weakref.WeakSet[Publisher] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for publisher in list(_all):
        if publisher.pid == os.getpid():
            publisher.close()


def for_thread(url: str, confirm_timeout_secs: float = 10.0) -> Publisher:
    """This thread's publisher for `url` (a new one after a fork)."""
    publisher: Publisher | None = getattr(_local, "publisher", None)
    if publisher is not None and publisher.pid == os.getpid() and publisher.url == url:
        return publisher
    if publisher is not None and publisher.pid == os.getpid():
        publisher.close()  # another URL; after a fork the socket is the parent's
    publisher = Publisher(url, confirm_timeout_secs)
    _local.publisher = publisher
    _all.add(publisher)
    return publisher


def close_for_thread() -> None:
    """Close this thread's publisher connection (a worker thread that ends)."""
    publisher: Publisher | None = getattr(_local, "publisher", None)
    _local.publisher = None
    if publisher is not None and publisher.pid == os.getpid():
        publisher.close()
