"""`GET` and `DELETE /api/v1/events` (and `/json/events`): the long poll,
for the requests the lean `poll.LeanPoll` does not take (sessions, new
queues, anything unusual), and the event stream (`Accept:
text/event-stream`, `stream`). What a poll does is `longpoll_flow`'s, which
both run; here is how this path reads a request and writes its answer."""

from __future__ import annotations

from collections.abc import Mapping

from queues.client import ClientDescriptor
from queues.errors import QueueError
from queues.event_queue import Item
from server.errors import ApiError
from server.handlers import stream
from server.handlers.base import BaseHandler
from server.handlers.headers import ANY_ORIGIN
from server.handlers.longpoll_flow import (
    MAX_QUEUE_ID,
    ParkedRequest,
    answer_position,
    begin_poll,
    poll_outcome,
    poll_refused,
    refuse_if_stopping,
)
from server.http.auth import AuthUser
from server.http.options import implicit_options
from server.http.responses import events_body
from server.interface import PollApi

_ALLOW = "OPTIONS, GET, DELETE"


class EventsHandler(BaseHandler):
    server: PollApi
    SUPPORTED_METHODS = ("GET", "DELETE", "OPTIONS")

    _parked: ParkedRequest | stream.EventStream | None = None
    _connection_closed = False

    def set_default_headers(self) -> None:
        super().set_default_headers()
        # Runs before `initialize`, so decide by path.
        if self.request.path.startswith("/api/"):
            self.set_header(*ANY_ORIGIN)

    def options(self) -> None:
        self.set_header("Allow", _ALLOW)
        self.set_header("Access-Control-Allow-Methods", _ALLOW)
        self.set_header("Access-Control-Allow-Headers", "Authorization")
        self.set_status(204)
        self.finish()

    async def get(self) -> None:
        user = await self.authenticate()
        if await self.served_elsewhere(user):
            return
        try:
            await self._get(user)
        except (ApiError, QueueError) as exc:
            poll_refused(self.server, user, self.request.query_arguments, exc)
            raise

    async def _get(self, user: AuthUser) -> None:
        params = self.params()
        server = self.server
        registry = server.registry
        queue_id = params.string("queue_id", max_length=MAX_QUEUE_ID)
        dont_block = params.boolean("dont_block", False)
        # Validated even where unused (a new queue): a malformed value is a
        # client bug to report, as Zulip does.
        last_event_id = params.integer("last_event_id")
        if queue_id is None:
            if not dont_block:
                raise ApiError("Missing 'queue_id' argument")
            options = implicit_options(params, user, registry, self.client_name(params))
            client = registry.allocate(user.user_id, user.realm_id, options, server.clock())
            server.observe_registered(client, 0.0)
            self._respond(client, [], "empty", 0.0, client.queue_id)
            server.journal_queue(client)
            return
        if stream.wants_stream(self.request.headers.get("Accept")) and not dont_block:
            after = stream.last_event_id(self.request.headers.get("Last-Event-ID"), last_event_id)
            client = begin_poll(server, user, queue_id, after, "stream")
            await self._stream(client)
            return
        client = begin_poll(server, user, queue_id, last_event_id, "full")
        if dont_block:
            items = client.event_queue.contents()
            self._respond(client, items, poll_outcome(items), 0.0)
            return
        await self._long_poll(client)

    def _respond(
        self,
        client: ClientDescriptor,
        items: list[Item],
        outcome: str,
        waited_secs: float,
        queue_id: str | None = None,
        extra: Mapping[str, bool] | None = None,
    ) -> None:
        body = events_body(items, queue_id, extra, answer_position(self.server, client, extra))
        self.write_body(body)
        self.server.observe_response(client, items, len(body), outcome, waited_secs)

    async def _long_poll(self, client: ClientDescriptor) -> None:
        if self._connection_closed:
            return  # went away while we authenticated: nothing to park
        refuse_if_stopping(self.server)
        waiter = ParkedRequest(self.server)
        waiter.park(client)
        self._parked = waiter
        outcome = await waiter.outcome
        self._parked = None
        if outcome == "disconnected":
            return
        items, kind, waited, queue_id, extra = waiter.answer_for(outcome)
        self._respond(client, items, kind, waited, queue_id, extra)

    async def _stream(self, client: ClientDescriptor) -> None:
        """Server-Sent Events from `client`'s queue until the client leaves,
        a newer reader or the queue's end ends it, or it has written what
        its reconnection is to acknowledge (server/handlers/stream.py)."""
        if self._connection_closed:
            return
        refuse_if_stopping(self.server)
        self.set_header("Content-Type", f"{stream.MEDIA_TYPE}; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        # nginx passes each write on at once (the generated site's event
        # locations, and any other proxy honouring it).
        self.set_header("X-Accel-Buffering", "no")
        connection = self.request.connection
        assert connection is not None
        target = stream.DirectTarget(self, connection)
        events = stream.EventStream(self.server, client, target)
        self._parked = events
        events.start()
        last = await events.ended
        self._parked = None
        if last == stream.DISCONNECTED or self._closed():
            return
        if last is not None:
            self.write(last)
        self.finish()

    def _closed(self) -> bool:
        """Whether its connection has closed (it may, at any await)."""
        return self._connection_closed

    def on_connection_close(self) -> None:
        self._connection_closed = True
        waiter = self._parked
        if waiter is not None:
            waiter.disconnected()
        super().on_connection_close()

    async def delete(self) -> None:
        user = await self.authenticate()
        if await self.served_elsewhere(user):
            return
        params = self.params()
        queue_id = params.required_string("queue_id", max_length=MAX_QUEUE_ID)
        self.queue_for(queue_id, user)  # logs another user's id
        self.server.registry.delete(queue_id, user.user_id, self.server.clock())
        self.write_success()
