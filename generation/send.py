"""`send_event`: how a backend service hands an event to eventq.

    send_event(realm_id, {"type": "task_done", "task": 7}, [user_id, ...])

The notice is validated and encoded before anything touches the broker; bad
input raises `BadNotice` (a ValueError). It is then published, persistent, to
the durable notify queue with publisher confirms, and `send_event` returns once
RabbitMQ has it, or raises `PublishError`. With `EVENTQ_AMQP_URL` empty it is
POSTed to the server's internal notify endpoint instead (a developer machine
without RabbitMQ).

Inside a database transaction, use `send_event_on_commit` within
`transaction(conn)`: the notice goes out after the commit, never on rollback.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from generation import publisher
from generation.config import ProducerConfig, SecretMissing
from generation.errors import BadNotice
from generation.notice import Notice, encode_notice, make_notice
from generation.publisher import PublishError
from generation.sharding import ShardingError, reach_of

__all__ = [
    "BadNotice",
    "PublishError",
    "prepare_notice",
    "publish_notice",
    "send_event",
    "send_event_on_commit",
    "transaction",
]


def prepare_notice(
    realm_id: int, event: Mapping[str, Any], users: Sequence[object]
) -> tuple[Notice, bytes]:
    """Validate and encode; raises `BadNotice` saying what is wrong."""
    if not isinstance(realm_id, int) or isinstance(realm_id, bool):
        raise BadNotice("realm_id is not an integer")
    notice = make_notice(event, users, realm_id)
    return notice, encode_notice(notice)


def publish_encoded(body: bytes, config: ProducerConfig, notice_id: str | None = None) -> None:
    """Hand an encoded notice to the broker, or to the server without one."""
    if config.amqp_url:
        publisher.for_thread(config.amqp_url, config.confirm_timeout_secs).publish(
            config.notify_queue, body, notice_id
        )
        return
    try:
        secret = config.secret()
    except SecretMissing as exc:
        raise PublishError(str(exc)) from None
    form = urllib.parse.urlencode({"secret": secret, "data": body.decode()}).encode()
    request = urllib.request.Request(config.notify_url, data=form, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=config.confirm_timeout_secs) as response:  # noqa: S310
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise PublishError(f"the server refused the notice ({exc.code}): {detail}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PublishError(f"the server at {config.notify_url} is unreachable: {exc}") from exc


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
        publish_encoded(body, config, notice_id)
        return
    parts = shard_map.split(notice.realm_id, notice.users, reach_of(notice.event))
    failed: list[str] = []
    for name, users in parts.items():
        part = (
            body if len(parts) == 1 else encode_notice(Notice(notice.event, users, notice.realm_id))
        )
        try:
            publish_encoded(part, config.for_shard(shard_map.shards[name]), notice_id)
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
) -> None:
    """Deliver `event` to the queues of `users` (ids, or dicts with "id" and
    that user's own data, such as `flags`). Choosing the users is the caller's
    job: sending a private event to a whole realm is a security bug.

    `notice_id` makes a retry safe: a caller that got `PublishError` and sends
    the same notice again with the same id has it delivered at most once, even
    if the broker did keep the first try (through RabbitMQ; the consumer
    remembers recent ids)."""
    if notice_id is not None and not (isinstance(notice_id, str) and 0 < len(notice_id) <= 200):
        raise BadNotice("notice_id must be a string of 1 to 200 characters")
    notice, body = prepare_notice(realm_id, event, users)
    publish_notice(notice, body, config or ProducerConfig.from_env(), notice_id)


# connection -> stack of callback lists, one per open `transaction` block.
_pending: weakref.WeakKeyDictionary[psycopg.Connection[Any], list[list[Callable[[], None]]]]
_pending = weakref.WeakKeyDictionary()


@contextmanager
def transaction(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A psycopg transaction that runs `send_event_on_commit` notices after it
    commits. Nested blocks are savepoints: notices of a savepoint that rolls
    back are dropped, the others wait for the outermost commit.

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
    except BaseException:
        stack.pop()
        raise
    callbacks = stack.pop()
    if stack:
        stack[-1].extend(callbacks)
        return
    errors: list[Exception] = []
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:  # run the others; report the first below
            errors.append(exc)
    if errors:
        raise errors[0]


def send_event_on_commit(
    conn: psycopg.Connection[Any],
    realm_id: int,
    event: Mapping[str, Any],
    users: Sequence[object],
    *,
    config: ProducerConfig | None = None,
) -> None:
    """`send_event` once the enclosing `transaction(conn)` commits. The notice
    is validated and encoded now, so bad input raises here, inside the
    transaction."""
    stack = _pending.get(conn)
    if not stack:
        raise RuntimeError("send_event_on_commit needs an enclosing eventq transaction(conn)")
    notice, body = prepare_notice(realm_id, event, users)
    resolved = config or ProducerConfig.from_env()
    stack[-1].append(lambda: publish_notice(notice, body, resolved))
