"""Scheduled messages: a user's messages to be sent later (Zulip's
ScheduledMessage), scheduled, edited and deleted by their sender, and sent
when due by the server's scheduler (server/scheduling/) through the ordinary
send actions, so that the message, its flags and its events are those of a
message sent then.

Every `scheduled_messages` event goes to the sender only: nobody else knows
of a message before it is sent. A row is deleted once sent (the message is
the record); one that could not be sent is kept, `failed`, until its sender
gives it a new time or deletes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from psycopg.rows import class_row

from generation.actions.access import inaccessible_user_ids
from generation.actions.base import ActionContext, ActionError, Connection, UserRow, get_user
from generation.actions.messages.common import (
    _realm,
    _render,
    _stream_for_sender,
    _users_by_ids_or_emails,
    normalize_content,
    normalize_topic,
)
from generation.actions.messages.send import do_send_direct_message, do_send_stream_message

RecipientType = Literal["stream", "private"]

# Zulip has no limit. Register answers every one of a user's scheduled
# messages, each up to 10,000 characters twice (content, rendered): 100 keep
# that under ~4 MB, and are more than a person queues up by hand.
MAX_SCHEDULED_PER_USER = 100
# Zulip's SCHEDULED_MESSAGE_LATE_CUTOFF_MINUTES: a message the scheduler
# reaches more than 10 minutes after its time (the servers were down) is not
# sent, since its recipients would read it out of context; it fails instead.
LATE_CUTOFF_SECS = 600
# Past the year 9999 PostgreSQL's timestamps and Python's datetimes end.
MAX_TIMESTAMP = 253_402_300_799

NOT_IN_FUTURE = "Scheduled delivery time must be in the future."
# Zulip's refusal of a direct message from a guest to someone they may not
# see (generation/actions/access.py), given when it is scheduled as when sent.
REFUSED_RECIPIENTS = "You do not have permission to access some of the recipients."
LATE = "Message could not be sent at the scheduled time."


def _not_found() -> ActionError:
    return ActionError("Scheduled message does not exist", "BAD_REQUEST", 404)


@dataclasses.dataclass(frozen=True, slots=True)
class _Scheduled:
    """A scheduled message as its actions need it."""

    id: int
    realm_id: int
    sender_id: int
    stream_id: int | None
    topic: str
    participant_ids: list[int] | None
    content: str
    rendered_content: str
    client: str
    read_by_sender: bool
    scheduled_timestamp: int
    failed: bool
    # Seconds since its time (negative before it), by the database's clock.
    late_secs: float


_COLUMNS = """
    id, realm_id, sender_id, stream_id, topic, participant_ids, content, rendered_content,
    client, read_by_sender, extract(epoch FROM scheduled_at)::bigint AS scheduled_timestamp,
    failed, extract(epoch FROM now() - scheduled_at)::float8 AS late_secs
"""


def scheduled_message_dict(
    message_id: int,
    sender_id: int,
    stream_id: int | None,
    topic: str,
    participant_ids: Sequence[int] | None,
    content: str,
    rendered_content: str,
    scheduled_timestamp: int,
    failed: bool,
) -> dict[str, Any]:
    """A scheduled message as its sender sees it (`ScheduledMessageObject`):
    a direct message is `to` its other participants, or to the sender alone."""
    message: dict[str, Any] = {"scheduled_message_id": message_id}
    if stream_id is not None:
        message |= {"type": "stream", "to": stream_id, "topic": topic}
    else:
        others = [uid for uid in participant_ids or () if uid != sender_id]
        message |= {"type": "private", "to": others or [sender_id]}
    return message | {
        "content": content,
        "rendered_content": rendered_content,
        "scheduled_delivery_timestamp": scheduled_timestamp,
        "failed": failed,
    }


def _as_dict(row: _Scheduled) -> dict[str, Any]:
    return scheduled_message_dict(
        row.id, row.sender_id, row.stream_id, row.topic, row.participant_ids, row.content,
        row.rendered_content, row.scheduled_timestamp, row.failed,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class _Addressed:
    """Where a message goes and what it says, checked as if sent now."""

    stream_id: int | None
    topic: str
    participant_ids: list[int] | None
    content: str
    rendered_content: str


async def _check_future(conn: Connection, timestamp: int) -> None:
    if timestamp > MAX_TIMESTAMP:
        raise ActionError("scheduled_delivery_timestamp is too far in the future")
    if timestamp < 0:
        raise ActionError(NOT_IN_FUTURE)  # (and far enough back, no timestamp at all)
    cur = await conn.execute("SELECT to_timestamp(%s) > now()", (timestamp,))
    row = await cur.fetchone()
    if row is None or not row[0]:
        raise ActionError(NOT_IN_FUTURE)


async def _address(
    conn: Connection,
    sender: UserRow,
    kind: RecipientType,
    to: int | Sequence[int],
    topic: str | None,
    content: str,
) -> _Addressed:
    """Zulip's check_message: the channel the sender may post to (and its
    topic), or the direct message's participants, and the content rendered
    (mentioning only whom the sender may see). `to` is a channel id, or
    recipients' ids; a guest of a realm that restricts its guests may write
    only to users they may see (Zulip's `check_sender_can_access_recipients`)."""
    if kind == "stream":
        if not isinstance(to, int):
            raise ActionError("Invalid data type for channel ID")
        stream = await _stream_for_sender(conn, sender, to)
        normalized = normalize_topic(topic or "")
        if not normalized and (await _realm(conn, sender.realm_id)).mandatory_topics:
            raise ActionError("Topics are required in this organization.")
        stream_id, participants = stream.id, None
    else:
        if isinstance(to, int):
            raise ActionError("Invalid data type for recipients")
        if not to:
            raise ActionError("Message must have recipients")
        named = await _users_by_ids_or_emails(conn, sender.realm_id, list(to))
        if sender.is_guest and await inaccessible_user_ids(
            conn, sender.realm_id, sender.id, [user.id for user in named]
        ):
            raise ActionError(REFUSED_RECIPIENTS)
        stream_id, normalized = None, ""
        participants = sorted({user.id for user in named} | {sender.id})
    content = normalize_content(content)
    rendered = await _render(conn, sender.realm_id, content, sender=sender)
    return _Addressed(stream_id, normalized, participants, content, rendered.html)


async def do_schedule_message(
    ctx: ActionContext,
    sender_id: int,
    kind: RecipientType,
    to: int | Sequence[int],
    topic: str | None,
    content: str,
    scheduled_delivery_timestamp: int,
    *,
    read_by_sender: bool | None = None,
    client: str = "Internal",
) -> int:
    """Schedule a message to a channel (`to`: its id; `topic`) or to users
    (`to`: their ids) for `scheduled_delivery_timestamp` (seconds since the
    epoch, in the future); returns its id. Checked as Zulip checks a message
    it sends now. `read_by_sender` (default: unless the message is to the
    sender alone) is whether the sender's copy will be read."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        await _check_future(conn, scheduled_delivery_timestamp)
        sender = await get_user(conn, sender_id)
        # Serializes the sender's scheduling, so that the limit holds.
        await conn.execute("SELECT 1 FROM users WHERE id = %s FOR NO KEY UPDATE", (sender.id,))
        cur = await conn.execute(
            "SELECT count(*) FROM scheduled_messages WHERE sender_id = %s", (sender.id,)
        )
        row = await cur.fetchone()
        if row is not None and row[0] >= MAX_SCHEDULED_PER_USER:
            raise ActionError(
                f"You cannot have more than {MAX_SCHEDULED_PER_USER} scheduled messages"
            )
        addressed = await _address(conn, sender, kind, to, topic, content)
        if read_by_sender is None:
            read_by_sender = addressed.participant_ids != [sender.id]
        cur = await conn.execute(
            """
            INSERT INTO scheduled_messages
                (realm_id, sender_id, stream_id, topic, participant_ids, content,
                 rendered_content, client, read_by_sender, scheduled_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s))
            RETURNING id
            """,
            (
                sender.realm_id, sender.id, addressed.stream_id, addressed.topic,
                addressed.participant_ids, addressed.content, addressed.rendered_content,
                client, read_by_sender, scheduled_delivery_timestamp,
            ),
        )  # fmt: skip
        row = await cur.fetchone()
        assert row is not None
        scheduled_id = int(row[0])
        message = scheduled_message_dict(
            scheduled_id, sender.id, addressed.stream_id, addressed.topic,
            addressed.participant_ids, addressed.content, addressed.rendered_content,
            scheduled_delivery_timestamp, False,
        )  # fmt: skip
        outbox.send(
            sender.realm_id,
            {"type": "scheduled_messages", "op": "add", "scheduled_messages": [message]},
            [sender.id],
        )
    return scheduled_id


async def _own(conn: Connection, sender: UserRow, scheduled_id: int) -> _Scheduled:
    """The sender's scheduled message, locked against the scheduler and
    other edits."""
    cur = conn.cursor(row_factory=class_row(_Scheduled))
    await cur.execute(
        f"SELECT {_COLUMNS} FROM scheduled_messages WHERE id = %s AND sender_id = %s FOR UPDATE",  # noqa: S608 (fixed columns)
        (scheduled_id, sender.id),
    )
    found = await cur.fetchone()
    if found is None:
        raise _not_found()
    return found


async def do_edit_scheduled_message(
    ctx: ActionContext,
    sender_id: int,
    scheduled_id: int,
    *,
    kind: RecipientType | None = None,
    to: int | Sequence[int] | None = None,
    topic: str | None = None,
    content: str | None = None,
    scheduled_delivery_timestamp: int | None = None,
    client: str = "Internal",
) -> None:
    """Change a scheduled message: its type (with new recipients `to`), its
    recipients, topic, content and/or time, with Zulip's rules; a failed one
    needs a new time, and is scheduled again. An `update` event to the
    sender."""
    conn = ctx.conn
    changes = (kind, to, topic, content, scheduled_delivery_timestamp)
    if all(change is None for change in changes):
        raise ActionError("Nothing to change")
    if kind is not None and to is None:
        raise ActionError("Recipient required when updating type of scheduled message.")
    if kind == "stream" and topic is None:
        raise ActionError("Topic required when updating scheduled message type to stream.")
    async with ctx.transaction() as outbox:
        if scheduled_delivery_timestamp is not None:
            await _check_future(conn, scheduled_delivery_timestamp)
        sender = await get_user(conn, sender_id)
        row = await _own(conn, sender, scheduled_id)
        if row.failed and scheduled_delivery_timestamp is None:
            raise ActionError(NOT_IN_FUTURE)
        old_kind: RecipientType = "private" if row.stream_id is None else "stream"
        stream_id, new_topic, participants = row.stream_id, row.topic, row.participant_ids
        new_content, rendered = row.content, row.rendered_content
        if kind is not None or to is not None or content is not None:
            new_kind = kind or old_kind
            if to is not None:
                target: int | Sequence[int] = to
            elif row.stream_id is not None:
                target = row.stream_id
            else:
                target = [uid for uid in row.participant_ids or () if uid != sender.id]
                target = target or [sender.id]
            addressed = await _address(
                conn,
                sender,
                new_kind,
                target,
                topic if topic is not None else row.topic,
                content if content is not None else row.content,
            )
            stream_id, new_topic = addressed.stream_id, addressed.topic
            participants = addressed.participant_ids
            new_content, rendered = addressed.content, addressed.rendered_content
        elif topic is not None and old_kind == "stream":
            # A topic sent for a direct message is ignored, as Zulip does.
            new_topic = normalize_topic(topic)
        timestamp = scheduled_delivery_timestamp or row.scheduled_timestamp
        await conn.execute(
            """
            UPDATE scheduled_messages
            SET stream_id = %s, topic = %s, participant_ids = %s, content = %s,
                rendered_content = %s, client = %s, scheduled_at = to_timestamp(%s),
                failed = false, failure_message = NULL
            WHERE id = %s
            """,
            (
                stream_id, new_topic, participants, new_content, rendered, client, timestamp,
                row.id,
            ),
        )  # fmt: skip
        message = scheduled_message_dict(
            row.id, sender.id, stream_id, new_topic, participants, new_content, rendered,
            timestamp, False,
        )  # fmt: skip
        outbox.send(
            sender.realm_id,
            {"type": "scheduled_messages", "op": "update", "scheduled_message": message},
            [sender.id],
        )


async def do_delete_scheduled_message(
    ctx: ActionContext, sender_id: int, scheduled_id: int
) -> None:
    """Delete one of the sender's scheduled messages (failed or not); a
    `remove` event to the sender."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        sender = await get_user(conn, sender_id)
        cur = await conn.execute(
            "DELETE FROM scheduled_messages WHERE id = %s AND sender_id = %s RETURNING id",
            (scheduled_id, sender.id),
        )
        if await cur.fetchone() is None:
            raise _not_found()
        outbox.send(
            sender.realm_id,
            {"type": "scheduled_messages", "op": "remove", "scheduled_message_id": scheduled_id},
            [sender.id],
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """What the scheduler did with one due scheduled message: sent it as
    `message_id`, or failed with `failure` (Zulip's `failure_message`)."""

    scheduled_id: int
    sender_id: int
    message_id: int | None
    failure: str | None


async def deliver_due_scheduled_message(ctx: ActionContext) -> Attempt | None:
    """Send the scheduled message due longest ago, if any is due; None when
    none is (or every due one is being sent by another server right now).

    One transaction: the row is claimed with FOR UPDATE SKIP LOCKED, so
    servers running this at once each take a different row and none sends
    one twice; the message is sent by the ordinary send action (checked
    again as of now: the sender may have lost the channel); then the row is
    deleted and the sender told (`remove`). A refused send (ActionError)
    marks the row `failed` with the refusal and tells the sender (`update`,
    unless the sender is deactivated, as Zulip); the rest of the send is
    rolled back. Any other exception rolls back everything: the row is due
    again."""
    conn = ctx.conn
    async with ctx.transaction() as outbox:
        cur = conn.cursor(row_factory=class_row(_Scheduled))
        await cur.execute(
            f"""
            SELECT {_COLUMNS} FROM scheduled_messages
            WHERE NOT failed AND scheduled_at <= now()
            ORDER BY scheduled_at, id LIMIT 1
            FOR UPDATE SKIP LOCKED
            """  # noqa: S608 (fixed columns)
        )
        row = await cur.fetchone()
        if row is None:
            return None
        try:
            if row.late_secs > LATE_CUTOFF_SECS:
                raise ActionError(LATE)
            message_id = await _send(ctx, row)
        except ActionError as exc:
            await conn.execute(
                "UPDATE scheduled_messages SET failed = true, failure_message = %s WHERE id = %s",
                (exc.msg, row.id),
            )
            found = await conn.execute(
                "SELECT is_active FROM users WHERE id = %s", (row.sender_id,)
            )
            active = await found.fetchone()
            if active is not None and active[0]:
                failed = dataclasses.replace(row, failed=True)
                outbox.send(
                    row.realm_id,
                    {
                        "type": "scheduled_messages",
                        "op": "update",
                        "scheduled_message": _as_dict(failed),
                    },
                    [row.sender_id],
                )
            return Attempt(row.id, row.sender_id, None, exc.msg)
        await conn.execute("DELETE FROM scheduled_messages WHERE id = %s", (row.id,))
        outbox.send(
            row.realm_id,
            {"type": "scheduled_messages", "op": "remove", "scheduled_message_id": row.id},
            [row.sender_id],
        )
    return Attempt(row.id, row.sender_id, message_id, None)


async def _send(ctx: ActionContext, row: _Scheduled) -> int:
    """The scheduled message sent now, in a savepoint of the caller's
    transaction (rolled back alone if refused)."""
    if row.stream_id is not None:
        return await do_send_stream_message(
            ctx, row.sender_id, row.stream_id, row.topic, row.content,
            client=row.client, read_by_sender=row.read_by_sender,
        )  # fmt: skip
    recipients = [uid for uid in row.participant_ids or () if uid != row.sender_id]
    return await do_send_direct_message(
        ctx, row.sender_id, recipients or [row.sender_id], row.content,
        client=row.client, read_by_sender=row.read_by_sender,
    )  # fmt: skip


async def seconds_until_due(conn: Connection) -> float | None:
    """Seconds until the next scheduled message is due by the database's
    clock (zero or less: one is due now), None when none is waiting. One
    read of the first entry of an index."""
    cur = await conn.execute(
        "SELECT extract(epoch FROM min(scheduled_at) - now())::float8"
        " FROM scheduled_messages WHERE NOT failed"
    )
    row = await cur.fetchone()
    return None if row is None or row[0] is None else float(row[0])
