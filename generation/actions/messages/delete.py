"""Deleting messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generation.actions.base import ActionContext, ActionError, get_user
from generation.actions.messages.common import _audience, _Message, _messages, _outsiders


async def do_delete_messages(ctx: ActionContext, actor_id: int, message_ids: Sequence[int]) -> None:
    """Delete messages (their reactions and flags with them). A user deletes
    their own messages; administrators any they can see. One `delete_message`
    event per channel topic (or direct conversation) to everyone who may see
    its messages."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        actor = await get_user(conn, actor_id)
        messages = await _messages(conn, actor, message_ids, lock=True)
        if not actor.is_admin and any(m.sender_id != actor.id for m in messages):
            raise ActionError("You don't have permission to delete this message")
        groups: dict[tuple[Any, ...], list[_Message]] = {}
        for message in messages:
            key = (
                ("stream", message.stream_id, message.topic)
                if message.stream_id is not None
                else ("private", tuple(message.participant_ids or ()))
            )
            groups.setdefault(key, []).append(message)
        events: list[tuple[dict[str, Any], list[Any]]] = []
        for group in groups.values():
            first = group[0]
            event: dict[str, Any] = {
                "type": "delete_message",
                "message_ids": [m.id for m in group],
                "message_type": first.message_type,
            }
            if first.stream_id is not None:
                event["stream_id"] = first.stream_id
                event["topic"] = first.topic
            audience = await _audience(conn, group)
            # Those who cannot see the channel now hear only of theirs.
            outsiders = await _outsiders(conn, first, [m.id for m in group], audience)
            events.append((event, sorted(audience - outsiders.keys())))
            if outsiders:
                theirs = {key: value for key, value in event.items() if key != "message_ids"}
                held = [{"id": uid, "message_ids": ids} for uid, ids in sorted(outsiders.items())]
                events.append((theirs, held))
        await conn.execute("DELETE FROM messages WHERE id = ANY(%s)", ([m.id for m in messages],))
        for event, users in events:
            outbox.send(actor.realm_id, event, users)
