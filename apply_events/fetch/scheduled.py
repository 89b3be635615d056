"""The `scheduled_messages` section (see apply_events/sections.py): the
registering user's messages scheduled for later and not sent yet, failed
ones included (their sender must see them to fix them), soonest first. One
query through the sender's index; at most `MAX_SCHEDULED_PER_USER` rows."""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import scheduled as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.actions.messages.scheduled import scheduled_message_dict

Connection = psycopg.AsyncConnection[Any]


async def scheduled_messages(conn: Connection, user_id: int) -> list[dict[str, Any]]:
    """The user's scheduled messages, in `appliers.order`'s order (also `GET
    scheduled_messages`)."""
    cur = await conn.execute(
        """
        SELECT id, sender_id, stream_id, topic, participant_ids, content, rendered_content,
               extract(epoch FROM scheduled_at)::bigint, failed
        FROM scheduled_messages WHERE sender_id = %s
        ORDER BY scheduled_at, id
        """,
        (user_id,),
    )
    return [scheduled_message_dict(*row) for row in await cur.fetchall()]


async def fetch_scheduled_messages(conn: Connection, ctx: StateContext) -> State:
    return {"scheduled_messages": await scheduled_messages(conn, ctx.user_id)}


SECTIONS: tuple[Section, ...] = (
    Section(
        "scheduled_messages",
        fetch_scheduled_messages,
        appliers.APPLIERS,
        state=appliers.ScheduledMessagesState,
    ),
)
