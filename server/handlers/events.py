"""`GET` and `DELETE /api/v1/events` (and `/json/events`): the long poll."""

from __future__ import annotations

import logging

from queues.client import ClientDescriptor
from queues.errors import QueueError
from queues.event_queue import Item
from server.auth import AuthUser
from server.errors import ApiError, bad_queue_id, from_queue_error
from server.handlers.base import BaseHandler
from server.handlers.poll import (
    MAX_QUEUE_ID,
    answer_position,
    begin_poll,
    poll_failed,
    poll_outcome,
    woken_answer,
)
from server.longpoll import ParkedRequest
from server.options import implicit_options
from server.responses import events_body

log = logging.getLogger("eventq.events")

_ALLOW = "OPTIONS, GET, DELETE"


class EventsHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET", "DELETE", "OPTIONS")

    _parked: tuple[ClientDescriptor, ParkedRequest] | None = None
    _connection_closed = False

    def set_default_headers(self) -> None:
        super().set_default_headers()
        # Runs before `initialize`, so decide by path. As Zulip's nginx does
        # for /api/v1/events: API clients running in browsers.
        if self.request.path.startswith("/api/"):
            self.set_header("Access-Control-Allow-Origin", "*")

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
            code = exc.code if isinstance(exc, ApiError) else from_queue_error(exc).code
            poll_failed(self.server, user, self.request.query_arguments, code)
            raise

    async def _get(self, user: AuthUser) -> None:
        params = self.params()
        server = self.server
        registry = server.registry
        # Longer than any id we issue is still just an unknown queue: the
        # client must re-register, not retry (as it would on BAD_REQUEST).
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
        client = begin_poll(server, user, queue_id, last_event_id)
        server.poll_paths["full"] += 1
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
        extra: dict[str, bool] | None = None,
    ) -> None:
        body = events_body(items, queue_id, extra, answer_position(self.server, client))
        self.write_body(body)
        self.server.observe_response(client, items, len(body), outcome, waited_secs)

    async def _long_poll(self, client: ClientDescriptor) -> None:
        server = self.server
        if self._connection_closed:
            return  # went away while we authenticated: nothing to park
        if server.stopping:
            # Shutdown began while this request was being authenticated.
            self.set_header("Connection", "close")
            raise ApiError(
                "The server is restarting; try again shortly",
                "SERVER_SHUTTING_DOWN",
                503,
                headers={"Retry-After": "1"},
            )
        waiter = ParkedRequest(server.answer_slices, server.heartbeats)
        parked_at = server.clock()
        registry = server.registry
        registry.park(client, waiter, parked_at)
        # Events waiting: answered in its turn among the woken requests
        # (as handlers.poll.LeanPoll does), without the queue id.
        ready = not client.event_queue.empty()
        if ready:
            waiter.take_turn(lambda: registry.unpark(client, waiter, server.clock()))
        else:
            waiter.heartbeat = server.heartbeats.start(waiter, client)
        self._parked = (client, waiter)
        outcome = await waiter.outcome
        self._parked = None
        if outcome == "disconnected":
            return
        if outcome == "overflow":
            raise bad_queue_id(client.queue_id, "overflow")
        waited = server.clock() - parked_at
        if outcome == "displaced":
            self._respond(client, [], "displaced", waited, client.queue_id, {"displaced": True})
            return
        items, kind = woken_answer(server, client, outcome)
        self._respond(client, items, kind, waited, None if ready else client.queue_id)

    def on_connection_close(self) -> None:
        self._connection_closed = True
        parked = self._parked
        if parked is not None:
            client, waiter = parked
            if self.server.registry.unpark(client, waiter, self.server.clock()):
                log.debug("client disconnected from queue %s", client.queue_id)
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
