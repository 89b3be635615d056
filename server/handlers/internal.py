"""Internal endpoints (`/api/internal/...`): the shared secret, from loopback.

Missing secret: 400; wrong secret or a caller that is not on this machine:
403 "Access denied" (reference 1.5). The secret is compared in constant time
and never logged.
"""

from __future__ import annotations

import hmac
import logging

from generation.errors import BadNotice
from generation.notice import parse_notice
from server.errors import ApiError, missing_argument
from server.handlers.base import BaseHandler, is_internal
from server.params import Params

log = logging.getLogger("eventq.internal")


class InternalHandler(BaseHandler):
    SUPPORTED_METHODS = ("POST",)
    internal = True

    def check_internal(self, params: Params) -> None:
        secret = params.raw("secret")
        if secret is None:
            raise missing_argument("secret")
        caller = self.request.remote_ip or ""
        # Loopback, or with several shards another shard's network.
        local = is_internal(caller, self.server.settings.sharding)
        expected = self.server.shared_secret.encode()
        if not hmac.compare_digest(secret.encode(), expected) or not local:
            log.warning(
                "internal request to %s from %s refused", self.request.path, self.request.remote_ip
            )
            raise ApiError("Access denied", "BAD_REQUEST", 403)


class NotifyHandler(InternalHandler):
    """Inject a notice as if it came from the notify queue."""

    def post(self) -> None:
        params = self.params()
        self.check_internal(params)
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
        self.check_internal(params)
        user_id = params.integer("user_id")
        self.write_success(self.server.stats(user_id))
