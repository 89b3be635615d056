"""The long poll's hot path: `GET /api/v1/events` (and `/json/events`) for a
queue that exists, served by a lean `tornado.httputil.HTTPMessageDelegate`
instead of a `RequestHandler`.

A busy server answers a parked request and takes the client's next poll
thousands of times per event it fans out. Tornado's `RequestHandler` costs
more per request than everything this server does for it (building the
handler, routing, default headers, a coroutine per request); here a poll is
one object, run from `finish` to its answer or its parking without a
coroutine, and its answer is written with precomputed headers.

Only the common case is served here: an authenticated user whose
credentials are cached, a `queue_id`, no body, this shard's user, a server
not shutting down. `routes.Dispatcher` decides before anything happens
and hands every other request (including anything unusual about a poll)
to the full `handlers.events.EventsHandler`. What a poll does (parking,
turns, heartbeats, what it answers, refusals) is `longpoll_flow`'s, which
both run; here is only how the lean path reads a poll and writes its
answer.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping

import orjson
import tornado.http1connection
import tornado.httputil

from queues.client import ClientDescriptor, WakeReason
from queues.errors import QueueError
from queues.event_queue import Item
from server.errors import ApiError, from_queue_error, rate_limited
from server.handlers.base import access_level, access_log, log_access, logged_uri
from server.handlers.lean import INTERNAL_ERROR, Connection, http_date, remote_ip, write_answer
from server.handlers.longpoll_flow import (
    MAX_QUEUE_ID,
    ParkedPoll,
    answer_position,
    begin_poll,
    note_end,
    poll_failed,
    poll_outcome,
    poll_refused,
)
from server.http.auth import AuthUser
from server.http.params import Params
from server.http.responses import events_body
from server.interface import PollApi

# `note_end` for the server's queue end hook, which imports it from here.
__all__ = ["MAX_QUEUE_ID", "LeanPoll", "note_end", "poll_arguments"]

# Tornado's logger for uncaught exceptions, as a RequestHandler logs them.
app_log = logging.getLogger("tornado.application")

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


class LeanPoll(ParkedPoll, tornado.httputil.HTTPMessageDelegate):
    """One `GET /events` for an existing queue (see the module's docstring).

    Runs when its request has been read (`finish`): answers at once or parks
    itself on the queue (`ParkedPoll`); a wake-up answers it in the server's
    next answer slice. Its connection closing detaches it.
    """

    __slots__ = (
        "_counted",
        "api",
        "conn",
        "date",
        "query",
        "started",
        "uri",
        "user",
    )

    def __init__(
        self,
        server: PollApi,
        conn: Connection,
        uri: str,
        query: dict[str, list[bytes]] | None,
        user: AuthUser,
        api: bool,
    ):
        # Not super(): under Python 3.11 that builds an object per request.
        ParkedPoll.__init__(self, server)
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
            self._crashed()

    def on_connection_close(self) -> None:
        self._leave()
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
            client = begin_poll(server, self.user, queue_id, last_event_id, "lean")
        except (ApiError, QueueError) as exc:
            poll_refused(server, self.user, query, exc)
            raise
        if dont_block:
            items = client.event_queue.contents()
            self._respond(client, items, poll_outcome(items), 0.0, None, None)
            return
        self.park(client)
        self.conn.set_close_callback(self.on_connection_close)

    def _answer(self, reason: WakeReason) -> None:
        if self._done:
            return
        client = self._client
        assert client is not None
        try:
            try:
                items, outcome, waited, queue_id, extra = self.answer_for(reason)
            except ApiError as error:
                # Its queue overflowed. The id as sent is this queue's: the
                # lookup matched it.
                poll_failed(self.server, self.user, client.queue_id, error.code)
                self._fail(error)
                return
            self._respond(client, items, outcome, waited, queue_id, extra)
        except Exception:
            self._crashed()

    # -- answering --------------------------------------------------------------

    def _respond(
        self,
        client: ClientDescriptor,
        items: list[Item],
        outcome: str,
        waited_secs: float,
        queue_id: str | None,
        extra: Mapping[str, bool] | None,
    ) -> None:
        body = events_body(items, queue_id, extra, answer_position(self.server, client, extra))
        self._write(200, body, None)
        self.server.observe_response(client, items, len(body), outcome, waited_secs)

    def _fail(self, exc: ApiError | QueueError) -> None:
        error = exc if isinstance(exc, ApiError) else from_queue_error(exc)
        self._write(error.status_code, orjson.dumps(error.body()), error.headers)

    def _crashed(self) -> None:
        """An uncaught exception: logged as a RequestHandler's, answered 500."""
        app_log.error(
            "Uncaught exception GET %s (%s)",
            logged_uri(self.uri),
            self.remote_ip(),
            exc_info=True,
        )
        client = self._client
        if client is not None and client.waiter is self:
            self.server.registry.unpark(client, self, self.server.clock())
        self._cancel_heartbeat()
        if not self._done:
            self._write(500, INTERNAL_ERROR, None)

    def _write(self, status: int, body: bytes, extra: Mapping[str, str] | None) -> None:
        """The answer, with the headers `handlers.base.BaseHandler` sends."""
        self._done = True
        date = self.date if status == 200 else http_date()
        write_answer(self.conn, status, body, extra, date, any_origin=self.api)
        if self._counted:
            self._counted = False
            self.server.request_finished()
        self._log_access(status)

    def _log_access(self, status: int) -> None:
        # Its arguments cost more than the check (answers are logged at DEBUG).
        if access_log.isEnabledFor(access_level(status)):
            log_access(status, "GET", self.uri, self.remote_ip(), time.time() - self.started)

    def remote_ip(self) -> str | None:
        return remote_ip(self.conn)
