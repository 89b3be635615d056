"""Requests for a user whose queues are on another shard (docs/architecture.md,
"Sharding"; Zulip hands requests between its Tornado shards the same way).

Any shard accepts any request. Register, `GET` and `DELETE /events` of a user
owned elsewhere are handed to the owner:

- behind the generated nginx site (which marks requests with `ACCEL_HEADER`),
  a `GET` is answered with an empty 200 and `X-Accel-Redirect:
  /internal/eventq/<shard><path?query>`; nginx replays it, long poll
  included, on the owner through an internal-only location (as Zulip does);
- otherwise, and for `POST`/`DELETE` (nginx replays a redirect as a body-less
  GET), the shard forwards the request itself over HTTP to the owner and
  relays the answer; a long poll is held open on both sides, and a client that
  goes away closes the forwarded connection, which unparks it on the owner.
  An event stream (server/handlers/stream.py) is relayed as it comes.

A forwarded request carries `FORWARDED_HEADER` with the shared secret; the
owner accepts it only from loopback or the configured internal networks, and
refuses to forward it again (shards that disagree about the config answer 503
instead of bouncing a request between them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Protocol

import tornado.httputil
import tornado.iostream
import tornado.tcpclient

from generation.sharding import Shard
from server.errors import ApiError
from server.http.responses import EVENT_STREAM_TYPE

log = logging.getLogger("eventq.forward")

FORWARDED_HEADER = "X-Eventq-Forwarded"
# Set by a shard on its refusal of a forwarded request (a wrong secret or
# caller): the forwarding shard answers its client 502, not that 403.
REFUSED_HEADER = "X-Eventq-Forward-Refused"
# Set by the generated nginx site on the public event locations: GETs may be
# answered with X-Accel-Redirect.
ACCEL_HEADER = "X-Eventq-Accel"
ACCEL_PREFIX = "/internal/eventq/"
CONNECT_TIMEOUT_SECS = 5.0
# A response head larger than this is not one of ours.
MAX_HEAD_BYTES = 64 * 1024

# Not passed along in either direction (RFC 9110 7.6.1, plus what the hop
# sets itself).
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
    "expect",
    FORWARDED_HEADER.lower(),
    ACCEL_HEADER.lower(),
}
_NOT_RELAYED = _HOP_BY_HOP | {"date", "server", REFUSED_HEADER.lower()}


class Forwarding(Protocol):
    """What forwarding uses of the request handler it answers for (a
    `handlers.base.BaseHandler`, which imports this module)."""

    @property
    def request(self) -> tornado.httputil.HTTPServerRequest: ...

    # The connection to the owner shard while forwarding, closed by the
    # handler when its client hangs up.
    upstream: tornado.iostream.IOStream | None

    def client_left(self) -> bool: ...

    def clear(self) -> None: ...

    def set_status(self, status_code: int, reason: str | None = None) -> None: ...

    def set_header(self, name: str, value: str) -> None: ...

    def add_header(self, name: str, value: str) -> None: ...

    def finish(self, chunk: bytes | None = None) -> object: ...

    def write(self, chunk: bytes) -> None: ...

    def flush(self) -> Awaitable[None]: ...


def accel_redirect(handler: Forwarding, shard: Shard) -> None:
    """Answer with the redirect nginx follows internally to `shard`."""
    log.debug(
        "X-Accel-Redirect of %s %s to shard %s",
        handler.request.method,
        handler.request.path,
        shard.name,
    )
    handler.set_header("X-Accel-Redirect", f"{ACCEL_PREFIX}{shard.name}{handler.request.uri}")
    handler.set_status(200)
    handler.finish(b"")


def _request_head(handler: Forwarding, secret: str, body: bytes) -> bytes:
    request = handler.request
    lines = [f"{request.method} {request.uri} HTTP/1.0", f"Host: {request.host}"]
    for name, value in request.headers.get_all():
        if name.lower() not in _HOP_BY_HOP and name.lower() != "x-forwarded-for":
            lines.append(f"{name}: {value}")
    forwarded_for = request.headers.get("X-Forwarded-For")
    client = request.remote_ip or ""
    lines.append(
        f"X-Forwarded-For: {forwarded_for}, {client}"
        if forwarded_for
        else f"X-Forwarded-For: {client}"
    )
    lines.append(f"{FORWARDED_HEADER}: {secret}")
    if body or request.method in ("POST", "PUT", "PATCH", "DELETE"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _unavailable(shard: Shard, why: str) -> ApiError:
    log.warning(
        "shard %s (%s) unavailable for a forwarded request: %s", shard.name, shard.address, why
    )
    return ApiError(
        "The server holding this queue is unavailable; try again shortly",
        "SHARD_UNAVAILABLE",
        502,
        headers={"Retry-After": "1"},
    )


def _streams(headers: tornado.httputil.HTTPHeaders) -> bool:
    """Whether an answer is an event stream (server/handlers/stream.py):
    relayed as it comes, not once whole."""
    return headers.get("Content-Type", "").startswith(EVENT_STREAM_TYPE)


async def _exchange(
    stream: tornado.iostream.IOStream, request: bytes
) -> tuple[tornado.httputil.ResponseStartLine, tornado.httputil.HTTPHeaders, bytes | None]:
    """The owner's answer: its start line, headers and body (None for an
    event stream, whose body the caller relays)."""
    await stream.write(request)
    while True:
        head = await stream.read_until(b"\r\n\r\n", max_bytes=MAX_HEAD_BYTES)
        first, _, rest = head.decode("latin-1").partition("\r\n")
        start = tornado.httputil.parse_response_start_line(first)
        if start.code >= 200:
            break  # a 1xx (100 Continue) is not the answer
    headers = tornado.httputil.HTTPHeaders.parse(rest)
    length = headers.get("Content-Length")
    if start.code == 200 and _streams(headers):
        payload = None
    elif length is not None:
        payload = await stream.read_bytes(int(length)) if int(length) else b""
    elif start.code in (204, 304):
        payload = b""
    else:
        payload = await stream.read_until_close()
    return start, headers, payload


async def forward(
    handler: Forwarding, shard: Shard, secret: str, body: bytes, timeout_secs: float
) -> None:
    """Send the handler's request to `shard` and answer with its response
    (502 `SHARD_UNAVAILABLE` if none comes within `timeout_secs`). HTTP/1.0
    with one connection per request: the response ends at its Content-Length
    or when the owner closes, never chunked."""
    log.debug(
        "forwarding %s %s to shard %s", handler.request.method, handler.request.path, shard.name
    )
    try:
        stream = await tornado.tcpclient.TCPClient().connect(
            shard.host, shard.port, timeout=CONNECT_TIMEOUT_SECS
        )
    except (OSError, tornado.iostream.StreamClosedError, TimeoutError) as exc:
        raise _unavailable(shard, repr(exc)) from None
    if handler.client_left():
        stream.close()  # left while we connected: nothing to park on the owner
        return
    handler.upstream = stream
    relaying = False
    try:
        request = _request_head(handler, secret, body) + body
        start, headers, payload = await asyncio.wait_for(_exchange(stream, request), timeout_secs)
        if payload is None and not handler.client_left():
            relaying = True
            _answer_head(handler, start, headers)
            await _relay(handler, stream, timeout_secs)
            return
    except tornado.iostream.StreamClosedError as exc:
        if handler.client_left():
            return  # our client went away and we closed the forwarded request
        if relaying:
            handler.finish()  # the owner ended the stream
            return
        raise _unavailable(shard, repr(exc.real_error or exc)) from None
    except TimeoutError:
        if relaying:
            # The owner wrote nothing, not even a heartbeat, for that long:
            # the stream ends and its client reconnects.
            log.warning(
                "shard %s (%s): an event stream relayed from it was silent for %g s; ended",
                shard.name,
                shard.address,
                timeout_secs,
            )
            handler.finish()
            return
        raise _unavailable(shard, f"no answer within {timeout_secs:g} s") from None
    except (
        tornado.httputil.HTTPInputError,
        tornado.iostream.UnsatisfiableReadError,
        tornado.iostream.StreamBufferFullError,
        ValueError,
    ) as exc:
        raise _unavailable(shard, f"unreadable response: {exc!r}") from None
    finally:
        handler.upstream = None
        stream.close()
    if handler.client_left():
        return
    assert payload is not None  # an event stream was relayed above
    if REFUSED_HEADER in headers:
        # Not the client's fault: the owner does not accept us as a shard.
        log.error(
            "shard %s refused a request this shard forwarded (%s): the shared secret or"
            " internal_networks differ between the shards",
            shard.name,
            payload[:200].decode("utf-8", "replace"),
        )
        raise _unavailable(shard, "it refused the forwarded request")
    _answer_head(handler, start, headers)
    handler.finish(payload)


def _answer_head(
    handler: Forwarding,
    start: tornado.httputil.ResponseStartLine,
    headers: tornado.httputil.HTTPHeaders,
) -> None:
    handler.clear()
    handler.set_status(start.code, start.reason or None)
    for name, value in headers.get_all():
        lowered = name.lower()
        if lowered == "set-cookie":
            handler.add_header(name, value)
        elif lowered not in _NOT_RELAYED:
            handler.set_header(name, value)


async def _relay(handler: Forwarding, stream: tornado.iostream.IOStream, idle_secs: float) -> None:
    """Relay an event stream's body as it comes, until the owner ends it
    (StreamClosedError) or writes nothing for `idle_secs` (TimeoutError)."""
    await handler.flush()  # the head, at once
    while True:
        chunk = await asyncio.wait_for(stream.read_bytes(65536, partial=True), idle_secs)
        handler.write(chunk)
        await handler.flush()
