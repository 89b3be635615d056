"""Submessages: the entries of a message's widget log (widgets.py), the
first written with the message as it is sent, the later ones by its readers
(`POST submessage`: a vote, a new option, a struck task)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from generation.actions.base import ActionContext, ActionError, Connection, get_user
from generation.actions.messages.common import _audience, _messages
from generation.actions.messages.widgets import WIDGET_MSG_TYPE, check_widget_data, widget_type_of

# What a reader posts is a small JSON object (a vote is ~40 characters, a new
# option one line of text); the message's own limit bounds it generously.
MAX_SUBMESSAGE_CHARS = 10_000
# Every copy of a message (its event, each page of history that holds it)
# carries its whole log, at ~150 bytes an entry: 1,000 entries (150 KB) are
# a poll voted on, and re-voted on, by a team of hundreds. Zulip has no limit.
MAX_SUBMESSAGES_PER_MESSAGE = 1000


async def insert_submessage(
    conn: Connection, message_id: int, sender_id: int, msg_type: str, content: str
) -> dict[str, Any]:
    """Store one entry of a message's log; returns it as a message carries
    it (`MessageSubmessage`)."""
    cur = await conn.execute(
        """
        INSERT INTO submessages (message_id, sender_id, msg_type, content)
        VALUES (%s, %s, %s, %s) RETURNING id
        """,
        (message_id, sender_id, msg_type, content),
    )
    row = await cur.fetchone()
    assert row is not None
    return {
        "id": row[0],
        "message_id": message_id,
        "sender_id": sender_id,
        "msg_type": msg_type,
        "content": content,
    }


async def submessage_dicts(
    conn: Connection, message_ids: Sequence[int]
) -> dict[int, list[dict[str, Any]]]:
    """The logs of these messages, by message id, each oldest first."""
    cur = await conn.execute(
        """
        SELECT id, message_id, sender_id, msg_type, content FROM submessages
        WHERE message_id = ANY(%s) ORDER BY message_id, id
        """,
        (list(message_ids),),
    )
    found: dict[int, list[dict[str, Any]]] = {}
    for submessage_id, message_id, sender_id, msg_type, content in await cur.fetchall():
        found.setdefault(message_id, []).append(
            {
                "id": submessage_id,
                "message_id": message_id,
                "sender_id": sender_id,
                "msg_type": msg_type,
                "content": content,
            }
        )
    return found


async def do_add_submessage(
    ctx: ActionContext, user_id: int, message_id: int, msg_type: str, content: str
) -> int:
    """Add an entry to the widget log of a message the user can see; a
    `submessage` event to everyone who may see the message. Returns its id.

    As Zulip: the message's sender starts the log (readers may add to it only
    once the sender has, which a widget message does as it is sent); a
    widget's entries must follow its protocol; only its author edits a
    poll's question or a todo list's title."""
    conn = ctx.conn
    if msg_type != WIDGET_MSG_TYPE:
        raise ActionError(f"Invalid msg_type: {msg_type!r} (only 'widget' is supported)")
    if len(content) > MAX_SUBMESSAGE_CHARS:
        raise ActionError(f"content is too long (limit: {MAX_SUBMESSAGE_CHARS} characters)")
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise ActionError("Invalid json for submessage") from None
    async with ctx.transaction() as outbox:
        user = await get_user(conn, user_id)
        # Locked: the sender's first entry, the count and the widget's type
        # are read against concurrent additions.
        [message] = await _messages(conn, user, [message_id], lock=True)
        cur = await conn.execute(
            """
            SELECT count(*), bool_or(sender_id = %(author)s),
                   (array_agg(content ORDER BY id) FILTER (WHERE msg_type = %(widget)s))[1]
            FROM submessages WHERE message_id = %(message)s
            """,
            {"author": message.sender_id, "widget": WIDGET_MSG_TYPE, "message": message.id},
        )
        row = await cur.fetchone()
        assert row is not None
        count, author_started, widget = row
        is_author = user.id == message.sender_id
        if not is_author and not author_started:
            raise ActionError("You cannot attach a submessage to this message.")
        if count >= MAX_SUBMESSAGES_PER_MESSAGE:
            raise ActionError(
                f"This message has too many submessages (at most {MAX_SUBMESSAGES_PER_MESSAGE:,})"
            )
        check_widget_data(
            None if widget is None else widget_type_of(widget), data, is_author=is_author
        )
        added = await insert_submessage(conn, message.id, user.id, msg_type, content)
        audience = await _audience(conn, [message])
        outbox.send(
            user.realm_id,
            {
                "type": "submessage",
                "msg_type": msg_type,
                "content": content,
                "message_id": message.id,
                "sender_id": user.id,
                "submessage_id": added["id"],
            },
            sorted(audience),
        )
    return int(added["id"])
