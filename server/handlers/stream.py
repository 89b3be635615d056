"""Server-Sent Events on the same queues as the long poll: `GET
/api/v1/events` with `Accept: text/event-stream` keeps its answer open and
writes each event as it arrives (docs/behaviour.md, "Event streams").

A stream is its queue's reader, as a parked poll is: it is parked on the
queue (`ParkedStream`) between writes, and woken by the same deliveries,
heartbeats, newer readers and ends, in its turn among the woken requests.
Each event is written as

    id: <event id>
    data: <the event as a long poll gives it, its id included>

after the events of each write, the stream position the client's state is
complete to once it has them (`event: position`, `data: {"stream_position":
N}`), and a heartbeat as a comment line (`: heartbeat`). The stream's own
messages are named (`event: displaced`, `deleted`, `error`) and end it.

**What a stream acknowledges.** Written is not read: an event stays in its
queue after it is written, until the client acknowledges it with the
`Last-Event-ID` of its next stream (an `EventSource` sends the id of the
last event it read when it reconnects), or with `last_event_id` on a poll.
A connection cut between the write and the read loses nothing: the next
stream starts after the last id the client read. So that a queue does not
grow without end, a stream ends by itself once it has written
`MAX_UNACKNOWLEDGED` events (or half the queue's byte budget), and the
client reconnects (after `RETRY_MS`), acknowledging them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from queues.client import ClientDescriptor
from queues.event_queue import Item
from server.errors import ApiError
from server.handlers.longpoll_flow import ParkedRequest
from server.interface import PollApi

MEDIA_TYPE = "text/event-stream"
# Events a stream writes before it ends and the client's reconnection
# acknowledges them: what its queue may hold on its behalf.
MAX_UNACKNOWLEDGED = 500
# What an EventSource waits before it reconnects after a stream ends.
RETRY_MS = 500
HEARTBEAT = b": heartbeat\n\n"
_ID = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")


def wants_stream(accept: str | None) -> bool:
    """Whether a request's Accept header asks for an event stream."""
    return accept is not None and MEDIA_TYPE in accept


def last_event_id(header: str | None, query: int | None) -> int | None:
    """The id a stream starts after: the `Last-Event-ID` header (an
    EventSource's reconnection, newer than the URL's) else `last_event_id`."""
    if header is None:
        return query
    value = header.strip()
    if not _ID.fullmatch(value):
        raise ApiError(f"Invalid Last-Event-ID header: {value[:40]!r}")
    return int(value)


def frames(items: Sequence[Item]) -> bytes:
    """Events as a stream writes them (`Payload.tail` is JSON on one line)."""
    return b"".join([b'id: %d\ndata: {"id":%d,%s\n\n' % (i, i, p.tail) for i, p in items])


def position(stream_position: int) -> bytes:
    """After the events of a write: the stream position the client's state
    is complete to once it has them (a long poll answer's `stream_position`,
    for `resume_from`)."""
    return b'event: position\ndata: {"stream_position":%d}\n\n' % stream_position


def named(event: str, data: bytes) -> bytes:
    """A stream's own message (`displaced`, `deleted`, `error`): not an
    event of the queue, so without an id."""
    return b"event: %s\ndata: %s\n\n" % (event.encode("ascii"), data)


class ParkedStream(ParkedRequest):
    """A stream parked on its queue until there is something it has not
    written (`written`: the id of the last event it wrote)."""

    __slots__ = ("written",)

    def __init__(self, server: PollApi, written: int) -> None:
        super().__init__(server)
        self.written = written

    def _unread(self, client: ClientDescriptor) -> bool:
        newest = client.event_queue.last_id()
        return newest is not None and newest > self.written


def must_end(server: PollApi, client: ClientDescriptor, written_count: int) -> bool:
    """Whether a stream that has written `written_count` events ends now
    (acknowledgement by reconnection, or shutdown)."""
    limits = server.registry.limits
    return (
        server.stopping
        or written_count >= min(MAX_UNACKNOWLEDGED, limits.max_events // 2)
        or client.event_queue.bytes >= limits.max_bytes // 2
    )
