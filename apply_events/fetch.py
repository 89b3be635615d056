"""Fetch the initial state from PostgreSQL, section by section.

Each section is selected by its name in `fetch_event_types` and fetched with
its own queries on an autocommit connection: the fetch is deliberately not
atomic (register replays the queue's events over it). To add state, add a
section here and an applier for its events in `apply_events.apply`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from apply_events.state import State, StateContext, Want

Connection = psycopg.AsyncConnection[Any]


class RealmGone(LookupError):
    """Raised by `fetch_initial_state` when the registering user's realm no
    longer exists."""


@dataclasses.dataclass(frozen=True, slots=True)
class Section:
    """One part of the initial state and how to fetch it."""

    name: str
    fetch: Callable[[Connection, StateContext], Awaitable[State]]


async def _fetch_realm(conn: Connection, ctx: StateContext) -> State:
    cur = await conn.execute("SELECT name, description FROM realms WHERE id = %s", (ctx.realm_id,))
    row = await cur.fetchone()
    if row is None:
        raise RealmGone(ctx.realm_id)
    return {
        "realm_name": row[0],
        "realm_description": row[1],
        "event_queue_longpoll_timeout_seconds": ctx.longpoll_timeout_secs,
        "server_generation": ctx.server_generation,
    }


SECTIONS: tuple[Section, ...] = (Section("realm", _fetch_realm),)


async def fetch_initial_state(conn: Connection, ctx: StateContext, want: Want) -> State:
    """Every wanted section, fetched one after the other on `conn`."""
    state: State = {}
    for section in SECTIONS:
        if want(section.name):
            state.update(await section.fetch(conn, ctx))
    return state
