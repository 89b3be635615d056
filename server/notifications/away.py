"""Who is away, decided where the queues are (docs/notifications.md).

A user is *present* when one of their queues on this process takes message
events and has a request parked on it, or had one within the presence window
(`EVENTQ_PRESENCE_WINDOW_SECS`, 140 s: Zulip's, the time after which its
presence calls a client idle). Every queue of a user is on one shard
(generation/sharding.py), so one process decides.

For each message notice that carries `notify` (generation/notice.py), each of
the named users of this shard who is not present gets a notification
enqueued now ("delivery"); for one who is present, each queue that took the
message remembers it (`ClientDescriptor.notifiable`). When the user's last
queue is garbage-collected, the remembered messages it still held (not
acknowledged by its client) are enqueued ("gc"): Zulip's missed-message hook.
A queue that ends otherwise (deleted by its client, evicted, overflowed,
ended by a role change) notifies nothing: its client left or re-registers.

Enqueued notifications are published in batches to the durable RabbitMQ
queue the worker consumes (server/notifications/worker.py), from one thread;
the worker keeps one record per (user, message), so one enqueued twice (a
restart replaying its notice, a crash between publish and save) is sent once.

Runs on the IO loop; the work per message is per notifiable user (a few: the
direct messages' and mentions' recipients), never per queue of the realm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from generation.notice import Notice
from generation.publisher import Publisher, PublishError
from queues.client import ClientDescriptor
from queues.registry import EndReason, QueueRegistry

log = logging.getLogger("eventq.notifications")

NOTIFY_EMAIL = 1
NOTIFY_PUSH = 2
KIND_BITS = {"email": NOTIFY_EMAIL, "push": NOTIFY_PUSH}

# Notifications waiting for the publisher thread, at most. A broker down for
# long drops the oldest (logged and counted): a queue of notifications must
# not grow the server's memory without bound.
MAX_PENDING = 100_000
# One published message carries at most this many notifications.
BATCH = 500
RETRY_FIRST_SECS = 1.0
RETRY_MAX_SECS = 30.0


def kinds_of(bits: int) -> list[str]:
    return [kind for kind, bit in KIND_BITS.items() if bits & bit]


class AwayNotifier:
    """Decides who is away and enqueues their notifications. IO loop only,
    except the publishing, which runs on its own thread."""

    def __init__(
        self,
        registry: QueueRegistry,
        amqp_url: str,
        queue: str,
        *,
        presence_window_secs: float,
        is_local: Callable[[int | None, int], bool],
        confirm_timeout_secs: float = 10.0,
    ):
        self.registry = registry
        self.queue = queue
        self.presence_window_secs = presence_window_secs
        # Whether a user's queues are on this shard (realm id, user id).
        self._is_local = is_local
        self._publisher = Publisher(amqp_url, confirm_timeout_secs)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="eventq-notify")
        # Notifications not yet handed to the thread, oldest first.
        self._pending: list[dict[str, Any]] = []
        # Whether a publish (or a retry of one) is under way or scheduled:
        # at most one at a time, so batches keep their order.
        self._busy = False
        # Set while nothing is pending or being published (`close` waits on it).
        self._drained = asyncio.Event()
        self._drained.set()
        self._retry_secs = RETRY_FIRST_SECS
        self._closed = False
        # Counters for /metrics (server/observability/metrics.py).
        self.enqueued: dict[str, int] = {"delivery": 0, "gc": 0}
        self.published = 0
        self.dropped = 0
        self.publish_failures = 0
        # Told of each notification as it is enqueued (user, realm, message,
        # kinds, path, wall time), on the IO loop; must return at once. Set
        # by app.py: the observers (the delivery log).
        self.on_enqueue: Callable[[int, int | None, int, list[str], str, float], None] | None = None

    # -- delivery -------------------------------------------------------------

    def before_delivery(self, notice: Notice, now: float) -> dict[int, dict[str, int] | None]:
        """Called just before `notice` goes into the queues. For each user of
        this shard that `notice.notify` names: None if away, else the next
        event id of each of their queues (to tell, after, which took it)."""
        notify = notice.notify
        assert notify is not None
        state: dict[int, dict[str, int] | None] = {}
        for ids in notify.values():
            for user_id in ids:
                if user_id in state or not self._is_local(notice.realm_id, user_id):
                    continue
                queues = self.registry.user_queues(user_id)
                present = any(self._present(client, now) for client in queues)
                state[user_id] = (
                    {c.queue_id: c.event_queue.next_event_id for c in queues} if present else None
                )
        return state

    def _present(self, client: ClientDescriptor, now: float) -> bool:
        if not client.accepts("message", {}, ()):
            return False
        return client.waiter is not None or now - client.last_active < self.presence_window_secs

    def after_delivery(
        self, notice: Notice, state: Mapping[int, dict[str, int] | None], wall: float
    ) -> None:
        """`notice` went into the queues: notify the away users, and let the
        present users' queues that took it remember it."""
        notify = notice.notify
        assert notify is not None
        message_id = notice.event["message"]["id"]
        bits: dict[int, int] = {}
        for kind, ids in notify.items():
            for user_id in ids:
                if user_id in state:
                    bits[user_id] = bits.get(user_id, 0) | KIND_BITS[kind]
        limit = self.registry.limits.max_events
        for user_id, kinds in bits.items():
            marks = state[user_id]
            if marks is None:
                self._enqueue(user_id, notice.realm_id, message_id, kinds, "delivery", wall)
                continue
            took = False
            for client in self.registry.user_queues(user_id):
                before = marks.get(client.queue_id)
                after = client.event_queue.next_event_id
                if before is None or after == before:
                    continue
                took = True
                held = client.notifiable
                pruned = client.event_queue.newest_pruned_id
                if held and held[0][0] <= pruned:
                    held[:] = [entry for entry in held if entry[0] > pruned]
                held.append((after - 1, message_id, kinds))
                if len(held) > limit:
                    del held[0]
            if not took:
                # Present, but no queue of theirs took the message (each is
                # narrowed elsewhere): nothing will show it to them.
                self._enqueue(user_id, notice.realm_id, message_id, kinds, "delivery", wall)

    # -- garbage collection ---------------------------------------------------

    def queue_ended(self, client: ClientDescriptor, reason: EndReason, last: bool) -> None:
        """The registry's end hook: the user's last queue expired holding
        messages they were not notified of."""
        if reason != "expired" or not last or not client.notifiable:
            return
        pruned = client.event_queue.newest_pruned_id
        wall = time.time()
        for event_id, message_id, kinds in client.notifiable:
            if event_id > pruned:
                self._enqueue(client.user_id, client.realm_id, message_id, kinds, "gc", wall)
        client.notifiable = []

    # -- publishing -----------------------------------------------------------

    def _enqueue(
        self, user_id: int, realm_id: int | None, message_id: int, kinds: int, via: str, wall: float
    ) -> None:
        self.enqueued[via] += 1
        names = kinds_of(kinds)
        self._pending.append(
            {
                "user_id": user_id,
                "realm_id": realm_id,
                "message_id": message_id,
                "kinds": names,
                "via": via,
                "at": round(wall, 3),
            }
        )
        if self.on_enqueue is not None:
            self.on_enqueue(user_id, realm_id, message_id, names, via, wall)
        if len(self._pending) > MAX_PENDING:
            drop = len(self._pending) - MAX_PENDING
            del self._pending[:drop]
            self.dropped += drop
            log.error("%d notifications dropped: more than %d wait for RabbitMQ", drop, MAX_PENDING)
        if not self._busy and not self._closed:
            self._busy = True
            self._drained.clear()
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Hand the next batch to the thread (one at a time)."""
        if self._closed or not self._pending:
            self._busy = False
            self._drained.set()
            return
        batch = self._pending[:BATCH]
        del self._pending[:BATCH]
        body = orjson.dumps({"notifications": batch})
        future = asyncio.get_running_loop().run_in_executor(
            self._thread, self._publisher.publish, self.queue, body
        )
        future.add_done_callback(lambda done: self._published(done, batch))

    def _published(self, done: asyncio.Future[str], batch: list[dict[str, Any]]) -> None:
        loop = asyncio.get_running_loop()
        if done.cancelled() or self._closed:
            self._busy = False
            self._drained.set()
            return
        error = done.exception()
        if error is None:
            self.published += len(batch)
            self._retry_secs = RETRY_FIRST_SECS
            loop.call_soon(self._flush)
            return
        self.publish_failures += 1
        self._pending[:0] = batch
        delay = self._retry_secs
        self._retry_secs = min(self._retry_secs * 2, RETRY_MAX_SECS)
        log.warning(
            "%d notifications not published (%s); retrying in %.0f s",
            len(self._pending),
            error if isinstance(error, PublishError) else repr(error),
            delay,
        )
        loop.call_later(delay, self._flush)

    def stats(self) -> dict[str, Any]:
        return {
            "enqueued": dict(self.enqueued),
            "published": self.published,
            "pending": len(self._pending),
            "dropped": self.dropped,
            "publish_failures": self.publish_failures,
        }

    async def close(self, timeout_secs: float = 5.0) -> None:
        """Publish what is pending (for at most `timeout_secs`), then stop the
        thread. What could not be published is logged."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), timeout_secs)
        self._closed = True
        if self._pending:
            log.warning("%d notifications not published at shutdown", len(self._pending))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._publisher.close)
        self._thread.shutdown(wait=False)
