"""Delivery: what the server does with a notice, from the consumer, the
internal endpoint or its own actions, to the queues (docs/architecture.md,
"Delivery").

`Delivery` owns the event log's reader (server/delivery/eventlog.py), which
hands notices on in position order; the ones with no position go straight
through. A control notice (a user's access changed) is acted on here, on
every shard; the others go into the queues (`QueueRegistry.deliver`) and
are told to the observers. With several shards, this process's own events
for another shard's users go through that shard's notify queue.

In the assembly room with `app.py` (tests/test_layout.py, ROOMS): it wires
the registry, the auth cache, the observers and the broker together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from generation.accounts import ROLE_GUEST
from generation.errors import BadNotice
from generation.events.realm import REALM_EVENT_TYPE, deactivated_realm_id
from generation.events.users import ACCESS_EVENT_TYPES, AccessChange, access_change, is_control
from generation.notice import Notice, encode_notice, parse_notice
from generation.send import PublishError, publish_encoded
from generation.sharding import reach_of
from queues.payload import PER_EVENT_OVERHEAD
from queues.registry import DeliveryReport, QueueRegistry
from server.config import Settings
from server.database.db import Database
from server.delivery.eventlog import EventLogReader
from server.http.auth import Authenticator
from server.http.responses import encode
from server.notifications.away import AwayNotifier
from server.observability.observe import Observers, make_origin

log = logging.getLogger("eventq.server")

# The event types that may change what this shard must know of a user or a
# realm; the checks for those changes are skipped for every other event.
WATCHED_TYPES = ACCESS_EVENT_TYPES | {REALM_EVENT_TYPE}


class Delivery:
    """Notices into this process's queues, in position order. Every method
    runs on the IO loop."""

    def __init__(
        self,
        settings: Settings,
        registry: QueueRegistry,
        db: Database,
        auth: Authenticator,
        observers: Observers,
        clock: Callable[[], float],
    ):
        self.settings = settings
        self.registry = registry
        self.auth = auth
        self.observers = observers
        self.clock = clock
        # Positioned notices reach the queues in position order.
        self.eventlog = EventLogReader(
            db, self.deliver_now, gap_timeout_secs=settings.gap_timeout_secs
        )
        # Publishes this shard's own events to the other shards (blocking pika
        # calls, off the loop); one thread keeps one broker connection.
        self._publisher: ThreadPoolExecutor | None = None
        if settings.sharding is not None and len(settings.sharding.shards) > 1:
            self._publisher = ThreadPoolExecutor(1, thread_name_prefix="eventq-publish")
        # Notifications for the users a message finds away (server/notifications/away.py).
        self.notifier: AwayNotifier | None = None
        if settings.notifications and settings.amqp_url:
            shard_map = settings.sharding
            self.notifier = AwayNotifier(
                registry,
                settings.amqp_url,
                settings.notification_queue,
                presence_window_secs=settings.presence_window_secs,
                is_local=(
                    (lambda realm_id, user_id: True)
                    if shard_map is None
                    else (
                        lambda realm_id, user_id: (
                            shard_map.shard_for(realm_id, user_id) == settings.shard
                        )
                    )
                ),
            )

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.shutdown(wait=False)

    def process_notice(
        self, body: bytes, published_at: float | None = None, *, will_retry: bool = False
    ) -> DeliveryReport:
        """The consumer's processor: decode, validate and deliver one notice
        (`published_at`: the producer's stamp, wall-clock seconds;
        `will_retry`: the notice comes again if this raises, see
        server/delivery/consumer.py). Raises `BadNotice` for a malformed one,
        or one larger than an internal request may be."""
        limit = self.settings.max_internal_request_bytes
        if len(body) > limit:
            raise BadNotice(
                f"the notice is {len(body)} bytes, more than EVENTQ_MAX_INTERNAL_REQUEST_BYTES"
                f" ({limit})"
            )
        return self.deliver(parse_notice(body), len(body), published_at, will_retry=will_retry)

    def deliver(
        self,
        notice: Notice,
        encoded_size: int,
        published_at: float | None = None,
        *,
        will_retry: bool = False,
    ) -> DeliveryReport:
        """Deliver a validated notice whose wire form is `encoded_size` bytes,
        in position order (server/delivery/eventlog.py); the report is empty when it
        waits behind a gap or a failed event, or was a duplicate. Raises
        `BadNotice` for an event no queue could hold: delivering it would
        end every recipient's queue."""
        limit = self.registry.limits.max_bytes - PER_EVENT_OVERHEAD
        if encoded_size > limit:  # cheap test first: the notice contains the event
            size = len(encode(notice.event))
            if size > limit:
                raise BadNotice(
                    f"the event is {size} bytes, more than a queue holds ({limit} bytes)"
                )
        report = self.eventlog.offer(notice, published_at, will_retry=will_retry)
        return report if isinstance(report, DeliveryReport) else DeliveryReport()

    async def sink(self, notice: Notice) -> None:
        """Where this process's own actions send their events: this shard's
        users straight into its queues; with several shards, the other
        shards' users through their notify queues, as `send_event` would.
        The change is committed by now: a shard that cannot be told is
        logged, and its clients catch up when they next register."""
        shard_map = self.settings.sharding
        if shard_map is None:
            self.deliver(notice, len(encode(notice.event)))
            return
        parts = shard_map.split(notice.realm_id, notice.users, reach_of(notice.event))
        # Own users first: their events never wait for the broker, and keep
        # their order with the next action's.
        own = parts.pop(self.settings.shard, None)
        if own is not None:
            part = notice.for_users(own)
            self.deliver(part, len(encode(part.event)))
        loop = asyncio.get_running_loop()
        for name, users in parts.items():
            part = notice.for_users(users)
            config = self.settings.producer.for_shard(shard_map.shards[name])
            try:
                await loop.run_in_executor(
                    self._publisher,
                    functools.partial(
                        publish_encoded,
                        encode_notice(part),
                        config,
                        logged=notice.position is not None,
                    ),
                )
            except PublishError as exc:
                log.warning(
                    "shard %s was not told of a %s event for %d users: %s",
                    name,
                    notice.event["type"],
                    len(users),
                    exc,
                )

    def deliver_now(self, notice: Notice, published_at: float | None) -> DeliveryReport:
        """The event log reader's hand-off: the notice's turn has come."""
        now = self.clock()
        watched = notice.event["type"] in WATCHED_TYPES
        if watched and is_control(notice.event):
            change = access_change(notice.event)
            if change is not None:
                self._access_changed(change, now)
            return DeliveryReport()
        wall = time.time()
        notifier = self.notifier if notice.notify is not None else None
        presence = notifier.before_delivery(notice, now) if notifier is not None else None
        report = self.registry.deliver(
            notice.event,
            notice.users,
            notice.realm_id,
            now,
            make_origin(wall, published_at, notice.position),
            notice.position,
        )
        if notifier is not None and presence:
            notifier.after_delivery(notice, presence, wall)
        self.observers.notice_delivered(notice.event["type"], report, wall)
        if watched:
            change = access_change(notice.event)
            if change is not None:
                self._access_changed(change, now)
            realm_id = deactivated_realm_id(notice.event)
            if realm_id is not None:
                self._realm_deactivated(realm_id, notice, now)
        if report.foreign:
            log.warning(
                "notice for realm %s named users whose queues are in another realm;"
                " %d queues skipped (a producer bug?)",
                notice.realm_id,
                report.foreign,
            )
        return report

    def _realm_deactivated(self, realm_id: int, notice: Notice, now: float) -> None:
        """A realm was deactivated (every shard hears of it): what this shard
        cached of its users is forgotten, so that their next request is
        refused (REALM_DEACTIVATED), and the queues of the users the notice
        names here end, after the event went into them: a parked poll
        answers with it, the next request gets the 401."""
        forgotten = self.auth.forget_realm(realm_id)
        ended = 0
        for user in notice.users:
            user_id = user if isinstance(user, int) else int(user["id"])
            ended += self.registry.end_user(user_id, "deactivated", now)
        log.info(
            "realm %d deactivated: %d queues ended, %d cached credentials forgotten",
            realm_id,
            ended,
            forgotten,
        )

    def _access_changed(self, change: AccessChange, now: float) -> None:
        """What a change of a user's access does here (every shard hears of
        it): what this shard cached of the user is forgotten, so the next
        request is checked against the database (a new role, a logout, a new
        key, a deactivation take effect at once, not at the cache's next
        look); a deactivated user's queues end, and so do the queues taking
        every public channel that a user made a guest may no longer have.
        The rule and its reasons: docs/behaviour.md, "Security"."""
        self.auth.forget_user(change.user_id)
        if change.deactivated:
            # Their clients get BAD_EVENT_QUEUE_ID, then 401.
            ended = self.registry.end_user(change.user_id, "deactivated", now)
            log.info("user %d deactivated: %d queues ended", change.user_id, ended)
        elif change.role == ROLE_GUEST:
            ended = self.registry.end_user(
                change.user_id, "role_changed", now, all_public_only=True
            )
            log.info(
                "user %d is a guest now: %d queues taking every public channel ended",
                change.user_id,
                ended,
            )
        elif change.role is not None:
            log.info("user %d has role %d now", change.user_id, change.role)
        else:
            log.info("user %d's credentials changed: forgotten here", change.user_id)
