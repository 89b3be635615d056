"""Requests for a user whose queues are on another shard (design.md, Scaling
out; reference 5).

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

A forwarded request carries `FORWARDED_HEADER` with the shared secret; the
owner accepts it only from loopback or the configured internal networks, and
refuses to forward it again (shards that disagree about the config answer 503
instead of bouncing a request between them).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import tornado.httputil
import tornado.iostream
import tornado.tcpclient

from generation.sharding import Shard
from server.errors import ApiError

if TYPE_CHECKING:
    from server.handlers.base import BaseHandler

log = logging.getLogger("eventq.forward")

FORWARDED_HEADER = "X-Eventq-Forwarded"
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
    FORWARDED_HEADER.lower(),
    ACCEL_HEADER.lower(),
}
_NOT_RELAYED = _HOP_BY_HOP | {"date", "server"}


def accel_redirect(handler: BaseHandler, shard: Shard) -> None:
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


def _request_head(handler: BaseHandler, secret: str, body: bytes) -> bytes:
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


async def forward(handler: BaseHandler, shard: Shard, secret: str, body: bytes) -> None:
    """Send the handler's request to `shard` and answer with its response.
    HTTP/1.0 with one connection per request: the response ends at its
    Content-Length or when the owner closes, never chunked."""
    log.debug(
        "forwarding %s %s to shard %s", handler.request.method, handler.request.path, shard.name
    )
    try:
        stream = await tornado.tcpclient.TCPClient().connect(
            shard.host, shard.port, timeout=CONNECT_TIMEOUT_SECS
        )
    except (OSError, tornado.iostream.StreamClosedError, TimeoutError) as exc:
        raise _unavailable(shard, repr(exc)) from None
    handler.upstream = stream
    try:
        await stream.write(_request_head(handler, secret, body) + body)
        head = await stream.read_until(b"\r\n\r\n", max_bytes=MAX_HEAD_BYTES)
        text = head.decode("latin-1")
        first, _, rest = text.partition("\r\n")
        start = tornado.httputil.parse_response_start_line(first)
        headers = tornado.httputil.HTTPHeaders.parse(rest)
        length = headers.get("Content-Length")
        if length is not None:
            payload = await stream.read_bytes(int(length)) if int(length) else b""
        elif start.code in (204, 304):
            payload = b""
        else:
            payload = await stream.read_until_close()
    except tornado.iostream.StreamClosedError as exc:
        if handler.request.connection is None or handler.client_gone:
            return  # our client went away and we closed the forwarded request
        raise _unavailable(shard, repr(exc.real_error or exc)) from None
    except (tornado.httputil.HTTPInputError, ValueError) as exc:
        raise _unavailable(shard, f"unreadable response: {exc}") from None
    finally:
        handler.upstream = None
        stream.close()
    if handler.client_gone:
        return
    handler.clear()
    handler.set_status(start.code, start.reason or None)
    for name, value in headers.get_all():
        lowered = name.lower()
        if lowered == "set-cookie":
            handler.add_header(name, value)
        elif lowered not in _NOT_RELAYED:
            handler.set_header(name, value)
    handler.finish(payload)
