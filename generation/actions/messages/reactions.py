"""Emoji reactions to messages."""

from __future__ import annotations

import re
from typing import Any

from generation.actions.base import ActionContext, ActionError, UserRow, get_user
from generation.actions.messages.common import _audience, _messages

REACTION_TYPES = ("unicode_emoji", "realm_emoji", "zulip_extra_emoji")

_EMOJI_NAME = re.compile(r"[a-z0-9_+-]{1,60}")
_EMOJI_CODE = re.compile(r"[0-9a-f]{1,8}(-[0-9a-f]{1,8}){0,9}")

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


def check_emoji(
    name: str | None, code: str | None, reaction_type: str | None
) -> tuple[str, str, str]:
    """(name, code, type) of a reaction (or a status emoji) from what a client gave: a Unicode
    emoji by name (common names only) or by name and code, or Zulip's extra
    emoji `zulip`. eventq has no custom (realm) emoji."""
    kind = reaction_type or "unicode_emoji"
    if kind not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{kind}'")
    if name is None or not _EMOJI_NAME.fullmatch(name):
        raise ActionError("Invalid emoji name.")
    if kind == "realm_emoji":
        raise ActionError("Invalid custom emoji.")
    if kind == "zulip_extra_emoji":
        if name != "zulip" or code not in (None, "zulip"):
            raise ActionError("Invalid emoji name.")
        return name, "zulip", kind
    known = EMOJI_CODES.get(name)
    if code is None:
        if known is None:
            raise ActionError(f"Emoji '{name}' does not exist")
        return name, known, kind
    if not _EMOJI_CODE.fullmatch(code):
        raise ActionError("Invalid emoji code.")
    if known is not None and known != code:
        raise ActionError("Invalid emoji name.")
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


async def do_add_reaction(
    ctx: ActionContext,
    user_id: int,
    message_id: int,
    emoji_name: str,
    emoji_code: str | None = None,
    reaction_type: str | None = None,
) -> None:
    """React to a message the user can see with an emoji; a `reaction` add
    event to everyone who may see the message."""
    conn = ctx.conn
    emoji = check_emoji(emoji_name, emoji_code, reaction_type)
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        [message] = await _messages(conn, user, [message_id])
        cur = await conn.execute(
            """
            INSERT INTO reactions (message_id, user_id, emoji_name, emoji_code, reaction_type)
            VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
            """,
            (message.id, user.id, *emoji),
        )
        if not cur.rowcount:
            raise ActionError("Reaction already exists.", "REACTION_ALREADY_EXISTS")
        audience = await _audience(conn, [message])
        outbox.send(
            user.realm_id, _reaction_event("add", user, message.id, emoji), sorted(audience)
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
    `emoji_name`; a `reaction` remove event to everyone who may see the
    message."""
    conn = ctx.conn
    kind = reaction_type or "unicode_emoji"
    if kind not in REACTION_TYPES:
        raise ActionError(f"Invalid emoji type: '{kind}'")
    if emoji_name is None and emoji_code is None:
        raise ActionError(
            "At least one of the following arguments must be present: emoji_name, emoji_code"
        )
    if emoji_code is not None and not (_EMOJI_CODE.fullmatch(emoji_code) or emoji_code == "zulip"):
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
            RETURNING emoji_name, emoji_code, reaction_type
            """,  # noqa: S608 (a fixed condition)
            (message.id, user.id, *value),
        )
        removed = await cur.fetchall()
        if not removed:
            raise ActionError("Reaction doesn't exist.", "REACTION_DOES_NOT_EXIST")
        audience = sorted(await _audience(conn, [message]))
        for name, code, removed_kind in removed:
            event = _reaction_event("remove", user, message.id, (name, code, removed_kind))
            outbox.send(user.realm_id, event, audience)
