"""The `realm` section: the organization's name, description and settings,
and the server facts Zulip reports with them."""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import realm as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.actions.access import ACCESS_GROUPS
from generation.topics import EMPTY_TOPIC_DISPLAY_NAME

Connection = psycopg.AsyncConnection[Any]


class RealmGone(LookupError):
    """Raised when the registering user's realm no longer exists."""


async def fetch_realm(conn: Connection, ctx: StateContext) -> State:
    cur = await conn.execute(
        """
        SELECT r.name, r.description, r.allow_message_editing, r.mandatory_topics,
               r.message_content_edit_limit_seconds, g.id
        FROM realms r
        LEFT JOIN user_groups g ON g.realm_id = r.id AND g.is_system_group
             AND g.name = CASE WHEN r.guests_see_all_users THEN %s ELSE %s END
        WHERE r.id = %s
        """,
        (*ACCESS_GROUPS, ctx.realm_id),
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
        # Who may see every user (generation/actions/access.py).
        "realm_can_access_all_users_group": row[5],
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
