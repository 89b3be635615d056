"""State sections of the realm's configuration: custom emoji, linkifiers
(and Zulip's legacy, always empty `realm_filters`), code playgrounds and the
realm's domains. One query per section; each is the query the actions send
their events from (generation/actions/realm_config/), so an event and a
fresh fetch agree by construction."""

from __future__ import annotations

from typing import Any

import psycopg

from apply_events.appliers import realm_config as appliers
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.actions.realm_config import (
    realm_domains,
    realm_emoji,
    realm_linkifiers,
    realm_playgrounds,
)

Connection = psycopg.AsyncConnection[Any]


async def fetch_realm_emoji(conn: Connection, ctx: StateContext) -> State:
    return {"realm_emoji": await realm_emoji(conn, ctx.realm_id)}


async def fetch_realm_linkifiers(conn: Connection, ctx: StateContext) -> State:
    if appliers.LINKIFIER_CAPABILITY not in ctx.capabilities:
        return {"realm_linkifiers": []}
    return {"realm_linkifiers": await realm_linkifiers(conn, ctx.realm_id)}


async def fetch_realm_filters(conn: Connection, ctx: StateContext) -> State:
    return {"realm_filters": []}


async def fetch_realm_playgrounds(conn: Connection, ctx: StateContext) -> State:
    return {"realm_playgrounds": await realm_playgrounds(conn, ctx.realm_id)}


async def fetch_realm_domains(conn: Connection, ctx: StateContext) -> State:
    return {"realm_domains": await realm_domains(conn, ctx.realm_id)}


SECTIONS: tuple[Section, ...] = (
    Section(
        "realm_emoji",
        fetch_realm_emoji,
        appliers.REALM_EMOJI_APPLIERS,
        state=appliers.RealmEmojiState,
    ),
    Section(
        "realm_linkifiers",
        fetch_realm_linkifiers,
        appliers.REALM_LINKIFIERS_APPLIERS,
        state=appliers.RealmLinkifiersState,
    ),
    Section("realm_filters", fetch_realm_filters, state=appliers.RealmFiltersState),
    Section(
        "realm_playgrounds",
        fetch_realm_playgrounds,
        appliers.REALM_PLAYGROUNDS_APPLIERS,
        state=appliers.RealmPlaygroundsState,
    ),
    Section(
        "realm_domains",
        fetch_realm_domains,
        appliers.REALM_DOMAINS_APPLIERS,
        state=appliers.RealmDomainsState,
    ),
)
