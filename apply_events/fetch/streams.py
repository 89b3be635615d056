"""State sections of the streams area: `stream`, `subscription` and
`default_streams` (see apply_events/sections.py).

Who sees what (the same rule the actions send events by): a user sees a
stream, and its subscriber list, if they are an active subscriber, or if the
stream is public and they are not a guest. Archived streams (which keep
their subscriptions) are in the state of clients with Zulip's
`archived_channels` capability only, with `is_archived` true, as Zulip's
register gives them. Subscriber lists hold active users only. Each section is one
query (one snapshot), whatever the number of streams and users.
"""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import streams as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.accounts import ROLE_GUEST
from generation.actions.streams.subscription_settings import settings_sql, subscription_settings
from generation.events.streams import CHANNEL_POLICIES, render_description

Connection = psycopg.AsyncConnection[Any]

# The columns of a stream object, in the order `_basic_stream` reads them.
_STREAM_COLUMNS = """
    s.id, s.name, s.description, s.invite_only,
    floor(extract(epoch FROM s.date_created))::bigint, s.deactivated
"""
# Zulip's client capability under which register includes archived streams.
ARCHIVED_CHANNELS = "archived_channels"
# Whether a stream is in the state: active, or archived and asked for.
_SHOWN = "(NOT s.deactivated OR %(archived)s)"

# Whether the registering user is a guest (NULL if they no longer exist).
_IS_GUEST = "(SELECT role = %(guest)s FROM users WHERE id = %(user)s)"


def _basic_stream(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "stream_id": row[0],
        "name": row[1],
        "description": row[2],
        "rendered_description": render_description(row[2]),
        "invite_only": row[3],
        "date_created": row[4],
        "is_archived": row[5],
        **CHANNEL_POLICIES,
    }


async def fetch_streams(conn: Connection, ctx: StateContext) -> State:
    """`streams`: every stream the user can see, by id."""
    cur = await conn.execute(
        f"""
        SELECT {_STREAM_COLUMNS}
        FROM streams s
        WHERE s.realm_id = %(realm)s AND {_SHOWN}
          AND ((NOT s.invite_only AND NOT {_IS_GUEST})
               OR EXISTS (SELECT 1 FROM subscriptions x
                          WHERE x.stream_id = s.id AND x.user_id = %(user)s AND x.active))
        ORDER BY s.id
        """,  # noqa: S608 (fixed SQL fragments)
        {
            "realm": ctx.realm_id,
            "user": ctx.user_id,
            "guest": ROLE_GUEST,
            "archived": ARCHIVED_CHANNELS in ctx.capabilities,
        },
    )
    return {"streams": [_basic_stream(row) for row in await cur.fetchall()]}


async def fetch_subscriptions(conn: Connection, ctx: StateContext) -> State:
    """`subscriptions`, `unsubscribed` and `never_subscribed`, each by
    stream id; subscriber lists (ascending user ids) if asked for."""
    cur = await conn.execute(
        f"""
        SELECT {_STREAM_COLUMNS}, x.active, {settings_sql("x")},
               CASE WHEN %(with_subscribers)s THEN ARRAY(
                   SELECT y.user_id FROM subscriptions y JOIN users u ON u.id = y.user_id
                   WHERE y.stream_id = s.id AND y.active AND u.is_active
                   ORDER BY y.user_id) END
        FROM streams s
        LEFT JOIN subscriptions x ON x.stream_id = s.id AND x.user_id = %(user)s
        WHERE s.realm_id = %(realm)s AND {_SHOWN}
          AND (x.active OR (NOT s.invite_only AND NOT {_IS_GUEST}))
        ORDER BY s.id
        """,  # noqa: S608 (fixed SQL fragments)
        {
            "realm": ctx.realm_id,
            "user": ctx.user_id,
            "guest": ROLE_GUEST,
            "with_subscribers": ctx.include_subscribers,
            "archived": ARCHIVED_CHANNELS in ctx.capabilities,
        },
    )
    state: State = {key: [] for key in appliers.SUBSCRIPTION_LISTS}
    for row in await cur.fetchall():
        entry = _basic_stream(row)
        active, *settings, subscribers = row[6:]
        if active is not None:
            entry.update(subscription_settings(settings))
        if subscribers is not None:
            entry["subscribers"] = list(subscribers)
        key = (
            "never_subscribed" if active is None else "subscriptions" if active else "unsubscribed"
        )
        state[key].append(entry)
    return state


async def fetch_default_streams(conn: Connection, ctx: StateContext) -> State:
    """`realm_default_streams`: the realm's default stream ids; none for a
    guest, who cannot see them all (as Zulip)."""
    cur = await conn.execute(
        f"""
        SELECT d.stream_id FROM default_streams d JOIN streams s ON s.id = d.stream_id
        WHERE d.realm_id = %(realm)s AND NOT s.deactivated AND NOT {_IS_GUEST}
        ORDER BY d.stream_id
        """,  # noqa: S608 (fixed SQL fragments)
        {"realm": ctx.realm_id, "user": ctx.user_id, "guest": ROLE_GUEST},
    )
    return {"realm_default_streams": [row[0] for row in await cur.fetchall()]}


async def list_streams(
    conn: Connection,
    user_id: int,
    realm_id: int,
    *,
    include_public: bool = True,
    include_subscribed: bool = True,
    include_default: bool = False,
    include_archived: bool = False,
) -> list[dict[str, Any]]:
    """`GET /streams`: of the streams the user can see, the public ones
    (never for a guest), the ones they are subscribed to, and the default
    ones, as chosen, archived ones too with `include_archived` (Zulip's
    `exclude_archived` false); by id."""
    cur = await conn.execute(
        f"""
        SELECT {_STREAM_COLUMNS}
        FROM streams s
        WHERE s.realm_id = %(realm)s AND {_SHOWN}
          AND ((%(public)s AND NOT s.invite_only AND NOT {_IS_GUEST})
               OR (%(subscribed)s AND EXISTS (
                   SELECT 1 FROM subscriptions x
                   WHERE x.stream_id = s.id AND x.user_id = %(user)s AND x.active))
               OR (%(default)s AND NOT s.invite_only AND NOT {_IS_GUEST} AND EXISTS (
                   SELECT 1 FROM default_streams d WHERE d.stream_id = s.id)))
        ORDER BY s.id
        """,  # noqa: S608 (fixed SQL fragments)
        {
            "realm": realm_id,
            "user": user_id,
            "guest": ROLE_GUEST,
            "public": include_public,
            "subscribed": include_subscribed,
            "default": include_default,
            "archived": include_archived,
        },
    )
    return [_basic_stream(row) for row in await cur.fetchall()]


SECTIONS: tuple[Section, ...] = (
    Section("stream", fetch_streams, appliers.STREAM_APPLIERS, state=appliers.StreamsState),
    Section(
        "subscription",
        fetch_subscriptions,
        appliers.SUBSCRIPTION_APPLIERS,
        state=appliers.SubscriptionsState,
    ),
    Section(
        "default_streams",
        fetch_default_streams,
        appliers.DEFAULT_STREAMS_APPLIERS,
        state=appliers.DefaultStreamsState,
    ),
)
