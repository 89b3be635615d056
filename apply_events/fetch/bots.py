"""The `realm_bot` section: the bots the registering user may administer
(`realm_bots`), from one query over the realm's bots whatever their number
(at most `generation.actions.bots.MAX_BOTS_PER_OWNER` per owner)."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg.rows import class_row

from apply_events.appliers import bots as appliers
from apply_events.fetch.users import UserGone
from apply_events.section import Section
from apply_events.state import State, StateContext
from generation.events.bots import bot_entry

Connection = psycopg.AsyncConnection[Any]


@dataclasses.dataclass(frozen=True, slots=True)
class _BotRow:
    id: int
    email: str
    full_name: str
    bot_type: int
    is_active: bool
    bot_owner_id: int


async def fetch_realm_bots(conn: Connection, ctx: StateContext) -> State:
    """Every bot of the realm, active or not, and who registers; which bots
    they are shown is post-processing's (`appliers.post_process_realm_bots`)."""
    cur = await conn.execute(
        "SELECT role, is_bot FROM users WHERE id = %s AND realm_id = %s",
        (ctx.user_id, ctx.realm_id),
    )
    me = await cur.fetchone()
    if me is None:
        raise UserGone(ctx.user_id)
    rows = conn.cursor(row_factory=class_row(_BotRow))
    await rows.execute(
        "SELECT id, email, full_name, bot_type, is_active, bot_owner_id"
        " FROM users WHERE realm_id = %s AND is_bot ORDER BY id",
        (ctx.realm_id,),
    )
    return {
        "raw_bots": {
            row.id: dict(
                bot_entry(
                    user_id=row.id,
                    email=row.email,
                    full_name=row.full_name,
                    bot_type=row.bot_type,
                    is_active=row.is_active,
                    owner_id=row.bot_owner_id,
                )
            )
            for row in await rows.fetchall()
        },
        "raw_bots_viewer": appliers.viewer(ctx.user_id, me[0], me[1]),
    }


SECTIONS: tuple[Section, ...] = (
    Section(
        "realm_bot",
        fetch_realm_bots,
        appliers.APPLIERS,
        post_process=appliers.post_process_realm_bots,
        state=appliers.RealmBotsState,
    ),
)
