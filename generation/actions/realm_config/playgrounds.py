"""Code playgrounds (Zulip's `RealmPlayground`): where clients offer to open
a code block of a language. Administrators add and remove them; every
active user of the realm is told, with all of the realm's playgrounds."""

from __future__ import annotations

import re

from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    active_user_ids,
)
from generation.actions.realm_config.common import check_url_template, require_admin
from generation.events.realm_config import RealmPlayground

# Each is in every register and every `realm_playgrounds` event (about 1 KB
# at most): 100 is far more than the languages a team uses (Zulip sets none).
MAX_PLAYGROUNDS = 100
MAX_NAME_LENGTH = 100
# Zulip's RealmPlayground.MAX_PYGMENTS_LANGUAGE_LENGTH and its characters.
MAX_LANGUAGE_LENGTH = 40
_LANGUAGE = re.compile(r"[a-z0-9_+\-./#]+")


async def realm_playgrounds(conn: Connection, realm_id: int) -> list[RealmPlayground]:
    """The realm's playgrounds in the order they were added."""
    cur = await conn.execute(
        "SELECT id, name, pygments_language, url_template FROM realm_playgrounds"
        " WHERE realm_id = %s ORDER BY id",
        (realm_id,),
    )
    return [
        RealmPlayground(id=row[0], name=row[1], pygments_language=row[2], url_template=row[3])
        for row in await cur.fetchall()
    ]


def _check(name: str, pygments_language: str, url_template: str) -> None:
    if not name:
        raise ActionError("This field cannot be blank.")  # Django's, as Zulip answers
    if len(name) > MAX_NAME_LENGTH:
        raise ActionError(f"name is too long (limit: {MAX_NAME_LENGTH} characters)")
    if len(pygments_language) > MAX_LANGUAGE_LENGTH:
        raise ActionError(
            f"pygments_language is too long (limit: {MAX_LANGUAGE_LENGTH} characters)"
        )
    if not _LANGUAGE.fullmatch(pygments_language):
        raise ActionError("Invalid characters in pygments language")
    variables = check_url_template(url_template)
    if "code" not in variables:
        raise ActionError('Missing the required variable "code" in the URL template')
    if len(variables) != 1:
        raise ActionError('"code" should be the only variable present in the URL template')


async def _send(ctx: ActionContext, outbox: Outbox, realm_id: int) -> None:
    """The realm's playgrounds as they are now in the transaction, to every
    active user of the realm."""
    playgrounds = await realm_playgrounds(ctx.conn, realm_id)
    outbox.send(
        realm_id,
        {"type": "realm_playgrounds", "realm_playgrounds": playgrounds},
        await active_user_ids(ctx.conn, realm_id),
    )


async def do_add_realm_playground(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    name: str,
    pygments_language: str,
    url_template: str,
) -> int:
    """Add a playground (each value stripped, as Zulip does); its id.
    Administrators."""
    name, pygments_language = name.strip(), pygments_language.strip()
    url_template = url_template.strip()
    _check(name, pygments_language, url_template)
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        # One writer at a time per realm, so that the limit holds.
        await ctx.conn.execute("SELECT 1 FROM realms WHERE id = %s FOR UPDATE", (realm_id,))
        cur = await ctx.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE pygments_language = %s AND name = %s)"
            " FROM realm_playgrounds WHERE realm_id = %s",
            (pygments_language, name, realm_id),
        )
        row = await cur.fetchone()
        assert row is not None
        if row[1]:
            raise ActionError(
                "Realm playground with this Realm, Pygments language and Name already exists."
            )
        if row[0] >= MAX_PLAYGROUNDS:
            raise ActionError(f"An organization has at most {MAX_PLAYGROUNDS} code playgrounds.")
        cur = await ctx.conn.execute(
            "INSERT INTO realm_playgrounds (realm_id, name, pygments_language, url_template)"
            " VALUES (%s, %s, %s, %s) RETURNING id",
            (realm_id, name, pygments_language, url_template),
        )
        inserted = await cur.fetchone()
        assert inserted is not None
        await _send(ctx, outbox, realm_id)
    return int(inserted[0])


async def do_remove_realm_playground(
    ctx: ActionContext, actor_id: int | None, realm_id: int, playground_id: int
) -> None:
    """Remove a playground of the realm; administrators."""
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        cur = await ctx.conn.execute(
            "DELETE FROM realm_playgrounds WHERE id = %s AND realm_id = %s RETURNING id",
            (playground_id, realm_id),
        )
        if await cur.fetchone() is None:
            raise ActionError("Invalid playground")
        await _send(ctx, outbox, realm_id)
