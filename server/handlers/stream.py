"""Server-Sent Events on the same queues as the long poll: `GET
/api/v1/events` with `Accept: text/event-stream` keeps its answer open and
writes each event as it arrives (docs/behaviour.md, "Event streams").

A stream is its queue's reader, as a parked poll is: it is parked on the
queue (`EventStream`) between writes, and woken by the same deliveries,
heartbeats, newer readers and ends; it writes in its turn among the woken
requests, as a poll is answered.
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

import asyncio
import re
from collections.abc import Sequence
from typing import Protocol

import orjson
import tornado.iostream

from queues.client import ClientDescriptor, WakeReason
from queues.errors import QueueError
from queues.event_queue import Item
from server.errors import ApiError, bad_queue_id, from_queue_error
from server.handlers.longpoll_flow import ParkedPoll, answer_position
from server.http.http1 import Exchange
from server.http.responses import EVENT_STREAM_TYPE
from server.interface import PollApi

MEDIA_TYPE = EVENT_STREAM_TYPE
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


class Response(Protocol):
    """The handler whose answer a stream is (`events.EventsHandler`): its
    own `flush` sends the head (status and headers) with the first chunk."""

    def write(self, chunk: bytes) -> None: ...

    def flush(self) -> asyncio.Future[None]: ...


class Connection(Protocol):
    """The HTTP connection under the handler (`server.http.http1.Exchange`,
    or Tornado's `HTTP1Connection`): `write` frames a chunk of the body."""

    def write(self, chunk: bytes) -> asyncio.Future[None]: ...


class DirectTarget:
    """What a stream writes on: `write` buffers, `flush` sends what is
    buffered, its future done once the connection takes more (None: it
    takes more now).

    Its writes go on the handler until its head is sent, then
    straight on the connection (`Exchange.send` where it is ours: no future
    made while the connection takes more): every later write would otherwise go
    through Tornado's `RequestHandler.write` and `flush` in Python (output
    transforms, of which the application has none: `compress_response` is
    off; and the HEAD check: the events route takes no HEAD). The handler
    still finishes the answer (`finish`) once the stream ends."""

    __slots__ = ("_connection", "_exchange", "_head_sent", "_pending", "_response")

    def __init__(self, response: Response, connection: Connection) -> None:
        self._response = response
        self._connection = connection
        self._exchange = connection if isinstance(connection, Exchange) else None
        self._head_sent = False
        self._pending: list[bytes] = []

    def write(self, chunk: bytes) -> None:
        if self._head_sent:
            self._pending.append(chunk)
        else:
            self._response.write(chunk)

    def flush(self) -> asyncio.Future[None] | None:
        if not self._head_sent:
            self._head_sent = True
            return self._response.flush()
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        exchange = self._exchange
        if exchange is not None:
            return exchange.send(data)
        return self._connection.write(data)


# How a stream ended: the message to write last (None: none), or
# DISCONNECTED (the client went away: nothing more to write).
DISCONNECTED = b""


class EventStream(ParkedPoll):
    """One open event stream: parked on its queue between writes as a long
    poll is, and written to in its turn among the woken requests (at most
    `longpoll.ANSWER_SLICE_SECS` of the loop at a time, so that a fan-out to
    thousands of streams does not stop the loop), without resuming the
    handler's coroutine. `ended` resolves when the stream is to end: with
    the message to write last (or None), or DISCONNECTED."""

    __slots__ = ("_target", "count", "ended", "waited", "written")

    def __init__(self, server: PollApi, client: ClientDescriptor, target: DirectTarget) -> None:
        super().__init__(server)
        self._client = client
        self._target = target
        # The id of the last event written, and how many were written.
        self.written = client.event_queue.newest_pruned_id
        self.count = 0
        self.waited = 0.0
        self.ended: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()

    def start(self) -> None:
        """Write what the queue holds already, then wait for more."""
        self._target.write(b"retry: %d\n\n" % RETRY_MS)
        self._write_new()
        self._flush_then_park()

    def park(self, client: ClientDescriptor) -> None:
        """Park again after a write (a parked poll parks once)."""
        self._ready = False
        self._woken = None
        super().park(client)

    def _woken_heartbeat(self, reason: WakeReason) -> None:
        """Woken by events, a stream keeps its heartbeat deadline: it parks
        again at once, and starting a deadline at every write costs more
        than a comment line every 45-55 s on a busy stream."""
        if reason != "events":
            self._cancel_heartbeat()

    def _start_heartbeat(self, client: ClientDescriptor) -> None:
        tick = self._heartbeat
        if tick is None or not self.server.heartbeats.pending(tick, self):
            super()._start_heartbeat(client)

    def _unread(self, client: ClientDescriptor) -> bool:
        newest = client.event_queue.last_id()
        return newest is not None and newest > self.written

    def _answer(self, reason: WakeReason) -> None:
        """Its turn: write what woke it, and park again (or end)."""
        if self._done:
            return
        self.waited = self.server.clock() - self._parked_at
        if reason == "events":
            self._write_new()
        elif reason == "heartbeat":
            self._target.write(HEARTBEAT)
        elif reason == "displaced":
            # A newer reader has the queue: its events are that one's now.
            self._end(named("displaced", b"{}"))
            return
        elif reason == "deleted":
            self._end_with_queue()
            return
        else:  # overflow: the queue is gone, the client registers a new one
            error = bad_queue_id(self._queue().queue_id, "overflow")
            self._end(named("error", orjson.dumps(error.body())))
            return
        self._flush_then_park()

    def _queue(self) -> ClientDescriptor:
        client = self._client
        assert client is not None
        return client

    def _write_new(self) -> None:
        client = self._queue()
        items = client.event_queue.after(self.written)
        if not items:
            return
        body = frames(items)
        self.written = items[-1][0]
        self.count += len(items)
        server = self.server
        # The queue held nothing more: its position is the stream's.
        stream_position = answer_position(server, client, None)
        if stream_position is None:
            self._target.write(body)
        else:
            self._target.write(body + position(stream_position))
        server.observe_response(client, items, len(body), "events", self.waited)

    def _flush_then_park(self) -> None:
        """Send what was written; park again once the connection takes more
        (a client slow to read holds its stream back, not the server)."""
        try:
            flushed = self._target.flush()
        except tornado.iostream.StreamClosedError:
            self.disconnected()
            return
        if flushed is None:
            self._sent()
        elif flushed.done():
            self._flushed(flushed)
        else:
            flushed.add_done_callback(self._flushed)

    def _flushed(self, flushed: asyncio.Future[None]) -> None:
        if self._done:
            return
        if flushed.cancelled() or flushed.exception() is not None:
            self.disconnected()
            return
        self._sent()

    def _sent(self) -> None:
        """Its write is sent, and the connection takes more."""
        server = self.server
        client = self._queue()
        if must_end(server, client, self.count):
            self._end(None)
        elif client not in server.registry:
            self._end_with_queue()  # it ended while the stream wrote
        elif client.waiter is not None:
            self._end(named("displaced", b"{}"))  # a newer reader parked meanwhile
        else:
            self.park(client)

    def _end_with_queue(self) -> None:
        """Its queue ended: what it still held is written, then why."""
        self._write_new()
        try:
            self._target.flush()
        except tornado.iostream.StreamClosedError:
            self.disconnected()
            return
        self._end(ended(self.server, self._queue()))

    def disconnected(self) -> None:
        """Its connection closed."""
        self._leave()
        self._end(DISCONNECTED)

    def _end(self, last: bytes | None) -> None:
        self._done = True
        self._cancel_heartbeat()
        if not self.ended.done():
            self.ended.set_result(last)


def ended(server: PollApi, client: ClientDescriptor) -> bytes:
    """What a stream says of its queue's end: the API's error when the
    owner is told why (overflow, eviction, a role change), else that it was
    deleted."""
    try:
        server.registry.get(client.queue_id, client.user_id)
    except QueueError as exc:
        error = from_queue_error(exc)
        if error.body().get("reason") is not None:
            return named("error", orjson.dumps(error.body()))
    return named("deleted", b"{}")


def must_end(server: PollApi, client: ClientDescriptor, written_count: int) -> bool:
    """Whether a stream that has written `written_count` events ends now
    (acknowledgement by reconnection, or shutdown)."""
    limits = server.registry.limits
    return (
        server.stopping
        or written_count >= min(MAX_UNACKNOWLEDGED, limits.max_events // 2)
        or client.event_queue.bytes >= limits.max_bytes // 2
    )
