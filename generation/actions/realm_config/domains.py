"""The realm's domains (Zulip's `RealmDomain`): the domains its users'
e-mail addresses may have. Administrators add, change and remove them;
every active user of the realm is told (Zulip's audience), with the one
entry that changed (ops `add`, `change`, `remove`)."""

from __future__ import annotations

import re

from generation.actions.base import ActionContext, ActionError, Connection, active_user_ids
from generation.actions.realm_config.common import require_admin
from generation.events.realm_config import RealmDomain

# Each is in every register and every client's memory; a realm has a few
# (Zulip sets none; 100 is far beyond any organization's own domains).
MAX_DOMAINS = 100
_LABEL = re.compile(r"[a-z0-9-]*")


def check_domain(domain: str) -> None:
    """Zulip's `validate_domain`, with its messages (as "Invalid domain: ...")."""
    problem = _domain_problem(domain)
    if problem is not None:
        raise ActionError(f"Invalid domain: {problem}")


def _domain_problem(domain: str) -> str | None:
    if not domain:
        return "Domain can't be empty."
    if "." not in domain:
        return "Domain must have at least one dot (.)"
    if len(domain) > 255:
        return "Domain is too long"
    if domain[0] == "." or domain[-1] == ".":
        return "Domain cannot start or end with a dot (.)"
    for label in domain.split("."):
        if not label:
            return "Consecutive '.' are not allowed."
        if label[0] == "-" or label[-1] == "-":
            return "Subdomains cannot start or end with a '-'."
        if not _LABEL.fullmatch(label):
            return "Domain can only have letters, numbers, '.' and '-'s."
    return None


async def realm_domains(conn: Connection, realm_id: int) -> list[RealmDomain]:
    """The realm's domains in the order they were added (register's
    `realm_domains`, GET realm/domains)."""
    cur = await conn.execute(
        "SELECT domain, allow_subdomains FROM realm_domains WHERE realm_id = %s ORDER BY id",
        (realm_id,),
    )
    return [RealmDomain(domain=row[0], allow_subdomains=row[1]) for row in await cur.fetchall()]


async def do_add_realm_domain(
    ctx: ActionContext, actor_id: int | None, realm_id: int, domain: str, allow_subdomains: bool
) -> tuple[int, RealmDomain]:
    """Add a domain (stripped, lower-cased, as Zulip does); administrators.
    Its id and the domain as stored."""
    domain = domain.strip().lower()
    check_domain(domain)
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        # One writer at a time per realm, so that the limit holds.
        await ctx.conn.execute("SELECT 1 FROM realms WHERE id = %s FOR UPDATE", (realm_id,))
        cur = await ctx.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE domain = %s)"
            " FROM realm_domains WHERE realm_id = %s",
            (domain, realm_id),
        )
        row = await cur.fetchone()
        assert row is not None
        if row[1]:
            raise ActionError(f"The domain {domain} is already a part of your organization.")
        if row[0] >= MAX_DOMAINS:
            raise ActionError(f"An organization has at most {MAX_DOMAINS} domains.")
        cur = await ctx.conn.execute(
            "INSERT INTO realm_domains (realm_id, domain, allow_subdomains)"
            " VALUES (%s, %s, %s) RETURNING id",
            (realm_id, domain, allow_subdomains),
        )
        inserted = await cur.fetchone()
        assert inserted is not None
        added = RealmDomain(domain=domain, allow_subdomains=allow_subdomains)
        outbox.send(
            realm_id,
            {"type": "realm_domains", "op": "add", "realm_domain": dict(added)},
            await active_user_ids(ctx.conn, realm_id),
        )
    return int(inserted[0]), added


async def do_change_realm_domain(
    ctx: ActionContext, actor_id: int | None, realm_id: int, domain: str, allow_subdomains: bool
) -> None:
    """Whether a domain's subdomains are allowed too; administrators."""
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        cur = await ctx.conn.execute(
            "UPDATE realm_domains SET allow_subdomains = %s"
            " WHERE realm_id = %s AND domain = %s RETURNING id",
            (allow_subdomains, realm_id, domain),
        )
        if await cur.fetchone() is None:
            raise ActionError(f"No entry found for domain {domain}.")
        outbox.send(
            realm_id,
            {
                "type": "realm_domains",
                "op": "change",
                "realm_domain": {"domain": domain, "allow_subdomains": allow_subdomains},
            },
            await active_user_ids(ctx.conn, realm_id),
        )


async def do_remove_realm_domain(
    ctx: ActionContext, actor_id: int | None, realm_id: int, domain: str
) -> None:
    """Remove a domain; administrators."""
    async with ctx.transaction() as outbox:
        await require_admin(ctx.conn, actor_id, realm_id)
        cur = await ctx.conn.execute(
            "DELETE FROM realm_domains WHERE realm_id = %s AND domain = %s RETURNING id",
            (realm_id, domain),
        )
        if await cur.fetchone() is None:
            raise ActionError(f"No entry found for domain {domain}.")
        outbox.send(
            realm_id,
            {"type": "realm_domains", "op": "remove", "domain": domain},
            await active_user_ids(ctx.conn, realm_id),
        )
