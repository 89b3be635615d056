"""The notification worker (`eventq notifications run`; docs/notifications.md).

It consumes the durable RabbitMQ queue the servers publish notifications to
(server/notifications/away.py), records each in PostgreSQL once per (user,
message) (server/notifications/store.py), and acknowledges it only then.
Every tick it sends the batches that are due: one email per user and window,
one webhook call per user batch, and the webhook's "remove" notices for
pushed messages read or deleted since.

Delivery is once per (user, message, kind):
- a notification published twice, or redelivered by RabbitMQ after a crash
  between the record and the acknowledgement, finds its row and is dropped;
- a batch is sent while its rows are locked in an open transaction that
  marks them sent: a worker killed before the commit leaves them pending,
  and the next sends them (the one window for a repeat is an SMTP server or
  webhook that took the batch in the milliseconds before the commit; the
  email's Message-ID and the webhook's delivery id stay the same for it);
- a send that fails is retried with backoff, `max_attempts` times.

A published message that cannot be recorded follows the notify consumer's
rules (server/delivery/consumer.py): malformed, it is dead-lettered at once;
failing otherwise, it is republished with its try count up to `MAX_RETRIES`
times, then dead-lettered with its error. The database being unreachable is
not the message's fault: it goes back to the queue and the worker
reconnects with backoff. Retried messages may be recorded out of order:
nothing depends on their order (a batch is sent in message id order).

Single-threaded and synchronous (pika's BlockingConnection, psycopg); several
workers may run against the same queue and database.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pika
import pika.exceptions
import psycopg

from generation.publisher import close_quietly
from server.delivery.consumer import MAX_RETRIES, dead_letter_queue, republish_failed
from server.notifications import mail, store, webhook
from server.notifications.mail import SendFailed
from server.notifications.settings import WorkerSettings
from server.notifications.store import Kind

log = logging.getLogger("eventq.notifications")

# Published messages taken before acknowledging (each carries up to 500
# notifications: away.py's BATCH).
PREFETCH = 20
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MAX_SECS = 30.0
# How often settled rows older than the retention are removed.
PRUNE_EVERY_SECS = 3600.0


class NotificationWorker:
    """Consumes, records and sends until `stop` is called (from any thread
    or a signal handler)."""

    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        wanted: list[Kind] = []
        if settings.smtp is not None:
            wanted.append("email")
        if settings.webhook_url is not None:
            wanted.append("push")
        self.wanted: tuple[Kind, ...] = tuple(wanted)
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._pruned_at = 0.0
        # Removals wait after a failed call, not to call every tick.
        self._removals_after = 0.0
        self._removal_failures = 0
        # The SMTP session and the webhook's connection, kept open while
        # there is something to send (closed after a tick that sent nothing).
        self._mailer = (
            mail.Mailer(settings.smtp, settings.send_timeout_secs)
            if settings.smtp is not None
            else None
        )
        self._webhook = (
            webhook.WebhookClient(
                settings.webhook_url, settings.webhook_secret, settings.send_timeout_secs
            )
            if settings.webhook_url is not None
            else None
        )

    def stop(self) -> None:
        self._stop.set()

    # -- running ----------------------------------------------------------------

    def run(self) -> None:
        """Until `stop`: connect, consume and send; reconnect with a capped
        backoff when RabbitMQ or PostgreSQL goes away."""
        log.info(
            "notification worker: queue %s; email %s; webhook %s",
            self.settings.queue,
            "on" if "email" in self.wanted else "off (no EVENTQ_SMTP_URL)",
            "on" if "push" in self.wanted else "off (no EVENTQ_NOTIFICATION_WEBHOOK_URL)",
        )
        backoff = BACKOFF_FIRST_SECS
        while not self._stop.is_set():
            try:
                self._consume()
                backoff = BACKOFF_FIRST_SECS
            except (pika.exceptions.AMQPError, psycopg.OperationalError, OSError) as exc:
                self._close_db()
                log.warning(
                    "notification worker: %s: %s; retrying in %.0f s",
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_SECS)
        self.close_connections()
        self._close_db()
        log.info("notification worker stopped")

    def _db(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.settings.database_url,
                autocommit=True,
                application_name="eventq-notifications",
                connect_timeout=10,
            )
        return self._conn

    def _close_db(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.close()

    def _consume(self) -> None:
        params = pika.URLParameters(self.settings.amqp_url)
        connection = pika.BlockingConnection(params)
        try:
            channel = connection.channel()
            channel.queue_declare(queue=self.settings.queue, durable=True)
            channel.queue_declare(queue=dead_letter_queue(self.settings.queue), durable=True)
            channel.basic_qos(prefetch_count=PREFETCH)
            channel.basic_consume(self.settings.queue, self._on_message)
            self._db()
            log.info("notification worker: consuming %s", self.settings.queue)
            while not self._stop.is_set():
                connection.process_data_events(time_limit=self.settings.tick_secs)
                self.tick(lambda: connection.process_data_events(time_limit=0))
        finally:
            close_quietly(connection)

    # -- consuming ----------------------------------------------------------------

    def _on_message(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        """pika's callback, inside `process_data_events`: record, then ack."""
        try:
            candidates = store.parse_candidates(orjson.loads(body).get("notifications"))
        except (orjson.JSONDecodeError, AttributeError, ValueError) as exc:
            self._failed(channel, properties, body, exc, retry=False)
            channel.basic_ack(method.delivery_tag)
            return
        try:
            conn = self._db()
            with conn.transaction():
                recorded, duplicates = store.record(conn, candidates, self.wanted)
                store.bump(conn, {"recorded": recorded, "duplicates": duplicates})
        except psycopg.OperationalError:
            # The database is down, not this message: back to the queue, and
            # `run` reconnects with backoff.
            channel.basic_nack(method.delivery_tag, requeue=True)
            raise
        except psycopg.Error as exc:
            self._failed(channel, properties, body, exc)
        channel.basic_ack(method.delivery_tag)

    def _failed(
        self, channel: Any, properties: Any, body: bytes, exc: Exception, retry: bool = True
    ) -> None:
        failure = republish_failed(channel, self.settings.queue, properties, body, exc, retry=retry)
        if not failure.dead:
            log.warning(
                "notifications not recorded (%s); retry %d of %d",
                failure.error,
                failure.failures,
                MAX_RETRIES,
            )
        else:
            log.error(
                "notifications failed %d times (%s); moved to %s",
                failure.failures,
                failure.error,
                failure.target,
            )
            self._count_dead_letter()

    def _count_dead_letter(self) -> None:
        try:
            conn = self._db()
            with conn.transaction():
                store.bump(conn, {"dead_lettered": 1})
        except psycopg.Error:
            log.warning("the dead letter could not be counted", exc_info=True)

    # -- sending ----------------------------------------------------------------

    def tick(self, between: Callable[[], object] = lambda: None) -> None:
        """Send what is due. `between` runs after each batch (the broker
        connection's heartbeats)."""
        conn = self._db()
        busy = False
        for kind in self.wanted:
            delay = (
                self.settings.email_delay_secs if kind == "email" else self.settings.push_delay_secs
            )
            for user_id in store.due_users(conn, kind, delay):
                busy = True
                if self._stop.is_set():
                    return
                try:
                    self.send_batch(user_id, kind)
                except (psycopg.OperationalError, pika.exceptions.AMQPError):
                    raise  # `run` reconnects
                except Exception as exc:  # a bug, or data it cannot send
                    self._batch_broke(user_id, kind, exc)
                between()
        if "push" in self.wanted and time.monotonic() >= self._removals_after:
            busy = self.send_removals() or busy
        if not busy:
            self.close_connections()
        if time.monotonic() - self._pruned_at >= PRUNE_EVERY_SECS:
            self._pruned_at = time.monotonic()
            with conn.transaction():
                pruned = store.prune(conn, self.settings.keep_days)
            if pruned:
                log.info("forgot %d settled notifications", pruned)

    def close_connections(self) -> None:
        """End the SMTP session and the webhook's connection (reopened when
        there is something to send)."""
        if self._mailer is not None:
            self._mailer.close()
        if self._webhook is not None:
            self._webhook.close()

    def _batch_broke(self, user_id: int, kind: Kind, exc: Exception) -> None:
        """Sending raised something else than a failed send: logged with its
        traceback, and the batch retried later as a failed send is (then
        given up), so that one batch cannot stop the worker or every tick."""
        log.exception("%s to user %d could not be sent", kind, user_id)
        settings = self.settings
        conn = self._db()
        with conn.transaction():
            ids, _skipped = store.claim(conn, user_id, kind)
            if not ids:
                return
            final = store.retry_later(
                conn,
                user_id,
                kind,
                ids,
                f"{type(exc).__name__}: {exc}",
                settings.retry_first_secs,
                settings.retry_max_secs,
                settings.max_attempts,
            )
            store.bump(conn, {"failed" if final else "retried": len(ids)})

    def send_batch(self, user_id: int, kind: Kind) -> None:
        """One user's due batch of `kind`: what is still unread is sent, in
        the transaction that holds its rows."""
        settings = self.settings
        conn = self._db()
        counts: dict[str, int] = {}
        with conn.transaction():
            ids, skipped = store.claim(conn, user_id, kind)
            counts.update(skipped)
            recipient = store.recipient(conn, user_id) if ids else None
            if ids and (recipient is None or not recipient.is_active):
                store.mark(conn, user_id, kind, ids, "deleted")
                counts["skipped_deleted"] = counts.get("skipped_deleted", 0) + len(ids)
            elif ids and recipient is not None:
                messages = store.messages(conn, user_id, ids)
                batch_id = f"{kind}-{user_id}-{ids[0]}-{ids[-1]}-{len(ids)}"
                try:
                    if kind == "email":
                        assert settings.smtp is not None
                        composed = mail.compose(
                            recipient,
                            messages,
                            site_url=settings.site_url,
                            sender=settings.email_from,
                            secret=settings.api_key_secret,
                            message_id=f"eventq-{batch_id}",
                        )
                        assert self._mailer is not None
                        self._mailer.send(composed)
                    else:
                        assert settings.webhook_url is not None
                        body = orjson.dumps(
                            {
                                "type": "notification",
                                "id": batch_id,
                                "user_id": user_id,
                                "user_email": recipient.email,
                                "realm_id": recipient.realm_id,
                                "messages": [store.as_row(m, kind) for m in messages],
                            }
                        )
                        assert self._webhook is not None
                        self._webhook.post(body, batch_id)
                except SendFailed as exc:
                    final = store.retry_later(
                        conn,
                        user_id,
                        kind,
                        ids,
                        str(exc),
                        settings.retry_first_secs,
                        settings.retry_max_secs,
                        settings.max_attempts,
                    )
                    counts["failed" if final else "retried"] = len(ids)
                    log.warning(
                        "%s to user %d of %d messages failed (%s)%s",
                        kind,
                        user_id,
                        len(ids),
                        exc,
                        "; given up" if final else "; will retry",
                    )
                else:
                    store.mark(conn, user_id, kind, ids, "sent")
                    counts[f"{kind}_sent"] = len(ids)
                    log.info("%s sent to user %d: %d messages", kind, user_id, len(ids))
            store.bump(conn, counts)

    def send_removals(self) -> bool:
        """Tell the webhook which pushed messages were read or deleted since;
        returns whether there were any."""
        settings = self.settings
        assert settings.webhook_url is not None
        conn = self._db()
        with conn.transaction():
            removed = 0
            found = store.removals(conn)
            for user_id, ids in found.items():
                delivery = f"remove-{user_id}-{ids[0]}-{ids[-1]}-{len(ids)}"
                body = orjson.dumps(
                    {"type": "remove", "id": delivery, "user_id": user_id, "message_ids": ids}
                )
                try:
                    assert self._webhook is not None
                    self._webhook.post(body, delivery)
                except SendFailed as exc:
                    self._removal_failures += 1
                    wait = min(
                        settings.retry_first_secs * 2 ** (self._removal_failures - 1),
                        settings.retry_max_secs,
                    )
                    self._removals_after = time.monotonic() + wait
                    log.warning("removal notice for user %d failed (%s)", user_id, exc)
                    break
                store.mark_removed(conn, user_id, ids)
                removed += len(ids)
                self._removal_failures = 0
            store.bump(conn, {"removed": removed})
        return bool(found)


def run_until_signalled(settings: WorkerSettings) -> None:
    """`eventq notifications run`: SIGTERM or SIGINT stop it after the batch
    in progress."""
    worker = NotificationWorker(settings)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("notification worker: signal %d, stopping", signum)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.run()
