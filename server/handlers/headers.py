"""The head of a JSON answer, defined once: `base.BaseHandler` sets these
headers on every `RequestHandler`'s answer, and `poll.LeanPoll` writes the
same ones, in the same order, from bytes it formats once (a client cannot
tell which of the two answered a poll).

Tornado begins every `RequestHandler` answer with `Server`, `Content-Type`
and `Date` (`RequestHandler.clear`); `BaseHandler.set_default_headers` then
replaces the `Content-Type` in its place, before the `Date`, and adds the
others after it. `Content-Length` comes last, when the body is written.
"""

from __future__ import annotations

import tornado

from server.errors import ApiError

SERVER = ("Server", f"TornadoServer/{tornado.version}")
CONTENT_TYPE = ("Content-Type", "application/json")
# An answer differs by the client's language and session cookie, and no cache
# may keep one: a poll's events are for that one request.
AFTER_DATE = (("Vary", "Accept-Language, Cookie"), ("Cache-Control", "no-store"))
# What `BaseHandler.set_default_headers` sets (Tornado's own go before).
DEFAULTS = (CONTENT_TYPE, *AFTER_DATE)
# After those, on the long poll's /api/ paths only: API clients running in
# browsers may call them from any origin (as Zulip's nginx allows for
# /api/v1/events); the /json/ paths are a session's, called from its origin.
ANY_ORIGIN = ("Access-Control-Allow-Origin", "*")


def shutting_down(*, close: bool = True) -> ApiError:
    """The refusal of a request that comes once shutdown has begun: 503, try
    again in a second (the restarted server answers then). With `close` the
    answer also says the connection is not to be reused. The headers travel
    in the error because `send_error` clears those set on the handler."""
    headers = {"Retry-After": "1"}
    if close:
        headers["Connection"] = "close"
    return ApiError(
        "The server is restarting; try again shortly",
        "SERVER_SHUTTING_DOWN",
        503,
        headers=headers,
    )
