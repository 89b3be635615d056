"""`POST /register` with `resume_from`: a client whose queue is gone gets a
new one holding the events logged for it after the position it last saw,
read from the event log, when the log still has them.

Three bounds (docs in the README's "Stream positions" and "Security"):

- **Only a position the user was given.** `resume_from` must be at or above
  the lowest stream position a register gave this user within the log's
  retention (`user_stream_floors`), and not ahead of this server's stream;
  anything else is RESUME_POSITION_UNKNOWN, and the client registers afresh.
- **What the user may see now**, not when the event was sent: an event
  about a message deleted since (a `delete_message` naming it is logged
  after `resume_from`) is not replayed, nor a message, edit, reaction or
  typing notice of a channel the user cannot see now (unsubscribed from a
  private channel, a channel made private, archived, or a guest's
  unsubscribed channel). Deletions are replayed; so is what tells the user
  of a change (subscription and channel events).
- **A bounded read.** The log is read by recipient in SQL (the rows naming
  the user, a realm's public channel messages for `all_public_streams`, and
  rows an earlier version wrote without saying, which are parsed to tell),
  at most two queues' worth of rows; the rows are parsed on the loop a slice at a
  time.

The events are read before the queue exists and put into it in the same
loop iteration as it is made, so none delivered live can come before them
or be missed between: the log is read up to the stream position, and read
again while the stream moved on during the read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from generation.errors import BadNotice
from generation.events.users import is_control
from generation.notice import Notice
from queues.client import NO_POSITIONS, ClientDescriptor, QueueOptions
from queues.specialize import is_public_channel_message
from server.db import LogRow
from server.errors import ApiError
from server.interface import ServerApi
from server.observe import Origin
from server.stream import CATCH_UP_PAGE, notice_from_log

log = logging.getLogger("eventq.register")

RESUME_EXPIRED = "RESUME_EXPIRED"
RESUME_POSITION_UNKNOWN = "RESUME_POSITION_UNKNOWN"

# Rows read from the log for one resume at most, in queues' worth
# (EVENTQ_QUEUE_MAX_EVENTS, 10,000 by default): the user's own events are at
# most one, the rest are rows of an earlier version's writers that turn out
# not to be theirs. Past it the client registers afresh (RESUME_EXPIRED),
# which costs one state fetch, not a read of the log.
MAX_READ_QUEUES = 2
# Rows are parsed (orjson, a notice's whole user list) for at most this long
# before the loop serves others: 10,000 notices of 1,000 users each take
# about a second in all.
SLICE_SECS = 0.001

# Events replayed whatever the user may see now: they take away.
_ALWAYS = frozenset({"delete_message"})


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayFacts:
    """What is true now of the messages and channels that candidate events
    name: `deleted` messages (a deletion logged after the resume position),
    the `channel_of` messages the domain knows, the channels it `knows` and,
    of those, the ones the user `sees`. A channel the domain does not know
    (a producer's own) is judged as it was when its events were sent."""

    deleted: frozenset[int]
    channel_of: Mapping[int, int]
    knows: frozenset[int]
    sees: frozenset[int]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def message_ids(event: Mapping[str, Any]) -> list[int]:
    """The messages an event is about: a message's id, an edit's or a
    reaction's message_id (and an edit's moved message_ids)."""
    kind = event.get("type")
    ids: list[int] = []
    if kind == "message":
        message = event.get("message")
        if isinstance(message, Mapping):
            ids.append(_int(message.get("id")) or 0)
    elif kind in ("update_message", "reaction"):
        ids.append(_int(event.get("message_id")) or 0)
        moved = event.get("message_ids")
        if isinstance(moved, list):
            ids.extend(_int(i) or 0 for i in moved)
    return [i for i in ids if i > 0]


def channel_id(event: Mapping[str, Any]) -> int | None:
    """The channel whose content an event carries: a channel message's, an
    edit's, a channel typing notice's; None for anything else."""
    kind = event.get("type")
    if kind == "message":
        message = event.get("message")
        if isinstance(message, Mapping) and message.get("type") == "stream":
            return _int(message.get("stream_id"))
        return None
    if kind in ("update_message", "typing"):
        return _int(event.get("stream_id"))
    return None


def replayable(event: Mapping[str, Any], facts: ReplayFacts) -> bool:
    """Whether a logged event for the user goes into their resumed queue."""
    if event.get("type") in _ALWAYS:
        return True
    ids = message_ids(event)
    if any(i in facts.deleted for i in ids):
        return False
    channel = channel_id(event)
    if channel is None and event.get("type") == "reaction" and ids:
        channel = facts.channel_of.get(ids[0])
    return channel is None or channel not in facts.knows or channel in facts.sees


def _may_reach(notice: Notice, user_id: int, options: QueueOptions) -> bool:
    """Whether the queue might take the notice (`deliver_to` decides): for a
    row whose recipients an earlier version did not record."""
    for user in notice.users:
        if (user if isinstance(user, int) else user["id"]) == user_id:
            return True
    return options.all_public_streams and is_public_channel_message(notice.event)


def _expired(msg: str, **fields: Any) -> ApiError:
    return ApiError(
        f"{msg}; register without resume_from and fetch the state afresh",
        RESUME_EXPIRED,
        **fields,
    )


async def _check_kept(server: ServerApi, resume_from: int) -> None:
    through = await server.db.log_pruned_through()
    if resume_from < through:
        raise _expired(
            f"The events after position {resume_from} are no longer kept (the event log"
            f" is pruned through {through})",
            pruned_through=through,
        )


async def _check_given(server: ServerApi, user_id: int, resume_from: int) -> None:
    """RESUME_POSITION_UNKNOWN unless `resume_from` may be one this user
    was given: not ahead of the stream (it only moves forward, and after a
    restart it catches up before it takes requests), and not below their
    first register's position."""
    position = server.stream.position
    floor = await server.stream_floor(user_id)
    if resume_from > position or floor is None or resume_from < floor:
        reason = (
            f"ahead of this server's stream ({position})"
            if resume_from > position
            else "not a position this server gave you"
        )
        log.warning("user %d: resume_from %d refused (%s)", user_id, resume_from, reason)
        raise ApiError(
            f"resume_from {resume_from} is {reason}; register without resume_from"
            " and fetch the state afresh",
            RESUME_POSITION_UNKNOWN,
        )


async def _parse(rows: list[LogRow], user_id: int, options: QueueOptions) -> list[Notice]:
    """The notices of `rows` for the queue, parsed a slice at a time."""
    found: list[Notice] = []
    began = time.perf_counter()
    for position, body, unknown in rows:
        if time.perf_counter() - began > SLICE_SECS:
            await asyncio.sleep(0)
            began = time.perf_counter()
        try:
            notice = notice_from_log(position, body)
        except BadNotice as exc:
            log.error("event log position %d is unreadable (%s); skipped", position, exc)
            continue
        if is_control(notice.event):
            continue  # for the servers, never for a queue
        if not unknown or _may_reach(notice, user_id, options):
            found.append(notice)
    return found


async def _facts(
    server: ServerApi, user_id: int, realm_id: int, notices: Iterable[Notice], after: int, upto: int
) -> ReplayFacts:
    ids: set[int] = set()
    channels: set[int] = set()
    for notice in notices:
        ids.update(message_ids(notice.event))
        channel = channel_id(notice.event)
        if channel is not None:
            channels.add(channel)
    if not ids and not channels:
        return ReplayFacts(frozenset(), {}, frozenset(), frozenset())
    db = server.db
    deleted = await db.deleted_messages(realm_id, sorted(ids), after, upto)
    channel_of = await db.message_channels(realm_id, sorted(ids - deleted))
    channels.update(channel_of.values())
    knows, sees = await db.channel_access(user_id, realm_id, sorted(channels))
    return ReplayFacts(frozenset(deleted), channel_of, frozenset(knows), frozenset(sees))


async def resume_queue(
    server: ServerApi, user_id: int, realm_id: int, options: QueueOptions, resume_from: int
) -> tuple[ClientDescriptor, int]:
    """Make `user_id`'s queue holding every logged event for it above
    `resume_from` that it may see now; returns it and the stream position it
    is complete to. Raises `ApiError`: RESUME_POSITION_UNKNOWN for a
    position the user was not given, RESUME_EXPIRED when the log no longer
    has the events or they are more than a queue holds or a read may take."""
    await _check_given(server, user_id, resume_from)
    await _check_kept(server, resume_from)
    limit = server.registry.limits.max_events
    max_read = MAX_READ_QUEUES * limit
    # A type with a NUL byte matches no logged event (PostgreSQL text has none).
    types = (
        None
        if options.event_types is None
        else sorted(t for t in options.event_types if "\x00" not in t)
    )
    stream = server.stream
    found: list[Notice] = []
    read = 0
    after = resume_from
    while True:
        upto = stream.position
        while True:
            rows = await server.db.log_for_user(
                after, upto, realm_id, user_id, options.all_public_streams, types, CATCH_UP_PAGE
            )
            read += len(rows)
            if read > max_read:
                raise _expired(
                    f"More than {max_read} logged events to read since position {resume_from}"
                )
            found.extend(await _parse(rows, user_id, options))
            if len(found) > limit:
                raise _expired(
                    f"More than {limit} events since position {resume_from}: more than a"
                    " queue holds"
                )
            if len(rows) < CATCH_UP_PAGE:
                break
            after = rows[-1][0]
        after = upto
        facts = await _facts(server, user_id, realm_id, found, resume_from, upto)
        # Pruning may have run while the log was read.
        await _check_kept(server, resume_from)
        if stream.position == upto:
            break  # no await from here on: nothing is delivered meanwhile
    registry = server.registry
    now = server.clock()
    client = registry.allocate(user_id, realm_id, options, now)
    late = set(stream.reader.late())
    covered: list[int] = []
    withheld = 0
    for notice in found:
        assert notice.position is not None
        if notice.position in late:
            # Accepted late by the stream: if it arrives, it is already here
            # (or withheld here, and must stay so).
            covered.append(notice.position)
        if not replayable(notice.event, facts):
            withheld += 1
            continue
        registry.deliver_to(
            client,
            notice.event,
            notice.users,
            notice.realm_id,
            now,
            Origin(time.time(), None, notice.position),
        )
    if client not in registry:
        raise _expired(f"The events since position {resume_from} are more than a queue holds")
    if withheld:
        log.info(
            "queue %s of user %d: %d logged events not replayed (deleted since, or of a"
            " channel they cannot see now)",
            client.queue_id,
            user_id,
            withheld,
        )
    client.covered = frozenset(covered) if covered else NO_POSITIONS
    return client, upto
