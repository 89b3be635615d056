"""A user's status: a short text, an emoji, and Zulip's legacy `away`.

Zulip's rules (`POST users/me/status`): each field the request leaves out
(None) keeps its value, an empty string clears it, and an emoji is set or
cleared as a whole (name, code and type); the emoji follows the rules of a
new reaction (`check_emoji`: one of the realm's active custom emoji, by
name or by its id as the code, is accepted, a deactivated one refused; a
status set before its emoji was deactivated keeps it). The `user_status`
event carries exactly the fields the request set and goes to every active
user of the realm who may see the user (Zulip's
`get_user_ids_who_can_access_user`: everyone, unless the realm restricts
its guests, generation/actions/access.py).

`GET users/{id}/status` reads one user's status (`user_status`) as
register's `user_status` shows it.
"""

from __future__ import annotations

from typing import Any

from generation.actions.access import users_who_can_access
from generation.actions.base import ActionContext, ActionError, Connection, get_user
from generation.actions.messages.reactions import check_emoji
from generation.events.personal import format_status

# Zulip's limit on `status_text`.
MAX_STATUS_TEXT = 60


async def user_status(conn: Connection, realm_id: int, user_id: int) -> dict[str, Any]:
    """The status of a user of the realm (`{}` if they never set one), with
    Zulip's refusals (`access_user_by_id`): "No such user" for an id that is
    no user of the realm or a bot, "User is deactivated" for a deactivated
    user."""
    cur = await conn.execute(
        """
        SELECT u.is_bot, u.is_active, s.away, s.status_text, s.emoji_name, s.emoji_code,
               s.reaction_type
        FROM users u LEFT JOIN user_statuses s ON s.user_id = u.id
        WHERE u.id = %s AND u.realm_id = %s
        """,
        (user_id, realm_id),
    )
    row = await cur.fetchone()
    if row is None or row[0]:
        raise ActionError("No such user")
    if not row[1]:
        raise ActionError("User is deactivated")
    if row[2] is None:  # no status row
        return {}
    return format_status(
        away=row[2],
        status_text=row[3],
        emoji_name=row[4],
        emoji_code=row[5],
        reaction_type=row[6],
    )


async def do_update_user_status(
    ctx: ActionContext,
    user_id: int,
    *,
    away: bool | None = None,
    status_text: str | None = None,
    emoji_name: str | None = None,
    emoji_code: str | None = None,
    reaction_type: str | None = None,
) -> None:
    """Change the fields of the user's status that are given (see the
    module's docstring); one `user_status` event to every active user who
    may see the user, even when nothing changed (as Zulip)."""
    if status_text is not None:
        status_text = status_text.strip()
        if len(status_text) > MAX_STATUS_TEXT:
            raise ActionError(f"status_text is too long (limit: {MAX_STATUS_TEXT} characters)")
        if "\x00" in status_text:
            raise ActionError("status_text must not contain null bytes")
    if away is None and status_text is None and emoji_name is None:
        raise ActionError("Client did not pass any new values.")
    if emoji_name is None and (emoji_code or reaction_type):
        raise ActionError(
            "Client must pass emoji_name if they pass either emoji_code or reaction_type."
        )
    user = await get_user(ctx.conn, user_id)
    async with ctx.transaction() as outbox:
        emoji: tuple[str, str, str] | None = None
        if emoji_name == "":
            emoji = ("", "", "unicode_emoji")  # clears the emoji
        elif emoji_name is not None:
            emoji = await check_emoji(
                ctx.conn, user.realm_id, emoji_name, emoji_code, reaction_type
            )
        await ctx.conn.execute(
            "INSERT INTO user_statuses (user_id) VALUES (%s) ON CONFLICT DO NOTHING", (user.id,)
        )
        await ctx.conn.execute(
            """
            UPDATE user_statuses SET
                away = coalesce(%(away)s, away),
                status_text = coalesce(%(text)s, status_text),
                emoji_name = coalesce(%(name)s, emoji_name),
                emoji_code = coalesce(%(code)s, emoji_code),
                reaction_type = coalesce(%(type)s, reaction_type)
            WHERE user_id = %(user)s
            """,
            {
                "away": away,
                "text": status_text,
                "name": None if emoji is None else emoji[0],
                "code": None if emoji is None else emoji[1],
                "type": None if emoji is None else emoji[2],
                "user": user.id,
            },
        )
        event: dict[str, Any] = {"type": "user_status", "user_id": user.id}
        if away is not None:
            event["away"] = away
        if status_text is not None:
            event["status_text"] = status_text
        if emoji is not None:
            event["emoji_name"], event["emoji_code"], event["reaction_type"] = emoji
        outbox.send(
            user.realm_id, event, await users_who_can_access(ctx.conn, user.realm_id, user.id)
        )
