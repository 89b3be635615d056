"""API errors and the one place that maps failures to HTTP status and `code`.

Error bodies follow Zulip's: `{"result": "error", "msg": ..., "code": ...}`
plus any data fields, such as `queue_id` with `BAD_EVENT_QUEUE_ID`
(https://zulip.com/api/rest-error-handling).
"""

from __future__ import annotations

import math
from typing import Any

from tornado.web import HTTPError

from queues.errors import (
    BadNarrow,
    BadQueueId,
    EventAlreadyPruned,
    EventNotInQueue,
    QueueError,
    TooManyQueues,
)

BASIC_CHALLENGE = 'Basic realm="zulip"'
SESSION_CHALLENGE = 'Session realm="zulip"'


class ApiError(HTTPError):
    """A request the server will not serve, with what the client is told.

    Raised by handlers and the modules they call; rendered by
    `handlers.base.BaseHandler.write_error`.
    """

    def __init__(
        self,
        msg: str,
        code: str = "BAD_REQUEST",
        status: int = 400,
        *,
        headers: dict[str, str] | None = None,
        **data: Any,
    ):
        super().__init__(status, log_message=None)
        self.msg = msg
        self.code = code
        self.data = data
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"result": "error", "msg": self.msg, "code": self.code, **self.data}


def missing_argument(name: str) -> ApiError:
    return ApiError(f"Missing '{name}' argument", "REQUEST_VARIABLE_MISSING", var_name=name)


def bad_queue_id(queue_id: str, reason: str | None = None) -> ApiError:
    data: dict[str, Any] = {"queue_id": queue_id}
    if reason is not None:
        data["reason"] = reason
    return ApiError(f"Bad event queue ID: {queue_id}", "BAD_EVENT_QUEUE_ID", **data)


def from_queue_error(exc: QueueError) -> ApiError:
    """The client-facing form of a queue-layer failure."""
    if isinstance(exc, BadQueueId):
        return bad_queue_id(exc.queue_id, exc.reason)
    if isinstance(exc, EventAlreadyPruned | EventNotInQueue | BadNarrow):
        return ApiError(str(exc))
    if isinstance(exc, TooManyQueues):
        return ApiError(str(exc), "TOO_MANY_EVENT_QUEUES")
    return ApiError(str(exc))


def rate_limited(wait_secs: float) -> ApiError:
    """Too many requests: Zulip's body, with `retry-after` in (fractional)
    seconds and the `Retry-After` header in whole ones."""
    return ApiError(
        "API usage exceeded rate limit",
        "RATE_LIMIT_HIT",
        429,
        headers={"Retry-After": str(max(1, math.ceil(wait_secs)))},
        **{"retry-after": round(wait_secs, 3)},
    )


def access_changed() -> ApiError:
    """The user's access changed (a new role, a logout, a new key) while their
    queue was being made: the client registers again, and is judged anew."""
    return ApiError(
        "Your access changed while the queue was made; register again",
        "ACCESS_CHANGED",
        503,
        headers={"Retry-After": "1"},
    )


def database_unavailable() -> ApiError:
    """The database could not answer in time; the client should retry."""
    return ApiError(
        "The server's database is unavailable; try again shortly",
        "DATABASE_UNAVAILABLE",
        503,
        headers={"Retry-After": "5"},
    )
