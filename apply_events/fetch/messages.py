"""State sections of the messages area (see apply_events/sections.py):
`message` (max_message_id), `update_message_flags` (unread_msgs; needs
`message`, as Zulip's) and `starred_messages`. Four queries in all, each
reading only the registering user's rows through an index.
"""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import messages as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.topics import EMPTY_TOPIC_CAPABILITY, topic_for_client

Connection = psycopg.AsyncConnection[Any]

# The newest unread messages register reports (Zulip's MAX_UNREAD_MESSAGES);
# beyond them `old_unreads_missing` is true.
MAX_UNREAD_MESSAGES = 50_000
# How many of the newest message ids `max_message_id` keeps while events are
# replayed: enough for deletions during one register to leave the right
# newest one.
RECENT_MESSAGES_KEPT = 1000


async def fetch_message(conn: Connection, ctx: StateContext) -> State:
    cur = await conn.execute(
        "SELECT message_id FROM user_messages WHERE user_id = %s ORDER BY message_id DESC LIMIT %s",
        (ctx.user_id, RECENT_MESSAGES_KEPT),
    )
    recent = {row[0] for row in await cur.fetchall()}
    return {appliers.RAW_RECENT: appliers.RawRecentMessages(recent)}


async def fetch_unread(conn: Connection, ctx: StateContext) -> State:
    cur = await conn.execute(
        """
        SELECT um.message_id, m.stream_id, m.topic, m.participant_ids,
               um.mentioned OR um.wildcard_mentioned
        FROM user_messages um JOIN messages m ON m.id = um.message_id
        WHERE um.user_id = %s AND NOT um.read
        ORDER BY um.message_id DESC LIMIT %s
        """,
        (ctx.user_id, MAX_UNREAD_MESSAGES + 1),
    )
    rows = await cur.fetchall()
    raw = appliers.RawUnread(
        direct={},
        channel={},
        group={},
        mentions=set(),
        muted_stream_ids=set(),
        old_unreads_missing=len(rows) > MAX_UNREAD_MESSAGES,
    )
    # Topics as this client's events name them (the empty one under its
    # display name without `empty_topic_name`), so that replayed events agree.
    allow_empty = EMPTY_TOPIC_CAPABILITY in ctx.capabilities
    for message_id, stream_id, topic, participants, mentioned in rows[:MAX_UNREAD_MESSAGES]:
        if stream_id is not None:
            raw.channel[message_id] = (stream_id, topic_for_client(topic, allow_empty))
        else:
            raw.add_direct(message_id, participants, ctx.user_id)
        if mentioned:
            raw.mentions.add(message_id)
    # Archived channels keep their subscriptions; only clients with
    # `archived_channels` hold them (apply_events/fetch/streams.py).
    cur = await conn.execute(
        """
        SELECT sub.stream_id FROM subscriptions sub JOIN streams s ON s.id = sub.stream_id
        WHERE sub.user_id = %s AND sub.active AND sub.is_muted AND (NOT s.deactivated OR %s)
        """,
        (ctx.user_id, "archived_channels" in ctx.capabilities),
    )
    raw.muted_stream_ids = {row[0] for row in await cur.fetchall()}
    return {appliers.RAW_UNREAD: raw}


async def fetch_starred(conn: Connection, ctx: StateContext) -> State:
    cur = await conn.execute(
        "SELECT message_id FROM user_messages WHERE user_id = %s AND starred ORDER BY message_id",
        (ctx.user_id,),
    )
    return {appliers.RAW_STARRED: appliers.RawStarred({row[0] for row in await cur.fetchall()})}


SECTIONS: tuple[Section, ...] = (
    Section(
        "message",
        fetch_message,
        appliers.MESSAGE_APPLIERS,
        post_process=appliers.post_process_message,
        state=appliers.MessageState,
    ),
    Section(
        "update_message_flags",
        fetch_unread,
        appliers.UNREAD_APPLIERS,
        post_process=appliers.post_process_unread,
        requires=("message",),
        state=appliers.UnreadState,
    ),
    Section(
        "starred_messages",
        fetch_starred,
        appliers.STARRED_APPLIERS,
        post_process=appliers.post_process_starred,
        state=appliers.StarredState,
    ),
)
