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
import socket
import time
from collections.abc import Sequence
from typing import Any

import tornado.netutil
import tornado.web

from generation.config import api_key_secret
from generation.events import CLIENT_RULES
from queues.client import ClientDescriptor
from queues.event_queue import Item
from queues.registry import EndReason, QueueRegistry
from server.config import Settings
from server.database.background import Runner
from server.database.background_runner import make_runner
from server.database.db import Database
from server.database.migrate import latest_migration
from server.delivering import Delivery
from server.delivery.consumer import NoticeConsumer
from server.delivery.longpoll import AnswerSlices, Heartbeats
from server.durability.floors import StreamFloors
from server.durability.journal import QueueJournal
from server.durability.saved_queues import SavedQueues
from server.handlers.poll import note_end
from server.http.auth import Authenticator
from server.http.http1 import FastHTTPServer
from server.http.httpserver import EventHTTPServer, Refusals
from server.http.ratelimit import RateLimiter
from server.http.responses import encode
from server.http.sessions import SessionSigner
from server.observability.deliverylog import DeliveryLog
from server.observability.looplag import GcPauses, LoopLagMonitor
from server.observability.metrics import gc_stats, make_metrics
from server.observability.observe import Observers
from server.routes import make_dispatcher
from server.upkeep import Upkeep
from server.version import ZULIP_FEATURE_LEVEL, ZULIP_MERGE_BASE, ZULIP_VERSION

log = logging.getLogger("eventq.server")

# How long start() waits for the consumer before accepting clients anyway.
CONSUMER_START_WAIT_SECS = 5.0
# Connections waiting this long for a request head are closed.
IDLE_CONNECTION_SECS = 3600.0
LISTEN_BACKLOG = 4096


class StartupError(RuntimeError):
    """Raised by `EventServer.start` when the server cannot serve at all; the
    message says what to do."""


class EventServer:
    """One eventq server process. Every method runs on the IO loop."""

    def __init__(self, settings: Settings):
        self.settings = settings
        # The capability rules come with the event types' declarations.
        self.registry = QueueRegistry(encode, settings.queue_limits, rules=CLIENT_RULES)
        self.registry.end_hooks.append(self._on_queue_end)
        self.db = Database(
            settings.database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max
        )
        # Read (or created) now, not on the loop at the first authentication.
        self.sessions = SessionSigner(api_key_secret())
        self.auth = Authenticator(
            self.db.api_key,
            upgrade=self.db.upgrade_api_key_hash,
            session_lookup=self.db.session_user,
            key_tag=self.sessions.key_tag,
            ttl_secs=settings.auth_cache_secs,
        )
        self.rate_limiter: RateLimiter | None = None
        if settings.rate_limit_requests > 0:
            self.rate_limiter = RateLimiter(
                settings.rate_limit_requests, settings.rate_limit_window_secs
            )
        self.auth_failures: RateLimiter | None = None
        if settings.auth_failure_limit > 0:
            self.auth_failures = RateLimiter(
                settings.auth_failure_limit, settings.rate_limit_window_secs, "address"
            )
        self.shared_secret = settings.load_shared_secret()
        # Identifies this run of the server to clients (Zulip: start time, s).
        self.server_generation = int(time.time())
        self.started_at = time.monotonic()
        self.loop_lag = LoopLagMonitor()
        self.gc_pauses = GcPauses()
        # Woken parked requests are answered a slice per loop iteration.
        self.answer_slices = AnswerSlices()
        # Parked requests' heartbeats, gathered in ticks (one timer per tick).
        self.heartbeats = Heartbeats(
            self.heartbeat, settings.heartbeat_secs, settings.heartbeat_jitter_secs
        )
        # Polls of existing queues by the path that served them: "lean"
        # (handlers/poll.py) or "full" (handlers/events.py); in stats.
        self.poll_paths = {"lean": 0, "full": 0}
        self.stopping = False
        # Requests being served (including parked ones); shutdown waits for 0.
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._http: EventHTTPServer | None = None
        self._fast: FastHTTPServer | None = None
        # Requests whose head cannot be served (too large, not HTTP) are
        # answered, counted and closed here (server/http/httpserver.py).
        self.refusals = Refusals(settings.max_header_bytes)
        self.port: int | None = None
        # Told of every delivery, poll, register and queue end (server/observability/observe.py).
        self.observers = Observers()
        # The delivery log for the analytics jobs, when EVENTQ_LOG_DIR is set.
        self.delivery_log: DeliveryLog | None = None
        if settings.log_dir is not None:
            self.delivery_log = DeliveryLog(
                settings.log_dir,
                settings.shard_name,
                flush_secs=settings.log_flush_secs,
                roll_secs=settings.log_roll_secs,
                retention_days=settings.log_retention_days,
                max_pending=settings.log_max_pending,
            )
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
            restart_event=self.restart_event,
        )
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
        )

    @staticmethod
    def clock() -> float:
        """The registry's clock: seconds, never going back."""
        return time.monotonic()

    # -- lifecycle ----------------------------------------------------------

    async def start(self, port: int | None = None, host: str | None = None) -> None:
        """Bind, restore queues, consume, connect to the database, then accept
        connections. Returns once serving; `port` 0 picks a free port (see
        `self.port`). Raises `StartupError` before touching any saved state
        if the port cannot be bound or the database schema is not migrated."""
        # Bind first: a taken port must fail before the saved queues are read
        # (and moved to .last). Connections wait in the backlog meanwhile.
        try:
            sockets = tornado.netutil.bind_sockets(
                self.settings.port if port is None else port,
                host or self.settings.host,
                family=socket.AF_INET,
                backlog=LISTEN_BACKLOG,
            )
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {host or self.settings.host}:{port}: {exc.strerror}"
            ) from exc
        self.port = sockets[0].getsockname()[1]
        if await self.db.open():
            missing = await self.db.missing_migrations(latest_migration())
            if missing:
                for sock in sockets:
                    sock.close()
                raise StartupError(
                    f"the database schema is not up to date ({missing}): run `eventq db migrate`"
                )
        self.loop_lag.start()
        self.gc_pauses.start()
        if self.delivery_log is not None:
            self.delivery_log.start()
        await self.saved.restore_queues()
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
        dispatcher = make_dispatcher(self)
        self._http = EventHTTPServer(
            dispatcher,
            # The handlers enforce their own (smaller) limits with a JSON 413;
            # this is the hard cap for a body without a Content-Length.
            max_body_size=self.settings.max_internal_request_bytes,
            refusals=self.refusals,
            idle_connection_timeout=IDLE_CONNECTION_SECS,
        )
        if self.settings.http_server == "eventq":
            # eventq's connections; Tornado's server gets those they hand over.
            self._fast = FastHTTPServer(
                dispatcher.application,
                dispatcher.lean_poll,
                self._http,
                max_body_size=self.settings.max_internal_request_bytes,
                idle_timeout=IDLE_CONNECTION_SECS,
            )
        if self.settings.checkpoint_secs > 0:
            # Right away: the restart event pushed to restored queues is in it.
            await self.upkeep.checkpoint()
        # Said before the runner starts: retention must know what this needs.
        await self.upkeep.say_reader_floor()
        self.upkeep.start_background()
        if self._fast is not None:
            await self._fast.add_sockets(sockets, LISTEN_BACKLOG)
        else:
            self._http.add_sockets(sockets)
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
        if self._fast is not None:
            self._fast.stop()
        if self._http is not None:
            self._http.stop()
        # No notice may enter a queue after it is saved: stop consuming first
        # (what was taken is processed and acknowledged; the rest stays queued).
        if self.consumer is not None:
            await self.consumer.stop()
        log.info("shutting down: answering %d parked requests", self.registry.parked)
        self.upkeep.stop_timers()
        now = self.clock()
        # A heartbeat is an answer every client already handles; it takes no
        # id, so the ids stay consistent across the restart.
        for client in list(self.registry):
            if client.waiter is not None:
                self.registry.wake_for_heartbeat(client, now)
        try:
            await asyncio.wait_for(self._idle.wait(), self.settings.shutdown_grace_secs)
        except TimeoutError:
            log.warning(
                "%d requests still in progress after %.0f s; saving queues anyway",
                self.in_flight,
                self.settings.shutdown_grace_secs,
            )
        await self.eventlog.stop()
        await self.save_queues()
        # The saved queues need the log from here on.
        self.saved.checkpoint_floor = self.eventlog.position
        await self.upkeep.say_reader_floor()
        await self.upkeep.stop_background()
        if self._fast is not None:
            await self._fast.close_all_connections()
        if self._http is not None:
            await self._http.close_all_connections()
        await self.refusals.close()
        # Last: every response and queue end is in the log by now.
        if self.delivery_log is not None:
            await self.delivery_log.stop()
        await self.db.close()
        await self.loop_lag.stop()
        self.gc_pauses.stop()
        self.delivery.close()
        log.info("stopped")

    def request_started(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def request_finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    # -- queues -------------------------------------------------------------

    async def save_queues(self) -> None:
        """Save every queue for the next start (a graceful stop)."""
        await self.saved.save_queues()

    @property
    def last_checkpoint(self) -> dict[str, float]:
        """The last checkpoint: queues saved, its time, its longest stretch on the loop."""
        return self.saved.last_checkpoint

    def journal_queue(self, client: ClientDescriptor) -> None:
        """Journal a queue just registered, as it is now (server/durability/journal.py);
        only when checkpoints are on, the journal being their complement."""
        if self.settings.checkpoint_secs > 0:
            self.journal.record(client, self.eventlog.position, self.clock(), time.time())

    def record_floor(self, user_id: int, position: int) -> None:
        """A register gave `user_id` the stream position `position`."""
        self.floors.record(user_id, position)

    async def stream_floor(self, user_id: int) -> int | None:
        """The lowest stream position registers gave `user_id`, those of
        this process's registers not yet written included (not waited for:
        under a flood of registers the writer is never done)."""
        written = await self.db.stream_floor(user_id)
        floors = [f for f in (written, self.floors.unwritten(user_id)) if f is not None]
        return min(floors, default=None)

    def restart_event(self) -> dict[str, Any]:
        return {
            "type": "restart",
            "zulip_version": ZULIP_VERSION,
            "zulip_merge_base": ZULIP_MERGE_BASE,
            "zulip_feature_level": ZULIP_FEATURE_LEVEL,
            "server_generation": self.server_generation,
        }

    def observe_response(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: str,
        waited_secs: float,
    ) -> None:
        if self.observers:
            wall = time.time()
            self.observers.responded(client, items, response_bytes, outcome, waited_secs, wall)

    def observe_registered(self, client: ClientDescriptor, latency_secs: float) -> None:
        if self.observers:
            wall = time.time()
            self.observers.registered(client, latency_secs, wall)

    def observe_poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str
    ) -> None:
        if self.observers:
            wall = time.time()
            self.observers.poll_failed(user_id, realm_id, queue_id, code, wall)

    def heartbeat(self, client: ClientDescriptor) -> None:
        """`heartbeats`' callback: the parked request has waited a heartbeat period."""
        self.registry.wake_for_heartbeat(client, self.clock())

    def _on_queue_end(self, client: ClientDescriptor, reason: EndReason, last: bool) -> None:
        note_end(self, client)
        self.journal.ended(client.queue_id)
        if self.observers:
            lifetime = self.clock() - client.created_at
            wall = time.time()
            self.observers.queue_ended(client, reason, lifetime, wall)
        if reason == "overflow":
            log.warning(
                "queue %s of user %d overflowed (%d events, %d bytes; limits %d events,"
                " %d bytes) and was ended: its client is not reading; it will re-register",
                client.queue_id,
                client.user_id,
                len(client.event_queue),
                client.event_queue.bytes,
                self.registry.limits.max_events,
                self.registry.limits.max_bytes,
            )
        elif reason == "evicted":
            log.info(
                "queue %s of user %d evicted: the user reached %d queues",
                client.queue_id,
                client.user_id,
                self.registry.limits.max_queues_per_user,
            )
        else:
            log.debug("queue %s of user %d ended: %s", client.queue_id, client.user_id, reason)

    def _http_stats(self) -> dict[str, Any]:
        """Which HTTP server serves connections; for eventq's, how many are
        open and how many it handed to Tornado's (server/http/http1.py)."""
        fast = self._fast
        if fast is None:
            return {"server": "tornado"}
        return {
            "server": "eventq",
            "connections": len(fast.connections),
            "handed_off": fast.handed_off,
            "write_buffer_bytes": fast.write_buffered(),
        }

    def stats(self, user_id: int | None = None) -> dict[str, Any]:
        events, size = self.registry.held()
        body: dict[str, Any] = {
            "server_generation": self.server_generation,
            "uptime_secs": round(time.monotonic() - self.started_at, 3),
            "queues": len(self.registry),
            "users": self.registry.users(),
            "parked": self.registry.parked,
            "events_held": events,
            "bytes_held": size,
            "in_flight": self.in_flight,
            "auth_lookups": self.auth.lookups,
            "loop_lag": self.loop_lag.percentiles(),
            "poll_paths": dict(self.poll_paths),
            "http": self._http_stats(),
            "stream": self.eventlog.stats(),
            "checkpoint": self.last_checkpoint,
            "db_pool": self.db.stats(),
            "python_gc": {**gc_stats(), "pauses": self.gc_pauses.stats()},
        }
        if self.consumer is not None:
            body["consumer"] = self.consumer.stats()
        if user_id is not None:
            body["user_queues"] = [
                {
                    "queue_id": client.queue_id,
                    "parked": client.waiter is not None,
                    "events": len(client.event_queue),
                    "idle_secs": round(self.clock() - client.last_active, 3),
                    "lifespan_secs": client.options.lifespan_secs,
                    "client_name": client.options.client_name,
                }
                for client in self.registry.user_queues(user_id)
            ]
        return body
