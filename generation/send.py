"""`send_event`: how a backend service hands an event to eventq.

    send_event(realm_id, {"type": "task_done", "task": 7}, [user_id, ...])

The notice is validated and encoded before anything touches the broker; bad
input raises `BadNotice` (a ValueError). It is then published to the durable
notify queue with publisher confirms, and `send_event` returns once RabbitMQ
has it, or raises `PublishError`. With `EVENTQ_AMQP_URL` empty it is
POSTed to the server's internal notify endpoint instead (a developer machine
without RabbitMQ).

The event is first written to the event log (generation/eventlog.py) in a
transaction of its own, which gives it a position; EVENTQ_EVENT_LOG=0 skips
that. A logged notice is published transient: the log is the source of
truth, and the server reads a notice the broker lost from the log's tail;
without the log the notice is persistent. Inside a database transaction,
use `send_event_on_commit` within `transaction(conn)`: the event is logged in
that transaction and the notice goes out after the commit, never on rollback.
"""

from __future__ import annotations

import dataclasses
import threading
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from generation import eventlog, publisher
from generation.config import ProducerConfig, SecretMissing
from generation.errors import BadNotice
from generation.notice import Notice, encode_notice, make_notice
from generation.publisher import PublishError
from generation.sharding import ShardingError, reach_of

__all__ = [
    "BadNotice",
    "PublishError",
    "close_for_thread",
    "prepare_notice",
    "publish_notice",
    "send_event",
    "send_event_on_commit",
    "transaction",
]


def prepare_notice(
    realm_id: int, event: Mapping[str, Any], users: Sequence[object], notify: object = None
) -> tuple[Notice, bytes]:
    """Validate and encode; raises `BadNotice` saying what is wrong."""
    if not isinstance(realm_id, int) or isinstance(realm_id, bool):
        raise BadNotice("realm_id is not an integer")
    notice = make_notice(event, users, realm_id, notify)
    return notice, encode_notice(notice)


def publish_encoded(
    body: bytes, config: ProducerConfig, notice_id: str | None = None, *, logged: bool = False
) -> None:
    """Hand an encoded notice to the broker, or to the server without one."""
    if config.amqp_url:
        publisher.for_thread(config.amqp_url, config.confirm_timeout_secs).publish(
            config.notify_queue, body, notice_id, persistent=not logged
        )
        return
    try:
        secret = config.secret()
    except SecretMissing as exc:
        raise PublishError(str(exc)) from None
    as_json = secret.isascii() and secret.isprintable() and secret == secret.strip()
    try:
        try:
            _post(config, *(_json_post if as_json else _form_post)(secret, body))
        except urllib.error.HTTPError as exc:
            if not as_json or exc.code != 415:
                raise
            # A server from before notices as JSON (during an upgrade): the form.
            exc.close()
            _post(config, *_form_post(secret, body))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise PublishError(f"the server refused the notice ({exc.code}): {detail}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PublishError(f"the server at {config.notify_url} is unreachable: {exc}") from exc


def _json_post(secret: str, body: bytes) -> tuple[bytes, dict[str, str]]:
    """The notice as the body, as the broker carries it (the server need not
    decode it out of a form), the secret in a header."""
    return body, {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"}


def _form_post(secret: str, body: bytes) -> tuple[bytes, dict[str, str]]:
    """Zulip's form: for a configured secret no header can carry, or a server
    that takes only forms."""
    form = urllib.parse.urlencode({"secret": secret, "data": body.decode()}).encode()
    return form, {"Content-Type": "application/x-www-form-urlencoded"}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """The notify endpoint never redirects: a redirect is refused (an
    HTTPError), not followed with the secret's header to another address."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _post(config: ProducerConfig, data: bytes, headers: dict[str, str]) -> None:
    request = urllib.request.Request(  # noqa: S310
        config.notify_url, data=data, method="POST", headers=headers
    )
    with _opener.open(request, timeout=config.confirm_timeout_secs) as response:
        response.read()


def publish_notice(
    notice: Notice, body: bytes, config: ProducerConfig, notice_id: str | None = None
) -> None:
    """Publish a prepared notice (`body` is its wire form). With a sharding
    config, one notice per shard that holds some of its users (every shard of
    the realm for a public channel message, every shard for a deactivation),
    each to that shard's queue; a shard that cannot be reached does not stop
    the others, and `PublishError` then names it (retrying the whole notice
    would repeat it on the shards that got it)."""
    try:
        shard_map = config.shard_map()
    except ShardingError as exc:
        raise PublishError(str(exc)) from None
    if shard_map is None:
        publish_encoded(body, config, notice_id, logged=notice.position is not None)
        return
    parts = shard_map.split(notice.realm_id, notice.users, reach_of(notice.event))
    failed: list[str] = []
    for name, users in parts.items():
        part = body if len(parts) == 1 else encode_notice(notice.for_users(users))
        try:
            publish_encoded(
                part,
                config.for_shard(shard_map.shards[name]),
                notice_id,
                logged=notice.position is not None,
            )
        except PublishError as exc:
            failed.append(f"shard {name}: {exc}")
    if failed:
        raise PublishError(
            f"{len(failed)} of {len(parts)} shards did not get the notice"
            f" (the others did): {'; '.join(failed)}"
        )


def send_event(
    realm_id: int,
    event: Mapping[str, Any],
    users: Sequence[object],
    *,
    config: ProducerConfig | None = None,
    notice_id: str | None = None,
    notify: Mapping[str, Sequence[int]] | None = None,
) -> None:
    """Deliver `event` to the queues of `users` (ids, or dicts with "id" and
    that user's own data, such as `flags`). Choosing the users is the caller's
    job: sending a private event to a whole realm is a security bug.

    `notify`, for a message event only: `{"email": [ids], "push": [ids]}`,
    the recipients for whom the message is worth a notification if they are
    away (docs/notifications.md); the server decides who is.

    `notice_id` makes a retry safe: a caller that got `PublishError` and sends
    the same notice again with the same id has it delivered at most once, even
    if the broker did keep the first try (through RabbitMQ; the consumer
    remembers recent ids)."""
    if notice_id is not None and not (isinstance(notice_id, str) and 0 < len(notice_id) <= 200):
        raise BadNotice("notice_id must be a string of 1 to 200 characters")
    notice, body = prepare_notice(realm_id, event, users, notify)
    resolved = config or ProducerConfig.from_env()
    if resolved.event_log:
        position = _log_alone(resolved.database_url, notice, body, notice_id)
        notice = dataclasses.replace(notice, position=position)
        body = eventlog.with_position(body, position)
    publish_notice(notice, body, resolved, notice_id)


_local = threading.local()


def close_for_thread() -> None:
    """Close this thread's broker and event-log connections (a worker thread
    that ends)."""
    publisher.close_for_thread()
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        conn.close()


def _log_alone(database_url: str, notice: Notice, body: bytes, notice_id: str | None) -> int:
    """Write one event to the log in a transaction of its own, on this
    thread's connection (opened once, reopened once after a failure). With a
    `notice_id`, a retry finds its first try's row."""
    for attempt in (1, 2):
        conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
        try:
            if conn is None or conn.closed or getattr(_local, "url", None) != database_url:
                if conn is not None:
                    conn.close()
                conn = psycopg.connect(
                    database_url,
                    autocommit=True,
                    application_name="eventq-send",
                    connect_timeout=10,
                )
                _local.conn, _local.url = conn, database_url
            if notice_id is not None:
                return eventlog.write_once(conn, (notice, body), notice_id)
            return eventlog.write(conn, [(notice, body)])[0]
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            _local.conn = None
            if attempt == 2 or isinstance(exc, psycopg.errors.UndefinedTable):
                raise PublishError(
                    f"the event log could not be written ({exc}); is the database at"
                    f" {database_url!r} migrated (`eventq db migrate`)? EVENTQ_EVENT_LOG=0"
                    " sends without it"
                ) from exc
    raise AssertionError("unreachable")


# connection -> stack of pending notice lists, one per open `transaction` block.
_pending: weakref.WeakKeyDictionary[psycopg.Connection[Any], list[list[_Pending]]]
_pending = weakref.WeakKeyDictionary()


@dataclasses.dataclass(slots=True)
class _Pending:
    notice: Notice
    body: bytes
    config: ProducerConfig


@contextmanager
def transaction(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A psycopg transaction that writes the `send_event_on_commit` events to
    the event log just before it commits (so each exists exactly when its
    change does) and publishes them after. Nested blocks are savepoints: the
    events of a savepoint that rolls back are dropped, the others wait for the
    outermost commit.

    The outermost block must start outside any transaction (so that leaving it
    really commits).
    """
    stack = _pending.setdefault(conn, [])
    if not stack and conn.info.transaction_status != TransactionStatus.IDLE:
        raise RuntimeError(
            "eventq transaction() must start outside any transaction: leaving it must commit"
        )
    stack.append([])
    try:
        with conn.transaction():
            yield conn
            if len(stack) == 1:
                # Last in the transaction, after the change's own writes.
                _log_pending(conn, stack[0])
    except BaseException:
        stack.pop()
        raise
    pending = stack.pop()
    if stack:
        stack[-1].extend(pending)
        return
    errors: list[Exception] = []
    for item in pending:
        try:
            publish_notice(item.notice, item.body, item.config)
        except Exception as exc:  # publish the others; report the first below
            errors.append(exc)
    if errors:
        raise errors[0]


def _log_pending(conn: psycopg.Connection[Any], pending: list[_Pending]) -> None:
    logged = [item for item in pending if item.config.event_log]
    positions = eventlog.write(conn, [(item.notice, item.body) for item in logged])
    for item, position in zip(logged, positions, strict=True):
        item.notice = dataclasses.replace(item.notice, position=position)
        item.body = eventlog.with_position(item.body, position)


def send_event_on_commit(
    conn: psycopg.Connection[Any],
    realm_id: int,
    event: Mapping[str, Any],
    users: Sequence[object],
    *,
    config: ProducerConfig | None = None,
) -> None:
    """`send_event` for the change the enclosing `transaction(conn)` makes:
    the event is written to the event log in that transaction (rolled back
    with it) and published once it commits. The notice is validated and
    encoded now, so bad input raises here, inside the transaction."""
    stack = _pending.get(conn)
    if not stack:
        raise RuntimeError("send_event_on_commit needs an enclosing eventq transaction(conn)")
    notice, body = prepare_notice(realm_id, event, users)
    stack[-1].append(_Pending(notice, body, config or ProducerConfig.from_env()))
