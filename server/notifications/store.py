"""The notification worker's records in PostgreSQL (the `notifications` and
`notification_counters` tables: deploy/migrations/0024_notifications.sql).

One row per (user, message): a notification published twice (by two paths,
two shards, a replay after a restart, a redelivery by RabbitMQ) is recorded
once, and so sent once. A batch is claimed with its rows locked
(`FOR UPDATE SKIP LOCKED`) for as long as it is being sent: a second worker
skips them, and a worker killed mid-send leaves them pending for the next.

Synchronous psycopg: the worker is a process of its own, with no event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import psycopg
from psycopg.rows import class_row

Kind = Literal["email", "push"]
KINDS: tuple[Kind, ...] = ("email", "push")
Conn = psycopg.Connection[Any]

# The counters /metrics shows (server/observability/metrics.py).
COUNTERS = (
    "recorded",
    "duplicates",
    "email_sent",
    "push_sent",
    "skipped_read",
    "skipped_deleted",
    "failed",
    "retried",
    "dead_lettered",
    "removed",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """A notification as a server published it."""

    user_id: int
    realm_id: int
    message_id: int
    kinds: frozenset[str]
    via: str
    at: float  # when the server enqueued it, seconds since the epoch


@dataclasses.dataclass(frozen=True, slots=True)
class Recipient:
    id: int
    email: str
    full_name: str
    realm_id: int
    realm_name: str
    is_active: bool


@dataclasses.dataclass(frozen=True, slots=True)
class NotifiedMessage:
    """A message of a batch, with what the email and the webhook show."""

    id: int
    sender_id: int
    sender_full_name: str
    stream_id: int | None
    stream_name: str | None
    topic: str
    content: str
    rendered_content: str
    timestamp: int
    mentioned: bool
    wildcard_mentioned: bool
    via: str

    def trigger(self, kind: Kind) -> str:
        """Why the user is told, by Zulip's trigger names."""
        if self.stream_id is None:
            return "direct_message"
        if self.mentioned:
            return "mentioned"
        if self.wildcard_mentioned:
            return "stream_wildcard_mentioned"
        return f"stream_{kind}_notify"


def bump(conn: Conn, counts: Mapping[str, int]) -> None:
    """Add to the counters, in the caller's transaction."""
    counts = {name: n for name, n in counts.items() if n}
    if not counts:
        return
    conn.execute(
        """
        INSERT INTO notification_counters (name, value)
        SELECT * FROM unnest(%s::text[], %s::bigint[])
        ON CONFLICT (name) DO UPDATE SET value = notification_counters.value + excluded.value
        """,
        (list(counts), list(counts.values())),
    )


def counters(conn: Conn) -> dict[str, int]:
    rows = conn.execute("SELECT name, value FROM notification_counters").fetchall()
    found = {name: int(value) for name, value in rows}
    return {name: found.get(name, 0) for name in COUNTERS}


def record(conn: Conn, candidates: Sequence[Candidate], wanted: Iterable[Kind]) -> tuple[int, int]:
    """Record what is new of `candidates` (kinds the worker does not send,
    not `wanted`, are left out), in the caller's transaction; returns
    (recorded, duplicates). A user who no longer exists is skipped (and
    counted with the duplicates)."""
    wanted = set(wanted)
    rows = [c for c in candidates if any(kind in wanted for kind in c.kinds)]
    if not rows:
        return 0, 0
    cur = conn.execute(
        """
        INSERT INTO notifications (user_id, message_id, realm_id, via, enqueued_at, email, push)
        SELECT t.user_id, t.message_id, t.realm_id, t.via, to_timestamp(t.at),
               CASE WHEN t.email THEN 'pending' END, CASE WHEN t.push THEN 'pending' END
        FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::float8[],
                    %s::boolean[], %s::boolean[])
            AS t (user_id, message_id, realm_id, via, at, email, push)
        WHERE EXISTS (SELECT 1 FROM users u WHERE u.id = t.user_id)
        ON CONFLICT (user_id, message_id) DO NOTHING
        RETURNING 1
        """,
        (
            [c.user_id for c in rows],
            [c.message_id for c in rows],
            [c.realm_id for c in rows],
            [c.via for c in rows],
            [c.at for c in rows],
            ["email" in c.kinds and "email" in wanted for c in rows],
            ["push" in c.kinds and "push" in wanted for c in rows],
        ),
    )
    recorded = len(cur.fetchall())
    return recorded, len(rows) - recorded


def due_users(conn: Conn, kind: Kind, delay_secs: float | None, limit: int = 100) -> list[int]:
    """Users with a batch of `kind` due: the first of its pending rows was
    enqueued a window ago (for email, `delay_secs` or else the user's
    `email_notifications_batching_period_seconds`; for push, `delay_secs`),
    and none waits for a retry."""
    period = (
        "coalesce(%(delay)s::float8, s.email_notifications_batching_period_seconds, 120)"
        if kind == "email"
        else "coalesce(%(delay)s::float8, 0)"
    )
    rows = conn.execute(
        f"""
        SELECT n.user_id
        FROM notifications n
        LEFT JOIN user_settings s ON s.user_id = n.user_id
        WHERE n.{kind} = 'pending'
        GROUP BY n.user_id, s.email_notifications_batching_period_seconds
        HAVING min(n.enqueued_at) + make_interval(secs => {period}) <= now()
           AND coalesce(max(n.{kind}_retry_at), '-infinity') <= now()
        ORDER BY min(n.enqueued_at)
        LIMIT %(limit)s
        """,  # noqa: S608 (kind is one of KINDS)
        {"delay": delay_secs, "limit": limit},
    ).fetchall()
    return [row[0] for row in rows]


def claim(conn: Conn, user_id: int, kind: Kind) -> tuple[list[int], dict[str, int]]:
    """In the caller's transaction: lock the user's pending rows of `kind`
    (skipping any another worker holds), mark those read or deleted since
    as such; returns (the message ids to send now, ascending; the skipped
    counts). A batch that failed before is sent again as it was, without
    what arrived since (that waits for the next batch): its retry keeps its
    delivery id and Message-ID, which a receiver that took the first try
    but lost its answer recognises."""
    rows = conn.execute(
        f"""
        SELECT n.message_id, m.id IS NULL OR um.user_id IS NULL AS gone,
               coalesce(um.read, false), n.{kind}_attempts > 0
        FROM notifications n
        LEFT JOIN messages m ON m.id = n.message_id
        LEFT JOIN user_messages um ON um.user_id = n.user_id AND um.message_id = n.message_id
        WHERE n.user_id = %s AND n.{kind} = 'pending'
        ORDER BY n.message_id
        FOR UPDATE OF n SKIP LOCKED
        """,  # noqa: S608 (kind is one of KINDS)
        (user_id,),
    ).fetchall()
    gone = [message_id for message_id, deleted, _read, _tried in rows if deleted]
    read = [message_id for message_id, deleted, is_read, _tried in rows if is_read and not deleted]
    for state, ids in (("deleted", gone), ("read", read)):
        if ids:
            conn.execute(
                f"UPDATE notifications SET {kind} = %s"  # noqa: S608 (as above)
                " WHERE user_id = %s AND message_id = ANY(%s)",
                (state, user_id, ids),
            )
    skipped = {"skipped_deleted": len(gone), "skipped_read": len(read)}
    left = [(m, tried) for m, deleted, is_read, tried in rows if not deleted and not is_read]
    retried = [message_id for message_id, tried in left if tried]
    return (retried or [message_id for message_id, _tried in left]), skipped


def recipient(conn: Conn, user_id: int) -> Recipient | None:
    cur = conn.cursor(row_factory=class_row(Recipient))
    return cur.execute(
        """
        SELECT u.id, u.email, u.full_name, u.realm_id, r.name AS realm_name, u.is_active
        FROM users u JOIN realms r ON r.id = u.realm_id
        WHERE u.id = %s
        """,
        (user_id,),
    ).fetchone()


def messages(conn: Conn, user_id: int, message_ids: Sequence[int]) -> list[NotifiedMessage]:
    cur = conn.cursor(row_factory=class_row(NotifiedMessage))
    return cur.execute(
        """
        SELECT m.id, m.sender_id, su.full_name AS sender_full_name, m.stream_id,
               st.name AS stream_name, m.topic, m.content, m.rendered_content,
               extract(epoch FROM m.date_sent)::bigint AS timestamp,
               um.mentioned, um.wildcard_mentioned, n.via
        FROM messages m
        JOIN users su ON su.id = m.sender_id
        JOIN user_messages um ON um.message_id = m.id AND um.user_id = %(user)s
        JOIN notifications n ON n.message_id = m.id AND n.user_id = %(user)s
        LEFT JOIN streams st ON st.id = m.stream_id
        WHERE m.id = ANY(%(ids)s)
        ORDER BY m.id
        """,
        {"user": user_id, "ids": list(message_ids)},
    ).fetchall()


def mark(conn: Conn, user_id: int, kind: Kind, message_ids: Sequence[int], state: str) -> None:
    """Set the rows' state for `kind` ('sent', 'failed', 'read', 'deleted')."""
    sent = ", " + kind + "_sent_at = now()" if state == "sent" else ""
    conn.execute(
        f"UPDATE notifications SET {kind} = %s{sent}"  # noqa: S608 (fixed names)
        " WHERE user_id = %s AND message_id = ANY(%s)",
        (state, user_id, list(message_ids)),
    )


def retry_later(
    conn: Conn,
    user_id: int,
    kind: Kind,
    message_ids: Sequence[int],
    error: str,
    first_secs: float,
    max_secs: float,
    max_attempts: int,
) -> bool:
    """A send failed: count the attempt and set when to try again (the
    backoff doubles from `first_secs` up to `max_secs`); after
    `max_attempts` the rows are 'failed'. Returns whether they were."""
    rows = conn.execute(
        f"""
        UPDATE notifications
        SET {kind}_attempts = {kind}_attempts + 1,
            {kind}_retry_at = now() + make_interval(
                secs => least(%s::float8 * 2 ^ {kind}_attempts, %s::float8)),
            last_error = %s
        WHERE user_id = %s AND message_id = ANY(%s)
        RETURNING {kind}_attempts
        """,  # noqa: S608 (fixed names)
        (first_secs, max_secs, error[:1000], user_id, list(message_ids)),
    ).fetchall()
    # A batch is retried whole (`claim`): its rows have one count.
    if not rows or max(attempts for (attempts,) in rows) < max_attempts:
        return False
    mark(conn, user_id, kind, message_ids, "failed")
    return True


def removals(conn: Conn, limit: int = 1000) -> dict[int, list[int]]:
    """Pushed messages read or deleted since, by user: what the webhook is
    to be told to remove. Locks them (SKIP LOCKED) in the caller's
    transaction."""
    rows = conn.execute(
        """
        SELECT n.user_id, n.message_id
        FROM notifications n
        LEFT JOIN user_messages um ON um.user_id = n.user_id AND um.message_id = n.message_id
        WHERE n.push = 'sent' AND NOT n.push_removed AND (um.user_id IS NULL OR um.read)
        ORDER BY n.user_id, n.message_id
        LIMIT %s
        FOR UPDATE OF n SKIP LOCKED
        """,
        (limit,),
    ).fetchall()
    found: dict[int, list[int]] = {}
    for user_id, message_id in rows:
        found.setdefault(user_id, []).append(message_id)
    return found


def mark_removed(conn: Conn, user_id: int, message_ids: Sequence[int]) -> None:
    conn.execute(
        "UPDATE notifications SET push_removed = true WHERE user_id = %s AND message_id = ANY(%s)",
        (user_id, list(message_ids)),
    )


def prune(conn: Conn, keep_days: float) -> int:
    """Forget settled rows recorded more than `keep_days` ago (a pending one
    is kept: it is still to be sent or retried)."""
    cur = conn.execute(
        """
        DELETE FROM notifications
        WHERE recorded_at < now() - make_interval(secs => %s::float8 * 86400)
          AND coalesce(email, '') <> 'pending' AND coalesce(push, '') <> 'pending'
        """,
        (keep_days,),
    )
    return cur.rowcount


def pending(conn: Conn) -> dict[str, int]:
    """Notifications waiting for their batch, by kind (the operator page)."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE email = 'pending'),"
        " count(*) FILTER (WHERE push = 'pending') FROM notifications"
    ).fetchone()
    assert row is not None
    return {"email": int(row[0]), "push": int(row[1])}


def parse_candidates(items: object) -> list[Candidate]:
    """The `notifications` list of a published batch
    (server/notifications/away.py); ValueError if malformed."""
    if not isinstance(items, list):
        raise ValueError("notifications is not a list")
    found: list[Candidate] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"notifications[{index}] is not an object")
        ints = [item.get(key) for key in ("user_id", "realm_id", "message_id")]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in ints):
            raise ValueError(f"notifications[{index}] lacks an integer user, realm or message id")
        kinds = item.get("kinds")
        if not isinstance(kinds, list) or not set(kinds) <= set(KINDS):
            raise ValueError(f"notifications[{index}].kinds is not a list of email, push")
        via = item.get("via")
        if via not in ("delivery", "gc"):
            raise ValueError(f"notifications[{index}].via is not delivery or gc")
        at = item.get("at")
        if not isinstance(at, int | float) or isinstance(at, bool):
            raise ValueError(f"notifications[{index}].at is not a time")
        user_id, realm_id, message_id = (int(n) for n in ints)  # type: ignore[arg-type]
        found.append(Candidate(user_id, realm_id, message_id, frozenset(kinds), via, float(at)))
    return found


def as_row(message: NotifiedMessage, kind: Kind) -> dict[str, Any]:
    """A message as the webhook's JSON shows it."""
    return {
        "id": message.id,
        "sender_id": message.sender_id,
        "sender_full_name": message.sender_full_name,
        "type": "private" if message.stream_id is None else "stream",
        "stream_id": message.stream_id,
        "stream": message.stream_name,
        "topic": message.topic,
        "content": message.content,
        "timestamp": message.timestamp,
        "trigger": message.trigger(kind),
    }
