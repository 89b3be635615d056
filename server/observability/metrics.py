"""Live metrics in Prometheus' text format (`GET /metrics`, internal callers).

Three kinds of figure, so that the hot path pays as little as possible and a
scrape never waits:
- counters and histograms of things that happen (events delivered by type,
  long-polls by outcome, register latency, queue ends, GC runs), kept by an
  observer (server/observability/observe.py) that does one increment per notice or per
  response, never per recipient;
- gauges and totals the server already keeps (queues, parked requests, events
  held, loop lag, the consumer's, the delivery log's and the notifications'
  counters), read only when Prometheus scrapes;
- the notification workers' figures, which live in PostgreSQL and RabbitMQ:
  read by a timer off the scrape, exported as last read
  (server/observability/notification_figures.py).

Each server has its own `CollectorRegistry`, so several servers in one process
(the tests) do not share figures.
"""

from __future__ import annotations

import gc
import time
import typing
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.registry import Collector

from queues.client import ClientDescriptor
from queues.event_queue import Item
from queues.registry import DeliveryReport, EndReason
from server.database.background_status import STATES
from server.interface import MetricsApi
from server.observability.notification_figures import NotificationFigures
from server.observability.observe import Observer, PollOutcome, Responder
from server.observability.pollrecords import PollCounts

if TYPE_CHECKING:
    # Its type only: the notifications' room is above this one (tests/test_layout.py).
    from server.notifications.away import AwayNotifier

# Producers may send any event type; past this many distinct ones, the rest are
# counted under "other" so that a buggy producer cannot grow the label set
# (and Prometheus' memory) without limit.
MAX_EVENT_TYPES = 200
OTHER = "other"

# Register takes from a few milliseconds (empty state) to seconds (a big realm
# on a loaded database); GC sweeps from microseconds to tens of milliseconds.
REGISTER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
GC_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)


class Metrics(Observer):
    """The counters that move with the server's work."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self._event_types: set[str] = set()
        # Each event type's child of `events_delivered`, found once: its
        # `labels()` costs more than the increment, on every notice.
        self._delivered_by_type: dict[str, Counter] = {}
        self.events_delivered = Counter(
            "eventq_events_delivered",
            "Events put into client queues, by event type (one per receiving queue)",
            ["type"],
            registry=registry,
        )
        self.notices = Counter(
            "eventq_notices_delivered",
            "Notices delivered into the queues (from RabbitMQ or the internal endpoint)",
            registry=registry,
        )
        # Moved by every answered poll: plain numbers, exported at scrape
        # time (`_PollCounters`); a prometheus_client Counter takes a lock
        # and a label lookup per increment.
        # Answers by outcome, and the events and bytes they carried: counted
        # by `counts.responded`, the server's hook for each (`responder`).
        self.counts = PollCounts()
        registry.register(_PollCounters(self, time.time()))
        self.poll_errors = Counter(
            "eventq_poll_errors",
            "Long-polls refused, by error code (BAD_EVENT_QUEUE_ID: clients re-registering)",
            ["code"],
            registry=registry,
        )
        self.register_latency = Histogram(
            "eventq_register_latency_seconds",
            "Time to create a queue and build its initial state",
            buckets=REGISTER_BUCKETS,
            registry=registry,
        )
        self.queues_ended = Counter(
            "eventq_queues_ended",
            "Queues ended, by reason (expired: idle GC; overflow: the client stopped reading)",
            ["reason"],
            registry=registry,
        )
        self.gc_duration = Histogram(
            "eventq_gc_duration_seconds",
            "Idle-queue GC sweeps and their duration",
            buckets=GC_BUCKETS,
            registry=registry,
        )
        self.gc_collected = Counter(
            "eventq_gc_collected_queues",
            "Queues collected by the idle-queue GC",
            registry=registry,
        )
        # Known labels start at 0, so a rate() has a series before the first event.
        for outcome in ("events", "heartbeat", "displaced", "empty", "deleted"):
            self.polls[outcome] = 0
        for reason in typing.get_args(EndReason):
            self.queues_ended.labels(reason)

    def _type_label(self, event_type: str) -> str:
        if event_type in self._event_types:
            return event_type
        if len(self._event_types) >= MAX_EVENT_TYPES:
            return OTHER
        self._event_types.add(event_type)
        return event_type

    # -- Observer -------------------------------------------------------------

    def notice_delivered(self, event_type: str, report: DeliveryReport, now: float) -> None:
        self.notices.inc()
        if report.queues:
            child = self._delivered_by_type.get(event_type)
            if child is None:
                label = self._type_label(event_type)
                child = self.events_delivered.labels(label)
                if label == event_type:  # at most MAX_EVENT_TYPES of them
                    self._delivered_by_type[event_type] = child
            child.inc(report.queues)

    @property
    def polls(self) -> dict[str, int]:
        """Answers by outcome."""
        return self.counts.outcomes

    @property
    def events_sent(self) -> int:
        return self.counts.events_sent

    @property
    def response_bytes(self) -> int:
        return self.counts.response_bytes

    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: PollOutcome,
        waited_secs: float,
        now: float,
    ) -> None:
        self.counts.responded(client, items, response_bytes, outcome, waited_secs, now)

    def responder(self) -> Responder:
        return self.counts.responded

    def poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str, now: float
    ) -> None:
        self.polls["error"] = self.polls.get("error", 0) + 1
        self.poll_errors.labels(code).inc()

    def registered(self, client: ClientDescriptor, latency_secs: float, now: float) -> None:
        self.register_latency.observe(latency_secs)

    def queue_ended(
        self, client: ClientDescriptor, reason: EndReason, lifetime_secs: float, now: float
    ) -> None:
        self.queues_ended.labels(reason).inc()

    def gc_ran(self, collected: int, duration_secs: float) -> None:
        self.gc_duration.observe(duration_secs)
        if collected:
            self.gc_collected.inc(collected)


class _PollCounters(Collector):
    """The per-poll counters of `Metrics`, as Prometheus counters."""

    def __init__(self, metrics: Metrics, created: float):
        self.metrics = metrics
        self.created = created

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        polls = CounterMetricFamily(
            "eventq_polls",
            "Answered long-polls (GET /events), by how they ended",
            labels=["outcome"],
        )
        for outcome, count in list(metrics.polls.items()):
            polls.add_metric([outcome], count, created=self.created)
        yield polls
        sent = CounterMetricFamily(
            "eventq_events_sent",
            "Events sent to clients in long-poll responses (heartbeats included)",
        )
        sent.add_metric([], metrics.events_sent, created=self.created)
        yield sent
        size = CounterMetricFamily("eventq_response_bytes", "Bytes of long-poll response bodies")
        size.add_metric([], metrics.response_bytes, created=self.created)
        yield size


class ServerState(Collector):
    """What the server holds right now, read at scrape time."""

    def __init__(self, server: MetricsApi):
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        registry = server.registry
        events, size = registry.held()
        yield GaugeMetricFamily("eventq_queues", "Client event queues", value=len(registry))
        yield GaugeMetricFamily(
            "eventq_users", "Users with at least one queue", value=registry.users()
        )
        yield GaugeMetricFamily(
            "eventq_parked_requests", "Long-polls parked, waiting for events", value=registry.parked
        )
        yield GaugeMetricFamily("eventq_events_held", "Events held in all queues", value=events)
        yield GaugeMetricFamily("eventq_bytes_held", "Bytes of events held in queues", value=size)
        yield GaugeMetricFamily(
            "eventq_requests_in_flight", "HTTP requests being served", value=server.in_flight
        )
        lag = server.loop_lag.percentiles()
        loop_lag = GaugeMetricFamily(
            "eventq_loop_lag_seconds",
            "How late the IO loop runs its timers, over the last minute",
            labels=["quantile"],
        )
        loop_lag.add_metric(["0.5"], lag["p50_ms"] / 1000)
        loop_lag.add_metric(["0.99"], lag["p99_ms"] / 1000)
        loop_lag.add_metric(["1"], lag["window_max_ms"] / 1000)
        yield loop_lag
        yield GaugeMetricFamily(
            "eventq_loop_lag_max_seconds",
            "The worst IO loop lag since the server started",
            value=lag["max_ms"] / 1000,
        )
        yield GaugeMetricFamily(
            "eventq_loop_lag_own_max_seconds",
            "The last minute's longest IO loop lag less the time the loop's thread waited"
            " for a CPU (Linux): the stop the process's own work made",
            value=lag["own_window_max_ms"] / 1000,
        )
        pauses = server.gc_pauses.stats()
        gc_seconds = CounterMetricFamily(
            "eventq_gc_pause_seconds",
            "Time Python's cyclic GC stopped the process (and its IO loop), by generation",
            labels=["generation"],
        )
        gc_longest = GaugeMetricFamily(
            "eventq_gc_pause_max_seconds",
            "The longest stop of Python's cyclic GC since the server started, by generation",
            labels=["generation"],
        )
        for generation, (total, longest) in enumerate(
            zip(pauses["total_ms"], pauses["max_ms"], strict=True)
        ):
            gc_seconds.add_metric([str(generation)], total / 1000)
            gc_longest.add_metric([str(generation)], longest / 1000)
        yield gc_seconds
        yield gc_longest
        limiter = server.rate_limiter
        if limiter is not None:
            yield CounterMetricFamily(
                "eventq_rate_limited_requests",
                "Requests refused with 429 RATE_LIMIT_HIT",
                value=limiter.refused,
            )
        refused = CounterMetricFamily(
            "eventq_requests_refused",
            "Requests answered and closed before routing: 400 not HTTP, 414 request line"
            " too long, 431 headers too large",
            labels=["status"],
        )
        for status, count in sorted(server.refusals.counts.items()):
            refused.add_metric([str(status)], count)
        yield refused
        yield from self._consumer()
        yield from self._delivery_log()
        yield from self._background()

    def _background(self) -> Iterator[Metric]:
        """What `eventq db background status` shows, as read from the table
        by this process's runner every few seconds (server/database/background.py),
        whichever runner works. The label sets stay small: `update` takes
        the names of the table's rows (enqueued by migrations, or by
        `enqueue` of an update this version knows), `state` those of STATES."""
        runner = self.server.background
        if runner is None:
            return
        yield GaugeMetricFamily(
            "eventq_background_runner_working",
            "1 while this process works on background updates (it holds the runner lock)",
            value=1.0 if runner.holding_lock else 0.0,
        )
        state = GaugeMetricFamily(
            "eventq_background_update_state",
            "1 for the background update's state (as `eventq db background status` shows it;"
            " waiting: for what it depends on), 0 for the others",
            labels=["update", "state"],
        )
        families = {
            key: GaugeMetricFamily(f"eventq_background_update_{key}", doc, labels=["update"])
            for key, doc in (
                ("done", "1 once the background update has finished (this run, if recurring)"),
                ("items_done", "Items the background update has done (this run, if recurring)"),
                ("items_left", "Items the background update has left, when it can tell"),
                ("items_per_second", "Items per second while the update's batches run"),
                ("batch_size", "The size of the update's last batch"),
                ("seconds_left", "Estimated seconds until the update finishes"),
                ("failures", "Batches of the update that failed in a row"),
            )
        }
        for status in runner.status:
            for name in STATES:
                state.add_metric([status.name, name], 1.0 if status.kind == name else 0.0)
            values = {
                "done": 1.0 if status.state == "done" else 0.0,
                "items_done": status.items_done,
                "items_left": status.items_left,
                "items_per_second": status.items_per_sec,
                "batch_size": status.batch_size,
                "seconds_left": status.seconds_left,
                "failures": status.failures,
            }
            for key, value in values.items():
                if value is not None:
                    families[key].add_metric([status.name], float(value))
        yield state
        yield from families.values()

    def _consumer(self) -> Iterator[Metric]:
        consumer = self.server.consumer
        if consumer is None:
            return
        yield GaugeMetricFamily(
            "eventq_consumer_consuming",
            "1 while the RabbitMQ consumer is consuming its notify queue",
            value=1.0 if consumer.consuming.is_set() else 0.0,
        )
        for name, value, doc in (
            ("notices_consumed", consumer.processed, "Notices consumed from RabbitMQ"),
            ("notices_duplicate", consumer.duplicates, "Redelivered notices skipped"),
            ("notices_retried", consumer.retried, "Notices that failed and were retried"),
            (
                "notices_dead_lettered",
                consumer.dead_lettered,
                "Notices that failed every try and went to the dead-letter queue",
            ),
            ("broker_connections", consumer.connections, "Connections opened to RabbitMQ"),
        ):
            yield CounterMetricFamily(f"eventq_{name}", doc, value=value)

    def _delivery_log(self) -> Iterator[Metric]:
        delivery_log = self.server.delivery_log
        if delivery_log is None:
            return
        yield CounterMetricFamily(
            "eventq_delivery_log_records_written",
            "Delivery-log records written to disk",
            value=delivery_log.written,
        )
        yield CounterMetricFamily(
            "eventq_delivery_log_records_dropped",
            "Delivery-log records dropped (disk full or slow, or the buffer full)",
            value=delivery_log.dropped,
        )
        yield GaugeMetricFamily(
            "eventq_delivery_log_records_pending",
            "Delivery-log records buffered, not yet written",
            value=delivery_log.pending,
        )


# The workers' totals (server/notifications/store.py COUNTERS), each
# exported as eventq_notifications_<name>_total.
WORKER_COUNTERS = {
    "recorded": "Notifications the workers recorded, once per user and message",
    "duplicates": "Notifications published again for a user and message already recorded"
    " (another path or shard, a replay, a redelivery), or for a user gone",
    "email_sent": "Notifications sent by email (one email carries a user's batch)",
    "push_sent": "Notifications sent to the webhook (one call carries a user's batch)",
    "skipped_read": "Notifications not sent: the user had read the message by then",
    "skipped_deleted": "Notifications not sent: the message or the user was gone by then",
    "failed": "Notifications given up after the last retry of their batch",
    "retried": "Notifications whose batch failed to send and was retried",
    "dead_lettered": "Published batches of notifications the workers dead-lettered",
    "removed": "Pushed notifications the webhook was told to remove (read or deleted since)",
}
_AS_READ = (
    "; read from PostgreSQL, the same on every server (do not sum them), as of"
    " eventq_notifications_read_timestamp_seconds"
)


class NotificationState(Collector):
    """Notifications for users found away (docs/notifications.md): this
    server's own counters (server/notifications/away.py), read at scrape
    time, and the workers' figures from PostgreSQL and RabbitMQ as the
    server last read them (`NotificationFigures`, every 15 s): a scrape
    never waits on either."""

    def __init__(self, notifier: AwayNotifier, figures: NotificationFigures):
        self.notifier = notifier
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        stats = self.notifier.stats()
        enqueued = CounterMetricFamily(
            "eventq_notifications_enqueued",
            "Notifications this server enqueued for users found away, by path (delivery:"
            " away when the message arrived; gc: their last queue expired holding it)",
            labels=["path"],
        )
        for path, count in sorted(stats["enqueued"].items()):
            enqueued.add_metric([path], count)
        yield enqueued
        for name, doc in (
            ("published", "Notifications this server published to RabbitMQ"),
            ("publish_failures", "Publishes of a batch of notifications that failed (retried)"),
            ("dropped", "Notifications dropped: too many waited for RabbitMQ (logged)"),
        ):
            yield CounterMetricFamily(f"eventq_notifications_{name}", doc, value=stats[name])
        yield GaugeMetricFamily(
            "eventq_notifications_unpublished",
            "Notifications waiting in this server's memory to be published to RabbitMQ",
            value=stats["pending"],
        )
        read_at = GaugeMetricFamily(
            "eventq_notifications_read_timestamp_seconds",
            "When this server last read the workers' figures, by source (database, rabbitmq)",
            labels=["source"],
        )
        worker = self.figures.worker
        if worker is not None:
            read_at.add_metric(["database"], worker.read_at)
            for name, value in worker.counters.items():
                doc = WORKER_COUNTERS.get(name, f"The workers' counter {name}")
                yield CounterMetricFamily(
                    f"eventq_notifications_{name}", doc + _AS_READ, value=value
                )
            pending = GaugeMetricFamily(
                "eventq_notifications_pending",
                "Notifications recorded and waiting for their batch's window, by kind" + _AS_READ,
                labels=["kind"],
            )
            for kind, count in sorted(worker.pending.items()):
                pending.add_metric([kind], count)
            yield pending
        depth = self.figures.queue_depth
        if depth is not None:
            read_at.add_metric(["rabbitmq"], depth.read_at)
            for name, value, doc in (
                ("queue_messages", depth.messages, "Published batches ready in the queue"),
                ("queue_consumers", depth.consumers, "Workers consuming the queue"),
                ("dead_letters", depth.dead_letters, "Batches in the dead-letter queue"),
            ):
                yield GaugeMetricFamily(
                    f"eventq_notifications_{name}",
                    f"{doc} (RabbitMQ's notification queue), as of the last read",
                    value=value,
                )
        yield read_at


def make_metrics(server: MetricsApi) -> tuple[Metrics, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    registry.register(ServerState(server))
    # python_gc_objects_collected_total and friends: objects that only
    # Python's cyclic GC frees cost the IO loop a pause per collection.
    GCCollector(registry=registry)
    return metrics, registry


def gc_stats() -> dict[str, list[int] | int]:
    """Python's cyclic GC: per generation (young first), the collections run
    and the objects they freed; and `pending`, the tracked objects allocated
    and not freed since the last young collection."""
    per_generation = gc.get_stats()
    return {
        "collections": [each["collections"] for each in per_generation],
        "collected": [each["collected"] for each in per_generation],
        "uncollectable": [each["uncollectable"] for each in per_generation],
        "pending": gc.get_count()[0],
    }


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
