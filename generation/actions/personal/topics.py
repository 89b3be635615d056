"""A user's visibility policy per topic (Zulip's user topics): muted,
unmuted, followed, or none ("inherit": the channel's setting applies).

A topic is named case-insensitively: the row keeps the letter case of the
latest request, which its event carries. Every change sends, to the user
only, Zulip's legacy `muted_topics` event (the whole list of muted topics,
by channel name, in the channels the user can see now) and then the
`user_topic` event. A request that changes nothing sends nothing.
"""

from __future__ import annotations

from typing import Any

from generation.actions.base import (
    ROLE_GUEST,
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    UserRow,
    get_user,
)
from generation.actions.messages.common import normalize_topic
from generation.actions.personal.common import (
    _accessible_stream,
    _lock_user,
    _stream_id_by_name,
)
from generation.events.personal import INHERIT, MUTED

VISIBILITY_POLICIES = (0, 1, 2, 3)
# Topics with a policy, per user. Zulip has no limit; every change sends the
# whole legacy list of muted topics (about 100 bytes an entry), so 1,000
# keeps each event under about 100 KB and register's lists bounded, far
# above what a person mutes or follows by hand.
MAX_USER_TOPICS = 1000
MUTED_TOPIC_OPS = ("add", "remove")


async def muted_topics(conn: Connection, user_id: int) -> list[list[str | int]]:
    """Zulip's legacy list: `[channel name, topic, last_updated]` of each
    muted topic in a channel the user can see now (subscribed, or public and
    not a guest), by channel id and topic. The names of channels the user
    cannot see are not theirs to learn."""
    cur = await conn.execute(
        """
        SELECT s.name, t.topic, floor(extract(epoch FROM t.last_updated))::bigint
        FROM user_topics t
        JOIN streams s ON s.id = t.stream_id
        JOIN users u ON u.id = t.user_id
        WHERE t.user_id = %(user)s AND t.visibility_policy = %(muted)s AND NOT s.deactivated
          AND ((NOT s.invite_only AND u.role <> %(guest)s)
               OR EXISTS (SELECT 1 FROM subscriptions sub WHERE sub.stream_id = s.id
                          AND sub.user_id = u.id AND sub.active))
        ORDER BY s.id, lower(t.topic)
        """,
        {"user": user_id, "muted": MUTED, "guest": ROLE_GUEST},
    )
    return [[name, topic, int(stamp)] for name, topic, stamp in await cur.fetchall()]


async def _current(
    conn: Connection, user_id: int, stream_id: int, topic: str
) -> tuple[str, int] | None:
    cur = await conn.execute(
        "SELECT topic, visibility_policy FROM user_topics"
        " WHERE user_id = %s AND stream_id = %s AND lower(topic) = lower(%s) FOR UPDATE",
        (user_id, stream_id, topic),
    )
    row = await cur.fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


async def _write(conn: Connection, user_id: int, stream_id: int, topic: str, policy: int) -> int:
    """Store the policy (none: delete the row); returns its time, UNIX
    seconds."""
    where = "user_id = %s AND stream_id = %s AND lower(topic) = lower(%s)"
    if policy == INHERIT:
        await conn.execute(f"DELETE FROM user_topics WHERE {where}", (user_id, stream_id, topic))  # noqa: S608 (a fixed condition)
        cur = await conn.execute("SELECT floor(extract(epoch FROM now()))::bigint")
    else:
        cur = await conn.execute(
            f"""
            UPDATE user_topics SET topic = %s, visibility_policy = %s, last_updated = now()
            WHERE {where} RETURNING floor(extract(epoch FROM last_updated))::bigint
            """,  # noqa: S608 (a fixed condition)
            (topic, policy, user_id, stream_id, topic),
        )
        if cur.rowcount == 0:
            count = await conn.execute(
                "SELECT count(*) FROM user_topics WHERE user_id = %s", (user_id,)
            )
            counted = await count.fetchone()
            assert counted is not None
            if counted[0] >= MAX_USER_TOPICS:
                raise ActionError(
                    f"You can set a visibility policy for at most {MAX_USER_TOPICS} topics."
                )
            cur = await conn.execute(
                "INSERT INTO user_topics (user_id, stream_id, topic, visibility_policy)"
                " VALUES (%s, %s, %s, %s)"
                " RETURNING floor(extract(epoch FROM last_updated))::bigint",
                (user_id, stream_id, topic, policy),
            )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _send(
    conn: Connection,
    outbox: Outbox,
    user: UserRow,
    stream_id: int,
    topic: str,
    policy: int,
    at: int,
) -> None:
    """The legacy list first, then the change, as Zulip sends them."""
    legacy = {"type": "muted_topics", "muted_topics": await muted_topics(conn, user.id)}
    outbox.send(user.realm_id, legacy, [user.id])
    event: dict[str, Any] = {
        "type": "user_topic",
        "stream_id": stream_id,
        "topic_name": topic,
        "last_updated": at,
        "visibility_policy": policy,
    }
    outbox.send(user.realm_id, event, [user.id])


def _check_policy(policy: int) -> int:
    if isinstance(policy, bool) or policy not in VISIBILITY_POLICIES:
        raise ActionError("Invalid visibility_policy")
    return policy


async def do_set_user_topic_visibility_policy(
    ctx: ActionContext, user_id: int, stream_id: int, topic: str, visibility_policy: int
) -> bool:
    """Set the user's policy for a topic of a channel they may access now
    (`POST user_topics`); returns False, sending nothing, when it already
    is that policy (or none, for `inherit`)."""
    policy = _check_policy(visibility_policy)
    topic = normalize_topic(topic)
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        await _accessible_stream(ctx.conn, user, stream_id)
        await _lock_user(ctx.conn, user.id)
        current = await _current(ctx.conn, user.id, stream_id, topic)
        if (current is None and policy == INHERIT) or current == (topic, policy):
            return False
        at = await _write(ctx.conn, user.id, stream_id, topic, policy)
        await _send(ctx.conn, outbox, user, stream_id, topic, policy, at)
    return True


async def do_mute_topic_legacy(
    ctx: ActionContext, user_id: int, stream: int | str, topic: str, op: str
) -> None:
    """Zulip's legacy `PATCH users/me/subscriptions/muted_topics`: `add`
    mutes a topic of a channel (by id or name), `remove` gives it no policy.
    Zulip's errors for a topic already muted, or not muted."""
    if op not in MUTED_TOPIC_OPS:
        raise ActionError(f"Invalid op: '{op}'")
    topic = normalize_topic(topic)
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        if isinstance(stream, str):
            stream_id = await _stream_id_by_name(ctx.conn, user, stream)
        else:
            stream_id = (await _accessible_stream(ctx.conn, user, stream)).id
        await _lock_user(ctx.conn, user.id)
        current = await _current(ctx.conn, user.id, stream_id, topic)
        muted = current is not None and current[1] == MUTED
        if op == "add" and muted:
            raise ActionError("Topic already muted")
        if op == "remove" and not muted:
            raise ActionError("Topic is not muted")
        policy = MUTED if op == "add" else INHERIT
        at = await _write(ctx.conn, user.id, stream_id, topic, policy)
        await _send(ctx.conn, outbox, user, stream_id, topic, policy, at)
