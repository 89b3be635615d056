"""What a producer needs to know, from the same environment as the server.

`EVENTQ_AMQP_URL` (RabbitMQ; empty means "no broker": notices go to the
server's internal notify endpoint at `EVENTQ_NOTIFY_URL` instead),
`EVENTQ_SHARED_SECRET` or the secret file in `EVENTQ_STATE_DIR`, and with
`EVENTQ_SHARDING` the sharding config (generation/sharding.py): each shard
then consumes `<EVENTQ_NOTIFY_QUEUE>_<shard>`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from generation import sharding

log = logging.getLogger("eventq.config")

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_NOTIFY_URL = "http://127.0.0.1:9800/api/internal/notify_tornado"
# The durable queue the (single) server consumes; sharding adds one per shard.
NOTIFY_QUEUE = "notify_tornado"
# The durable queue of notifications for users who are away: every shard
# publishes to it, the notification worker consumes it (server/notifications/).
NOTIFICATION_QUEUE = "eventq.notifications"
DEFAULT_DATABASE_URL = "host=127.0.0.1 port=5432 dbname=eventq"
_OFF = ("0", "false", "no", "off")


def default_state_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "eventq"


def sharding_path_from(env: Mapping[str, str]) -> Path | None:
    raw = env.get("EVENTQ_SHARDING", "").strip()
    return Path(raw) if raw else None


def state_dir_from(env: Mapping[str, str]) -> Path:
    return Path(env.get("EVENTQ_STATE_DIR") or default_state_dir(env))


class SecretMissing(RuntimeError):
    """Raised by `shared_secret` for a producer when neither
    `EVENTQ_SHARED_SECRET` nor the server's secret file exists."""


def shared_secret(state_dir: Path, configured: str = "", *, create: bool = False) -> str:
    """The secret internal callers present: `configured` when set, otherwise a
    random one generated once per installation into `<state_dir>/shared_secret`
    (mode 0600) by the server (`create`), which producers on the machine read."""
    if configured:
        return configured
    path = state_dir / "shared_secret"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        if not create:
            raise SecretMissing(
                f"no shared secret: set EVENTQ_SHARED_SECRET, or start the server once"
                f" so that it creates {path}"
            ) from None
    return _create_secret(path)


class SecretInvalid(ValueError):
    """Raised by `api_key_secret` for a configured value that cannot be one."""


# Shorter than this is a typo or a placeholder, not a key.
MIN_SECRET_LENGTH = 16


@functools.cache
def _api_key_secret(configured: str, state_dir: Path) -> bytes:
    if configured:
        if len(configured) < MIN_SECRET_LENGTH or configured.upper().startswith("CHANGE-ME"):
            raise SecretInvalid(
                f"EVENTQ_API_KEY_SECRET must be a random value of at least"
                f" {MIN_SECRET_LENGTH} characters (`openssl rand -hex 32`)"
            )
        return configured.encode()
    path = state_dir / "api_key_secret"
    try:
        secret = path.read_text().strip()
    except FileNotFoundError:
        secret = _create_secret(path)
        # Not silent: a second installation's secret makes every key of the
        # first one fail, so whoever created it says where it is.
        log.warning(
            "generated a new API key secret in %s: the server and every `eventq user`"
            " command must use this state directory, or all set EVENTQ_API_KEY_SECRET",
            path,
        )
    if len(secret) < MIN_SECRET_LENGTH:
        raise SecretInvalid(f"{path} holds no usable secret (empty or too short)")
    return secret.encode()


def existing_api_key_secret(env: Mapping[str, str] | None = None) -> bytes | None:
    """`api_key_secret` when it is configured or its file exists; None
    rather than generating one (for work that must use the installation's)."""
    env = os.environ if env is None else env
    configured = env.get("EVENTQ_API_KEY_SECRET", "")
    if not configured and not (state_dir_from(env) / "api_key_secret").is_file():
        return None
    return _api_key_secret(configured, state_dir_from(env))


def api_key_secret(env: Mapping[str, str] | None = None) -> bytes:
    """The installation's key for hashing API keys (HMAC-SHA256): a database
    dump alone reveals no key and allows no offline guessing.
    `EVENTQ_API_KEY_SECRET` when set (the same on every host: shards, the
    command line), otherwise `<EVENTQ_STATE_DIR>/api_key_secret`, generated
    once by whichever of the server or the command line needs it first."""
    env = os.environ if env is None else env
    return _api_key_secret(env.get("EVENTQ_API_KEY_SECRET", ""), state_dir_from(env))


def _create_secret(path: Path) -> str:
    """A new random secret in `path` (mode 0600), or the one another process
    wrote there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    # Unique per process and call: two threads may create it at once.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    try:
        # link() fails if another process created the file meanwhile: use theirs.
        os.link(tmp, path)
    except FileExistsError:
        secret = path.read_text().strip()
    finally:
        tmp.unlink()
    return secret


@dataclasses.dataclass(frozen=True)
class ProducerConfig:
    amqp_url: str = DEFAULT_AMQP_URL
    notify_url: str = DEFAULT_NOTIFY_URL
    notify_queue: str = NOTIFY_QUEUE
    state_dir: Path = dataclasses.field(default_factory=lambda: default_state_dir(os.environ))
    configured_secret: str = ""
    # Seconds a publish may wait for the broker's confirmation.
    confirm_timeout_secs: float = 10.0
    # The sharding config; None: one server process.
    sharding_path: Path | None = None
    # Where `send_event` writes the event log (generation/eventlog.py);
    # `event_log` False (EVENTQ_EVENT_LOG=0) sends notices without a position.
    database_url: str = DEFAULT_DATABASE_URL
    event_log: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProducerConfig:
        env = os.environ if env is None else env
        return cls(
            amqp_url=env.get("EVENTQ_AMQP_URL", DEFAULT_AMQP_URL),
            notify_url=env.get("EVENTQ_NOTIFY_URL") or DEFAULT_NOTIFY_URL,
            notify_queue=env.get("EVENTQ_NOTIFY_QUEUE") or NOTIFY_QUEUE,
            state_dir=state_dir_from(env),
            configured_secret=env.get("EVENTQ_SHARED_SECRET", ""),
            sharding_path=sharding_path_from(env),
            database_url=env.get("EVENTQ_DATABASE_URL") or DEFAULT_DATABASE_URL,
            event_log=env.get("EVENTQ_EVENT_LOG", "1").strip().lower() not in _OFF,
        )

    def shard_map(self) -> sharding.ShardMap | None:
        """The sharding config (re-read when the file changes), or None;
        raises `sharding.ShardingError`."""
        if self.sharding_path is None:
            return None
        return sharding.load_cached(self.sharding_path)

    def for_shard(self, shard: sharding.Shard) -> ProducerConfig:
        """Where a notice for `shard` goes: its queue, or without a broker its
        internal notify endpoint."""
        return dataclasses.replace(
            self,
            notify_queue=sharding.notify_queue(self.notify_queue, shard.name),
            notify_url=f"{shard.url}/api/internal/notify_tornado",
            sharding_path=None,
        )

    def secret(self) -> str:
        return shared_secret(self.state_dir, self.configured_secret)
