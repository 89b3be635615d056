"""Fetch, apply and post-process, over every section that was asked for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from apply_events.section import Section
from apply_events.sections import SECTIONS
from apply_events.state import Event, State, StateContext, Want
from generation.events import TRANSIENT

# Called between two sections' fetches with the name of the next one; the
# race tests run actions there.
Between = Callable[[str], Awaitable[None]]


def wanted_sections(want: Want, sections: Sequence[Section] | None = None) -> list[Section]:
    return [section for section in (sections or SECTIONS) if section.wanted(want)]


async def fetch_initial_state(
    conn: Any,
    ctx: StateContext,
    want: Want,
    *,
    sections: Sequence[Section] | None = None,
    between: Between | None = None,
) -> State:
    """Every wanted section, fetched one after the other on `conn` (a
    psycopg AsyncConnection in autocommit mode: each query its own snapshot)."""
    state: State = {}
    for index, section in enumerate(wanted_sections(want, sections)):
        if between is not None and index:
            await between(section.name)
        state.update(await section.fetch(conn, ctx))
    return state


async def fetch_at_snapshot(
    conn: Any,
    ctx: StateContext,
    want: Want,
    since: int,
    late: Sequence[int] = (),
    *,
    sections: Sequence[Section] | None = None,
    between: Between | None = None,
) -> tuple[State, frozenset[int]]:
    """The state at one snapshot, with the event log positions it covers:
    every wanted section read in one REPEATABLE READ transaction on `conn`
    (an autocommit psycopg AsyncConnection), and, in the same snapshot, the
    logged positions above `since` (the stream position when the queue was
    made) or in `late` (given up on, may still arrive) that are visible.
    Their changes are in the state, so they are neither applied nor
    delivered again; every other event reaching the queue is not in it,
    since an event is logged in its change's transaction. Exact by
    construction, whatever order writers commit in."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        state = await fetch_initial_state(conn, ctx, want, sections=sections, between=between)
        cur = await conn.execute(
            "SELECT position FROM event_log WHERE position > %s OR position = ANY(%s)",
            (since, list(late)),
        )
        covered = frozenset(int(row[0]) for row in await cur.fetchall())
    return state, covered


def apply_events(
    state: State,
    events: Iterable[Event],
    want: Want,
    ctx: StateContext,
    *,
    sections: Sequence[Section] | None = None,
) -> None:
    """Apply, in order, each event whose type was asked for, to every fetched
    section that has an applier for it. Types declared transient
    (`generation.events`) change no state and are skipped. Pure."""
    fetched = wanted_sections(want, sections)
    for event in events:
        event_type = event.get("type")
        if not isinstance(event_type, str) or event_type in TRANSIENT or not want(event_type):
            continue
        for section in fetched:
            applier = section.appliers.get(event_type)
            if applier is not None:
                applier(state, event, ctx)


def post_process_state(
    state: State, want: Want, ctx: StateContext, *, sections: Sequence[Section] | None = None
) -> None:
    """Turn each section's intermediate structures into the keys clients read."""
    for section in wanted_sections(want, sections):
        if section.post_process is not None:
            section.post_process(state, ctx)
