"""What every endpoint shares: body limits, parameters, JSON output, errors,
authentication, and the server's count of requests in progress."""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
import re
import time
import urllib.parse
from collections.abc import Awaitable
from typing import Any, NoReturn

import orjson
import tornado.httputil
import tornado.iostream
import tornado.web

from generation.sharding import ShardMap
from queues.client import ClientDescriptor
from queues.errors import BadQueueId, QueueError
from server.database.db import DatabaseUnavailable
from server.errors import ApiError, database_unavailable, from_queue_error, rate_limited
from server.handlers.headers import DEFAULTS, shutting_down
from server.http.auth import AuthUser, not_logged_in
from server.http.forward import (
    ACCEL_HEADER,
    FORWARDED_HEADER,
    REFUSED_HEADER,
    accel_redirect,
    forward,
)
from server.http.params import Params, request_params
from server.http.responses import success_body
from server.http.sessions import CSRF_HEADER, USER_HEADER, check_csrf, cookie_names
from server.interface import HandlerApi

log = logging.getLogger("eventq.http")
# Refused calls of the operators' endpoints (server/handlers/internal.py).
internal_log = logging.getLogger("eventq.internal")

# A URL in a log line is cut here: a request head may be 64 KiB, and a
# log line that long is noise an operator scrolls past (and can hide the next).
LOGGED_URI_CHARS = 300


access_log = logging.getLogger("eventq.access")


# Query parameters whose values never reach a log (by their decoded names).
_SECRET_NAMES = frozenset({"token", "api_key", "password", "secret"})


def _redacted(uri: str) -> str:
    path, sep, query = uri.partition("?")
    if not sep:
        return uri
    parts = []
    for part in query.split("&"):
        name, eq, _ = part.partition("=")
        secret = eq and urllib.parse.unquote_plus(name).strip().lower() in _SECRET_NAMES
        parts.append(f"{name}=[redacted]" if secret else part)
    return f"{path}?{'&'.join(parts)}"


def logged_uri(uri: str) -> str:
    """`uri` as the logs show it: secrets in its query string redacted, cut
    at LOGGED_URI_CHARS, saying so."""
    uri = _redacted(uri)
    if len(uri) <= LOGGED_URI_CHARS:
        return uri
    return f"{uri[:LOGGED_URI_CHARS]}... ({len(uri)} characters)"


def is_internal(address: str, shard_map: ShardMap | None) -> bool:
    """Whether `address` is this machine, or with several shards one of the
    sharding config's internal networks."""
    if shard_map is not None:
        return shard_map.is_internal(address)
    return _is_loopback(address)


@functools.lru_cache(maxsize=1024)
def _is_loopback(address: str) -> bool:
    # Remembered: a producer posts a notice per event from the same address,
    # and reading an address costs more than the rest of the check.
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def access_level(status: int) -> int:
    """The access log's level for an answer: successes at DEBUG (a busy shard
    answers hundreds of polls a second), client errors at INFO, server
    errors at ERROR."""
    return logging.DEBUG if status < 400 else logging.INFO if status < 500 else logging.ERROR


def log_access(
    status: int, method: str, uri: str, remote_ip: str | None, request_secs: float
) -> None:
    """The access log's line for an answered request (at `access_level`)."""
    level = access_level(status)
    if access_log.isEnabledFor(level):
        access_log.log(
            level,
            "%d %s %s (%s) %.1fms",
            status,
            method,
            logged_uri(uri),
            remote_ip,
            1000.0 * request_secs,
        )


def client_address(peer: str, forwarded: str | None, shard_map: ShardMap | None) -> str:
    """Who is calling: the peer, or behind our own proxy (a loopback or
    internal peer) the address nginx puts in X-Real-IP (`forwarded`)."""
    if forwarded and is_internal(peer, shard_map):
        return forwarded
    return peer


def owned_queue(server: HandlerApi, queue_id: str, user: AuthUser) -> ClientDescriptor:
    """The user's queue `queue_id`; another user's id fails exactly like an
    unknown one (and is logged)."""
    try:
        return server.registry.get(queue_id, user.user_id)
    except BadQueueId as exc:
        if exc.wrong_owner:
            log.warning("User %d is not authorized for queue %s", user.user_id, queue_id)
        raise


_DIGITS = re.compile(r"[0-9]{1,18}")


def clean_client_name(name: str) -> str:
    """A client's name as messages store it (`messages.client`, a text
    column, which holds no NUL): Zulip's 30 characters, without control
    characters; "Unspecified" if nothing is left."""
    cleaned = "".join(c for c in name if c.isprintable())[:30]
    return cleaned or "Unspecified"


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Bodies are streamed so that an oversized one is refused (413, JSON)
    before it is read.

    `internal` handlers (`/api/internal/*`, `/metrics`) take bodies up to
    `max_internal_request_bytes`, and answer only callers that
    `caller_is_internal`: any other gets 403 "Access denied" from its
    request head, before any of its body is read."""

    # Each kind of handler narrows this to its role (server/interface.py).
    server: HandlerApi
    json_api: bool
    internal: bool = False
    # Sharding (server/http/forward.py): the request came from another shard; the
    # connection to the owner shard while forwarding; our client hung up.
    forwarded = False
    upstream: tornado.iostream.IOStream | None = None
    client_gone = False

    def initialize(self, server: HandlerApi, json_api: bool = False) -> None:
        self.server = server
        self.json_api = json_api
        self._chunks: list[bytes] = []
        self._size = 0
        self._counted = False

    def set_default_headers(self) -> None:
        for name, value in DEFAULTS:
            self.set_header(name, value)

    def body_limit(self) -> int:
        settings = self.server.settings
        return settings.max_internal_request_bytes if self.internal else settings.max_request_bytes

    def prepare(self) -> Awaitable[None] | None:
        self.server.request_started()
        self._counted = True
        if self.server.stopping:
            # The server is going away: the connection is not to be reused.
            raise shutting_down()
        if self.internal and not self.caller_is_internal():
            # Before the Content-Length checks: an outsider learns nothing
            # of the limits, and its body (up to 64 MiB) is never read.
            self.refuse_caller()
        limit = self.body_limit()
        headers = self.request.headers
        # A membership test first: HTTPHeaders.get raises and catches a
        # KeyError when the header is absent (every GET), 4% of a busy server.
        if "Content-Length" in headers:
            length = headers["Content-Length"]
            if not _DIGITS.fullmatch(length):
                raise ApiError("Invalid Content-Length header")
            if int(length) > limit:
                # The body is never read: the connection cannot be reused.
                raise ApiError(
                    f"Request body too large (limit: {limit} bytes)",
                    "REQUEST_TOO_LARGE",
                    413,
                    headers={"Connection": "close"},
                )
        if FORWARDED_HEADER in headers:
            self._check_forwarded(headers[FORWARDED_HEADER])
        return None

    def client_left(self) -> bool:
        """Whether the client closed its connection (a method, not the
        attribute: it changes across awaits)."""
        return self.client_gone

    def _check_forwarded(self, secret: str) -> None:
        """A request another shard forwarded: the shared secret, from another
        shard's address; anything else is refused like a bad internal call."""
        expected = self.server.shared_secret.encode()
        shard_map = self.server.settings.sharding
        caller = self.request.remote_ip or ""
        internal = shard_map.is_internal(caller) if shard_map is not None else False
        if not hmac.compare_digest(secret.encode(), expected) or not internal:
            path = logged_uri(self.request.path)
            log.warning("forwarded request to %s from %s refused", path, caller)
            raise ApiError("Access denied", "BAD_REQUEST", 403, headers={REFUSED_HEADER: "1"})
        self.forwarded = True

    def data_received(self, chunk: bytes) -> None:
        # A chunked body has no Content-Length to refuse up front: count it,
        # keep nothing past the limit, and answer 413 once it has been read.
        self._size += len(chunk)
        if self._size <= self.body_limit():
            self._chunks.append(chunk)
        else:
            self._chunks.clear()

    def on_finish(self) -> None:
        if self._counted:
            self._counted = False
            self.server.request_finished()

    def on_connection_close(self) -> None:
        self.client_gone = True
        if self.upstream is not None:
            self.upstream.close()  # the owner shard sees its client leave
        super().on_connection_close()
        # A request whose client went away before it was answered still ends.
        if self._counted and not self._finished:
            self._counted = False
            self.server.request_finished()

    # -- input --------------------------------------------------------------

    def body(self) -> bytes:
        """The request's body; 413 past the handler's limit."""
        if self._size > self.body_limit():
            raise ApiError(
                f"Request body too large (limit: {self.body_limit()} bytes)",
                "REQUEST_TOO_LARGE",
                413,
            )
        return b"".join(self._chunks)

    def params(self) -> Params:
        """Query-string parameters, then form-body ones (which win)."""
        return request_params(
            self.request.query_arguments,
            self.body(),
            self.request.headers.get("Content-Type", ""),
            self.request.headers,
        )

    def over_tls(self) -> bool:
        """Whether the client's connection is TLS: here, or at our own proxy
        (a loopback or internal peer) that says so in X-Forwarded-Proto."""
        if self.request.protocol == "https":
            return True
        forwarded = self.request.headers.get("X-Forwarded-Proto", "")
        peer = self.request.remote_ip or ""
        return forwarded.lower() == "https" and is_internal(peer, self.server.settings.sharding)

    def refuse_other_hosts(self) -> None:
        """For what this machine's own callers are trusted with (the operator
        page, the demo's login): a Host header that is an address, localhost,
        or a name of the sharding config. Another name is a page that had
        its name pointed at this machine (DNS rebinding)."""
        host = self.request.host_name.lower()
        if host == "localhost" or host.endswith(".localhost"):
            return
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            pass
        else:
            return
        shard_map = self.server.settings.sharding
        if shard_map is not None and host in shard_map.known_host_names():
            return
        log.warning("request to %s for host %r refused", self.request.path, host[:100])
        raise ApiError(
            f"Unknown host {host[:100]!r}: use this server's address or a name of its config",
            "BAD_REQUEST",
            403,
        )

    def client_address(self) -> str:
        """Who is calling: the peer, or behind our own proxy (a loopback or
        internal peer) the address nginx puts in X-Real-IP."""
        return client_address(
            self.request.remote_ip or "",
            self.request.headers.get("X-Real-IP"),
            self.server.settings.sharding,
        )

    def caller_is_internal(self) -> bool:
        """Whether the caller (`client_address`: behind our own proxy, the
        address it forwards) is this machine or, with several shards, one of
        the sharding config's internal networks: who may call the internal
        endpoints and see the operator pages without a token."""
        return is_internal(self.client_address(), self.server.settings.sharding)

    def caller_shown(self) -> str:
        """The caller for a log line: its address, and the peer it came
        through when that is another (our own proxy)."""
        peer = self.request.remote_ip or ""
        address = self.client_address()
        return address if address == peer else f"{address} (through {peer})"

    def refuse_caller(self, *, body_read: bool = False) -> NoReturn:
        """Raise the internal endpoints' 403 "Access denied", logged (one
        WARNING line) with the path and the caller. Unless `body_read`, the
        answer closes the connection: the body that may follow the head was
        not read, so the connection cannot carry another request."""
        internal_log.warning(
            "internal request to %s from %s refused",
            logged_uri(self.request.path),
            self.caller_shown(),
        )
        headers = {} if body_read else {"Connection": "close"}
        raise ApiError("Access denied", "BAD_REQUEST", 403, headers=headers)

    # The auth cache's mark when this request began authenticating
    # (`access_changed`).
    auth_epoch = 0

    def access_changed(self, user: AuthUser) -> bool:
        """Whether `user`'s access changed (a new role, a logout, a new key,
        a deactivation) since this request began authenticating them: what
        it was authenticated with may be out of date."""
        return self.server.auth.forgotten(user.user_id) > self.auth_epoch

    async def authenticate(self) -> AuthUser:
        self.auth_epoch = self.server.auth.epoch()
        header = self.request.headers.get("Authorization")
        if self.json_api and header is None:
            user = await self._session_user()
        else:
            user = await self._basic_user(header)
        limiter = self.server.rate_limiter
        if limiter is not None:
            wait = limiter.hit(user.user_id, self.server.clock())
            if wait > 0.0:
                raise rate_limited(wait)
        return user

    async def _basic_user(self, header: str | None) -> AuthUser:
        failures = self.server.auth_failures if header is not None else None
        address = ""
        if failures is not None:
            # Guessing keys: each wrong one costs a database query.
            address = self.client_address()
            wait = failures.wait(address, self.server.clock())
            if wait > 0.0:
                raise rate_limited(wait)
        try:
            return await self.server.auth.authenticate(header)
        except DatabaseUnavailable as exc:
            log.warning("authentication failed: %s", exc)
            raise database_unavailable() from exc
        except ApiError as exc:
            if exc.status_code == 401 and failures is not None:
                failures.hit(address, self.server.clock())
            raise

    async def _session_user(self) -> AuthUser:
        """A /json/ request without credentials: the browser session's user
        (server/http/sessions.py), with its CSRF check."""
        selected = self.request.headers.get(USER_HEADER)
        user_id = None
        if selected is not None:
            if not _DIGITS.fullmatch(selected.strip()):
                raise ApiError(f"Invalid {USER_HEADER} header: a user id")
            user_id = int(selected)
        token = self.get_cookie(cookie_names(user_id)[0])
        session = self.server.sessions.verify(token, time.time()) if token else None
        if session is None or (user_id is not None and session.user_id != user_id):
            raise not_logged_in()
        headers = self.request.headers
        check_csrf(
            self.server.sessions,
            session,
            self.request.method or "",
            headers.get(CSRF_HEADER),
            headers.get("Origin"),
            headers.get("Host"),
        )
        try:
            return await self.server.auth.authenticate_session(session)
        except DatabaseUnavailable as exc:
            log.warning("authentication failed: %s", exc)
            raise database_unavailable() from exc

    async def served_elsewhere(self, user: AuthUser) -> bool:
        """With several shards: hand the request to the shard that owns
        `user` (server/http/forward.py) and return True; False when it is this one."""
        server = self.server
        shard_map = server.settings.sharding
        if shard_map is None:
            return False
        owner = shard_map.shard_for(user.realm_id, user.user_id)
        if owner == server.settings.shard:
            return False
        if self.forwarded:
            log.error(
                "shard %s got a request for user %d forwarded to it, but its sharding config"
                " says shard %s owns them: every shard must run the same config",
                server.settings.shard,
                user.user_id,
                owner,
            )
            raise ApiError(
                "The servers disagree about where this queue lives; try again shortly",
                "SHARD_MISMATCH",
                503,
                headers={"Retry-After": "5"},
            )
        shard = shard_map.shards[owner]
        if self.request.method == "GET" and ACCEL_HEADER in self.request.headers:
            accel_redirect(self, shard)
            return True
        if self._size > self.body_limit():
            self.params()  # raises the 413
        settings = server.settings
        # A long poll is answered by a heartbeat at the latest; anything else
        # (register's state fetch) well within the client's timeout.
        timeout = (
            settings.heartbeat_secs + settings.heartbeat_jitter_secs + 30.0
            if self.request.method == "GET"
            else settings.longpoll_timeout_secs
        )
        await forward(self, shard, server.shared_secret, b"".join(self._chunks), timeout)
        return True

    def queue_for(self, queue_id: str, user: AuthUser) -> ClientDescriptor:
        """The user's queue `queue_id`; another user's id fails exactly like
        an unknown one (and is logged)."""
        return owned_queue(self.server, queue_id, user)

    def client_name(self, params: Params | None = None) -> str:
        """Zulip's client name: the `client` parameter, else the User-Agent's
        first word ("ZulipPython/0.9.1 (...)" -> "ZulipPython")."""
        name = params.string("client", max_length=1000) if params is not None else None
        if not name:
            agent = self.request.headers.get("User-Agent", "")
            name = agent.split("/", 1)[0].split(" ", 1)[0]
        return clean_client_name(name) if name else "Unspecified"

    # -- output -------------------------------------------------------------

    def compute_etag(self) -> None:
        """No ETags: a long-poll answer must never become a 304."""
        return

    def write_body(self, body: bytes, status: int = 200) -> None:
        self.set_status(status)
        self.finish(body)

    def write_success(self, data: dict[str, Any] | None = None) -> None:
        self.write_body(success_body(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error as Zulip's JSON error body, never an HTML page."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, QueueError):
            exc = from_queue_error(exc)
        elif isinstance(exc, DatabaseUnavailable):
            exc = database_unavailable()
        if isinstance(exc, ApiError):
            self.set_status(exc.status_code)
            for name, value in exc.headers.items():
                self.set_header(name, value)
            self.finish(orjson.dumps(exc.body()))
            return
        if status_code == 405:
            self.set_header("Allow", ", ".join(self.allowed_methods()))
            body = {"result": "error", "msg": "Method Not Allowed", "code": "BAD_REQUEST"}
        elif status_code < 500:
            body = {"result": "error", "msg": self._reason, "code": "BAD_REQUEST"}
        else:
            body = {"result": "error", "msg": "Internal server error", "code": "INTERNAL_ERROR"}
        self.finish(orjson.dumps(body))

    def allowed_methods(self) -> list[str]:
        return [
            m
            for m in self.SUPPORTED_METHODS
            if getattr(type(self), m.lower()) is not getattr(tornado.web.RequestHandler, m.lower())
        ]

    def _request_summary(self) -> str:
        # Tornado's own log lines (errors) show the request through this.
        request = self.request
        return f"{request.method} {logged_uri(request.uri or '')} ({request.remote_ip})"

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, ApiError | QueueError):
            return
        if isinstance(value, DatabaseUnavailable):
            log.warning("%s %s: %s", self.request.method, self.request.path, value)
            return
        super().log_exception(typ, value, tb)


class NotFoundHandler(BaseHandler):
    """Any path no endpoint serves."""

    def prepare(self) -> None:
        super().prepare()
        raise ApiError(f"Invalid API path: {self.request.path}", "NOT_FOUND", 404)
