"""Emoji reactions to messages, and the emoji rules they share with the
user status (`check_emoji`).

An emoji is Unicode (`unicode_emoji`: its code is its code points), one of
the realm's custom emoji (`realm_emoji`: its code is the custom emoji's id,
generation/actions/realm_config/emoji.py) or Zulip's extra emoji `zulip`.
Zulip's rules (zerver/lib/emoji.py): a client may name an emoji by name
alone, and an active custom emoji of that name wins over a Unicode one;
a new reaction or status may use only an active custom emoji, while a
reaction of one deactivated since stays, may still be removed, and may
still be voted for (reacting with the same emoji as someone already did
takes that reaction's name, unchecked).

In a realm that restricts its guests (generation/actions/access.py), a guest
who has the message but may not see the reactor gets the event's `user`
(Zulip's legacy duplicate of `user_id`) as "Unknown user" with the
reactor's placeholder address, as a message's sender is shown to them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from generation.actions.access import (
    INACCESSIBLE_USER_NAME,
    guests_not_seeing,
    inaccessible_email,
    realm_subdomain,
)
from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    UserRow,
    get_user,
)
from generation.actions.messages.common import _audience, _messages

REACTION_TYPES = ("unicode_emoji", "realm_emoji", "zulip_extra_emoji")

# A name: Zulip's Unicode names, and custom emoji names (lower-case letters,
# digits, '.', '-', '_'; at most 100 characters, realm_config/emoji.py).
_EMOJI_NAME = re.compile(r"[a-z0-9_.+-]{1,100}")
_EMOJI_CODE = re.compile(r"[0-9a-f]{1,8}(-[0-9a-f]{1,8}){0,9}")
# A custom emoji's code: its id, a positive bigint.
_REALM_EMOJI_CODE = re.compile(r"[1-9][0-9]{0,18}")
_MAX_ID = 2**63 - 1

# Zulip's names of common Unicode emoji, for reactions sent by name only.
# (Zulip resolves names through its full emoji table; a client may always
# send `emoji_code` for any other emoji.)
EMOJI_CODES = {
    "+1": "1f44d", "thumbs_up": "1f44d", "-1": "1f44e", "thumbs_down": "1f44e",
    "tada": "1f389", "heart": "2764", "smile": "1f604", "smiley": "1f603",
    "grinning": "1f600", "joy": "1f602", "laughing": "1f606", "slight_smile": "1f642",
    "wink": "1f609", "thinking": "1f914", "cry": "1f622", "sob": "1f62d",
    "eyes": "1f440", "fire": "1f525", "rocket": "1f680", "clap": "1f44f",
    "wave": "1f44b", "pray": "1f64f", "star": "2b50", "100": "1f4af",
    "heart_eyes": "1f60d", "octopus": "1f419", "check": "2705", "x": "274c",
    "question": "2753", "exclamation": "2757", "working_on_it": "1f6e0",
    "coffee": "2615", "zzz": "1f4a4", "muscle": "1f4aa", "ok": "1f197",
}  # fmt: skip


def _realm_emoji_id(code: str) -> int | None:
    """The custom emoji id a code names, None if it names none."""
    if not _REALM_EMOJI_CODE.fullmatch(code) or int(code) > _MAX_ID:
        return None
    return int(code)


async def resolve_emoji(
    conn: Connection, realm_id: int, name: str, code: str | None, reaction_type: str | None
) -> tuple[str, str]:
    """(code, type) of an emoji as a client named it, Zulip's defaults filling
    what it left out (`get_emoji_data`): the realm's active custom emoji of
    that name, else `zulip`, else a Unicode emoji eventq knows by name. A
    name eventq does not know, with a code, is Unicode (eventq has no full
    table of Unicode names). Not yet checked: see `check_emoji_request`."""
    if reaction_type is not None and reaction_type not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{reaction_type}'")
    if code is not None and reaction_type is not None:
        return code, reaction_type
    if not _EMOJI_NAME.fullmatch(name):
        raise ActionError("Invalid emoji name.")
    cur = await conn.execute(
        "SELECT id FROM realm_emoji WHERE realm_id = %s AND name = %s AND NOT deactivated",
        (realm_id, name),
    )
    row = await cur.fetchone()
    found: tuple[str, str] | None
    if row is not None:
        found = (str(row[0]), "realm_emoji")
    elif name == "zulip":
        found = ("zulip", "zulip_extra_emoji")
    elif name in EMOJI_CODES:
        found = (EMOJI_CODES[name], "unicode_emoji")
    elif code is not None:
        found = (code, "unicode_emoji")
    else:
        raise ActionError(f"Emoji '{name}' does not exist")
    return code if code is not None else found[0], reaction_type or found[1]


def _well_formed(code: str, reaction_type: str) -> bool:
    """Whether `code` has the form of a code of its type (every stored
    reaction's has): a code that does not is never looked up."""
    if reaction_type == "realm_emoji":
        return _realm_emoji_id(code) is not None
    if reaction_type == "zulip_extra_emoji":
        return code == "zulip"
    return _EMOJI_CODE.fullmatch(code) is not None


async def check_emoji_request(
    conn: Connection, realm_id: int, name: str, code: str, reaction_type: str
) -> None:
    """`ActionError` unless (name, code, type) is an emoji a new reaction or
    status may use in the realm (Zulip's `check_emoji_request`)."""
    if reaction_type == "realm_emoji":
        emoji_id = _realm_emoji_id(code)
        row = None
        if emoji_id is not None:
            cur = await conn.execute(
                "SELECT name, deactivated FROM realm_emoji WHERE id = %s AND realm_id = %s",
                (emoji_id, realm_id),
            )
            row = await cur.fetchone()
        if row is None:
            raise ActionError("Invalid custom emoji.")
        if row[0] != name:
            raise ActionError("Invalid custom emoji name.")
        if row[1]:
            raise ActionError("This custom emoji has been deactivated.")
    elif reaction_type == "zulip_extra_emoji":
        if code != "zulip":
            raise ActionError("Invalid emoji code.")
        if name != code:
            raise ActionError("Invalid emoji name.")
    else:
        if not _EMOJI_NAME.fullmatch(name):
            raise ActionError("Invalid emoji name.")
        if not _EMOJI_CODE.fullmatch(code):
            raise ActionError("Invalid emoji code.")
        known = EMOJI_CODES.get(name)
        if known is not None and known != code:
            raise ActionError("Invalid emoji name.")


async def check_emoji(
    conn: Connection, realm_id: int, name: str, code: str | None, reaction_type: str | None
) -> tuple[str, str, str]:
    """(name, code, type) of a new reaction or status emoji from what a
    client gave, checked: `resolve_emoji`, then `check_emoji_request`."""
    code, kind = await resolve_emoji(conn, realm_id, name, code, reaction_type)
    await check_emoji_request(conn, realm_id, name, code, kind)
    return name, code, kind


def _reaction_event(
    op: str, user: UserRow, message_id: int, emoji: tuple[str, str, str]
) -> dict[str, Any]:
    name, code, kind = emoji
    return {
        "type": "reaction",
        "op": op,
        "message_id": message_id,
        "emoji_name": name,
        "emoji_code": code,
        "reaction_type": kind,
        "user_id": user.id,
        "user": {"user_id": user.id, "email": user.email, "full_name": user.full_name},
    }


# The realm's flag (generation/actions/access.py), read by the statement
# that writes the reaction: an unrestricted realm pays no query for the rule.
_GUESTS_SEE_ALL_USERS = "(SELECT guests_see_all_users FROM realms WHERE id = %s)"


async def _send_reaction_events(
    conn: Connection,
    outbox: Outbox,
    user: UserRow,
    audience: set[int],
    events: Sequence[dict[str, Any]],
    *,
    restricted: bool,
) -> None:
    """Send each event to `audience`. When `restricted` (the realm restricts
    its guests), the guests of the audience who may not see `user` (the
    reactor) get it with `user` as "Unknown user", in a notice of their own;
    who they are is asked only when a guest is in the audience."""
    hidden = set(await guests_not_seeing(conn, user.id, audience)) if restricted else set()
    unknown: dict[str, Any] = {}
    if hidden:
        subdomain = await realm_subdomain(conn, user.realm_id)
        unknown = {
            "user_id": user.id,
            "email": inaccessible_email(user.id, subdomain),
            "full_name": INACCESSIBLE_USER_NAME,
        }
    for event in events:
        outbox.send(user.realm_id, event, sorted(audience - hidden))
        if hidden:
            outbox.send(user.realm_id, event | {"user": unknown}, sorted(hidden))


async def do_add_reaction(
    ctx: ActionContext,
    user_id: int,
    message_id: int,
    emoji_name: str,
    emoji_code: str | None = None,
    reaction_type: str | None = None,
) -> None:
    """React to a message the user can see with an emoji; a `reaction` add
    event to everyone who may see the message. The same emoji (code and
    type) as a reaction already on the message is a vote for it: it takes
    that reaction's name, and is not checked (Zulip's `check_add_reaction`:
    a custom emoji deactivated since may still be voted for)."""
    conn = ctx.conn
    # What needs no lookup is refused first, whatever the message.
    if reaction_type is not None and reaction_type not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{reaction_type}'")
    if not _EMOJI_NAME.fullmatch(emoji_name):
        raise ActionError("Invalid emoji name.")
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        [message] = await _messages(conn, user, [message_id])
        code, kind = await resolve_emoji(conn, user.realm_id, emoji_name, emoji_code, reaction_type)
        voted = None
        if _well_formed(code, kind):
            cur = await conn.execute(
                "SELECT emoji_name FROM reactions"
                " WHERE message_id = %s AND emoji_code = %s AND reaction_type = %s LIMIT 1",
                (message.id, code, kind),
            )
            voted = await cur.fetchone()
        if voted is None:
            await check_emoji_request(conn, user.realm_id, emoji_name, code, kind)
        emoji = (emoji_name if voted is None else voted[0], code, kind)
        cur = await conn.execute(
            f"""
            INSERT INTO reactions (message_id, user_id, emoji_name, emoji_code, reaction_type)
            VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
            RETURNING {_GUESTS_SEE_ALL_USERS}
            """,  # noqa: S608 (a fixed subquery)
            (message.id, user.id, *emoji, user.realm_id),
        )
        inserted = await cur.fetchone()
        if inserted is None:
            raise ActionError("Reaction already exists.", "REACTION_ALREADY_EXISTS")
        audience = await _audience(conn, [message])
        await _send_reaction_events(
            conn,
            outbox,
            user,
            audience,
            [_reaction_event("add", user, message.id, emoji)],
            restricted=not inserted[0],
        )


async def do_remove_reaction(
    ctx: ActionContext,
    user_id: int,
    message_id: int,
    emoji_name: str | None = None,
    emoji_code: str | None = None,
    reaction_type: str | None = None,
) -> None:
    """Remove the user's own reaction, named by `emoji_code` (and type) or by
    `emoji_name` (whatever its type: eventq matches the stored name, as it
    has no full table of Unicode names to look codes up in); a `reaction`
    remove event to everyone who may see the message. Nothing is checked
    against the realm's custom emoji, so a reaction of a deactivated one is
    removed like any other (Zulip's `remove_reaction`)."""
    conn = ctx.conn
    kind = reaction_type or "unicode_emoji"
    if kind not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{kind}'")
    if emoji_name is None and emoji_code is None:
        raise ActionError(
            "At least one of the following arguments must be present: emoji_name, emoji_code"
        )
    if emoji_code is not None and not (
        _EMOJI_CODE.fullmatch(emoji_code)
        or emoji_code == "zulip"
        or _realm_emoji_id(emoji_code) is not None
    ):
        raise ActionError("Invalid emoji code.")
    if emoji_code is None and emoji_name is not None and not _EMOJI_NAME.fullmatch(emoji_name):
        raise ActionError("Invalid emoji name.")
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        [message] = await _messages(conn, user, [message_id])
        value: tuple[str | None, ...]
        if emoji_code is not None:
            condition, value = "emoji_code = %s AND reaction_type = %s", (emoji_code, kind)
        else:
            condition, value = "emoji_name = %s", (emoji_name,)
        cur = await conn.execute(
            f"""
            DELETE FROM reactions WHERE message_id = %s AND user_id = %s AND {condition}
            RETURNING emoji_name, emoji_code, reaction_type, {_GUESTS_SEE_ALL_USERS}
            """,  # noqa: S608 (a fixed condition and subquery)
            (message.id, user.id, *value, user.realm_id),
        )
        removed = await cur.fetchall()
        if not removed:
            raise ActionError("Reaction doesn't exist.", "REACTION_DOES_NOT_EXIST")
        audience = await _audience(conn, [message])
        events = [
            _reaction_event("remove", user, message.id, (name, code, removed_kind))
            for name, code, removed_kind, _ in removed
        ]
        await _send_reaction_events(
            conn, outbox, user, audience, events, restricted=not removed[0][3]
        )
