"""Linkifiers (Zulip's `RealmFilter`): regular expressions whose matches in
messages and topics clients turn into links, from RFC 6570 URL templates
filled with the pattern's named groups. Administrators add, change, remove
and reorder them; every active user of the realm is told, with all of the
realm's linkifiers in the order they apply (clients without the
`linkifier_url_template` capability get no event: the declaration's rule).

eventq only stores linkifiers and sends them: it never matches a pattern
against anything (its Markdown does not linkify), so a pattern whose
matching would be slow (catastrophic backtracking) costs the server
nothing. Compiling one is what the server does, once per change, and
takes time linear in the pattern's length, which is bounded.
"""

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
from generation.events.realm_config import RealmLinkifier

# Each is in every register and every `realm_linkifiers` event (up to 2 KB
# each): 100 keeps the event under 200 KB (Zulip sets no limit; large
# realms have a few dozen).
MAX_LINKIFIERS = 100
MAX_PATTERN_LENGTH = 1000


async def realm_linkifiers(conn: Connection, realm_id: int) -> list[RealmLinkifier]:
    """The realm's linkifiers in the order they apply (register's
    `realm_linkifiers`, GET realm/linkifiers)."""
    cur = await conn.execute(
        "SELECT pattern, url_template, id FROM realm_linkifiers WHERE realm_id = %s"
        " ORDER BY position, id",
        (realm_id,),
    )
    return [
        RealmLinkifier(pattern=row[0], url_template=row[1], id=row[2])
        for row in await cur.fetchall()
    ]


def check_linkifier(pattern: str, url_template: str) -> None:
    """Zulip's rules: the pattern compiles, the template is an RFC 6570
    template, and the template's variables are exactly the pattern's named
    groups. Patterns use Python's syntax for named groups, `(?P<name>...)`."""
    if not pattern:
        raise ActionError("This field cannot be blank.")  # Django's, as Zulip answers
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ActionError(f"pattern is too long (limit: {MAX_PATTERN_LENGTH} characters)")
    try:
        groups = set(re.compile(pattern).groupindex)
    except (re.error, RecursionError, OverflowError) as exc:
        # RecursionError: deeply nested groups; OverflowError: a repeat
        # count beyond the engine's.
        raise ActionError(f"Bad regular expression: {exc}") from None
    variables = check_url_template(url_template)
    if variables - groups:
        name = min(variables - groups)
        raise ActionError(f"Group {name!r} in URL template is not present in linkifier pattern.")
    if groups - variables:
        name = min(groups - variables)
        raise ActionError(f"Group {name!r} in linkifier pattern is not present in URL template.")


async def _lock_realm(conn: Connection, realm_id: int) -> None:
    """One change of the realm's linkifiers at a time, so that the limit and
    the positions hold."""
    await conn.execute("SELECT 1 FROM realms WHERE id = %s FOR UPDATE", (realm_id,))


async def _pattern_taken(conn: Connection, realm_id: int, pattern: str, but: int) -> None:
    cur = await conn.execute(
        "SELECT 1 FROM realm_linkifiers WHERE realm_id = %s AND pattern = %s AND id <> %s",
        (realm_id, pattern, but),
    )
    if await cur.fetchone() is not None:
        raise ActionError("Realm filter with this Realm and Pattern already exists.")


async def _send(ctx: ActionContext, outbox: Outbox, realm_id: int) -> None:
    """The realm's linkifiers as they are now in the transaction, to every
    active user of the realm."""
    linkifiers = await realm_linkifiers(ctx.conn, realm_id)
    outbox.send(
        realm_id,
        {"type": "realm_linkifiers", "realm_linkifiers": linkifiers},
        await active_user_ids(ctx.conn, realm_id),
    )


async def do_add_linkifier(
    ctx: ActionContext, actor_id: int | None, realm_id: int, pattern: str, url_template: str
) -> int:
    """Add a linkifier, applied after the others (both values stripped, as
    Zulip does); its id. Administrators."""
    pattern, url_template = pattern.strip(), url_template.strip()
    check_linkifier(pattern, url_template)
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        await _lock_realm(ctx.conn, realm_id)
        await _pattern_taken(ctx.conn, realm_id, pattern, 0)
        cur = await ctx.conn.execute(
            "SELECT count(*), coalesce(max(position) + 1, 0) FROM realm_linkifiers"
            " WHERE realm_id = %s",
            (realm_id,),
        )
        row = await cur.fetchone()
        assert row is not None
        if row[0] >= MAX_LINKIFIERS:
            raise ActionError(f"An organization has at most {MAX_LINKIFIERS} linkifiers.")
        cur = await ctx.conn.execute(
            "INSERT INTO realm_linkifiers (realm_id, pattern, url_template, position)"
            " VALUES (%s, %s, %s, %s) RETURNING id",
            (realm_id, pattern, url_template, row[1]),
        )
        inserted = await cur.fetchone()
        assert inserted is not None
        await _send(ctx, outbox, realm_id)
    return int(inserted[0])


async def do_update_linkifier(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    linkifier_id: int,
    pattern: str,
    url_template: str,
) -> None:
    """Change a linkifier's pattern and template; administrators."""
    pattern, url_template = pattern.strip(), url_template.strip()
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        await _lock_realm(ctx.conn, realm_id)
        cur = await ctx.conn.execute(
            "SELECT 1 FROM realm_linkifiers WHERE id = %s AND realm_id = %s",
            (linkifier_id, realm_id),
        )
        if await cur.fetchone() is None:
            raise ActionError("Linkifier not found.")
        check_linkifier(pattern, url_template)
        await _pattern_taken(ctx.conn, realm_id, pattern, linkifier_id)
        await ctx.conn.execute(
            "UPDATE realm_linkifiers SET pattern = %s, url_template = %s WHERE id = %s",
            (pattern, url_template, linkifier_id),
        )
        await _send(ctx, outbox, realm_id)


async def do_remove_linkifier(
    ctx: ActionContext, actor_id: int | None, realm_id: int, linkifier_id: int
) -> None:
    """Remove a linkifier; administrators."""
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        cur = await ctx.conn.execute(
            "DELETE FROM realm_linkifiers WHERE id = %s AND realm_id = %s RETURNING id",
            (linkifier_id, realm_id),
        )
        if await cur.fetchone() is None:
            raise ActionError("Linkifier not found.")
        await _send(ctx, outbox, realm_id)


async def do_reorder_linkifiers(
    ctx: ActionContext, actor_id: int | None, realm_id: int, ordered_ids: list[int]
) -> None:
    """Apply the linkifiers in the order of `ordered_ids`, which names each
    of the realm's linkifiers exactly once; administrators."""
    if len(set(ordered_ids)) < len(ordered_ids):
        raise ActionError("The ordered list must not contain duplicated linkifiers")
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        await _lock_realm(ctx.conn, realm_id)
        cur = await ctx.conn.execute(
            "SELECT id FROM realm_linkifiers WHERE realm_id = %s", (realm_id,)
        )
        if {row[0] for row in await cur.fetchall()} != set(ordered_ids):
            raise ActionError(
                "The ordered list must enumerate all existing linkifiers exactly once"
            )
        if not ordered_ids:
            return  # nothing to order, nothing changed: no event (as Zulip)
        await ctx.conn.execute(
            "UPDATE realm_linkifiers l SET position = o.position"
            " FROM unnest(%s::bigint[]) WITH ORDINALITY AS o(id, position)"
            " WHERE l.id = o.id",
            (ordered_ids,),
        )
        await _send(ctx, outbox, realm_id)
