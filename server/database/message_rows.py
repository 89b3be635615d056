"""Stored messages as Zulip's clients read them in history (`GET
/messages`, `GET /messages/{id}`): the message object of a `message` event
(generation/events/messages.py, `MessageObject`), with the reader's own
`flags` and, for an edited message, `last_edit_timestamp`. A sender the
reader may not see (a guest of a realm that restricts them,
generation/actions/access.py) is shown as "Unknown user", as Zulip's
`MessageDict.post_process_dicts` does; `display_recipient` is left as is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from generation.actions.access import (
    INACCESSIBLE_AVATAR_URL,
    INACCESSIBLE_USER_NAME,
    inaccessible_email,
    inaccessible_user_ids,
)
from generation.actions.messages.send import avatar_url
from generation.actions.messages.submessages import submessage_dicts
from generation.markdown import is_me_message

Connection = psycopg.AsyncConnection[Any]

# A message stored before eventq recorded the sending client.
UNKNOWN_CLIENT = "Internal"
# Zulip's flags of a message the reader has no row for (a channel's history).
HISTORICAL_FLAGS = ("read", "historical")


def _flags(
    has_row: bool, read: bool, starred: bool, mentioned: bool, wildcard: bool, alerted: bool
) -> list[str]:
    """The reader's flags in Zulip's order."""
    if not has_row:
        return list(HISTORICAL_FLAGS)
    flags = []
    if read:
        flags.append("read")
    if starred:
        flags.append("starred")
    if mentioned:
        flags.append("mentioned")
    if wildcard:
        flags.append("wildcard_mentioned")
    if alerted:
        flags.append("has_alert_word")
    return flags


async def message_dicts(
    conn: Connection,
    user_id: int,
    realm_id: int,
    ids: Sequence[int],
    *,
    apply_markdown: bool,
    client_gravatar: bool,
) -> list[dict[str, Any]]:
    """The messages `ids` (already known visible to `user_id`), by id."""
    if not ids:
        return []
    cur = await conn.execute(
        """
        SELECT m.id, m.sender_id, su.email, su.full_name, m.stream_id, s.name, m.topic,
               m.participant_ids, m.content, m.rendered_content,
               extract(epoch FROM m.date_sent)::bigint,
               extract(epoch FROM m.last_edit_time)::bigint, m.client,
               um.user_id IS NOT NULL, COALESCE(um.read, false), COALESCE(um.starred, false),
               COALESCE(um.mentioned, false), COALESCE(um.wildcard_mentioned, false),
               COALESCE(um.has_alert_word, false)
        FROM messages m
        JOIN users su ON su.id = m.sender_id
        LEFT JOIN streams s ON s.id = m.stream_id
        LEFT JOIN user_messages um ON um.message_id = m.id AND um.user_id = %(me)s
        WHERE m.id = ANY(%(ids)s) AND m.realm_id = %(realm)s
        ORDER BY m.id
        """,
        {"me": user_id, "ids": list(ids), "realm": realm_id},
    )
    rows = await cur.fetchall()
    reactions = await _reactions(conn, [row[0] for row in rows])
    submessages = await submessage_dicts(conn, [row[0] for row in rows])
    people = await _people(conn, {u for row in rows for u in row[7] or ()})
    cur = await conn.execute("SELECT subdomain FROM realms WHERE id = %s", (realm_id,))
    realm_row = await cur.fetchone()
    subdomain = "" if realm_row is None else str(realm_row[0])
    unseen = await inaccessible_user_ids(conn, realm_id, user_id, {row[1] for row in rows})
    messages = []
    for row in rows:
        (message_id, sender_id, email, full_name, stream_id, stream_name, topic) = row[:7]
        participants, content, rendered, sent, edited, client = row[7:13]
        message: dict[str, Any] = {
            "id": message_id,
            "type": "private" if stream_id is None else "stream",
            "sender_id": sender_id,
            "sender_email": email,
            "sender_full_name": full_name,
            "sender_realm_str": subdomain,
            "avatar_url": None if client_gravatar else avatar_url(email),
            "client": client or UNKNOWN_CLIENT,
            "content": rendered if apply_markdown else content,
            "content_type": "text/html" if apply_markdown else "text/x-markdown",
            "display_recipient": (
                stream_name
                if stream_id is not None
                else [people[u] for u in participants if u in people]
            ),
            "subject": topic,
            "topic_links": [],
            "is_me_message": is_me_message(content),
            "reactions": reactions.get(message_id, []),
            "submessages": submessages.get(message_id, []),
            "timestamp": sent,
            "flags": _flags(*row[13:19]),
        }
        if sender_id in unseen:
            message["sender_email"] = inaccessible_email(sender_id, subdomain)
            message["sender_full_name"] = INACCESSIBLE_USER_NAME
            message["avatar_url"] = INACCESSIBLE_AVATAR_URL
        if stream_id is not None:
            message["stream_id"] = stream_id
        if edited is not None:
            message["last_edit_timestamp"] = edited
        messages.append(message)
    return messages


async def _reactions(conn: Connection, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    cur = await conn.execute(
        """
        SELECT message_id, emoji_name, emoji_code, reaction_type, user_id
        FROM reactions WHERE message_id = ANY(%s)
        ORDER BY message_id, emoji_code, user_id
        """,
        (ids,),
    )
    found: dict[int, list[dict[str, Any]]] = {}
    for message_id, name, code, kind, user_id in await cur.fetchall():
        found.setdefault(message_id, []).append(
            {"emoji_name": name, "emoji_code": code, "reaction_type": kind, "user_id": user_id}
        )
    return found


async def _people(conn: Connection, ids: set[int]) -> dict[int, dict[str, Any]]:
    """The participants of direct messages, as `display_recipient` lists them."""
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT id, email, full_name FROM users WHERE id = ANY(%s)", (sorted(ids),)
    )
    return {
        row[0]: {"id": row[0], "email": row[1], "full_name": row[2], "is_mirror_dummy": False}
        for row in await cur.fetchall()
    }


async def message_content(conn: Connection, message_id: int) -> str:
    """The Markdown of a message (`raw_content`)."""
    cur = await conn.execute("SELECT content FROM messages WHERE id = %s", (message_id,))
    row = await cur.fetchone()
    return "" if row is None else str(row[0])


async def edit_snapshots(conn: Connection, message_id: int) -> list[dict[str, Any]]:
    """Zulip's `message_history`: the message as sent, then as each edit
    left it (with what it changed: `prev_topic`, `prev_content`,
    `prev_rendered_content`), oldest first. Built back from the message as
    it is now through its stored `edit_history` entries."""
    cur = await conn.execute(
        """
        SELECT sender_id, extract(epoch FROM date_sent)::bigint, topic, content,
               rendered_content, COALESCE(edit_history, '[]'::jsonb)
        FROM messages WHERE id = %s
        """,
        (message_id,),
    )
    row = await cur.fetchone()
    if row is None:
        return []
    sender_id, sent, topic, content, rendered, entries = row
    snapshots: list[dict[str, Any]] = []
    for entry in reversed(entries):
        snapshot: dict[str, Any] = {
            "topic": topic,
            "content": content,
            "rendered_content": rendered,
            "user_id": entry.get("user_id"),
            "timestamp": entry.get("timestamp"),
        }
        if "prev_topic" in entry:
            snapshot["prev_topic"] = entry["prev_topic"]
            topic = entry["prev_topic"]
        if "prev_content" in entry:
            snapshot["prev_content"] = entry["prev_content"]
            snapshot["prev_rendered_content"] = entry.get("prev_rendered_content", "")
            content = entry["prev_content"]
            rendered = entry.get("prev_rendered_content", "")
        snapshots.append(snapshot)
    original = {
        "topic": topic,
        "content": content,
        "rendered_content": rendered,
        "user_id": sender_id,
        "timestamp": sent,
    }
    return [original, *reversed(snapshots)]
