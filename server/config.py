"""Configuration from environment variables, with working local defaults.

Every timing of docs/architecture.md's "Numbers and their reasons" has its own
variable (fractional values allowed) so that tests and operators can shorten it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from generation import sharding
from generation.config import (
    DEFAULT_AMQP_URL,
    NOTIFICATION_QUEUE,
    NOTIFY_QUEUE,
    ProducerConfig,
    default_state_dir,
    shared_secret,
)
from queues.registry import QueueLimits

_LIMITS = QueueLimits()
# The realm `eventq demo` creates (server/admin/demo_commands.py) and whose
# users the development login lists (server/handlers/session.py).
DEMO_REALM = "demo"
EVENT_LOOPS = ("uvloop", "asyncio")
HTTP_SERVERS = ("eventq", "tornado")
# A shard's name goes into file names (saved queues, delivery log).
_SHARD_NAME = re.compile(r"[A-Za-z0-9_-]+")


class ConfigError(ValueError):
    """Raised by `Settings.from_env` for a variable that cannot be used; the
    message names the variable and says what it must be."""


def env_number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    """The number in variable `name` (unset or empty: `default`); `ConfigError`
    if it is not a number or is below `minimum`."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not value >= minimum or value == float("inf"):
        raise ConfigError(f"{name} must be a finite number >= {minimum}, got {raw!r}")
    return value


def _integer(
    env: Mapping[str, str], name: str, default: int, *, minimum: int = 1, maximum: int | None = None
) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {raw!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {raw!r}")
    return value


def _background_tasks(
    env: Mapping[str, str], shard_map: sharding.ShardMap | None, shard: str
) -> bool:
    raw = env.get("EVENTQ_BACKGROUND_TASKS", "").strip().lower()
    if raw in ("on", "1", "true", "yes"):
        return True
    if raw in ("off", "0", "false", "no"):
        return False
    if raw not in ("", "auto"):
        raise ConfigError(f"EVENTQ_BACKGROUND_TASKS must be on, off or auto, got {raw!r}")
    # auto: a lone server runs them; of several shards, the one named.
    return shard_map is None or not shard or shard == shard_map.background_tasks_on


# Read by earlier versions only: name -> what to do instead.
_RETIRED = {
    "EVENTQ_EVENT_LOG_PRUNE_BATCH": "the event log is pruned by a background update whose"
    " batches follow its controller (docs/background-updates.md)",
}


def retired_advice(name: str) -> str:
    return _RETIRED[name]


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "off", "false", "no"):
        return False
    if raw in ("1", "on", "true", "yes"):
        return True
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")


def _operator_token(env: Mapping[str, str]) -> str:
    token = env.get("EVENTQ_OPERATOR_TOKEN", "").strip()
    if token and len(token) < 16:
        raise ConfigError(
            "EVENTQ_OPERATOR_TOKEN must be at least 16 random characters (`openssl rand -hex 16`)"
        )
    return token


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _modules(env: Mapping[str, str]) -> tuple[str, ...]:
    names = tuple(n.strip() for n in env.get("EVENTQ_MODULES", "").split(",") if n.strip())
    for name in names:
        if not _MODULE_NAME.fullmatch(name):
            raise ConfigError(f"EVENTQ_MODULES must be dotted module names, got {name!r}")
    return names


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the server and the command line read from the environment."""

    database_url: str = "host=127.0.0.1 port=5432 dbname=eventq"
    # Empty: no broker; notices arrive only through the internal endpoint.
    amqp_url: str = DEFAULT_AMQP_URL
    # Empty: read (or create once) `<state_dir>/shared_secret`.
    shared_secret: str = ""
    state_dir: Path = dataclasses.field(default_factory=lambda: default_state_dir(os.environ))
    log_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 9800
    # Heartbeat: 45 s + 0-10 s jitter after a request parks. NAT boxes drop idle
    # HTTP connections at 60 s; jitter spreads the wake-ups of clients that
    # parked together.
    heartbeat_secs: float = 45.0
    heartbeat_jitter_secs: float = 10.0
    # Idle garbage collection: 600 s default lifespan, 7 days at most, swept
    # every 60 s (docs/architecture.md, "Numbers and their reasons").
    queue_idle_timeout_secs: float = 600.0
    queue_max_lifespan_secs: float = 7 * 24 * 3600.0
    gc_interval_secs: float = 60.0
    # Queues are checkpointed this often (0: never) for recovery after a crash;
    # a gap in the event log is waited on at most gap_timeout_secs.
    checkpoint_secs: float = 5.0
    gap_timeout_secs: float = 5.0
    # The event log keeps events this long and about this many bytes, pruned
    # every log_prune_secs (0: never) by the background updates' runner.
    log_retention_hours: float = 24.0
    log_retention_bytes: int = 1 << 30
    log_prune_secs: float = 60.0
    # Background updates (server/database/background.py): whether this process runs
    # them (a lone server does; of several shards, the one the sharding
    # config names), the default controller's target per batch and pause
    # before each, how often an idle runner looks for work, and the modules
    # whose setup(api) may register controller callbacks.
    background_tasks: bool = True
    background_target_ms: int = 100
    background_sleep_ms: int = 1000
    background_idle_secs: float = 5.0
    # Whether this process sends due scheduled messages (server/scheduling/):
    # every shard may, each message is claimed by one.
    scheduled_messages: bool = True
    # Notifications for users who are away (server/notifications/,
    # docs/notifications.md): on when there is a broker (EVENTQ_NOTIFICATIONS=0
    # turns them off), published to this durable queue; a user's client is
    # present for this long after its last request (140 s: Zulip's presence
    # idle threshold).
    notifications: bool = True
    notification_queue: str = NOTIFICATION_QUEUE
    presence_window_secs: float = 140.0
    modules: tuple[str, ...] = ()
    # Browser pages (server/handlers/pages.py): the demo page and its
    # password-less login (only with the demo realm, as deploy/run.sh runs
    # it), how long a browser session lasts, the token that lets someone
    # outside the internal networks see the operator page, and where the
    # analytics jobs write (for the operator page's link to the report).
    demo: bool = False
    session_secs: float = 14 * 24 * 3600.0
    operator_token: str = ""
    analytics_dir: Path | None = None
    # Variables of earlier versions that are set but no longer read, for a
    # warning at start.
    ignored: tuple[str, ...] = ()
    # Advertised to clients as their long-poll timeout: longer than the
    # heartbeat, so a live server never times a client out.
    longpoll_timeout_secs: float = 90.0
    queue_max_events: int = _LIMITS.max_events
    # Events one `resume_from` may replay (at most a queue's worth): past it
    # the client registers afresh, which costs less (tests/benchmarks/resume.py:
    # a register with the whole state costs the server about what replaying
    # 500-700 events does, 9,000 events twenty times that).
    resume_max_events: int = 1000
    queue_max_bytes: int = _LIMITS.max_bytes
    max_queues_per_user: int = _LIMITS.max_queues_per_user
    # Requests to the public API are small (the largest is a register with a
    # long narrow); internal notices can carry thousands of users.
    max_request_bytes: int = 1024 * 1024
    max_internal_request_bytes: int = 64 * 1024 * 1024
    # A request head (request line and headers) past this gets 414 or 431
    # (server/http/httpserver.py). 64 KiB is Tornado's default; nginx's is 32 KiB
    # (4 buffers of 8 KiB), and no Zulip client sends more than a few KiB.
    max_header_bytes: int = 64 * 1024
    # An authenticated user is trusted this long before the database is asked
    # again: a deactivation takes effect within this time.
    auth_cache_secs: float = 60.0
    # Zulip's api_by_user: requests per window per user (0: no limit).
    rate_limit_requests: int = 200
    rate_limit_window_secs: float = 60.0
    # Failed authentications per client address per window (0: no limit):
    # each costs a database query.
    auth_failure_limit: int = 50
    db_pool_min: int = 1
    db_pool_max: int = 10
    # How long a shutdown waits for requests in progress (register) to finish.
    shutdown_grace_secs: float = 10.0
    # The durable RabbitMQ queue this process consumes.
    notify_queue: str = NOTIFY_QUEUE
    # Names this process's files when several shards share a state directory;
    # empty: the single shard, whose saved queues keep Zulip's file names
    # (`shard_name` is then "default").
    shard: str = ""
    # With several shards (EVENTQ_SHARDING): the config every shard and
    # producer shares; `shard` then names this process in it, and its host,
    # port and notify queue come from it.
    sharding: sharding.ShardMap | None = None
    # What `send_event` from this process (its own actions) is configured with.
    producer: ProducerConfig = dataclasses.field(default_factory=ProducerConfig)
    # The delivery log (server/observability/deliverylog.py), when `log_dir` is set. Flush:
    # a crash loses at most this much; roll: how old the newest data the jobs
    # can read may be (logfiles.ROLL_SECS: an hour, one Parquet file per shard
    # and hour; repeated here so that reading settings does not import
    # pyarrow); retention in days, 0 keeps everything; pending: records
    # buffered (about 250 bytes each in memory) before new ones are dropped.
    log_flush_secs: float = 1.0
    log_roll_secs: float = 3600.0
    log_retention_days: int = 30
    log_max_pending: int = 500_000
    # The asyncio event loop `eventq serve` runs on: "uvloop" (libuv, the
    # default) or "asyncio" (the standard library's).
    event_loop: str = "uvloop"
    # What serves HTTP connections: "eventq" (server/http/http1.py: the common
    # requests on eventq's own connections, the others handed to Tornado's)
    # or "tornado" (Tornado's HTTP server for every connection).
    http_server: str = "eventq"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read `EVENTQ_*` variables; unset or empty ones take the defaults."""
        env = os.environ if env is None else env
        # What producers read too (broker, queue, state directory, secret).
        producer = ProducerConfig.from_env(env)
        heartbeat = env_number(env, "EVENTQ_HEARTBEAT_SECS", 45.0, minimum=0.001)
        # The jitter scales with the heartbeat unless set: 10 s at 45 s.
        jitter = env_number(env, "EVENTQ_HEARTBEAT_JITTER_SECS", heartbeat * 10.0 / 45.0)
        idle = env_number(env, "EVENTQ_QUEUE_IDLE_TIMEOUT_SECS", 600.0, minimum=0.001)
        max_lifespan = env_number(env, "EVENTQ_QUEUE_MAX_LIFESPAN_SECS", 7 * 24 * 3600.0)
        if max_lifespan < idle:
            raise ConfigError(
                "EVENTQ_QUEUE_MAX_LIFESPAN_SECS must be at least EVENTQ_QUEUE_IDLE_TIMEOUT_SECS"
            )
        # The advertised client timeout must outlast a heartbeat period, or
        # clients would time out waiting for one: 90 s by default, longer
        # when the heartbeat is set longer.
        longest_wait = heartbeat + jitter
        longpoll = env_number(
            env, "EVENTQ_LONGPOLL_TIMEOUT_SECS", max(90.0, longest_wait + 30.0), minimum=1
        )
        if longpoll <= longest_wait:
            raise ConfigError(
                f"EVENTQ_LONGPOLL_TIMEOUT_SECS ({longpoll:g}) must be longer than the longest"
                f" heartbeat wait ({longest_wait:g} s), or clients time out on idle polls"
            )
        pool_min = _integer(env, "EVENTQ_DB_POOL_MIN", cls.db_pool_min, minimum=0)
        pool_max = _integer(env, "EVENTQ_DB_POOL_MAX", cls.db_pool_max)
        if pool_min > pool_max:
            raise ConfigError("EVENTQ_DB_POOL_MIN must not be larger than EVENTQ_DB_POOL_MAX")
        log_dir = env.get("EVENTQ_LOG_DIR", "").strip()
        event_loop = env.get("EVENTQ_EVENT_LOOP", "").strip() or cls.event_loop
        if event_loop not in EVENT_LOOPS:
            raise ConfigError(
                f"EVENTQ_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)}, got {event_loop!r}"
            )
        http_server = env.get("EVENTQ_HTTP_SERVER", "").strip() or cls.http_server
        if http_server not in HTTP_SERVERS:
            raise ConfigError(
                f"EVENTQ_HTTP_SERVER must be one of {', '.join(HTTP_SERVERS)}, got {http_server!r}"
            )
        shard = env.get("EVENTQ_SHARD", "").strip()
        if shard and not _SHARD_NAME.fullmatch(shard):
            raise ConfigError(
                f"EVENTQ_SHARD must be letters, digits, '_' and '-' (it names files), got {shard!r}"
            )
        host = env.get("EVENTQ_HOST") or cls.host
        port = _integer(env, "EVENTQ_PORT", cls.port)
        notify_queue = producer.notify_queue
        shard_map = None
        if producer.sharding_path is not None:
            try:
                shard_map = producer.shard_map()
            except sharding.ShardingError as exc:
                raise ConfigError(f"EVENTQ_SHARDING: {exc}") from None
            assert shard_map is not None
            # Empty: a command that is not a shard (send-event, sharding
            # nginx, ...); `eventq serve` refuses to start without one.
            if shard and shard not in shard_map.shards:
                raise ConfigError(
                    f"EVENTQ_SHARD must name this process's shard in {shard_map.source}"
                    f" (one of {', '.join(shard_map.shards)}), got {shard!r}"
                )
        if shard_map is not None and shard:
            own = shard_map.shards[shard]
            # The config says where the shard listens; a different port or
            # host in the environment is a mistake, not an override.
            for name, value, wanted in (
                ("EVENTQ_PORT", env.get("EVENTQ_PORT", "").strip(), str(own.port)),
                ("EVENTQ_HOST", env.get("EVENTQ_HOST", "").strip(), own.host),
            ):
                if value and value != wanted:
                    raise ConfigError(
                        f"{name}={value} disagrees with {shard_map.source}, where shard"
                        f" {shard!r} listens on {own.address}; unset it"
                    )
            host, port = own.host, own.port
            notify_queue = sharding.notify_queue(producer.notify_queue, shard)
        return cls(
            database_url=env.get("EVENTQ_DATABASE_URL") or cls.database_url,
            amqp_url=producer.amqp_url,
            shared_secret=producer.configured_secret,
            state_dir=producer.state_dir,
            log_dir=Path(log_dir) if log_dir else None,
            host=host,
            port=port,
            heartbeat_secs=heartbeat,
            heartbeat_jitter_secs=jitter,
            queue_idle_timeout_secs=idle,
            queue_max_lifespan_secs=max_lifespan,
            gc_interval_secs=env_number(env, "EVENTQ_GC_INTERVAL_SECS", 60.0, minimum=0.001),
            checkpoint_secs=env_number(env, "EVENTQ_CHECKPOINT_SECS", 5.0),
            gap_timeout_secs=env_number(env, "EVENTQ_GAP_TIMEOUT_SECS", 5.0, minimum=0.001),
            log_retention_hours=env_number(
                env, "EVENTQ_EVENT_LOG_RETENTION_HOURS", 24.0, minimum=0.0001
            ),
            log_retention_bytes=_integer(
                env, "EVENTQ_EVENT_LOG_RETENTION_BYTES", cls.log_retention_bytes, minimum=1
            ),
            log_prune_secs=env_number(env, "EVENTQ_EVENT_LOG_PRUNE_SECS", 60.0),
            background_tasks=_background_tasks(env, shard_map, shard),
            background_target_ms=_integer(
                env, "EVENTQ_BACKGROUND_TARGET_MS", cls.background_target_ms
            ),
            background_sleep_ms=_integer(
                env, "EVENTQ_BACKGROUND_SLEEP_MS", cls.background_sleep_ms, minimum=0
            ),
            background_idle_secs=env_number(
                env, "EVENTQ_BACKGROUND_IDLE_SECS", cls.background_idle_secs, minimum=0.01
            ),
            scheduled_messages=_flag(env, "EVENTQ_SCHEDULED_MESSAGES")
            if env.get("EVENTQ_SCHEDULED_MESSAGES", "").strip()
            else True,
            notifications=_flag(env, "EVENTQ_NOTIFICATIONS")
            if env.get("EVENTQ_NOTIFICATIONS", "").strip()
            else True,
            notification_queue=env.get("EVENTQ_NOTIFICATION_QUEUE", "").strip()
            or NOTIFICATION_QUEUE,
            presence_window_secs=env_number(
                env, "EVENTQ_PRESENCE_WINDOW_SECS", cls.presence_window_secs, minimum=0.001
            ),
            modules=_modules(env),
            ignored=tuple(name for name in _RETIRED if env.get(name, "").strip()),
            demo=_flag(env, "EVENTQ_DEMO"),
            session_secs=env_number(env, "EVENTQ_SESSION_SECS", cls.session_secs, minimum=1),
            operator_token=_operator_token(env),
            analytics_dir=Path(analytics)
            if (analytics := env.get("EVENTQ_ANALYTICS_DIR", "").strip())
            else None,
            longpoll_timeout_secs=longpoll,
            queue_max_events=_integer(env, "EVENTQ_QUEUE_MAX_EVENTS", cls.queue_max_events),
            resume_max_events=_integer(env, "EVENTQ_RESUME_MAX_EVENTS", cls.resume_max_events),
            queue_max_bytes=_integer(env, "EVENTQ_QUEUE_MAX_BYTES", cls.queue_max_bytes),
            max_queues_per_user=_integer(
                env, "EVENTQ_MAX_QUEUES_PER_USER", cls.max_queues_per_user
            ),
            max_request_bytes=_integer(env, "EVENTQ_MAX_REQUEST_BYTES", cls.max_request_bytes),
            max_internal_request_bytes=_integer(
                env, "EVENTQ_MAX_INTERNAL_REQUEST_BYTES", cls.max_internal_request_bytes
            ),
            max_header_bytes=_integer(
                env,
                "EVENTQ_MAX_HEADER_BYTES",
                cls.max_header_bytes,
                minimum=1024,
                # Near Tornado's read buffer (100 MiB) a head past the limit
                # fills the buffer first, and is closed without an answer.
                maximum=2**20,
            ),
            auth_cache_secs=env_number(env, "EVENTQ_AUTH_CACHE_SECS", 60.0),
            rate_limit_requests=_integer(
                env, "EVENTQ_RATE_LIMIT_REQUESTS", cls.rate_limit_requests, minimum=0
            ),
            auth_failure_limit=_integer(
                env, "EVENTQ_AUTH_FAILURE_LIMIT", cls.auth_failure_limit, minimum=0
            ),
            rate_limit_window_secs=env_number(
                env, "EVENTQ_RATE_LIMIT_WINDOW_SECS", cls.rate_limit_window_secs, minimum=0.001
            ),
            db_pool_min=pool_min,
            db_pool_max=pool_max,
            shutdown_grace_secs=env_number(env, "EVENTQ_SHUTDOWN_GRACE_SECS", 10.0),
            notify_queue=notify_queue,
            shard=shard,
            sharding=shard_map,
            producer=producer,
            log_flush_secs=env_number(env, "EVENTQ_LOG_FLUSH_SECS", 1.0, minimum=0.001),
            log_roll_secs=env_number(env, "EVENTQ_LOG_ROLL_SECS", 3600.0, minimum=0.001),
            log_retention_days=_integer(env, "EVENTQ_LOG_RETENTION_DAYS", 30, minimum=0),
            log_max_pending=_integer(env, "EVENTQ_LOG_MAX_PENDING", cls.log_max_pending),
            event_loop=event_loop,
            http_server=http_server,
        )

    @property
    def queue_limits(self) -> QueueLimits:
        return QueueLimits(
            default_lifespan_secs=self.queue_idle_timeout_secs,
            max_lifespan_secs=self.queue_max_lifespan_secs,
            max_events=self.queue_max_events,
            max_bytes=self.queue_max_bytes,
            max_queues_per_user=self.max_queues_per_user,
        )

    @property
    def shard_name(self) -> str:
        """This shard's name in the delivery log: EVENTQ_SHARD, or "default"."""
        return self.shard or "default"

    def load_shared_secret(self) -> str:
        """See `generation.config.shared_secret`; the server creates the file
        when there is none."""
        return shared_secret(self.state_dir, self.shared_secret, create=True)
