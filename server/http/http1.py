"""eventq's own HTTP/1.1 connections, on the event loop, for the long poll's CPU
cost (tests/benchmarks/fanout.py measures it against a C server).

Tornado's `HTTP1Connection` and `IOStream` cost more per request than
everything eventq does for a long poll (a coroutine per request, headers
parsed and formatted in Python line by line, a future and a poller
re-registration per read and write). Here a connection is an
`asyncio.Protocol`: the loop's transport (uvloop's, in C) reads and writes,
a request head is cut from one buffer and parsed by llhttp (Node's HTTP
parser, in C, through `httptools`), and an answer is one `transport.write`.

Each request is handed to the same `HTTPServerConnectionDelegate` Tornado's
server would use (`routes.Dispatcher`), through `Exchange`, an
`HTTPConnection` that frames the answer as `HTTP1Connection` does: the
lean long poll and every full handler run unchanged, with the same headers,
keep-alive and close decisions.

Only the requests everybody sends are served here: HTTP/1.1, a head of
plain ASCII within the head limit that llhttp takes in its strict mode
(which refuses the ambiguous heads requests are smuggled in: Content-Length
with Transfer-Encoding, two Content-Lengths, obsolete line folding, a bare
LF, a space before a colon), a request line of single spaces, no body or a
`Content-Length` one within the body limit, no `Transfer-Encoding`,
`Expect` or `Upgrade`. A connection whose next request is anything else
(a head past the limit, a head llhttp refuses, HTTP/1.0, a chunked body,
...) is handed, from that request on, to Tornado's server
(`httpserver.EventHTTPServer.adopt`), whose answers to all of those are
tested and stay as they are: the same socket, the bytes already read put
back in front of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httptools
import tornado.httputil
import tornado.iostream
from tornado.httputil import HTTPHeaders, RequestStartLine, ResponseStartLine

from server.http.httpserver import IDLE_SWEEP_SECS, EventHTTPServer, close_idle
from server.http.turns import Backlog, RequestTurns

log = logging.getLogger("eventq.http")
# Tornado's logger for exceptions a delegate let escape; its HTTP1Connection
# logs them there too.
app_log = logging.getLogger("tornado.application")

_HEAD_END = b"\r\n\r\n"
# Methods the server answers; any other goes to Tornado (which answers 405).
_METHODS = frozenset((b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD", b"OPTIONS"))
# A Host header Tornado's request parser certainly accepts (a name or IPv4
# address of unreserved characters, and a port); a request with any other is
# left to Tornado's parser (here: the connection is handed over; in
# routes.Dispatcher: the full handlers), which answers 400 for those it refuses.
PLAIN_HOST = re.compile(r"[A-Za-z0-9._~-]+(?::[0-9]*)?")
# Headers whose presence sends a request to Tornado (names in lower case).
_UNUSUAL = frozenset(("transfer-encoding", "expect", "upgrade"))
# A request head taken apart: its start line, its headers by lower-case name
# (a repeated one's values joined by commas, as HTTPHeaders joins them), its
# header lines as sent, its body's length and whether the connection stays open.
Parsed = tuple[RequestStartLine, dict[str, str], list[tuple[str, str]], int, bool]
# What serves the requests it takes without HTTPHeaders or routing (the long
# poll's and the notify endpoint's common cases, `routes.Dispatcher.lean`):
# given a request's start line, headers by lower-case name and its Exchange,
# a delegate (given the body, if any, then finished), or None for the full
# delegate.
LeanPath = Callable[
    [RequestStartLine, dict[str, str], "Exchange"],
    tornado.httputil.HTTPMessageDelegate | None,
]
# A head's headers taken apart: by lower-case name, as sent, the body's
# length, whether the connection stays open. Shared by every request that
# sends the same header bytes (`FastHTTPServer.heads`): never modified.
_Headers = tuple[dict[str, str], list[tuple[str, str]], int, bool]
_UNKNOWN = object()
# Header blocks remembered taken apart (or refused): at most this many, each
# of at most this size and this many lines (a block taken apart holds a few
# objects per line: about 10 MB in all at worst); all forgotten at once when
# full.
_MAX_KNOWN_HEADS = 2048
_MAX_KNOWN_HEAD_BYTES = 2048
_MAX_KNOWN_HEAD_LINES = 32
# A body is handed to the delegate in pieces of at most this (Tornado's).
_CHUNK_BYTES = 65536
# What may wait unread behind a request in progress (pipelined requests, or
# a body beyond the current one) before the connection stops reading.
_MAX_PENDING_BYTES = 256 * 1024
# At shutdown, how long closing connections may take to send what they hold.
CLOSE_WAIT_SECS = 5.0


class _Url:
    """What llhttp tells of a head whose header lines are already known."""

    __slots__ = ("url",)

    def __init__(self) -> None:
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url


class _Head(_Url):
    """What llhttp tells of a head: its request-target and header lines."""

    __slots__ = ("lines",)

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[bytes, bytes]] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.lines.append((name, value))


class _Context:
    """What `HTTPServerRequest` reads of a connection: the peer's address."""

    __slots__ = ("address", "protocol", "remote_ip")

    def __init__(self, address: Any):
        self.address = address
        self.remote_ip = address[0] if isinstance(address, tuple) and address else ""
        self.protocol = "http"

    def __str__(self) -> str:
        return self.remote_ip


def _closed_future() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_exception(tornado.iostream.StreamClosedError())
    future.exception()  # retrieved: nobody has to look at it
    return future


class Exchange(tornado.httputil.HTTPConnection):
    """One request and its answer on an `HTTP1Protocol` connection: the
    `HTTPConnection` its delegate writes the answer through, framed as
    Tornado's `HTTP1Connection` frames it (chunked without a
    Content-Length, `Connection: close` when the connection ends after it,
    no body for HEAD, 204 and 304)."""

    __slots__ = (
        "_chunking",
        "_close_callback",
        "_remaining",
        "context",
        "delegate",
        "delegate_done",
        "disconnect",
        "protocol",
        "read_finished",
        "start_line",
        "write_finished",
    )

    def __init__(self, protocol: HTTP1Protocol, start_line: RequestStartLine, keep_alive: bool):
        self.protocol = protocol
        self.start_line = start_line
        self.context = protocol.context
        self.delegate: tornado.httputil.HTTPMessageDelegate | None = None
        # Whether the connection closes once this answer is written.
        self.disconnect = not keep_alive
        self.read_finished = False
        self.write_finished = False
        # Whether the delegate has been finished, or told the connection
        # closed: it hears of the connection no more.
        self.delegate_done = False
        self._chunking = False
        self._remaining: int | None = None
        self._close_callback: Callable[[], None] | None = None

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self._close_callback = callback

    def delegate_finished(self) -> None:
        """Its delegate hears of this exchange no more, and is let go: the
        delegate holds the exchange to answer through it, and the pair would
        otherwise wait for Python's cyclic GC, whose young collections then
        each took thousands of them (6-22 ms with the IO loop stopped, at
        3,000 long polls a second)."""
        self.delegate_done = True
        self.delegate = None

    def connection_closed(self) -> None:
        """The connection ended (client gone, or closed by us) before this
        request's answer was finished."""
        callback, self._close_callback = self._close_callback, None
        if callback is not None:
            callback()

    def write_headers(
        self,
        start_line: RequestStartLine | ResponseStartLine,
        headers: HTTPHeaders,
        chunk: bytes | None = None,
    ) -> asyncio.Future[None]:
        assert isinstance(start_line, ResponseStartLine)
        code = start_line.code
        head_request = self.start_line.method == "HEAD"
        self._chunking = (
            not head_request
            and code not in (204, 304)
            and not 100 <= code < 200
            and "Content-Length" not in headers
        )
        if self.disconnect:
            headers["Connection"] = "close"
        if self._chunking:
            headers["Transfer-Encoding"] = "chunked"
        if head_request or code == 304:
            self._remaining = 0
        elif "Content-Length" in headers:
            self._remaining = int(headers["Content-Length"])
        else:
            self._remaining = None
        status = f"HTTP/1.1 {code} {start_line.reason}"
        lines = [f"{name}: {value}" for name, value in headers.get_all()]
        text = "".join(f"\r\n{line}" for line in lines)
        # As Tornado refuses them: a CR or LF inside a header would let a
        # value write headers (or an answer) of its own.
        if (
            text.count("\n") != len(lines)
            or text.count("\r") != len(lines)
            or "\r" in status
            or "\n" in status
        ):
            raise ValueError(f"Illegal characters (CR or LF) in header: {status + text!r}")
        # The status line in UTF-8, the headers in Latin-1, as Tornado writes them.
        data = status.encode() + text.encode("latin1") + b"\r\n\r\n"
        if chunk:
            data += self._frame(chunk)
        return self.protocol.write(data)

    def write(self, chunk: bytes) -> asyncio.Future[None]:
        return self.protocol.write(self._frame(chunk))

    def send(self, chunk: bytes) -> asyncio.Future[None] | None:
        """`write` for a writer that goes on at once unless told to wait (an
        event stream): None when the connection takes more, without making
        a future for it, else `write`'s future."""
        return self.protocol.send(self._frame(chunk))

    def _frame(self, chunk: bytes) -> bytes:
        if self._remaining is not None:
            self._remaining -= len(chunk)
            if self._remaining < 0:
                self.protocol.close()
                raise tornado.httputil.HTTPOutputError(
                    "Tried to write more data than Content-Length"
                )
        if self._chunking and chunk:
            return b"%x\r\n%s\r\n" % (len(chunk), chunk)
        return chunk

    def finish(self) -> None:
        protocol = self.protocol
        if self._remaining and not protocol.closed:
            protocol.close()
            raise tornado.httputil.HTTPOutputError(
                f"Tried to write {self._remaining} bytes less than Content-Length"
            )
        if self._chunking:
            protocol.write(b"0\r\n\r\n")
        self.write_finished = True
        # Answered before the body was read: closing the connection is the
        # only way not to read the rest of it.
        if not self.read_finished:
            self.disconnect = True
        self._close_callback = None
        protocol.exchange_done(self)

    def answer(self, data: bytes) -> None:
        """Write a whole answer (head and body) made by the caller, which
        has framed it as `write_headers` would (the lean poll's answers:
        a Content-Length, never chunked), and finish."""
        if self.disconnect:
            raise AssertionError("a connection closing after the answer takes write_headers")
        protocol = self.protocol
        if not protocol.closed:
            protocol.transport.write(data)  # type: ignore[union-attr]
        self.write_finished = True
        self._close_callback = None
        protocol.exchange_done(self)


class HTTP1Protocol(asyncio.Protocol):
    """One client connection (see the module's docstring)."""

    # Thousands are parked at once: no __dict__ each.
    __slots__ = (
        "_data_waiter",
        "_drain_waiters",
        "_handoff_pending",
        "_reading",
        "body_left",
        "buffer",
        "closed",
        "context",
        "exchange",
        "handed_off",
        "head_since",
        "server",
        "transport",
    )

    def __init__(self, server: FastHTTPServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.context = _Context(None)
        # Bytes read and not yet taken: the next request's head, a body.
        self.buffer = bytearray()
        # The request being served (read, answered, or both).
        self.exchange: Exchange | None = None
        # Bytes of the current request's body not yet taken from `buffer`.
        self.body_left = 0
        # Whether the connection is closed or closing; whether Tornado has it.
        self.closed = False
        self.handed_off = False
        # Since when the connection has been waiting for a request head
        # (None while a request is served).
        self.head_since: float | None = time.monotonic()
        self._data_waiter: asyncio.Future[None] | None = None
        # Futures of writes made while the transport's buffer is full; None
        # while it takes more.
        self._drain_waiters: list[asyncio.Future[None]] | None = None
        # A handoff waiting for our last answer to leave the buffer.
        self._handoff_pending = False
        self._reading = True

    # -- asyncio's side -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes.
        self.transport = cast(asyncio.Transport, transport)
        self.context = _Context(transport.get_extra_info("peername"))
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Every answer is written whole: Nagle's algorithm could only delay it.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.handed_off:
            return
        self.buffer += data
        waiter = self._data_waiter
        if waiter is not None:
            self._data_waiter = None
            if not waiter.done():
                waiter.set_result(None)
        if self.exchange is None:
            self.request_arrived()
        elif len(self.buffer) - self.body_left > _MAX_PENDING_BYTES:
            self._pause_reading()

    def eof_received(self) -> bool:
        return False  # a half-closed client is a gone client: close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.closed(self)
        waiter = self._data_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        for drain in self._drain_waiters or ():
            if not drain.done():
                drain.set_exception(tornado.iostream.StreamClosedError())
                drain.exception()
        self._drain_waiters = None
        exchange, self.exchange = self.exchange, None
        if exchange is None or self.handed_off:
            return
        if exchange.write_finished:
            # Answered before its body was read (the connection closes for
            # that): nothing to tell the delegate, which is let go.
            exchange.delegate_finished()
            return
        if not exchange.delegate_done:
            # Still reading its request: its delegate is told, as Tornado tells it.
            delegate = exchange.delegate
            exchange.delegate_finished()
            if delegate is not None:
                try:
                    delegate.on_connection_close()
                except Exception:
                    app_log.error("Uncaught exception", exc_info=True)
            return
        try:
            exchange.connection_closed()
        except Exception:
            app_log.error("Uncaught exception", exc_info=True)

    def pause_writing(self) -> None:
        self._drain_waiters = []

    def resume_writing(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)
        if self._handoff_pending:
            self._handoff_pending = False
            self._hand_off()
        elif self.exchange is None and not self.closed:
            # The next request waited for the answers before it to leave.
            self._resume_reading()
            self.request_arrived()

    def _pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self.transport.pause_reading()  # type: ignore[union-attr]

    def _resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self.transport.resume_reading()  # type: ignore[union-attr]

    # -- for Exchange -----------------------------------------------------------

    def send(self, data: bytes) -> asyncio.Future[None] | None:
        """`Exchange.send`: `write`, but None where its future would be done
        (the transport takes more, this write included)."""
        if self.closed:
            return _closed_future()
        self.transport.write(data)  # type: ignore[union-attr]
        # Paused by this very write, or before it.
        waiters = self._drain_waiters
        if waiters is None:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(future)
        return future

    def write(self, data: bytes) -> asyncio.Future[None]:
        """Write `data`; the future is done once the transport takes more."""
        future = self.send(data)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)
        return future

    def close(self) -> None:
        """Close once what is written has been sent."""
        if not self.closed:
            self.closed = True
            self.transport.close()  # type: ignore[union-attr]

    def exchange_done(self, exchange: Exchange) -> None:
        """`exchange`'s answer is written: the connection closes or reads on."""
        if exchange is not self.exchange or self.closed:
            return
        if exchange.disconnect:
            self.close()
            return
        self.exchange = None
        self.head_since = time.monotonic()
        if self._drain_waiters is not None:
            # The client is not reading its answers: read no more requests
            # until they have left (resume_writing), as Tornado reads the
            # next request once the answer is written.
            self._pause_reading()
            return
        self._resume_reading()
        if self.buffer:
            # A pipelined request: served from the loop, not from inside the
            # answer to the one before.
            asyncio.get_running_loop().call_soon(self.request_arrived)

    # -- requests -----------------------------------------------------------------

    def request_arrived(self) -> None:
        """Serve the next request: a GET (a poll) after the answers due
        (server/http/turns.py), a notice or any other at once."""
        buffer = self.buffer
        end = buffer.find(_HEAD_END) if buffer.startswith(b"GET ") else -1
        if 0 <= end <= self.server.max_header_bytes - 4:
            if len(buffer) > _MAX_PENDING_BYTES:
                self._pause_reading()  # resumed once it is served
            self.server.turns.ready(self)
        else:
            self.next_request()  # a head still coming, too large, not a GET

    def next_request(self) -> None:
        """Serve the request at the front of `buffer` (`turns.Waiting`)."""
        if self.exchange is not None or self.closed or self.handed_off or not self.buffer:
            return
        if self._drain_waiters is not None:
            self._pause_reading()  # resume_writing serves it
            return
        buffer = self.buffer
        end = buffer.find(_HEAD_END)
        limit = self.server.max_header_bytes
        if end < 0:
            # Tornado ends a head at a bare LF too; a head past the limit is
            # refused. Both are Tornado's to answer.
            if len(buffer) > limit or b"\n\n" in buffer or b"\n\r\n" in buffer:
                self._hand_off()
            return
        if end + 4 > limit:
            self._hand_off()
            return
        head = bytes(buffer[: end + 4])
        parsed = self._parse(head, end)
        if parsed is None:
            self._hand_off()
            return
        if len(buffer) == end + 4:
            # A bytearray keeps its size after a deletion: a parked
            # connection keeps an empty one.
            self.buffer = bytearray()
        else:
            del buffer[: end + 4]
        self._serve(head, *parsed)

    def _parse(self, head: bytes, end: int | None = None) -> Parsed | None:
        """The request in `head` up to `end` (its blank line; default: all
        of it), or None for one this connection does not serve (Tornado will)."""
        if end is None:
            end = len(head)
        if not head.isascii():
            return None
        split = head.find(b"\r\n", 0, end)
        if split < 0:
            split = end
        # A client sends the same headers request after request: taken apart
        # once, for every connection.
        block = head[split:end]
        known = self.server.heads
        headers = known.get(block, _UNKNOWN)
        if headers is None:
            return None
        # llhttp parses the whole head every time (about a microsecond); the
        # header lines are handed to Python only the first time.
        sink = _Head() if headers is _UNKNOWN else _Url()
        parser = httptools.HttpRequestParser(sink)
        try:
            # `next_request` hands the head with its blank line; tests without.
            parser.feed_data(head if len(head) == end + 4 else head[:end] + _HEAD_END)
        except httptools.HttpParserError:  # an Upgrade too
            return None
        method, url = parser.get_method(), sink.url
        # llhttp takes several spaces between the request line's parts, and
        # a request-target that is not a path; Tornado does not.
        if (
            method not in _METHODS
            or parser.get_http_version() != "1.1"
            or url[:1] != b"/"
            or head[:split] != b"%s %s HTTP/1.1" % (method, url)
        ):
            return None
        if headers is _UNKNOWN:
            headers = self._parse_headers(cast(_Head, sink).lines)
            if len(block) <= _MAX_KNOWN_HEAD_BYTES and block.count(b"\n") <= _MAX_KNOWN_HEAD_LINES:
                if len(known) >= _MAX_KNOWN_HEADS:
                    known.clear()
                known[block] = headers
            if headers is None:
                return None
        fields, lines, length, keep_alive = cast(_Headers, headers)
        start_line = RequestStartLine(method.decode(), url.decode(), "HTTP/1.1")
        return start_line, fields, lines, length, keep_alive

    def _parse_headers(self, raw: list[tuple[bytes, bytes]]) -> _Headers | None:
        """The header lines llhttp took apart (ASCII, tokens for names, no
        control characters in values), or None for headers this connection
        does not serve."""
        lines = [(name.decode(), value.decode().rstrip(" \t")) for name, value in raw]
        fields = {name.lower(): value for name, value in lines}
        if len(fields) != len(lines):
            # A name given twice: its values joined, as HTTPHeaders joins them.
            fields = {}
            for name, value in lines:
                key = name.lower()
                fields[key] = f"{fields[key]},{value}" if key in fields else value
        if not fields.keys().isdisjoint(_UNUSUAL):
            return None
        # Tornado refuses an HTTP/1.1 request without a Host.
        host = fields.get("host")
        if host is None or not PLAIN_HOST.fullmatch(host):
            return None
        length = 0
        declared = fields.get("content-length")
        if declared is not None:
            # llhttp took one, of digits only, below 2**64.
            length = int(declared)
            if length > self.server.max_body_size:
                return None
        connection = fields.get("connection")
        keep_alive = connection is None or connection.lower() != "close"
        return fields, lines, length, keep_alive

    def _serve(
        self,
        head: bytes,
        start_line: RequestStartLine,
        fields: dict[str, str],
        lines: list[tuple[str, str]],
        length: int,
        keep_alive: bool,
    ) -> None:
        exchange = Exchange(self, start_line, keep_alive)
        self.exchange = exchange
        self.head_since = None
        self.body_left = length
        server = self.server
        try:
            # The long poll's and the notify endpoint's common cases,
            # without HTTPHeaders or routing.
            lean = server.lean(start_line, fields, exchange)
            if lean is not None:
                exchange.delegate = delegate = lean
                waiting = None
            else:
                headers = HTTPHeaders()
                for name, value in lines:
                    headers.add(name, value)
                delegate = server.delegate.start_request(self, exchange)
                exchange.delegate = delegate
                waiting = delegate.headers_received(start_line, headers)
        except tornado.httputil.HTTPInputError:
            # A request Tornado's parser refuses (a query of too many fields,
            # ...), found out before anything was done for it: Tornado's
            # server answers it, from its head on.
            exchange.delegate_finished()
            self.exchange = None
            self.body_left = 0
            self.buffer[:0] = head
            self._hand_off()
            return
        except Exception:
            self._uncaught(exchange)
            return
        if waiting is None and (length == 0 or (lean is not None and length <= len(self.buffer))):
            # The common cases, without a coroutine: a GET, or a lean
            # delegate's body already read.
            try:
                if length:
                    self._take_body(delegate, length)
                exchange.read_finished = True
                if not exchange.write_finished:
                    delegate.finish()
            except Exception:
                self._uncaught(exchange)
                return
            exchange.delegate_finished()
            return
        asyncio.get_running_loop().create_task(self._serve_body(exchange, waiting))

    def _take_body(self, delegate: tornado.httputil.HTTPMessageDelegate, length: int) -> None:
        """Hand the `length` bytes at the front of `buffer` to a lean
        delegate (whose `data_received` returns nothing to wait for)."""
        buffer = self.buffer
        if len(buffer) == length:
            body = bytes(buffer)
            self.buffer = bytearray()
        else:
            with memoryview(buffer) as view:
                body = view[:length].tobytes()
            del buffer[:length]
        self.body_left = 0
        if len(self.buffer) <= _MAX_PENDING_BYTES:
            self._resume_reading()
        delegate.data_received(body)

    async def _serve_body(self, exchange: Exchange, waiting: Awaitable[None] | None) -> None:
        delegate = exchange.delegate
        assert delegate is not None
        try:
            if waiting is not None:
                await waiting
            while self.body_left > 0:
                if self.closed:
                    return
                if not self.buffer:
                    waiter = asyncio.get_running_loop().create_future()
                    self._data_waiter = waiter
                    await waiter
                    continue
                take = min(len(self.buffer), self.body_left, _CHUNK_BYTES)
                chunk = bytes(self.buffer[:take])
                del self.buffer[:take]
                self.body_left -= take
                if len(self.buffer) - self.body_left <= _MAX_PENDING_BYTES:
                    self._resume_reading()
                if not exchange.write_finished:
                    pending = delegate.data_received(chunk)
                    if pending is not None:
                        await pending
            if self.closed:
                return  # the delegate was told (connection_lost), or has answered
            exchange.read_finished = True
            if not exchange.write_finished:
                delegate.finish()
            exchange.delegate_finished()
        except Exception:
            self._uncaught(exchange)

    def _uncaught(self, exchange: Exchange) -> None:
        """A delegate raised: logged as Tornado logs it, and the connection
        closes (its delegate told, if it was still reading)."""
        app_log.error("Uncaught exception", exc_info=True)
        exchange.set_close_callback(None)
        delegate = exchange.delegate
        if delegate is not None and not exchange.delegate_done:
            exchange.delegate_finished()
            try:
                delegate.on_connection_close()
            except Exception:
                app_log.error("Uncaught exception", exc_info=True)
        self.close()

    # -- to Tornado -------------------------------------------------------------------

    def _hand_off(self) -> None:
        """Give the connection, from the request at the front of `buffer`
        on, to Tornado's server. Waits for our last answer to be sent."""
        transport = self.transport
        assert transport is not None
        self._pause_reading()
        if transport.get_write_buffer_size() and not self.closed:
            # Once the buffer is empty (resume_writing; connection_lost if
            # the client goes first).
            self._handoff_pending = True
            transport.set_write_buffer_limits(high=0)
            return
        sock = transport.get_extra_info("socket")
        if sock is None or self.closed:
            self.close()
            return
        try:
            duplicate = socket.socket(fileno=os.dup(sock.fileno()))
        except OSError:
            self.close()
            return
        self.handed_off = True
        self.closed = True
        self.server.closed(self)
        data, self.buffer = bytes(self.buffer), bytearray()
        # Our descriptor closes; the connection lives on in the duplicate.
        transport.abort()
        self.server.handed_off += 1
        self.server.tornado.adopt(duplicate, self.context.address, data)


class FastHTTPServer:
    """Listens with `HTTP1Protocol` connections; requests are served by
    `lean` when it takes them, else by `delegate`; connections it does not
    serve, by `tornado` (which does not listen itself)."""

    def __init__(
        self,
        delegate: tornado.httputil.HTTPServerConnectionDelegate,
        lean: LeanPath,
        tornado_server: EventHTTPServer,
        *,
        max_body_size: int,
        idle_timeout: float | None,
        backlog: Backlog | None = None,
    ):
        self.delegate = delegate
        self.lean = lean
        self.turns = RequestTurns(backlog)  # polls wait for the answers due
        # Header blocks already taken apart (see `_Headers`), None for refused ones.
        self.heads: dict[bytes, _Headers | None] = {}
        self.tornado = tornado_server
        self.max_header_bytes = tornado_server.refusals.max_header_bytes
        self.max_body_size = max_body_size
        self.idle_timeout = idle_timeout
        self.connections: set[HTTP1Protocol] = set()
        # Set while no connection is open (close_all_connections waits on it).
        self._none_open = asyncio.Event()
        self._none_open.set()
        # Connections given to Tornado since start (read by tests and stats).
        self.handed_off = 0
        self._servers: list[asyncio.Server] = []
        self._sweep: asyncio.TimerHandle | None = None

    async def add_sockets(self, sockets: list[socket.socket], backlog: int) -> None:
        loop = asyncio.get_running_loop()
        for sock in sockets:
            server = await loop.create_server(
                lambda: HTTP1Protocol(self), sock=sock, backlog=backlog
            )
            self._servers.append(server)
        if self.idle_timeout is not None and self._sweep is None:
            self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        assert self.idle_timeout is not None
        every = min(IDLE_SWEEP_SECS, self.idle_timeout / 4)
        self._sweep = asyncio.get_running_loop().call_later(every, self._close_idle)

    def _close_idle(self) -> None:
        """Close the connections that have waited `idle_timeout` for a
        request head (as `EventHTTPServer.close_idle` does for its own)."""
        assert self.idle_timeout is not None
        close_idle(list(self.connections), lambda each: each.head_since, self.idle_timeout)
        self._schedule_sweep()

    def stop(self) -> None:
        """Stop accepting connections; the open ones go on."""
        self.turns.stop()
        for server in self._servers:
            server.close()
        self._servers = []
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def write_buffered(self) -> int:
        """Bytes written and not yet taken by the kernel, on all connections."""
        return sum(
            connection.transport.get_write_buffer_size()
            for connection in self.connections
            if connection.transport is not None and not connection.closed
        )

    def opened(self, connection: HTTP1Protocol) -> None:
        self.connections.add(connection)
        self._none_open.clear()

    def closed(self, connection: HTTP1Protocol) -> None:
        self.connections.discard(connection)
        if not self.connections:
            self._none_open.set()

    async def close_all_connections(self) -> None:
        """Close every connection (what is written is sent first); those
        that have not gone after CLOSE_WAIT_SECS are cut."""
        for connection in list(self.connections):
            connection.close()
        try:
            await asyncio.wait_for(self._none_open.wait(), CLOSE_WAIT_SECS)
        except TimeoutError:
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
