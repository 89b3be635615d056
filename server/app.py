"""The server process: its state, its startup and its shutdown.

`EventServer` holds the queue registry, the database pool and the timers, and
is what every handler reaches through `self.server`. Lifecycle, symmetric:
`start()` loads saved queues, opens the pool and listens; `stop()` refuses new
work, answers parked requests, waits for requests in progress, saves the
queues and closes the pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from generation.config import api_key_secret
from generation.events import CLIENT_RULES
from queues import compiled
from queues.client import ClientDescriptor
from queues.registry import QueueRegistry
from server.config import Settings
from server.database.background import Runner
from server.database.background_runner import make_runner
from server.database.db import Database
from server.database.migrate import latest_migration
from server.delivering import Delivery
from server.delivery.consumer import NoticeConsumer, dead_letter_queue
from server.delivery.longpoll import AnswerSlices, Heartbeats
from server.durability.floors import StreamFloors
from server.durability.journal import QueueJournal
from server.durability.restore import restore_queues
from server.durability.saved_queues import SavedQueues
from server.http.auth import Authenticator
from server.http.ratelimit import limiters
from server.http.responses import encode
from server.http.sessions import SessionSigner
from server.listener import Listener, StartupError
from server.notifications.store import COUNTERS
from server.observability.deliverylog import delivery_log_for
from server.observability.looplag import GcPauses, LoopLagMonitor
from server.observability.metrics import NotificationState, gc_stats, make_metrics
from server.observability.notification_figures import NotificationFigures
from server.observability.observe import Observers
from server.routes import make_dispatcher
from server.scheduling.scheduler import Scheduler
from server.telling import Telling
from server.upkeep import Upkeep

log = logging.getLogger("eventq.server")

# How long start() waits for the consumer before accepting clients anyway.
CONSUMER_START_WAIT_SECS = 5.0

__all__ = ["EventServer", "StartupError"]


class EventServer:
    """One eventq server process. Every method runs on the IO loop."""

    def __init__(self, settings: Settings):
        self.settings = settings
        # The capability rules come with the event types' declarations.
        self.registry = QueueRegistry(
            encode, settings.queue_limits, rules=CLIENT_RULES, embed=orjson.Fragment
        )
        self.db = Database(
            settings.database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max
        )
        # Read (or created) now, not on the loop at the first authentication.
        # Signs sessions and the emails' unsubscribe links.
        self.api_key_secret = api_key_secret()
        self.sessions = SessionSigner(self.api_key_secret)
        self.auth = Authenticator(
            self.db.api_key,
            upgrade=self.db.upgrade_api_key_hash,
            session_lookup=self.db.session_user,
            key_tag=self.sessions.key_tag,
            ttl_secs=settings.auth_cache_secs,
        )
        self.rate_limiter, self.auth_failures = limiters(settings)
        self.shared_secret = settings.load_shared_secret()
        # Identifies this run of the server to clients (Zulip: start time, s).
        self.server_generation = int(time.time())
        self.started_at = time.monotonic()
        self.delivery_path = compiled.describe()
        self.loop_lag = LoopLagMonitor()
        self.gc_pauses = GcPauses()
        # Woken parked requests are answered a slice per loop iteration.
        self.answer_slices = AnswerSlices()
        # Parked requests' heartbeats, gathered in ticks (one timer per tick).
        self.heartbeats = Heartbeats(
            self.heartbeat, settings.heartbeat_secs, settings.heartbeat_jitter_secs
        )
        # Polls of existing queues by the path that served them: "lean"
        # (handlers/poll.py), "full" (handlers/events.py) or "stream" (an
        # event stream opened, handlers/stream.py); in stats.
        self.poll_paths = {"lean": 0, "full": 0, "stream": 0}
        # Notices posted to the notify endpoint by the path that served them:
        # "lean" (handlers/internal.py's LeanNotify) or "full"; in stats.
        self.notify_paths = {"lean": 0, "full": 0}
        self.stopping = False
        # The sockets, the HTTP servers, the requests in flight (server/listener.py).
        self.listener = Listener(settings)
        self.refusals = self.listener.refusals
        self.request_started = self.listener.request_started
        self.request_finished = self.listener.request_finished
        # Told of every delivery, poll, register and queue end (server/observability/observe.py).
        self.observers = Observers()
        # The delivery log for the analytics jobs, when EVENTQ_LOG_DIR is set.
        self.delivery_log = delivery_log_for(settings)
        if self.delivery_log is not None:
            self.observers.add(self.delivery_log)
        # Prometheus figures (GET /metrics): counters kept by an observer,
        # gauges read from the server at scrape time.
        metrics, self.metrics_registry = make_metrics(self)
        self.metrics = metrics
        self.observers.add(metrics)
        # Notices into the queues, in position order (server/delivering.py).
        self.delivery = Delivery(
            settings, self.registry, self.db, self.auth, self.observers, self.clock
        )
        self.eventlog = self.delivery.eventlog
        self.deliver = self.delivery.deliver
        self.sink = self.delivery.sink
        # Queues registered since the last checkpoint (server/durability/journal.py).
        # Names this server's rows in queue_journal and stream_readers.
        self.reader_key = f"{settings.shard_name}:{settings.state_dir.resolve()}"
        self.journal = QueueJournal(self.db, self.reader_key)
        # The positions registers gave each user, which resume_from may not
        # go below (server/durability/floors.py).
        self.floors = StreamFloors(self.db)
        self.record_floor = self.floors.record
        self.stream_floor = self.floors.lowest
        # The background updates' runner, when this process runs them.
        self.background: Runner | None = None
        if settings.background_tasks:
            self.background = make_runner(
                settings,
                api_key_secret(),
                application_name=f"eventq-background {settings.shard_name}",
            )
        self.consumer: NoticeConsumer | None = None
        if settings.amqp_url:
            self.consumer = NoticeConsumer(
                settings.amqp_url,
                settings.notify_queue,
                self.delivery.process_notice,
                (self.observers,),  # one member, telling them all
            )
        # Restores, saves and checkpoints the queues (server/durability/saved_queues.py).
        self.saved = SavedQueues(
            settings,
            self.registry,
            self.eventlog,
            self.db,
            self.journal,
            self.floors,
            self.consumer,
            clock=self.clock,
            server_generation=self.server_generation,
        )
        self.journal_queue = self.saved.journal_queue
        # Answers, registers, failed polls and queue ends, told to the
        # observers; queue ends logged (server/telling.py).
        telling = Telling(self.observers, self.journal, self.registry.limits, self, self.clock)
        self.registry.end_hooks.append(telling.queue_ended)
        # The missed-message hook: a user's last queue expiring notifies what
        # it held (server/notifications/away.py).
        self.notifier = self.delivery.notifier
        # And the operators see them: each enqueued one told to the
        # observers (the delivery log), the workers' figures read every 15 s
        # for /metrics and the operator page (server/observability/notification_figures.py).
        self.notification_figures: NotificationFigures | None = None
        if self.notifier is not None:
            self.registry.end_hooks.append(self.notifier.queue_ended)
            self.notifier.on_enqueue = self.observers.notification_enqueued
            self.notification_figures = NotificationFigures(
                self.db,
                settings.amqp_url,
                settings.notification_queue,
                dead_letter_queue(settings.notification_queue),
                COUNTERS,
            )
            self.metrics_registry.register(
                NotificationState(self.notifier, self.notification_figures)
            )
        self.observe_response = telling.responded
        self.observe_registered = telling.registered
        self.observe_poll_failed = telling.poll_failed
        # The timers: idle-queue GC, the log's tail, checkpoints, the
        # retention floor, the background runner (server/upkeep.py).
        self.upkeep = Upkeep(
            settings,
            self.registry,
            self.db,
            self.eventlog,
            self.saved,
            self.observers,
            (self.rate_limiter, self.auth_failures),
            self.background,
            self.reader_key,
            self.clock,
            lambda: self.stopping,
            self.notification_figures,
        )
        # Sends due scheduled messages (server/scheduling/), when this
        # process does.
        self.scheduler: Scheduler | None = None
        if settings.scheduled_messages:
            self.scheduler = Scheduler(self.db, self.sink, self.metrics_registry)

    # The registry's clock: seconds, never going back. The builtin itself, so
    # that the compiled delivery path calls it without a Python frame.
    clock = staticmethod(time.monotonic)

    # -- lifecycle ----------------------------------------------------------

    async def start(self, port: int | None = None, host: str | None = None) -> None:
        """Bind, restore queues, consume, connect to the database, then accept
        connections. Returns once serving; `port` 0 picks a free port (see
        `self.port`). Raises `StartupError` before touching any saved state
        if the port cannot be bound or the database schema is not migrated."""
        # Bind first: a taken port must fail before the saved queues are read
        # (and moved to .last). Connections wait in the backlog meanwhile.
        self.port = self.listener.bind(port, host)
        if await self.db.open():
            missing = await self.db.missing_migrations(latest_migration())
            if missing:
                self.listener.unbind()
                raise StartupError(
                    f"the database schema is not up to date ({missing}): run `eventq db migrate`"
                )
        self.loop_lag.start()
        self.gc_pauses.start()
        if self.delivery_log is not None:
            self.delivery_log.start()
        await restore_queues(self.saved)
        # Consume before accepting clients: notices published while the server
        # was down reach the restored queues before clients come back.
        if self.consumer is not None:
            self.consumer.start()
            try:
                await asyncio.wait_for(self.consumer.consuming.wait(), CONSUMER_START_WAIT_SECS)
            except TimeoutError:
                log.warning(
                    "not consuming %s yet (RabbitMQ unreachable?); serving meanwhile",
                    self.settings.notify_queue,
                )
        else:
            log.info(
                "no broker (EVENTQ_AMQP_URL is empty): notices arrive only through"
                " /api/internal/notify_tornado"
            )
        self.upkeep.start_timers()
        if self.scheduler is not None:
            self.scheduler.start()
        self.listener.make_servers(make_dispatcher(self))
        if self.settings.checkpoint_secs > 0:
            # Right away: the restart event pushed to restored queues is in it.
            await self.upkeep.checkpoint()
        # Said before the runner starts: retention must know what this needs.
        await self.upkeep.say_reader_floor()
        self.upkeep.start_background()
        await self.listener.serve()
        log.info(
            "listening on http://%s:%d (generation %d, %d queues)",
            host or self.settings.host,
            self.port,
            self.server_generation,
            len(self.registry),
        )

    async def stop(self) -> None:
        """Graceful shutdown; queues are saved for the next start."""
        if self.stopping:
            return
        self.stopping = True
        self.listener.stop_accepting()
        # No notice may enter a queue after it is saved: stop consuming first
        # (what was taken is processed and acknowledged; the rest stays queued).
        if self.consumer is not None:
            await self.consumer.stop()
        log.info("shutting down: answering %d parked requests", self.registry.parked)
        self.upkeep.stop_timers()
        # Its last message's events reach the queues before they are saved.
        if self.scheduler is not None:
            await self.scheduler.stop()
        now = self.clock()
        # A heartbeat is an answer every client already handles; it takes no
        # id, so the ids stay consistent across the restart.
        for client in list(self.registry):
            if client.waiter is not None:
                self.registry.wake_for_heartbeat(client, now)
        try:
            await asyncio.wait_for(self.listener.requests_done(), self.settings.shutdown_grace_secs)
        except TimeoutError:
            log.warning(
                "%d requests still in progress after %.0f s; saving queues anyway",
                self.in_flight,
                self.settings.shutdown_grace_secs,
            )
        await self.eventlog.stop()
        await self.saved.save_queues()
        # The saved queues need the log from here on.
        self.saved.checkpoint_floor = self.eventlog.position
        await self.upkeep.say_reader_floor()
        await self.upkeep.stop_background()
        if self.notifier is not None:
            await self.notifier.close()
        if self.notification_figures is not None:
            await self.notification_figures.close()
        await self.listener.close()
        # Last: every response and queue end is in the log by now.
        if self.delivery_log is not None:
            await self.delivery_log.stop()
        await self.db.close()
        await self.loop_lag.stop()
        self.gc_pauses.stop()
        self.delivery.close()
        log.info("stopped")

    @property
    def in_flight(self) -> int:
        """Requests being served, parked long-polls included."""
        return self.listener.in_flight

    def heartbeat(self, client: ClientDescriptor) -> None:
        """`heartbeats`' callback: the parked request has waited a heartbeat period."""
        self.registry.wake_for_heartbeat(client, self.clock())

    def stats(self) -> dict[str, Any]:
        events, size = self.registry.held()
        body: dict[str, Any] = {
            "server_generation": self.server_generation,
            "uptime_secs": round(time.monotonic() - self.started_at, 3),
            # Whether the delivery path runs compiled (queues/compiled.py).
            "delivery_path": self.delivery_path,
            "queues": len(self.registry),
            "users": self.registry.users(),
            "parked": self.registry.parked,
            "events_held": events,
            "bytes_held": size,
            "in_flight": self.in_flight,
            "auth_lookups": self.auth.lookups,
            "loop_lag": self.loop_lag.percentiles(),
            "poll_paths": dict(self.poll_paths),
            "notify_paths": dict(self.notify_paths),
            "queue_gc": {
                "sweeps": self.upkeep.gc_sweeps,
                "last_ms": round(self.upkeep.gc_last_secs * 1000, 3),
                "max_ms": round(self.upkeep.gc_max_secs * 1000, 3),
            },
            "http": self.listener.stats(),
            "stream": self.eventlog.stats(),
            "checkpoint": self.saved.last_checkpoint,
            "db_pool": self.db.stats(),
            "python_gc": {**gc_stats(), "pauses": self.gc_pauses.stats()},
        }
        if self.consumer is not None:
            body["consumer"] = self.consumer.stats()
        if self.notifier is not None:
            body["notifications"] = self.notifier.stats()
        if self.notification_figures is not None:
            body["notifications"] |= self.notification_figures.stats()
        return body
