"""The long poll's hot path: `GET /api/v1/events` (and `/json/events`) for a
queue that exists, served by a lean `tornado.httputil.HTTPMessageDelegate`
instead of a `RequestHandler`.

A busy server answers a parked request and takes the client's next poll
thousands of times per event it fans out. Tornado's `RequestHandler` costs
more per request than everything this server does for it (building the
handler, routing, default headers, a coroutine per request); here a poll is
one object, run from `finish` to its answer or its parking without a
coroutine, and its answer is written with precomputed headers.

A poll that finds events waiting is not answered at once but in its turn
among the woken parked requests (`longpoll.AnswerSlices`): under load its
answer then carries what arrived meanwhile. The full handler does the same
(`longpoll.ParkedRequest.take_turn`).

Only the common case is served here: an authenticated user whose
credentials are cached, a `queue_id`, no body, this shard's user, a server
not shutting down. `routes.Dispatcher` decides before anything happens
and hands every other request (including anything unusual about a poll)
to the full `handlers.events.EventsHandler`; both share the functions
below, so the answers, errors, logs, metrics and delivery log are the same
whichever path served a poll.
"""

from __future__ import annotations

import http.client
import logging
import re
import time
from collections.abc import Mapping

import orjson
import tornado
import tornado.http1connection
import tornado.httputil

from queues.client import ClientDescriptor, WakeReason
from queues.errors import QueueError
from queues.event_queue import Item
from server.auth import AuthUser
from server.errors import ApiError, bad_queue_id, from_queue_error, rate_limited
from server.handlers.base import access_level, access_log, log_access, logged_uri, owned_queue
from server.http1 import Exchange
from server.interface import ServerApi
from server.params import Params
from server.responses import events_body

log = logging.getLogger("eventq.events")
# Tornado's logger for uncaught exceptions, as a RequestHandler logs them.
app_log = logging.getLogger("tornado.application")

# An answer's headers, as `handlers.base.BaseHandler` sends them: those
# before the Date, the Date, those after it, the CORS header for /api/ paths,
# then the extra ones and the Content-Length.
_BEFORE_DATE = (
    ("Server", f"TornadoServer/{tornado.version}"),
    ("Content-Type", "application/json"),
)
_AFTER_DATE = (("Vary", "Accept-Language, Cookie"), ("Cache-Control", "no-store"))
_ANY_ORIGIN = ("Access-Control-Allow-Origin", "*")


def _lines(headers: tuple[tuple[str, str], ...]) -> bytes:
    return b"".join(f"{name}: {value}\r\n".encode("ascii") for name, value in headers)


# The same head as bytes with room for status, reason, date, the CORS line
# and the body's length, for `Exchange.answer`.
_HEAD = (
    b"HTTP/1.1 %d %s\r\n"
    + _lines(_BEFORE_DATE)
    + b"Date: %s\r\n"
    + _lines(_AFTER_DATE)
    + b"%sContent-Length: %d\r\n\r\n"
)
_ANY_ORIGIN_LINE = _lines((_ANY_ORIGIN,))
_REASONS = {code: reason.encode("ascii") for code, reason in http.client.responses.items()}
_INTERNAL_ERROR = b'{"result":"error","msg":"Internal server error","code":"INTERNAL_ERROR"}'

# Longer than any id we issue, yet short enough for a log line.
MAX_QUEUE_ID = 1000


def poll_outcome(items: list[Item]) -> str:
    """How a poll that answered `items` ended, for the log and the metrics."""
    if not items:
        return "empty"
    for _, payload in items:
        if payload.event.get("type") != "heartbeat":
            return "events"
    return "heartbeat"


# A last_event_id JSON reads as an integer of at most 18 digits (always within
# Params.integer's bounds).
_PLAIN_ID = re.compile(rb"-?(?:0|[1-9][0-9]{0,17})")
_PLAIN_BOOLEANS = {b"true": True, b"false": False}


def poll_arguments(query: Mapping[str, list[bytes]]) -> tuple[str, bool, int | None]:
    """A lean poll's queue_id, dont_block and last_event_id, as `Params`
    reads them (the errors too: an unusual value is read by `Params`)."""
    queue_id = query["queue_id"][-1]  # routes.Dispatcher sends the others on
    last = query.get("last_event_id")
    dont_block = query.get("dont_block")
    if (
        len(query) == 1 + (last is not None) + (dont_block is not None)
        and queue_id.isascii()
        and len(queue_id) <= MAX_QUEUE_ID
        and (last is None or _PLAIN_ID.fullmatch(last[-1]))
        and (dont_block is None or dont_block[-1] in _PLAIN_BOOLEANS)
    ):
        return (
            queue_id.decode("ascii"),
            dont_block is not None and _PLAIN_BOOLEANS[dont_block[-1]],
            None if last is None else int(last[-1]),
        )
    params = Params(query)
    plain_id = params.string("queue_id", max_length=MAX_QUEUE_ID)
    assert plain_id is not None
    return (
        plain_id,
        params.boolean("dont_block", False),
        params.integer("last_event_id"),
    )


def woken_answer(
    server: ServerApi, client: ClientDescriptor, reason: WakeReason
) -> tuple[list[Item], str]:
    """What a parked request woken for `reason` ("events", "heartbeat" or
    "deleted") answers, and how the poll ended: whatever the queue holds, or
    a heartbeat when nothing came meanwhile."""
    items = client.event_queue.contents()
    if not items and reason == "heartbeat":
        items = server.registry.heartbeat_items(client)
    return items, "deleted" if reason == "deleted" else poll_outcome(items)


def note_end(server: ServerApi, client: ClientDescriptor) -> None:
    """Remember the stream position `client`'s queue ended at (the server
    calls this from its queue end hook)."""
    client.ended_at_position = server.stream.position


def answer_position(server: ServerApi, client: ClientDescriptor) -> int:
    """The stream position an events answer gives: the queue holds every
    event up to it for the client. A queue that ended (a request parked on it
    answered after a DELETE) got nothing after its end, whatever came since."""
    ended = client.ended_at_position
    return server.stream.position if ended is None else ended


def begin_poll(
    server: ServerApi, user: AuthUser, queue_id: str, last_event_id: int | None
) -> ClientDescriptor:
    """A poll of an existing queue: acknowledge what the client has, restart
    the queue's idle clock and answer a request still parked on it (which
    is told it was displaced)."""
    if last_event_id is None:
        raise ApiError("Missing 'last_event_id' argument")
    client = owned_queue(server, queue_id, user)
    client.event_queue.prune(last_event_id)
    registry = server.registry
    now = server.clock()
    registry.touch(client, now)
    registry.displace(client, now)
    return client


def poll_failed(
    server: ServerApi, user: AuthUser, query: Mapping[str, list[bytes]], code: str
) -> None:
    """Tell the observers of a poll refused with `code`, naming the queue id
    as sent (cut at the longest an id may be), so that the log shows what
    clients ask for."""
    queue_id = query.get("queue_id", [b""])[-1][:MAX_QUEUE_ID]
    server.observe_poll_failed(
        user.user_id, user.realm_id, queue_id.decode("utf-8", "replace") or None, code
    )


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


class LeanPoll(tornado.httputil.HTTPMessageDelegate):
    """One `GET /events` for an existing queue (see the module's docstring).

    Runs when its request has been read (`finish`): answers at once or parks
    itself on the queue as its `Waiter`; a wake-up answers it in the server's
    next answer slice. Its connection closing detaches it.
    """

    __slots__ = (
        "_answered",
        "_client",
        "_closed",
        "_counted",
        "_heartbeat",
        "_parked_at",
        "_ready",
        "_woken",
        "api",
        "conn",
        "date",
        "query",
        "server",
        "started",
        "uri",
        "user",
    )

    def __init__(
        self,
        server: ServerApi,
        conn: tornado.http1connection.HTTP1Connection | Exchange,
        uri: str,
        query: dict[str, list[bytes]] | None,
        user: AuthUser,
        api: bool,
    ):
        self.server = server
        self.conn = conn
        self.uri = uri
        # The parsed query string, read once by `_serve`; a parked poll does
        # not keep it.
        self.query = query
        self.user = user
        # /api/ paths allow browsers' cross-origin API clients; /json/ not.
        self.api = api
        self.started = time.time()
        # As a RequestHandler does, a success carries the time its request
        # arrived, an error the time it is answered.
        self.date = http_date(self.started)
        self._client: ClientDescriptor | None = None
        self._parked_at = 0.0
        # The tick of the pending heartbeat (`server.heartbeats`).
        self._heartbeat: int | None = None
        self._answered = False
        self._closed = False
        # Whether it found events waiting (and parked only until its turn),
        # and then what woke it before that turn, if anything did.
        self._ready = False
        self._woken: WakeReason | None = None
        # Whether the server counts this request as in progress (from
        # `finish` until it is answered or its connection closes).
        self._counted = False

    # -- tornado's side -------------------------------------------------------

    def finish(self) -> None:
        server = self.server
        server.request_started()
        self._counted = True
        try:
            self._limit()
            self._serve()
        except (ApiError, QueueError) as exc:
            self._fail(exc)
        except Exception:
            app_log.error(
                "Uncaught exception GET %s (%s)",
                logged_uri(self.uri),
                self.remote_ip(),
                exc_info=True,
            )
            self._error(500, _INTERNAL_ERROR)

    def on_connection_close(self) -> None:
        self._closed = True
        client = self._client
        if client is not None and client.waiter is self:
            server = self.server
            if server.registry.unpark(client, self, server.clock()):
                log.debug("client disconnected from queue %s", client.queue_id)
        self._cancel_heartbeat()
        if self._counted:
            self._counted = False
            self.server.request_finished()
            # As Tornado finishes a RequestHandler whose client left: logged
            # as answered (the answer went nowhere).
            self._log_access(200)

    # -- serving ----------------------------------------------------------------

    def _limit(self) -> None:
        """The per-user rate limit (not an observed poll failure, as in the
        full handler: it comes before the poll is looked at)."""
        limiter = self.server.rate_limiter
        if limiter is not None:
            wait = limiter.hit(self.user.user_id, self.server.clock())
            if wait > 0.0:
                raise rate_limited(wait)

    def _serve(self) -> None:
        server = self.server
        query, self.query = self.query, None
        assert query is not None
        try:
            queue_id, dont_block, last_event_id = poll_arguments(query)
            client = begin_poll(server, self.user, queue_id, last_event_id)
            server.poll_paths["lean"] += 1
        except (ApiError, QueueError) as exc:
            code = exc.code if isinstance(exc, ApiError) else from_queue_error(exc).code
            poll_failed(server, self.user, query, code)
            raise
        if dont_block:
            items = client.event_queue.contents()
            self._respond(client, items, poll_outcome(items), 0.0, None, None)
            return
        self._client = client
        self._parked_at = server.clock()
        server.registry.park(client, self, self._parked_at)
        self.conn.set_close_callback(self.on_connection_close)
        if client.event_queue.empty():
            self._heartbeat = server.heartbeats.start(self, client)
        else:
            # Events are waiting: answered in its turn among the woken
            # requests (longpoll.AnswerSlices), parked until then, so that
            # what arrives meanwhile goes out in the same answer.
            self._ready = True
            server.answer_slices.add(self._answer_ready, "events")

    def wake(self, reason: WakeReason) -> None:
        """`queues.client.Waiter`: the registry detached this request. It is
        answered in its turn: the one it has already (it found events
        waiting), else the next one."""
        self._cancel_heartbeat()
        if self._ready:
            self._woken = reason
        else:
            self.server.answer_slices.add(self._answer_parked, reason)

    def _answer_parked(self, reason: WakeReason) -> None:
        if self._closed or self._answered:
            return
        client = self._client
        assert client is not None
        server = self.server
        try:
            if reason == "overflow":
                error = bad_queue_id(client.queue_id, "overflow")
                # The id as sent is this queue's: the lookup matched it.
                user = self.user
                server.observe_poll_failed(user.user_id, user.realm_id, client.queue_id, error.code)
                self._fail(error)
                return
            waited = server.clock() - self._parked_at
            if reason == "displaced":
                self._respond(client, [], "displaced", waited, client.queue_id, {"displaced": True})
                return
            items, kind = woken_answer(server, client, reason)
            # A poll that found events waiting is answered as one answered at
            # once is: without the queue id.
            queue_id = None if self._ready else client.queue_id
            self._respond(client, items, kind, waited, queue_id, None)
        except Exception:
            app_log.error(
                "Uncaught exception GET %s (%s)",
                logged_uri(self.uri),
                self.remote_ip(),
                exc_info=True,
            )
            self._error(500, _INTERNAL_ERROR)

    def _answer_ready(self, reason: WakeReason) -> None:
        """The turn of a poll that found events waiting: answered for what
        woke it meanwhile (a later event, a newer poll, the queue's end), or
        taken off the queue and answered with its events."""
        if self._closed or self._answered:
            return
        woken = self._woken
        if woken is None:
            client = self._client
            assert client is not None
            assert client.waiter is self  # only a wake-up or a close detaches it
            self.server.registry.unpark(client, self, self.server.clock())
            woken = reason
        self._answer_parked(woken)

    def _cancel_heartbeat(self) -> None:
        tick = self._heartbeat
        if tick is not None:
            self._heartbeat = None
            self.server.heartbeats.cancel(tick, self)

    # -- answering --------------------------------------------------------------

    def _respond(
        self,
        client: ClientDescriptor,
        items: list[Item],
        outcome: str,
        waited_secs: float,
        queue_id: str | None,
        extra: dict[str, bool] | None,
    ) -> None:
        """As `handlers.events.EventsHandler` answers: the queue id only in
        the answer to a request that was parked."""
        body = events_body(items, queue_id, extra, answer_position(self.server, client))
        self._write(200, body, None)
        self.server.observe_response(client, items, len(body), outcome, waited_secs)

    def _fail(self, exc: ApiError | QueueError) -> None:
        error = exc if isinstance(exc, ApiError) else from_queue_error(exc)
        self._write(error.status_code, orjson.dumps(error.body()), error.headers)

    def _error(self, status: int, body: bytes) -> None:
        client = self._client
        if client is not None and client.waiter is self:
            self.server.registry.unpark(client, self, self.server.clock())
        self._cancel_heartbeat()
        if not self._answered and not self._closed:
            self._write(status, body, None)

    def _write(self, status: int, body: bytes, extra: Mapping[str, str] | None) -> None:
        """The answer, with the headers `handlers.base.BaseHandler` sends."""
        self._answered = True
        conn = self.conn
        conn.set_close_callback(None)
        date = self.date if status == 200 else http_date()
        if not extra and isinstance(conn, Exchange) and not conn.disconnect:
            # The same bytes as below, formatted at once.
            conn.answer(
                _HEAD
                % (
                    status,
                    _REASONS.get(status, b"Unknown"),
                    date.encode("ascii"),
                    _ANY_ORIGIN_LINE if self.api else b"",
                    len(body),
                )
                + body
            )
        else:
            headers = tornado.httputil.HTTPHeaders()
            for name, value in (*_BEFORE_DATE, ("Date", date), *_AFTER_DATE):
                headers[name] = value
            if self.api:
                headers[_ANY_ORIGIN[0]] = _ANY_ORIGIN[1]
            if extra:
                for name, value in extra.items():
                    headers[name] = value
            headers["Content-Length"] = str(len(body))
            reason = http.client.responses.get(status, "Unknown")
            conn.write_headers(
                tornado.httputil.ResponseStartLine("HTTP/1.1", status, reason), headers, body
            )
            conn.finish()
        if self._counted:
            self._counted = False
            self.server.request_finished()
        self._log_access(status)

    def _log_access(self, status: int) -> None:
        # Its arguments cost more than the check (answers are logged at DEBUG).
        if access_log.isEnabledFor(access_level(status)):
            log_access(status, "GET", self.uri, self.remote_ip(), time.time() - self.started)

    def remote_ip(self) -> str | None:
        context = getattr(self.conn, "context", None)
        return getattr(context, "remote_ip", None)
