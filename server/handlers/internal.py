"""Internal endpoints (`/api/internal/...`): the shared secret, from this
machine or, with several shards, the sharding config's internal networks.

A caller from anywhere else (behind our nginx: the address it forwards in
X-Real-IP) is refused from its request head, before its body is read
(`BaseHandler.prepare`): 403 "Access denied", and the connection closes.
Then the secret, in the body (or, for a notice sent as JSON, in the
Authorization header): missing, 400; wrong, 403 "Access denied", as
Zulip's internal endpoints answer. The secret is compared in constant time and never
logged.

The notify endpoint takes a notice in either of two forms: Zulip's, a form
with `secret` and `data` (the notice's JSON), or eventq's own producers',
the notice itself as the body (`Content-Type: application/json`, the body a
RabbitMQ notice carries) with the secret in `Authorization: Bearer
<secret>`, which spares the server decoding the notice out of a form.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import NoReturn

import orjson
import tornado.httputil

from generation.errors import BadNotice
from generation.notice import parse_notice
from server.errors import ApiError, missing_argument
from server.handlers.base import (
    BaseHandler,
    access_level,
    access_log,
    internal_log,
    log_access,
)
from server.handlers.lean import INTERNAL_ERROR, Connection, http_date, remote_ip, write_answer
from server.http.params import FORM_TYPES, Params, request_params
from server.http.responses import success_body
from server.interface import InternalApi

# Tornado's logger for uncaught exceptions, as a RequestHandler logs them.
app_log = logging.getLogger("tornado.application")

NOTIFY_PATH = "/api/internal/notify_tornado"
# The Content-Type of a notice sent as the body.
JSON_TYPE = "application/json"


def secret_given(params: Params, shared_secret: str) -> bool:
    """Whether the request's `secret` is `shared_secret` (compared in
    constant time); a request without one is refused (400)."""
    secret = params.raw("secret")
    if secret is None:
        raise missing_argument("secret")
    return hmac.compare_digest(secret.encode(), shared_secret.encode())


def is_json(content_type: str) -> bool:
    """Whether a request's Content-Type is JSON (a notice as the body)."""
    return content_type.partition(";")[0].strip().lower() == JSON_TYPE


def bearer_given(authorization: str | None, shared_secret: str) -> bool:
    """Whether `Authorization: Bearer <secret>` names the shared secret
    (compared in constant time); a JSON notice without it is refused (400).
    A header's value is its bytes read as Latin-1, so a UTF-8 secret sent
    as such compares as its bytes."""
    parts = (authorization or "").split(None, 1)
    if len(parts) != 2 or parts[0].lower() != "bearer" or not parts[1].strip():
        raise ApiError(
            "A notice sent as JSON needs the shared secret in 'Authorization: Bearer <secret>'",
            "REQUEST_VARIABLE_MISSING",
            var_name="secret",
        )
    try:
        given = parts[1].strip().encode("latin-1")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(given, shared_secret.encode())


def notify(server: InternalApi, params: Params) -> bytes:
    """Deliver the notice in the form's `data`; the success answer's body."""
    data = params.raw("data")
    if data is None:
        raise missing_argument("data")
    return deliver_notice(server, data)


def deliver_notice(server: InternalApi, data: bytes | str) -> bytes:
    """Deliver the notice `data` (its JSON); the success answer's body."""
    try:
        notice = parse_notice(data)
        report = server.deliver(notice, len(data))
    except BadNotice as exc:
        raise ApiError(f"Invalid notice: {exc}") from None
    return success_body({"queues": report.queues})


class InternalHandler(BaseHandler):
    server: InternalApi
    SUPPORTED_METHODS = ("POST",)
    internal = True

    def check_secret(self, params: Params) -> None:
        """The request's `secret` is the shared secret: missing, 400; wrong,
        403 "Access denied" (logged with the path and the caller)."""
        if not secret_given(params, self.server.shared_secret):
            self.refuse_caller(body_read=True)


class NotifyHandler(InternalHandler):
    """Inject a notice as if it came from the notify queue (a request
    `LeanNotify` does not take)."""

    def post(self) -> None:
        self.server.notify_paths["full"] += 1
        headers = self.request.headers
        if is_json(headers.get("Content-Type", "")):
            body = self.body()
            if "Content-Encoding" in headers:
                raise ApiError(
                    "Unsupported Content-Encoding: send the notice unencoded",
                    "UNSUPPORTED_MEDIA_TYPE",
                    415,
                )
            if not bearer_given(headers.get("Authorization"), self.server.shared_secret):
                self.refuse_caller(body_read=True)
            self.write_body(deliver_notice(self.server, body))
            return
        if self.body() and not headers.get("Content-Type", "").startswith(FORM_TYPES):
            raise ApiError(
                "Unsupported Content-Type: send the notice as JSON (application/json)"
                " or as a form of 'secret' and 'data'",
                "UNSUPPORTED_MEDIA_TYPE",
                415,
            )
        params = self.params()
        self.check_secret(params)
        self.write_body(notify(self.server, params))


class LeanNotify(tornado.httputil.HTTPMessageDelegate):
    """`POST /api/internal/notify_tornado` in its common case, without
    Tornado's routing and `RequestHandler` (server/handlers/lean.py): a form
    or JSON body of at most the internal limit, from a caller of this machine or the
    internal networks, no proxy between. `routes.Dispatcher` decides from the
    head and hands every other request to `NotifyHandler`, which answers
    the same way. `authorization`: the request's Authorization header for a
    notice sent as JSON, None for a form."""

    __slots__ = ("authorization", "chunks", "conn", "counted", "json", "server", "started")

    def __init__(
        self, server: InternalApi, conn: Connection, json: bool, authorization: str | None
    ):
        self.server = server
        self.conn = conn
        self.json = json
        self.authorization = authorization
        self.chunks: list[bytes] = []
        self.started = time.time()
        # In flight from its head on, as the full handler's `prepare` counts
        # it: a shutdown waits for a notice whose body is still coming
        # before it saves the queues.
        server.request_started()
        self.counted = True

    def data_received(self, chunk: bytes) -> None:
        self.chunks.append(chunk)  # the Dispatcher took its length: within the limit

    def finish(self) -> None:
        server = self.server
        server.notify_paths["lean"] += 1
        try:
            chunks = self.chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self.chunks = []
            if self.json:
                if not bearer_given(self.authorization, server.shared_secret):
                    self._refuse()
                answer = deliver_notice(server, body)
            else:
                params = request_params({}, body, "application/x-www-form-urlencoded")
                if not secret_given(params, server.shared_secret):
                    self._refuse()
                answer = notify(server, params)
        except ApiError as error:
            self._write(error.status_code, orjson.dumps(error.body()), error.headers)
        except Exception:
            app_log.error(
                "Uncaught exception POST %s (%s)",
                NOTIFY_PATH,
                remote_ip(self.conn),
                exc_info=True,
            )
            self._write(500, INTERNAL_ERROR, None)
        else:
            self._write(200, answer, None)

    def _refuse(self) -> NoReturn:
        internal_log.warning(
            "internal request to %s from %s refused", NOTIFY_PATH, remote_ip(self.conn)
        )
        raise ApiError("Access denied", "BAD_REQUEST", 403)

    def on_connection_close(self) -> None:
        self.chunks = []  # still reading its body: nothing was done
        if self.counted:
            self.counted = False
            self.server.request_finished()

    def _write(self, status: int, body: bytes, extra: dict[str, str] | None) -> None:
        # As a RequestHandler's: a success carries the time its request
        # arrived, an error the time it is answered.
        date = http_date(self.started) if status == 200 else http_date()
        write_answer(self.conn, status, body, extra, date, any_origin=False)
        if self.counted:
            self.counted = False
            self.server.request_finished()
        # Its arguments cost more than the check (answers are logged at DEBUG).
        if access_log.isEnabledFor(access_level(status)):
            secs = time.time() - self.started
            log_access(status, "POST", NOTIFY_PATH, remote_ip(self.conn), secs)


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
