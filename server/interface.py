"""What the HTTP layer (server/handlers/, server/routes.py,
server/observability/metrics.py) may use of the server: `Protocol`s that
`server.app.EventServer` satisfies structurally, one per role. Every handler
sees `HandlerApi` (authentication, limits, shutdown); each kind of handler
sees its role's members besides, and no others: the domain endpoints
`DomainApi`, the long poll `PollApi`, register `RegisterApi`, the internal
endpoints `InternalApi`, the pages `PagesApi`, the metrics `MetricsApi`.
`ServerApi` is all of them, for the routes that build every handler.

It lives at the bottom of server/'s rooms so that imports run one way:
handlers and routes import this module, app imports them and this module, and
this module imports the types it names only for the type checker, never at
run time (tests/test_layout.py checks both). A member belongs here only while
one of those modules uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    # Types only: this module sits at the bottom of server/'s rooms and names
    # the types of the rooms above it (tests/test_layout.py, ROOMS).
    from prometheus_client import CollectorRegistry

    from generation.notice import Notice
    from queues.client import ClientDescriptor
    from queues.event_queue import Item
    from queues.registry import DeliveryReport, QueueRegistry
    from server.config import Settings
    from server.database.background import Runner
    from server.database.db import Database
    from server.delivery.consumer import NoticeConsumer
    from server.delivery.eventlog import EventLogReader
    from server.delivery.longpoll import AnswerSlices, Heartbeats
    from server.http.auth import Authenticator
    from server.http.httpserver import Refusals
    from server.http.ratelimit import RateLimiter
    from server.http.sessions import SessionSigner
    from server.observability.deliverylog import DeliveryLog
    from server.observability.looplag import GcPauses, LoopLagMonitor


class HandlerApi(Protocol):
    """What every request handler uses of the server: settings, the
    registry, authentication and its limits, shutdown, the clock. Every
    member is used on the IO loop only. The attributes are read-only here:
    the server changes them, the HTTP layer reads them."""

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> QueueRegistry: ...

    @property
    def auth(self) -> Authenticator: ...

    @property
    def sessions(self) -> SessionSigner:
        """Signs and checks browser sessions (server/http/sessions.py)."""

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """Requests per user; None when rate limiting is off."""

    @property
    def auth_failures(self) -> RateLimiter | None:
        """Failed authentications per address; None when not limited."""

    @property
    def shared_secret(self) -> str:
        """What internal callers and other shards prove themselves with."""

    @property
    def stopping(self) -> bool:
        """True once shutdown has begun: new requests are refused."""

    def clock(self) -> float:
        """The registry's clock: seconds, never going back."""

    def request_started(self) -> None:
        """Called once per request as it starts; `request_finished` once as it
        ends, whatever the outcome (shutdown waits for every one)."""

    def request_finished(self) -> None: ...


class DomainApi(HandlerApi, Protocol):
    """The domain's endpoints (messages, channels, users, sessions): the
    database, and where their actions' events go."""

    @property
    def db(self) -> Database: ...

    async def sink(self, notice: Notice) -> None:
        """Where this process's own actions send their committed events."""


class QueueMaking(HandlerApi, Protocol):
    """Making a queue (register, and the implicit register of a poll with
    no queue)."""

    def observe_registered(self, client: ClientDescriptor, latency_secs: float) -> None: ...

    def journal_queue(self, client: ClientDescriptor) -> None:
        """A queue just registered, to be rebuilt after a crash before the
        next checkpoint has it."""


class DeliveredPositions(Protocol):
    """What the long poll reads of the event log's reader
    (server/delivery/eventlog.py `EventLogReader`): how far it has delivered."""

    @property
    def position(self) -> int: ...

    @property
    def handed(self) -> int: ...


class PollApi(QueueMaking, Protocol):
    """The long poll (server/handlers/longpoll_flow.py, both paths)."""

    @property
    def eventlog(self) -> DeliveredPositions:
        """Positioned notices in position order (server/delivery/eventlog.py)."""
        ...

    @property
    def poll_paths(self) -> dict[str, int]:
        """Polls of existing queues served by each path ("lean", "full"):
        counted by the handlers, shown in stats."""

    @property
    def answer_slices(self) -> AnswerSlices:
        """Where a woken parked request waits for its answer's turn."""

    @property
    def heartbeats(self) -> Heartbeats:
        """The heartbeat deadlines of parked requests: `start` when parking,
        `cancel` when answered."""

    def observe_response(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: str,
        waited_secs: float,
    ) -> None: ...

    def observe_poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str
    ) -> None: ...


class RegisterApi(QueueMaking, Protocol):
    """`POST /register`: the state from the database, or a resume from the
    event log (server/durability/resume.py)."""

    @property
    def db(self) -> Database: ...

    @property
    def eventlog(self) -> EventLogReader: ...

    @property
    def server_generation(self) -> int:
        """Identifies this run of the server to clients."""

    def record_floor(self, user_id: int, position: int) -> None:
        """A register (with state) gave `user_id` the stream position
        `position`: their `resume_from` may not go below the lowest."""

    async def stream_floor(self, user_id: int) -> int | None:
        """The lowest stream position registers gave `user_id` (None: none)."""


class InternalApi(HandlerApi, Protocol):
    """The internal endpoints: notices from producers, the stats."""

    def deliver(self, notice: Notice, encoded_size: int) -> DeliveryReport:
        """Deliver a validated notice whose wire form is `encoded_size` bytes.
        Raises `BadNotice` for an event no queue could hold."""

    def stats(self) -> dict[str, Any]:
        """The internal stats body (the stats endpoint adds a user's queues)."""

    @property
    def notify_paths(self) -> dict[str, int]:
        """Notices posted to the notify endpoint by the path that served them
        ("lean", "full"): counted by the handlers, shown in stats."""


class MetricsApi(HandlerApi, Protocol):
    """`/metrics` (server/observability/metrics.py reads the gauges at
    scrape time)."""

    @property
    def metrics_registry(self) -> CollectorRegistry: ...

    @property
    def in_flight(self) -> int:
        """Requests being served, parked long-polls included."""

    @property
    def loop_lag(self) -> LoopLagMonitor: ...

    @property
    def gc_pauses(self) -> GcPauses: ...

    @property
    def refusals(self) -> Refusals: ...

    @property
    def background(self) -> Runner | None:
        """The background updates' runner, when this process runs them."""

    @property
    def consumer(self) -> NoticeConsumer | None:
        """None when the server consumes no RabbitMQ queue."""

    @property
    def delivery_log(self) -> DeliveryLog | None:
        """None when there is no delivery log (no EVENTQ_LOG_DIR)."""


class Counters(Protocol):
    """What the operator page reads of the observers' counters
    (server/observability/metrics.py's `Metrics`)."""

    @property
    def events_sent(self) -> int: ...

    @property
    def polls(self) -> dict[str, int]:
        """Long polls answered, by outcome."""


class PagesApi(InternalApi, Protocol):
    """The operator page's figures: the stats, counters, the stream, the
    background updates."""

    @property
    def metrics(self) -> Counters:
        """The counters the observers keep (server/observability/metrics.py)."""

    @property
    def eventlog(self) -> EventLogReader: ...

    @property
    def background(self) -> Runner | None: ...


class ServerApi(DomainApi, PollApi, RegisterApi, PagesApi, MetricsApi, Protocol):
    """One server process, every role: what the routes hand each handler."""

    @property
    def eventlog(self) -> EventLogReader: ...
