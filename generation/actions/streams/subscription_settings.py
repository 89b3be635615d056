"""The user's own settings of the streams they are subscribed to: color,
muted (and its legacy inverse `in_home_view`), pinned, and the channel's
notification settings (`SUBSCRIPTION_NOTIFICATIONS`: each None until set,
then the user's own setting applies; Zulip's), with how a subscription
object shows them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from generation.actions.base import ActionContext, ActionError, Connection, UserRow, get_user
from generation.actions.streams.common import _can_see, _is_subscribed, _lock_streams
from generation.events.streams import SUBSCRIPTION_NOTIFICATIONS

_HEX_COLOR = re.compile(r"#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})")
# Zulip accepts only true or false for each (its `check_bool`), though a
# subscription object shows an unset notification setting as null: no
# request sets one back to null.
_BOOLEAN_PROPERTIES = ("is_muted", "in_home_view", "pin_to_top", *SUBSCRIPTION_NOTIFICATIONS)
SUBSCRIPTION_PROPERTIES = ("color", *_BOOLEAN_PROPERTIES)

# The columns of a `subscriptions` row that `subscription_settings` reads, in
# its order (the table's alias, if any, is the caller's to add).
SETTINGS_COLUMNS = ("color", "is_muted", "pin_to_top", *SUBSCRIPTION_NOTIFICATIONS)


def settings_sql(alias: str = "") -> str:
    """`SETTINGS_COLUMNS` for a SELECT list, each prefixed with `alias.`."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column for column in SETTINGS_COLUMNS)


def subscription_settings(values: Sequence[Any]) -> dict[str, Any]:
    """The user's settings as a subscription object shows them, from the
    values of `SETTINGS_COLUMNS`: with `in_home_view`, and the notification
    settings as stored (None: the user's setting applies)."""
    color, is_muted, pin_to_top, *notifications = values
    return {
        "color": color,
        "is_muted": is_muted,
        "in_home_view": not is_muted,
        "pin_to_top": pin_to_top,
        **dict(zip(SUBSCRIPTION_NOTIFICATIONS, notifications, strict=True)),
    }


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
            elif prop in ("pin_to_top", *SUBSCRIPTION_NOTIFICATIONS):
                column, events = prop, [(prop, value)]
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
