"""What the lean delegates have in common (`poll.LeanPoll`, the long poll's
hot path, and `notify.LeanNotify`, the internal notify endpoint's): the
answer, written with the headers `base.BaseHandler` sends, in the same order,
from bytes formatted once; the `Date` header's value; the caller's address.

A lean delegate is a `tornado.httputil.HTTPMessageDelegate` that
`routes.Dispatcher` picks from a request's head instead of Tornado's routing
and a `RequestHandler`: for the requests a busy server takes thousands of
times a second, those cost more than what is done for the request.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Mapping

import tornado.http1connection
import tornado.httputil

from server.handlers.headers import AFTER_DATE, ANY_ORIGIN, CONTENT_TYPE, SERVER
from server.http.http1 import Exchange

# An answer's headers (`handlers.headers`), as `handlers.base.BaseHandler`
# sends them: those before the Date, the Date, those after it, the CORS
# header for the long poll's /api/ path, then the extra ones and the
# Content-Length.
_BEFORE_DATE = (SERVER, CONTENT_TYPE)


def _lines(headers: tuple[tuple[str, str], ...]) -> bytes:
    return b"".join(f"{name}: {value}\r\n".encode("ascii") for name, value in headers)


# The same head as bytes with room for status, reason, date, the CORS line
# and the body's length, for `Exchange.answer`.
_HEAD = (
    b"HTTP/1.1 %d %s\r\n"
    + _lines(_BEFORE_DATE)
    + b"Date: %s\r\n"
    + _lines(AFTER_DATE)
    + b"%sContent-Length: %d\r\n\r\n"
)
_ANY_ORIGIN_LINE = _lines((ANY_ORIGIN,))
_REASONS = {code: reason.encode("ascii") for code, reason in http.client.responses.items()}
INTERNAL_ERROR = b'{"result":"error","msg":"Internal server error","code":"INTERNAL_ERROR"}'

Connection = tornado.http1connection.HTTP1Connection | Exchange


class _DateHeader:
    """The `Date` header's value, formatted once per second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def __call__(self, now: float | None = None) -> str:
        """The value for `now` (default: the current time)."""
        if now is None:
            now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._value = tornado.httputil.format_timestamp(now)
        return self._value


http_date = _DateHeader()


def write_answer(
    conn: Connection,
    status: int,
    body: bytes,
    extra: Mapping[str, str] | None,
    date: str,
    *,
    any_origin: bool,
) -> None:
    """Answer on `conn` with `body` (JSON) and the headers
    `handlers.base.BaseHandler` sends; `extra` headers after them (an
    ApiError's), the CORS header when `any_origin`."""
    conn.set_close_callback(None)
    if not extra and isinstance(conn, Exchange) and not conn.disconnect:
        # The same bytes as below, formatted at once.
        conn.answer(
            _HEAD
            % (
                status,
                _REASONS.get(status, b"Unknown"),
                date.encode("ascii"),
                _ANY_ORIGIN_LINE if any_origin else b"",
                len(body),
            )
            + body
        )
        return
    headers = tornado.httputil.HTTPHeaders()
    for name, value in (*_BEFORE_DATE, ("Date", date), *AFTER_DATE):
        headers[name] = value
    if any_origin:
        headers[ANY_ORIGIN[0]] = ANY_ORIGIN[1]
    if extra:
        for name, value in extra.items():
            headers[name] = value
    headers["Content-Length"] = str(len(body))
    reason = http.client.responses.get(status, "Unknown")
    conn.write_headers(
        tornado.httputil.ResponseStartLine("HTTP/1.1", status, reason), headers, body
    )
    conn.finish()


def remote_ip(conn: Connection) -> str | None:
    """The peer's address, as a RequestHandler's `request.remote_ip`."""
    context = getattr(conn, "context", None)
    return getattr(context, "remote_ip", None)
