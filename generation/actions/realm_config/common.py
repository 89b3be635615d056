"""What the realm configuration's actions share: who may change the
configuration, and RFC 6570 URL templates (linkifiers and playgrounds)."""

from __future__ import annotations

import re

from generation.actions.base import ActionError, Connection, UserRow, get_user

# -- who may ----------------------------------------------------------------------


async def require_admin(conn: Connection, actor_id: int | None, realm_id: int) -> None:
    """Zulip's `require_realm_admin`: an administrator (or owner) of the
    realm; `actor_id` None is the operator (the command line)."""
    if actor_id is not None and not (await get_user(conn, actor_id, realm_id)).is_admin:
        raise ActionError("Must be an organization administrator", "UNAUTHORIZED", 403)


async def require_member(conn: Connection, actor_id: int, realm_id: int) -> UserRow:
    """Zulip's `require_member_or_admin`: any active user of the realm but a
    guest."""
    user = await get_user(conn, actor_id, realm_id)
    if user.is_guest:
        raise ActionError("Not allowed for guest users", "UNAUTHORIZED", 403)
    return user


# -- RFC 6570 URL templates ----------------------------------------------------------

MAX_URL_TEMPLATE_LENGTH = 1000

# A variable name: letters, digits, '_' or percent-escapes, in dot-separated
# parts; with a prefix (":1" to ":9999") or explode ("*") modifier.
_VARCHAR = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_VARSPEC = rf"({_VARCHAR}+(?:\.{_VARCHAR}+)*)(?::[1-9][0-9]{{0,3}}|\*)?"
# An expression: an optional operator of levels 2-4 (RFC 6570 reserves
# "=,!@|" for future extensions: refused, as Zulip's validator does), then
# one or more variables.
_EXPRESSION = re.compile(rf"\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*\}}")
_VARIABLE = re.compile(_VARSPEC)
# A literal: any character but controls, space and "'%<>\^`{|}, or a
# percent-escape.
_LITERAL = re.compile(r"(?:[^\x00-\x20\"'%<>\\^`{|}\x7f]|%[0-9A-Fa-f]{2})+")


def template_variables(template: str) -> set[str] | None:
    """The variable names of an RFC 6570 URL template (levels 1-4), None
    if `template` is not one."""
    names: set[str] = set()
    position = 0
    while position < len(template):
        expression = _EXPRESSION.match(template, position)
        if expression is not None:
            inner = expression.group(0)[1:-1].lstrip("+#./;?&")
            names.update(match.group(1) for match in _VARIABLE.finditer(inner))
            position = expression.end()
            continue
        literal = _LITERAL.match(template, position)
        if literal is None:
            return None
        position = literal.end()
    return names


def check_url_template(template: str) -> set[str]:
    """The variables of a valid URL template; else Zulip's error."""
    if len(template) > MAX_URL_TEMPLATE_LENGTH:
        raise ActionError(f"url_template is too long (limit: {MAX_URL_TEMPLATE_LENGTH} characters)")
    names = template_variables(template)
    if not template or names is None:
        raise ActionError("Invalid URL template.")
    return names
