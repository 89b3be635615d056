"""`POST /register` with `resume_from`: a client whose queue is gone gets a
new one holding the events logged for it after the position it last saw,
read from the event log, when the log still has them.

Three bounds (docs in docs/behaviour.md, "Stream positions" and "Security"):

- **Only a position the user was given.** `resume_from` must be at or above
  the lowest stream position a register ever gave this user
  (`user_stream_floors`, server/durability/floors.py), and not ahead of this server's
  stream; anything else is RESUME_POSITION_UNKNOWN, and the client
  registers afresh.
- **What the user may see now**, not when the event was sent: no event is
  replayed that names a message deleted since (a `delete_message` naming it
  is logged after `resume_from`), or a channel the user cannot see now
  (unsubscribed from a private channel, a channel made private, a
  guest's unsubscribed channel), or a message of such a channel. Deletions
  are replayed, and so are the channel and subscription events that tell of
  the change (`_ALWAYS`). What the domain's tables do not know (a
  producer's own channels and messages) is judged as it was when sent.
- **A bounded read.** The log is read once, by recipient in SQL (the rows
  naming the user, a realm's public channel messages for
  `all_public_streams`, and rows an earlier version wrote without saying,
  which are parsed to tell), at most twice the events a resume may replay
  (`EVENTQ_RESUME_MAX_EVENTS`, 1,000); the rows are parsed, and the new
  queue filled, on the loop a slice at a time. A client further behind
  registers afresh: the whole state costs less than such a replay.

The event log reader records what it hands to the queues while the log is read and
the new queue filled (`EventLogReader.recording`); the queue is filled outside
the registry with the replayed events (up to the position the read began
at), then, without an await, given the recorded ones, as a live delivery
would have, and added to the registry: nothing missed, nothing twice,
however busy the server. A change of the
user's access meanwhile (a new role: the options may no longer be theirs)
refuses the resume with ACCESS_CHANGED, and the client registers again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import psycopg

from generation.errors import BadNotice
from generation.events.users import is_control
from generation.notice import Notice, parse_notice_for
from queues.client import NO_POSITIONS, ClientDescriptor, QueueOptions
from queues.specialize import is_public_channel_message
from server.database.db import LogRow
from server.errors import ApiError
from server.errors import access_changed as access_changed_error
from server.interface import RegisterApi
from server.observability.observe import make_origin

log = logging.getLogger("eventq.register")

RESUME_EXPIRED = "RESUME_EXPIRED"
RESUME_POSITION_UNKNOWN = "RESUME_POSITION_UNKNOWN"

# Rows read from the log for one resume at most, in resumes' worth (the
# events one may replay: EVENTQ_RESUME_MAX_EVENTS, 1,000 by default, at most
# a queue's worth): the user's own events are at most one, the rest are rows
# of an earlier version's writers that turn out not to be theirs. Past it the
# client registers afresh (RESUME_EXPIRED), which costs one state fetch, not
# a read of the log.
MAX_READ_RESUMES = 2
# Rows are parsed, and the queue filled, for at most this long before the
# loop serves others (tests/benchmarks/resume.py: 1,000 events of channels of
# 200 members take about 75 ms of CPU in all).
SLICE_SECS = 0.001
# Rows asked of the log at a time. psycopg makes a page's rows in one step
# on the loop, as its last bytes arrive: 1,000 notices of about 2 KB took
# up to 2.9 ms there on a quiet machine and twice that under load (the
# resume benchmark's phase g), 250 take 0.1-0.3 ms; a resume of 1,000
# events pays three more round trips (a fraction of a millisecond each).
RESUME_PAGE = 250

# Events replayed whatever the user may see now: they take away (deletions),
# tell of the change itself (a channel's and the user's subscriptions'), or
# are the user's own (flags).
_ALWAYS = frozenset({"delete_message", "stream", "subscription", "update_message_flags"})


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayFacts:
    """What is true now of the messages and channels that candidate events
    name: `deleted` messages (a deletion logged after the resume position),
    the `channel_of` messages the domain knows, the channels it `knows` and,
    of those, the ones the user `sees`. A channel or message the domain does
    not know (a producer's own) is judged as it was when its events were
    sent."""

    deleted: frozenset[int]
    channel_of: Mapping[int, int]
    knows: frozenset[int]
    sees: frozenset[int]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def message_ids(event: Mapping[str, Any]) -> list[int]:
    """The messages an event judged by what the user may see now is about:
    a message event's message, and any event's `message_id` and
    `message_ids` (edits, moves, reactions, submessages...)."""
    if event.get("type") in _ALWAYS:
        return []
    ids: list[int | None] = [_int(event.get("message_id"))]
    message = event.get("message")
    if event.get("type") == "message" and isinstance(message, Mapping):
        ids.append(_int(message.get("id")))
    moved = event.get("message_ids")
    if isinstance(moved, list):
        ids.extend(_int(i) for i in moved)
    return [i for i in ids if i is not None and i > 0]


def channel_ids(event: Mapping[str, Any]) -> list[int]:
    """The channels whose content an event judged by what the user may see
    now carries: a channel message's, and any event's `stream_id` and
    `new_stream_id` (an edit's, a move's, a typing notice's...)."""
    if event.get("type") in _ALWAYS:
        return []
    ids = [_int(event.get("stream_id")), _int(event.get("new_stream_id"))]
    message = event.get("message")
    if isinstance(message, Mapping) and message.get("type") == "stream":
        ids.append(_int(message.get("stream_id")))
    return [i for i in ids if i is not None]


def replayable(event: Mapping[str, Any], facts: ReplayFacts) -> bool:
    """Whether a logged event for the user goes into their resumed queue:
    none of its messages deleted since, and every channel it names, or its
    messages are in, one the user may see now (or one the domain does not
    know)."""
    ids = message_ids(event)
    if any(i in facts.deleted for i in ids):
        return False
    channels = channel_ids(event) + [facts.channel_of[i] for i in ids if i in facts.channel_of]
    return all(c not in facts.knows or c in facts.sees for c in channels)


def _may_reach(notice: Notice, user_id: int, options: QueueOptions) -> bool:
    """Whether the queue might take the notice (`payload_for` decides): for a
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


async def _check_kept(server: RegisterApi, resume_from: int) -> None:
    through = await server.db.log_pruned_through()
    if resume_from < through:
        raise _expired(
            f"The events after position {resume_from} are no longer kept (the event log"
            f" is pruned through {through})",
            pruned_through=through,
        )


async def _check_given(server: RegisterApi, user_id: int, resume_from: int) -> None:
    """RESUME_POSITION_UNKNOWN unless `resume_from` may be one this user
    was given: not ahead of the stream (it only moves forward, and after a
    restart it catches up before it takes requests), and not below their
    first register's position."""
    position = server.eventlog.position
    floor = await server.stream_floor(user_id)
    if resume_from > position or floor is None or resume_from < floor:
        reason = (
            f"ahead of this server's stream ({position})"
            if resume_from > position
            else "not a position this server gave you"
        )
        log.info("user %d: resume_from %d refused (%s)", user_id, resume_from, reason)
        raise ApiError(
            f"resume_from {resume_from} is {reason}; register without resume_from"
            " and fetch the state afresh",
            RESUME_POSITION_UNKNOWN,
        )


# A notice read for the queue, held until the fill: its position, its event
# and the user's own entry encoded (`[event, users]`), and its realm. Bytes,
# not the decoded event: a resume holds up to a thousand of them across its
# slices, and decoded (ten or so tracked objects each) they survived into the
# GC's middle generation and lengthened its stops (tests/benchmarks/README.md,
# resume.py); a tuple of bytes and numbers the GC stops tracking. Decoding the
# event again costs a few microseconds; the notice's hundreds of users are
# not decoded again.
_Held = tuple[int, bytes, int | None]


def _hold(notice: Notice, position: int) -> _Held:
    return (position, orjson.dumps([notice.event, notice.users]), notice.realm_id)


def _unhold(held: _Held) -> Notice:
    position, encoded, realm_id = held
    event, users = orjson.loads(encoded)
    return Notice(event, users, realm_id, position)


@dataclasses.dataclass(slots=True)
class _Found:
    """The notices read for the queue so far, each holding only the user's
    own entry (`parse_notice_for`), and the messages and channels they name."""

    notices: list[_Held] = dataclasses.field(default_factory=list)
    message_ids: set[int] = dataclasses.field(default_factory=set)
    channel_ids: set[int] = dataclasses.field(default_factory=set)


async def _parse(rows: list[LogRow], user_id: int, options: QueueOptions, found: _Found) -> None:
    """Add the notices of `rows` for the queue to `found`, a slice at a time."""
    began = time.perf_counter()
    for position, body, unknown in rows:
        if time.perf_counter() - began > SLICE_SECS:
            await asyncio.sleep(0)
            began = time.perf_counter()
        try:
            notice = parse_notice_for(body, user_id, position)
        except BadNotice as exc:
            log.error("event log position %d is unreadable (%s); skipped", position, exc)
            continue
        if is_control(notice.event):
            continue  # for the servers, never for a queue
        if not unknown or _may_reach(notice, user_id, options):
            found.notices.append(_hold(notice, position))
            found.message_ids.update(message_ids(notice.event))
            found.channel_ids.update(channel_ids(notice.event))


async def _facts(
    server: RegisterApi, user_id: int, realm_id: int, found: _Found, after: int, upto: int
) -> ReplayFacts:
    ids, channels = found.message_ids, set(found.channel_ids)
    if not ids and not channels:
        return ReplayFacts(frozenset(), {}, frozenset(), frozenset())
    db = server.db
    try:
        deleted = await db.deleted_messages(realm_id, sorted(ids), after, upto)
    except psycopg.DataError as exc:
        # A deletion logged in a form PostgreSQL cannot read: refuse this
        # resume rather than replay a message that may be deleted.
        log.error("a deletion in the event log since position %d is unreadable (%s)", after, exc)
        raise _expired("The deletions logged since then cannot be read") from None
    channel_of = await db.message_channels(realm_id, sorted(ids - deleted))
    channels.update(channel_of.values())
    knows, sees = await db.channel_access(user_id, realm_id, sorted(channels))
    return ReplayFacts(frozenset(deleted), channel_of, frozenset(knows), frozenset(sees))


def _put(server: RegisterApi, client: ClientDescriptor, notice: Notice, resume_from: int) -> None:
    """Into the detached queue, as a delivery would put it (if at all)."""
    payload = server.registry.payload_for(
        client,
        notice.event,
        notice.users,
        notice.realm_id,
        make_origin(time.time(), None, notice.position),
    )
    if payload is not None and not server.registry.fill(client, payload):
        raise _expired(f"The events since position {resume_from} are more than a queue holds")


async def _fill(
    server: RegisterApi,
    client: ClientDescriptor,
    found: list[_Held],
    facts: ReplayFacts,
    resume_from: int,
) -> int:
    """Put the replayable `found` notices into the detached queue, a slice at
    a time; returns how many were withheld."""
    withheld = 0
    began = time.perf_counter()
    for held in found:
        if time.perf_counter() - began > SLICE_SECS:
            await asyncio.sleep(0)
            began = time.perf_counter()
        notice = _unhold(held)
        if replayable(notice.event, facts):
            _put(server, client, notice, resume_from)
        else:
            withheld += 1
    return withheld


async def resume_queue(
    server: RegisterApi,
    user_id: int,
    realm_id: int,
    options: QueueOptions,
    resume_from: int,
    access_changed: Callable[[], bool],
) -> tuple[ClientDescriptor, int]:
    """Make `user_id`'s queue holding every logged event for it above
    `resume_from` that it may see now; returns it and the stream position it
    is complete to. Raises `ApiError`: RESUME_POSITION_UNKNOWN for a
    position the user was not given, RESUME_EXPIRED when the log no longer
    has the events or they are more than a resume replays or a read may take,
    ACCESS_CHANGED when `access_changed()` says the user's access changed
    since they were authenticated (the options may no longer be theirs)."""
    await _check_given(server, user_id, resume_from)
    try:
        return await _resume(server, user_id, realm_id, options, resume_from, access_changed)
    except ApiError as exc:
        if exc.code == RESUME_EXPIRED:
            log.info("user %d: resume_from %d expired (%s)", user_id, resume_from, exc.msg)
        raise


async def _resume(
    server: RegisterApi,
    user_id: int,
    realm_id: int,
    options: QueueOptions,
    resume_from: int,
    access_changed: Callable[[], bool],
) -> tuple[ClientDescriptor, int]:
    limit = min(server.settings.resume_max_events, server.registry.limits.max_events)
    max_read = MAX_READ_RESUMES * limit
    # A type with a NUL byte matches no logged event (PostgreSQL text has none).
    types = (
        None
        if options.event_types is None
        else sorted(t for t in options.event_types if "\x00" not in t)
    )
    eventlog = server.eventlog
    # What reaches the queues while the log is read is what the new queue
    # would miss: recorded, and given to it as a live delivery would have.
    # One read, however busy the server: waiting for a moment when nothing
    # arrives would never end at a thousand events a second.
    with eventlog.recording() as arrived:
        await _check_kept(server, resume_from)
        upto = eventlog.position
        found = _Found()
        read = 0
        after = resume_from
        while True:
            # No more rows than may still be the user's without passing the
            # limit: a log too long for a resume is known after one more.
            page = min(RESUME_PAGE, limit + 1 - len(found.notices))
            rows = await server.db.log_for_user(
                after, upto, realm_id, user_id, options.all_public_streams, types, page
            )
            read += len(rows)
            if read > max_read:
                raise _expired(
                    f"More than {max_read} logged events to read since position {resume_from}"
                )
            await _parse(rows, user_id, options, found)
            if len(found.notices) > limit:
                raise _expired(
                    f"More than {limit} events since position {resume_from}: more than a"
                    " resume replays"
                )
            if len(rows) < page:
                break
            after = rows[-1][0]
        facts = await _facts(server, user_id, realm_id, found, resume_from, upto)
        # Pruning may have run while the log was read.
        await _check_kept(server, resume_from)
        registry = server.registry
        # Filled outside the registry a slice at a time (10,000 events take
        # a few hundred milliseconds), then adopted: deliveries meanwhile are
        # recorded, and go in after the replayed ones.
        client = registry.detached(user_id, realm_id, options, server.clock())
        withheld = await _fill(server, client, found.notices, facts, resume_from)
        # No await from here on: nothing is delivered meanwhile.
        if access_changed():
            raise access_changed_error()
        now = server.clock()
        replayed = {position for position, _, _ in found.notices}
        for notice in arrived:
            if notice.position in replayed or is_control(notice.event):
                continue  # a late event read from the log too; a servers' notice
            if notice.realm_id in (realm_id, None) and _may_reach(notice, user_id, options):
                _put(server, client, notice, resume_from)
        registry.adopt(client, now)
    late = eventlog.reader.late()
    covered = [position for position in late if position in replayed]
    if withheld:
        log.info(
            "queue %s of user %d: %d logged events not replayed (deleted since, or of a"
            " channel they cannot see now)",
            client.queue_id,
            user_id,
            withheld,
        )
    client.covered = frozenset(covered) if covered else NO_POSITIONS
    return client, eventlog.position
