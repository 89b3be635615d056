"""The user's own settings of the streams they are subscribed to: color,
muted (and its legacy inverse `in_home_view`), pinned."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from generation.actions.base import ActionContext, ActionError, Connection, UserRow, get_user
from generation.actions.streams.common import _can_see, _is_subscribed, _lock_streams

_HEX_COLOR = re.compile(r"#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})")
_BOOLEAN_PROPERTIES = ("is_muted", "in_home_view", "pin_to_top")
SUBSCRIPTION_PROPERTIES = ("color", *_BOOLEAN_PROPERTIES)


def _check_property(prop: str, value: Any) -> Any:
    """The value to store for a subscription property (colors normalized to
    lowercase #rrggbb), or ActionError."""
    if prop == "color":
        if not isinstance(value, str) or not _HEX_COLOR.fullmatch(value):
            raise ActionError("color is not a valid hex color code")
        digits = value[1:].lower()
        if len(digits) == 3:
            digits = "".join(digit * 2 for digit in digits)
        return "#" + digits
    if prop in _BOOLEAN_PROPERTIES:
        if not isinstance(value, bool):
            raise ActionError(f"{prop} is not a boolean")
        return value
    raise ActionError(f"Unknown subscription property: {prop}")


async def do_update_subscription_properties(
    ctx: ActionContext, user_id: int, changes: Sequence[tuple[int, str, Any]]
) -> list[dict[str, Any]]:
    """Change the user's own settings of streams they are subscribed to:
    (stream id, property, value) each, all or none. Each change sends its
    `subscription` update to the user only; `is_muted` and its legacy
    inverse `in_home_view` always go together (two events, as Zulip's).
    Returns the changes as stored."""
    clean = [(stream_id, prop, _check_property(prop, value)) for stream_id, prop, value in changes]
    async with ctx.transaction() as outbox:
        conn = ctx.conn
        user = await get_user(conn, user_id)
        for stream_id, prop, value in clean:
            await _check_subscribed(conn, user, stream_id)
            stored = value
            if prop == "color":
                column, events = "color", [("color", value)]
            elif prop == "pin_to_top":
                column, events = "pin_to_top", [("pin_to_top", value)]
            else:
                stored = value if prop == "is_muted" else not value
                column, events = "is_muted", [("in_home_view", not stored), ("is_muted", stored)]
            await conn.execute(
                f"UPDATE subscriptions SET {column} = %s"  # noqa: S608 (fixed column names)
                " WHERE user_id = %s AND stream_id = %s",
                (stored, user.id, stream_id),
            )
            for name, event_value in events:
                event = {
                    "type": "subscription",
                    "op": "update",
                    "stream_id": stream_id,
                    "property": name,
                    "value": event_value,
                }
                outbox.send(user.realm_id, event, [user.id])
    return [
        {"stream_id": stream_id, "property": prop, "value": value}
        for stream_id, prop, value in clean
    ]


async def _check_subscribed(conn: Connection, user: UserRow, stream_id: int) -> None:
    found = await _lock_streams(conn, user.realm_id, "id = %s", (stream_id,))
    if not found or not await _can_see(conn, user, found[0]):
        raise ActionError("Invalid channel ID")
    if not await _is_subscribed(conn, user.id, stream_id):
        raise ActionError(f"Not subscribed to channel ID {stream_id}")
