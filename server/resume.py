"""`POST /register` with `resume_from`: a client whose queue is gone gets a
new one holding exactly the events for it logged after the position it last
saw, read from the event log, when the log still has them.

The events are read before the queue exists and put into it in the same
loop iteration as it is made, so none delivered live can come before them
or be missed between: the log is read up to the stream position, and read
again while the stream moved on during the read.
"""

from __future__ import annotations

import logging
import time

from generation.errors import BadNotice
from generation.notice import Notice
from queues.client import NO_POSITIONS, ClientDescriptor, QueueOptions
from queues.specialize import is_public_channel_message
from server.errors import ApiError
from server.interface import ServerApi
from server.observe import Origin
from server.stream import CATCH_UP_PAGE, notice_from_log

log = logging.getLogger("eventq.register")

RESUME_EXPIRED = "RESUME_EXPIRED"


def _may_reach(notice: Notice, user_id: int, options: QueueOptions) -> bool:
    """Whether the queue might take the notice (`deliver_to` decides)."""
    for user in notice.users:
        if (user if isinstance(user, int) else user["id"]) == user_id:
            return True
    return options.all_public_streams and is_public_channel_message(notice.event)


async def _check_kept(server: ServerApi, resume_from: int) -> None:
    through = await server.db.log_pruned_through()
    if resume_from < through:
        raise ApiError(
            f"The events after position {resume_from} are no longer kept (the event log"
            f" is pruned through {through}); register without resume_from and fetch the"
            " state afresh",
            RESUME_EXPIRED,
            pruned_through=through,
        )


async def resume_queue(
    server: ServerApi, user_id: int, realm_id: int, options: QueueOptions, resume_from: int
) -> tuple[ClientDescriptor, int]:
    """Make `user_id`'s queue holding every logged event for it above
    `resume_from`; returns it and the stream position it is complete to.
    Raises `ApiError` (code RESUME_EXPIRED) when the log no longer has them
    all or they would not fit in a queue."""
    if resume_from > server.stream.position:
        # Not a position this server gave: its stream only moves forward,
        # and after a restart it catches up before it takes requests.
        raise ApiError(
            f"resume_from {resume_from} is ahead of this server's stream"
            f" ({server.stream.position}); fetch the state afresh",
            RESUME_EXPIRED,
            stream_position=server.stream.position,
        )
    await _check_kept(server, resume_from)
    limit = server.registry.limits.max_events
    # A type with a NUL byte matches no logged event (PostgreSQL text has none).
    types = (
        None
        if options.event_types is None
        else sorted(t for t in options.event_types if "\x00" not in t)
    )
    stream = server.stream
    found: list[Notice] = []
    after = resume_from
    while True:
        upto = stream.position
        while True:
            rows = await server.db.log_for_realm(after, upto, realm_id, types, CATCH_UP_PAGE)
            for position, body in rows:
                try:
                    notice = notice_from_log(position, body)
                except BadNotice as exc:
                    log.error("event log position %d is unreadable (%s); skipped", position, exc)
                    continue
                if _may_reach(notice, user_id, options):
                    found.append(notice)
            if len(found) > limit:
                raise ApiError(
                    f"More than {limit} events since position {resume_from}: more than a"
                    " queue holds; register without resume_from and fetch the state afresh",
                    RESUME_EXPIRED,
                )
            if len(rows) < CATCH_UP_PAGE:
                break
            after = rows[-1][0]
        after = upto
        # Pruning may have run while the log was read.
        await _check_kept(server, resume_from)
        if stream.position == upto:
            break  # no await from here on: nothing is delivered meanwhile
    registry = server.registry
    now = server.clock()
    client = registry.allocate(user_id, realm_id, options, now)
    late = set(stream.reader.late())
    covered: list[int] = []
    for notice in found:
        assert notice.position is not None
        registry.deliver_to(
            client,
            notice.event,
            notice.users,
            notice.realm_id,
            now,
            Origin(time.time(), None, notice.position),
        )
        if notice.position in late:
            # Accepted late by the stream: if it arrives, it is already here.
            covered.append(notice.position)
    if client not in registry:
        raise ApiError(
            f"The events since position {resume_from} are more than a queue holds;"
            " register without resume_from and fetch the state afresh",
            RESUME_EXPIRED,
        )
    client.covered = frozenset(covered) if covered else NO_POSITIONS
    return client, upto
