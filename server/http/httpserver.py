"""The HTTP server: Tornado's, with an answer for every request it cannot parse.

Tornado closes a connection without a word when a request head (request line
and headers) is larger than its limit (tornado issue #2632), and answers one
that does not parse with a bare `400 Bad Request` and no body. The client then
sees "connection reset" or an empty reply and cannot tell what it did wrong.
Here such a request gets the API's JSON error, with `Connection: close`:

- 414 `URI_TOO_LONG`: the request line alone is longer than the head limit;
- 431 `HEADERS_TOO_LARGE`: the request line fits, the head as a whole does not;
- 400 `BAD_REQUEST`: the head is not HTTP/1.x (a request line or header that
  does not parse, an unknown HTTP version, a bad Content-Length, ...), or a
  chunked body's framing is broken before any answer was started.

The connection then closes lingering, as nginx does: the answer is sent, our
side of the connection is shut down, and whatever the client is still sending
is read and dropped (up to `LINGER_BYTES`, for at most `LINGER_SECS`) before
the socket is closed. A socket closed with unread input sends a reset, which
can destroy the answer before the client has read it: a client that sent a
100 KB URL is usually still sending when the server has decided.

Each refusal is one log line (peer, status, why, sizes; never the request's
bytes) and a count in `/metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

import orjson
import tornado.httpserver
import tornado.ioloop
import tornado.iostream

log = logging.getLogger("eventq.http")

# How long, and how much, a refused connection is drained before it closes.
LINGER_SECS = 5.0
LINGER_BYTES = 1024 * 1024
# Refused connections draining at once; past it a refusal is sent (if the
# socket takes it at once) and the socket closed, so a flood of bad requests
# cannot hold sockets and tasks without bound.
MAX_LINGERING = 256
# How often connections waiting for a request head are checked against the
# idle timeout (Tornado would arm a timer per request instead).
IDLE_SWEEP_SECS = 60.0

# What Tornado writes for a request head it cannot parse (http1connection.py),
# replaced by our JSON answer. Should a Tornado release write anything else,
# the client would get Tornado's bare 400 again: tests/server/test_refusals.py
# would fail.
_TORNADO_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"

# Tornado's own lines for the same events (INFO, without the peer or the
# status); ours replace them.
_TORNADO_MESSAGES = ("Unsatisfiable read, closing connection", "Malformed HTTP message from")

_REASONS = {400: "Bad Request", 414: "URI Too Long", 431: "Request Header Fields Too Large"}


def refusal(status: int, code: str, msg: str) -> bytes:
    """A whole HTTP/1.1 response: the API's JSON error, closing the connection."""
    body = orjson.dumps({"result": "error", "msg": msg, "code": code})
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _QuietTornado(logging.Filter):
    """Drops Tornado's log line about a refused head: ours says more."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_TORNADO_MESSAGES))


_QUIET_TORNADO = _QuietTornado()


class Refusals:
    """Answers, drains and closes refused connections; counts them by status.

    Lives on the IO loop: every method runs there.
    """

    def __init__(self, max_header_bytes: int):
        self.max_header_bytes = max_header_bytes
        # status -> requests refused since start (read by /metrics).
        self.counts: dict[int, int] = dict.fromkeys(_REASONS, 0)
        # The drains in progress; at most MAX_LINGERING.
        self._lingering: set[asyncio.Task[None]] = set()

    def head_too_large(self, buffered: bytes | bytearray | None) -> tuple[int, bytes, str]:
        """The answer to a head past the limit, given what was read of it."""
        limit = self.max_header_bytes
        if buffered is not None and b"\n" not in buffered[:limit]:
            why = f"request line longer than {limit} bytes"
            return 414, refusal(414, "URI_TOO_LONG", f"Request URI too long: {why}"), why
        why = f"request head (request line and headers) over {limit} bytes"
        return 431, refusal(431, "HEADERS_TOO_LARGE", f"Request headers too large: {why}"), why

    def bad_request(self, head: bool = True) -> tuple[int, bytes, str]:
        """The answer to a head (or, `head` False, a body's framing: chunk
        sizes, Content-Length) that does not parse or is over Tornado's limit."""
        if head:
            why = "not an HTTP/1.x request (request line or headers do not parse)"
        else:
            why = "request body framing does not parse or is over the size limit"
        return 400, refusal(400, "BAD_REQUEST", f"Malformed HTTP request: {why}"), why

    def bad_body(self) -> tuple[int, bytes, str]:
        """The answer to a body whose chunked framing does not parse."""
        why = "malformed chunked body (a chunk-size line over 64 bytes)"
        return 400, refusal(400, "BAD_REQUEST", f"Malformed HTTP request: {why}"), why

    def refuse(
        self, sock: socket.socket, peer: str, status: int, why: str, answer: bytes | None
    ) -> None:
        """Take over `sock`: send `answer` (None: already sent), drain, close."""
        self.counts[status] += 1
        log.info("refused a request from %s with %d: %s", peer, status, why)
        if len(self._lingering) >= MAX_LINGERING:
            if answer is not None:
                with contextlib.suppress(OSError):  # best effort: no time to wait
                    sock.send(answer)
            sock.close()
            return
        try:
            task = asyncio.get_running_loop().create_task(_linger(sock, answer))
        except BaseException:
            sock.close()
            raise
        self._lingering.add(task)
        task.add_done_callback(self._lingering.discard)
        # A drain cancelled before it started never reaches its `finally`.
        task.add_done_callback(lambda _task: sock.close())

    async def close(self) -> None:
        """Stop every drain in progress (at shutdown); their sockets close."""
        for task in list(self._lingering):
            task.cancel()
        if self._lingering:
            await asyncio.gather(*self._lingering, return_exceptions=True)


async def _linger(sock: socket.socket, answer: bytes | None) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LINGER_SECS
    try:
        if answer is not None:
            await asyncio.wait_for(loop.sock_sendall(sock, answer), LINGER_SECS)
        sock.shutdown(socket.SHUT_WR)
        drained = 0
        while drained < LINGER_BYTES:
            left = deadline - loop.time()
            if left <= 0:
                break
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 64 * 1024), left)
            if not chunk:
                break
            drained += len(chunk)
    except (OSError, TimeoutError):
        pass  # the client went away, or kept sending: nothing more to tell it
    finally:
        sock.close()


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


def close_idle(
    connections: Iterable[_C], waiting_since: Callable[[_C], float | None], timeout: float
) -> None:
    """Close the `connections` that have waited `timeout` or longer for a
    request head (`waiting_since`: since when, None while a request is
    served), and say how many."""
    oldest = time.monotonic() - timeout
    idle = [
        each
        for each in connections
        if (since := waiting_since(each)) is not None and since <= oldest
    ]
    for each in idle:
        each.close()
    if idle:
        log.info("closed %d connections idle for %.0f s", len(idle), timeout)


class _AnsweringStream(tornado.iostream.IOStream):
    """A connection's stream that hands a refused request to `Refusals`
    instead of closing it silently.

    Tornado reads each request head with `read_until_regex` (limited to the
    head size) and bodies with `read_bytes` or `read_until` (a chunk-size
    line, limited to 64 bytes): a read past its limit is a head too large
    while a head is being read, else a broken body. Tornado answers one
    request at a time, so a new head read also means no answer is under way.
    """

    def __init__(
        self,
        sock: socket.socket,
        refusals: Refusals,
        peer: str,
        initial: bytes = b"",
        **kwargs: Any,
    ):
        super().__init__(sock, **kwargs)
        if initial:
            # Read before the connection was handed over (server/http/http1.py):
            # what Tornado reads first.
            self._read_buffer += initial
            self._read_buffer_size += len(initial)
        self._refusals = refusals
        self._peer = peer
        # Whether the read in progress is a request head.
        self._reading_head = False
        # Whether anything of the current request's answer has been written:
        # a refusal can no longer be sent then.
        self._answering = False
        # (status, why) once Tornado has written its bare 400 (as our JSON one).
        self._refused: tuple[int, str] | None = None
        # When the current request head's read began.
        self.head_since = time.monotonic()
        super().set_nodelay(True)

    def set_nodelay(self, value: bool) -> None:
        """TCP_NODELAY stays on (set once, above). Every answer is written
        whole, so Nagle's algorithm could only delay it; Tornado switches it
        on and off around each answer, two system calls per request."""

    def read_until_regex(self, regex: bytes, max_bytes: int | None = None) -> Awaitable[bytes]:
        self._reading_head = True
        self._answering = False
        self.head_since = time.monotonic()
        return super().read_until_regex(regex, max_bytes)

    def waiting_for_head_since(self) -> float | None:
        """Since when this connection has been waiting for (the rest of) a
        request head; None while a request is read or answered."""
        return self.head_since if self._reading_head and self.reading() else None

    def read_until(self, delimiter: bytes, max_bytes: int | None = None) -> Awaitable[bytes]:
        self._reading_head = False
        return super().read_until(delimiter, max_bytes)

    def read_bytes(self, num_bytes: int, partial: bool = False) -> Awaitable[bytes]:
        self._reading_head = False
        return super().read_bytes(num_bytes, partial)

    def write(self, data: bytes | memoryview) -> asyncio.Future[None]:
        if self._refused is None and not self._answering and data == _TORNADO_BAD_REQUEST:
            status, answer, why = self._refusals.bad_request(head=self._reading_head)
            self._refused = (status, why)
            data = answer
        # An interim answer (100 Continue, before a body is read) is not the
        # request's answer: a refusal of the body can still follow it.
        if not bytes(data[:10]).startswith(b"HTTP/1.1 1"):
            self._answering = True
        return super().write(data)

    def close_fd(self) -> None:
        refused = self._refused
        answer: bytes | None = None
        if refused is None and isinstance(self.error, tornado.iostream.UnsatisfiableReadError):
            if self._reading_head:
                # What was read of the head tells a long request line from
                # long headers; Tornado keeps it in its read buffer until now.
                status, answer, why = self._refusals.head_too_large(
                    getattr(self, "_read_buffer", None)
                )
                refused = (status, why)
            elif not self._answering:
                status, answer, why = self._refusals.bad_body()
                refused = (status, why)
        if refused is None:
            super().close_fd()
            return
        sock, self.socket = self.socket, None  # type: ignore[assignment]
        self._refusals.refuse(sock, self._peer, refused[0], refused[1], answer)


class EventHTTPServer(tornado.httpserver.HTTPServer):
    """Tornado's HTTPServer whose connections answer the requests they refuse
    through `refusals`, whose `max_header_bytes` is the request head limit
    (request line and headers)."""

    def initialize(self, *args: Any, refusals: Refusals, **kwargs: Any) -> None:  # type: ignore[override]
        if kwargs.get("ssl_options") is not None:
            # handle_stream serves every socket as a plain IOStream.
            raise ValueError("EventHTTPServer does not serve TLS: terminate it in nginx")
        kwargs["max_header_size"] = refusals.max_header_bytes
        super().initialize(*args, **kwargs)
        self.refusals = refusals
        # Tornado waits for each request head under a timeout of its own (the
        # idle connection timeout), a timer armed and cancelled per request;
        # one sweep a minute closes the connections idle that long instead.
        self.idle_timeout: float | None = self.conn_params.header_timeout
        self.conn_params.header_timeout = None
        self._streams: weakref.WeakSet[_AnsweringStream] = weakref.WeakSet()
        self._sweep: tornado.ioloop.PeriodicCallback | None = None
        tornado_log = logging.getLogger("tornado.general")
        if _QUIET_TORNADO not in tornado_log.filters:
            tornado_log.addFilter(_QUIET_TORNADO)

    def handle_stream(self, stream: tornado.iostream.IOStream, address: Any) -> None:
        # Tornado made a plain IOStream for the new connection, which has not
        # read or registered anything yet: serve the same socket through ours.
        self._serve(stream.socket, address, b"")

    def adopt(self, sock: socket.socket, address: Any, initial: bytes) -> None:
        """Serve a connection another server began (server/http/http1.py), from
        the request that starts `initial`, the bytes it read of it."""
        sock.setblocking(False)
        self._serve(sock, address, initial)

    def _serve(self, sock: socket.socket, address: Any, initial: bytes) -> None:
        peer = address[0] if isinstance(address, tuple) and address else str(address)
        answering = _AnsweringStream(
            sock,
            self.refusals,
            peer,
            initial,
            max_buffer_size=self.max_buffer_size,
            read_chunk_size=self.read_chunk_size,
        )
        self._streams.add(answering)
        if self._sweep is None and self.idle_timeout is not None:
            self._sweep = tornado.ioloop.PeriodicCallback(
                self.close_idle, min(IDLE_SWEEP_SECS, self.idle_timeout / 4) * 1000
            )
            self._sweep.start()
        super().handle_stream(answering, address)

    def close_idle(self) -> None:
        """Close the connections that have waited `idle_timeout` for a request
        head (keep-alive connections nobody uses, heads sent too slowly)."""
        if self.idle_timeout is not None:
            close_idle(
                list(self._streams), lambda each: each.waiting_for_head_since(), self.idle_timeout
            )

    def stop(self) -> None:
        if self._sweep is not None:
            self._sweep.stop()
            self._sweep = None
        super().stop()
