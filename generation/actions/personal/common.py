"""What the personal actions share: the channels a user may name in their
own preferences (`_accessible_stream`), and serializing one user's changes
to their own rows (`_lock_user`).

Its underscored names belong to this package: its modules share them, and
nothing outside it uses them.
"""

from __future__ import annotations

import dataclasses

from psycopg.rows import class_row

from generation.actions.base import ActionError, Connection, UserRow


@dataclasses.dataclass(frozen=True, slots=True)
class _Stream:
    id: int
    name: str


async def _accessible_stream(conn: Connection, user: UserRow, stream_id: int) -> _Stream:
    """An active channel of the user's realm that the user may access now:
    one they are subscribed to, or a public one unless they are a guest
    (Zulip's `access_stream_by_id`). Any other is reported as Zulip reports
    a channel that does not exist."""
    cur = conn.cursor(row_factory=class_row(_Stream))
    await cur.execute(
        """
        SELECT s.id, s.name FROM streams s
        WHERE s.id = %(stream)s AND s.realm_id = %(realm)s AND NOT s.deactivated
          AND ((NOT s.invite_only AND NOT %(guest)s)
               OR EXISTS (SELECT 1 FROM subscriptions sub WHERE sub.stream_id = s.id
                          AND sub.user_id = %(user)s AND sub.active))
        """,
        {"stream": stream_id, "realm": user.realm_id, "guest": user.is_guest, "user": user.id},
    )
    found = await cur.fetchone()
    if found is None:
        raise ActionError("Invalid channel ID")
    return found


async def _stream_id_by_name(conn: Connection, user: UserRow, name: str) -> int:
    """The id of the channel the user may access with this name (any letter
    case); Zulip's error for any other."""
    if "\x00" in name or len(name) > 60:
        raise ActionError(f"Invalid channel name '{name}'")  # no channel has such a name
    cur = await conn.execute(
        """
        SELECT s.id FROM streams s
        WHERE s.realm_id = %(realm)s AND NOT s.deactivated AND lower(s.name) = lower(%(name)s)
          AND ((NOT s.invite_only AND NOT %(guest)s)
               OR EXISTS (SELECT 1 FROM subscriptions sub WHERE sub.stream_id = s.id
                          AND sub.user_id = %(user)s AND sub.active))
        """,
        {"realm": user.realm_id, "name": name, "guest": user.is_guest, "user": user.id},
    )
    row = await cur.fetchone()
    if row is None:
        raise ActionError(f"Invalid channel name '{name}'")
    return int(row[0])


async def _lock_user(conn: Connection, user_id: int) -> None:
    """Serialize one user's changes to their own rows, so that a per-user
    limit counted in one transaction holds against a concurrent one, and
    each event's full list is the list as of its own commit."""
    await conn.execute("SELECT 1 FROM users WHERE id = %s FOR NO KEY UPDATE", (user_id,))
