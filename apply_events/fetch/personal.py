"""State sections of the personal area: the realm's statuses
(`user_status`), the user's topic policies (`user_topic`, and Zulip's
legacy `muted_topics`), muted users, alert words, drafts and saved snippets.
One or two queries per section.

The whole lists an event carries (muted users, alert words) and the drafts
and snippets are read by the same functions the actions use to build their
events (`generation.actions.personal`), so that a fresh fetch and an event
agree by construction.
"""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import personal as appliers
from apply_events.fetch.users import VIEWER_RESTRICTED, seen_by
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.accounts import ROLE_GUEST
from generation.actions.personal import (
    muted_users,
    user_alert_words,
    user_drafts,
    user_saved_snippets,
)
from generation.events.personal import MUTED
from generation.topics import EMPTY_TOPIC_CAPABILITY, topic_for_client

Connection = psycopg.AsyncConnection[Any]


async def fetch_user_status(conn: Connection, ctx: StateContext) -> State:
    """Every status of the realm; that of a user a restricted guest may not
    see counts as an inactive user's for them (not shown, as Zulip) until a
    `realm_user` add says they may (apply_events/fetch/users.py)."""
    cur = await conn.execute(
        f"""
        SELECT s.user_id, u.is_active, s.away, s.status_text, s.emoji_name, s.emoji_code,
               s.reaction_type, u.is_bot, {VIEWER_RESTRICTED}
        FROM user_statuses s JOIN users u ON u.id = s.user_id
        WHERE u.realm_id = %(realm)s
        """,  # noqa: S608 (a constant)
        {"realm": ctx.realm_id, "viewer": ctx.user_id},
    )
    rows = await cur.fetchall()
    seen = await seen_by(conn, ctx.user_id, rows[0][8] if rows else None)
    return {
        "raw_user_status": {
            row[0]: appliers.status_entry(
                active=row[1] and (seen is None or row[7] or row[0] in seen),
                away=row[2],
                text=row[3],
                emoji_name=row[4],
                emoji_code=row[5],
                reaction_type=row[6],
            )
            for row in rows
        }
    }


async def fetch_user_topics(conn: Connection, ctx: StateContext) -> State:
    """Every policy of the user, whatever the channel (as Zulip's
    `user_topics`; the channel ids are no secret to their owner); the empty
    topic under its display name for clients without `empty_topic_name`, as
    their `user_topic` events name it."""
    cur = await conn.execute(
        """
        SELECT stream_id, topic, floor(extract(epoch FROM last_updated))::bigint,
               visibility_policy
        FROM user_topics WHERE user_id = %s
        """,
        (ctx.user_id,),
    )
    allow_empty = EMPTY_TOPIC_CAPABILITY in ctx.capabilities
    topics = [
        {
            "stream_id": row[0],
            "topic_name": topic_for_client(row[1], allow_empty),
            "last_updated": int(row[2]),
            "visibility_policy": row[3],
        }
        for row in await cur.fetchall()
    ]
    topics.sort(key=lambda t: appliers.topic_key(t["stream_id"], t["topic_name"]))
    return {"user_topics": topics}


async def fetch_muted_topics(conn: Connection, ctx: StateContext) -> State:
    """The names of the channels the user can see, and every muted topic of
    the user (see `appliers.personal`, `raw_muted_topics`)."""
    cur = await conn.execute(
        """
        SELECT s.id, s.name FROM streams s JOIN users u ON u.id = %(user)s
        WHERE s.realm_id = u.realm_id AND NOT s.deactivated
          AND ((NOT s.invite_only AND u.role <> %(guest)s)
               OR EXISTS (SELECT 1 FROM subscriptions sub WHERE sub.stream_id = s.id
                          AND sub.user_id = u.id AND sub.active))
        """,
        {"user": ctx.user_id, "guest": ROLE_GUEST},
    )
    names = {int(row[0]): str(row[1]) for row in await cur.fetchall()}
    cur = await conn.execute(
        "SELECT stream_id, topic, floor(extract(epoch FROM last_updated))::bigint"
        " FROM user_topics WHERE user_id = %s AND visibility_policy = %s",
        (ctx.user_id, MUTED),
    )
    rows = {
        (int(stream_id), topic.lower()): [int(stream_id), topic, int(stamp)]
        for stream_id, topic, stamp in await cur.fetchall()
    }
    return {"raw_muted_topics": {"names": names, "rows": rows}}


async def fetch_muted_users(conn: Connection, ctx: StateContext) -> State:
    return {"muted_users": await muted_users(conn, ctx.user_id)}


async def fetch_alert_words(conn: Connection, ctx: StateContext) -> State:
    return {"alert_words": await user_alert_words(conn, ctx.user_id)}


async def fetch_drafts(conn: Connection, ctx: StateContext) -> State:
    """The user's drafts; none while synchronizing them is off (as Zulip)."""
    cur = await conn.execute(
        "SELECT coalesce((SELECT enable_drafts_synchronization FROM user_settings"
        " WHERE user_id = %s), true)",
        (ctx.user_id,),
    )
    row = await cur.fetchone()
    syncing = row is not None and bool(row[0])
    return {"drafts": await user_drafts(conn, ctx.user_id) if syncing else []}


async def fetch_saved_snippets(conn: Connection, ctx: StateContext) -> State:
    return {"saved_snippets": await user_saved_snippets(conn, ctx.user_id)}


SECTIONS: tuple[Section, ...] = (
    Section(
        "user_status",
        fetch_user_status,
        appliers.USER_STATUS_APPLIERS,
        post_process=appliers.post_process_user_status,
        state=appliers.UserStatusState,
    ),
    Section(
        "user_topic",
        fetch_user_topics,
        appliers.USER_TOPIC_APPLIERS,
        state=appliers.UserTopicState,
    ),
    # Its channel names follow `stream` events: a client that wants
    # `muted_topics` but not `stream` keeps the names it was given.
    Section(
        "muted_topics",
        fetch_muted_topics,
        appliers.MUTED_TOPICS_APPLIERS,
        post_process=appliers.post_process_muted_topics,
        state=appliers.MutedTopicsState,
    ),
    Section(
        "muted_users",
        fetch_muted_users,
        appliers.MUTED_USERS_APPLIERS,
        state=appliers.MutedUsersState,
    ),
    Section(
        "alert_words",
        fetch_alert_words,
        appliers.ALERT_WORDS_APPLIERS,
        state=appliers.AlertWordsState,
    ),
    Section("drafts", fetch_drafts, appliers.DRAFTS_APPLIERS, state=appliers.DraftsState),
    Section(
        "saved_snippets",
        fetch_saved_snippets,
        appliers.SAVED_SNIPPETS_APPLIERS,
        state=appliers.SavedSnippetsState,
    ),
)
