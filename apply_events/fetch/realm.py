"""The `realm` section: the organization's name, description and settings,
and the server facts Zulip reports with them."""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import realm as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.topics import EMPTY_TOPIC_DISPLAY_NAME

Connection = psycopg.AsyncConnection[Any]


class RealmGone(LookupError):
    """Raised when the registering user's realm no longer exists."""


async def fetch_realm(conn: Connection, ctx: StateContext) -> State:
    cur = await conn.execute(
        """
        SELECT name, description, allow_message_editing, mandatory_topics,
               message_content_edit_limit_seconds
        FROM realms WHERE id = %s
        """,
        (ctx.realm_id,),
    )
    row = await cur.fetchone()
    if row is None:
        raise RealmGone(ctx.realm_id)
    return {
        "realm_name": row[0],
        "realm_description": row[1],
        "realm_allow_message_editing": row[2],
        "realm_mandatory_topics": row[3],
        "realm_message_content_edit_limit_seconds": row[4],
        # Zulip translates it into the user's language; eventq has no
        # translations (generation/topics.py).
        "realm_empty_topic_display_name": EMPTY_TOPIC_DISPLAY_NAME,
        "event_queue_longpoll_timeout_seconds": ctx.longpoll_timeout_secs,
        # Zulip's "forever": eventq keeps every message (no retention policy).
        "realm_message_retention_days": -1,
        "server_generation": ctx.server_generation,
    }


SECTIONS: tuple[Section, ...] = (
    Section("realm", fetch_realm, appliers.APPLIERS, state=appliers.RealmState),
)
