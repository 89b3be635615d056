"""Internal endpoints (`/api/internal/...`): the shared secret, from this
machine or, with several shards, the sharding config's internal networks.

A caller from anywhere else (behind our nginx: the address it forwards in
X-Real-IP) is refused from its request head, before its body is read
(`BaseHandler.prepare`): 403 "Access denied", and the connection closes.
Then the secret, which is in the body: missing, 400; wrong, 403 "Access
denied", as Zulip's internal endpoints answer. The secret is compared in constant time and never
logged.
"""

from __future__ import annotations

import hmac

from generation.errors import BadNotice
from generation.notice import parse_notice
from server.errors import ApiError, missing_argument
from server.handlers.base import BaseHandler
from server.http.params import Params
from server.interface import InternalApi


class InternalHandler(BaseHandler):
    server: InternalApi
    SUPPORTED_METHODS = ("POST",)
    internal = True

    def check_secret(self, params: Params) -> None:
        """The request's `secret` is the shared secret: missing, 400; wrong,
        403 "Access denied" (logged with the path and the caller)."""
        secret = params.raw("secret")
        if secret is None:
            raise missing_argument("secret")
        expected = self.server.shared_secret.encode()
        if not hmac.compare_digest(secret.encode(), expected):
            self.refuse_caller(body_read=True)


class NotifyHandler(InternalHandler):
    """Inject a notice as if it came from the notify queue."""

    def post(self) -> None:
        params = self.params()
        self.check_secret(params)
        data = params.raw("data")
        if data is None:
            raise missing_argument("data")
        try:
            notice = parse_notice(data)
        except BadNotice as exc:
            raise ApiError(f"Invalid notice: {exc}") from None
        try:
            report = self.server.deliver(notice, len(data))
        except BadNotice as exc:
            raise ApiError(f"Invalid notice: {exc}") from None
        self.write_success({"queues": report.queues})


class StatsHandler(InternalHandler):
    """What an operator asks a running shard: queues, parked requests, memory
    held, loop lag, database pool; with `user_id`, that user's queues."""

    def post(self) -> None:
        params = self.params()
        self.check_secret(params)
        user_id = params.integer("user_id")
        body = self.server.stats()
        if user_id is not None:
            now = self.server.clock()
            body["user_queues"] = [
                {
                    "queue_id": client.queue_id,
                    "parked": client.waiter is not None,
                    "events": len(client.event_queue),
                    "idle_secs": round(now - client.last_active, 3),
                    "lifespan_secs": client.options.lifespan_secs,
                    "client_name": client.options.client_name,
                }
                for client in self.server.registry.user_queues(user_id)
            ]
        self.write_success(body)
