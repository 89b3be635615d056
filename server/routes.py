"""The URL map: Zulip's paths under /api/v1/ (Basic auth) and /json/ (browser
sessions, server/http/sessions.py; Basic credentials are accepted there too), and
the browser's pages and static files (server/handlers/pages.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TypeGuard

import tornado.escape
import tornado.http1connection
import tornado.httputil
import tornado.web

from server.handlers.base import NotFoundHandler, client_address, is_internal, log_access
from server.handlers.domain import ROUTES as DOMAIN_ROUTES
from server.handlers.events import EventsHandler
from server.handlers.internal import (
    NOTIFY_PATH,
    LeanNotify,
    NotifyHandler,
    StatsHandler,
    is_json,
)
from server.handlers.metrics import MetricsHandler
from server.handlers.openapi import OpenApiHandler
from server.handlers.pages import (
    DemoPageHandler,
    OperatorPageHandler,
    OperatorReportHandler,
    OperatorReportsHandler,
    OperatorStatsHandler,
    StaticHandler,
)
from server.handlers.poll import LeanPoll
from server.handlers.realm_config import EMOJI_IMAGE_ROUTE, EmojiImageHandler
from server.handlers.register import RegisterHandler
from server.handlers.session import DevLoginHandler, DevUsersHandler, LoginHandler, LogoutHandler
from server.handlers.settings import ServerSettingsHandler
from server.handlers.stream import wants_stream
from server.handlers.unsubscribe import UnsubscribeHandler
from server.http.forward import FORWARDED_HEADER
from server.http.http1 import PLAIN_HOST, Exchange
from server.interface import ServerApi
from server.openapi import document


def _log_request(handler: tornado.web.RequestHandler) -> None:
    request = handler.request
    log_access(
        handler.get_status(),
        request.method or "",
        request.uri or "",
        request.remote_ip,
        request.request_time(),
    )


def make_application(server: ServerApi) -> tornado.web.Application:
    api = {"server": server}
    json = {"server": server, "json_api": True}
    domain = [
        route
        for path, handler in DOMAIN_ROUTES
        for route in ((rf"/api/v1/{path}", handler, api), (rf"/json/{path}", handler, json))
    ]
    return tornado.web.Application(
        [
            *domain,
            (r"/api/v1/events", EventsHandler, api),
            (r"/json/events", EventsHandler, json),
            (r"/api/v1/register", RegisterHandler, api),
            (r"/json/register", RegisterHandler, json),
            (r"/api/v1/server_settings", ServerSettingsHandler, api),
            (r"/json/server_settings", ServerSettingsHandler, json),
            (r"/api/v1/openapi.json", OpenApiHandler, {**api, "document": document}),
            (NOTIFY_PATH, NotifyHandler, api),
            (r"/api/internal/stats", StatsHandler, api),
            (r"/metrics", MetricsHandler, api),
            # Browsers: sessions, the client library, the pages.
            (r"/json/login", LoginHandler, json),
            (r"/json/dev_login", DevLoginHandler, json),
            (r"/json/dev_users", DevUsersHandler, json),
            (r"/json/logout", LogoutHandler, json),
            (r"/static/([A-Za-z0-9_.-]+)", StaticHandler, api),
            (EMOJI_IMAGE_ROUTE, EmojiImageHandler, api),
            (r"/demo", DemoPageHandler, api),
            # The missed-message emails' unsubscribe link (server/notifications/).
            (r"/accounts/unsubscribe/missed_messages/([0-9]+-[0-9a-f]+)", UnsubscribeHandler, api),
            (r"/operator", OperatorPageHandler, api),
            (r"/operator/stats", OperatorStatsHandler, api),
            # Before report/?: that would take "reports/..." as "s/...".
            (r"/operator/reports(?:/(.*))?", OperatorReportsHandler, api),
            (r"/operator/report/?(.*)", OperatorReportHandler, api),
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=api,
        log_function=_log_request,
        compress_response=False,
    )


# A notice's form (or JSON), and the headers that send it to the full handler: a body
# in chunks or encoded, a forwarded request, one through a proxy (whose
# client is not the peer).
_FORM = "application/x-www-form-urlencoded"
_NOT_LEAN_NOTIFY = frozenset(
    ("transfer-encoding", "content-encoding", FORWARDED_HEADER.lower(), "x-real-ip")
)
# The long poll's paths, and whether each allows cross-origin API clients.
_POLL_PATHS = {"/api/v1/events": True, "/json/events": False}
_FORWARDED = FORWARDED_HEADER.lower()
# Tornado refuses a query string of more than 1,000 fields; the lean path
# takes only those well below it.
_MAX_QUERY_SEPARATORS = 100


class Dispatcher(tornado.httputil.HTTPServerConnectionDelegate):
    """What the HTTP server hands each request to: the long poll's common
    case to `handlers.poll.LeanPoll`, the notify endpoint's to
    `handlers.internal.LeanNotify`, every other request to `application`
    (the full handlers). The choice is made from the request head before
    anything is done for the request, so a request the lean path does not
    take is served exactly as if it did not exist."""

    def __init__(self, application: tornado.web.Application, server: ServerApi):
        self.application = application
        self.server = server

    def start_request(
        self,
        server_conn: object,
        request_conn: tornado.httputil.HTTPConnection,
    ) -> tornado.httputil.HTTPMessageDelegate:
        return _Route(self, server_conn, request_conn)

    def lean(
        self,
        start_line: tornado.httputil.RequestStartLine,
        fields: Mapping[str, str],
        conn: tornado.httputil.HTTPConnection,
    ) -> LeanPoll | LeanNotify | None:
        """The lean delegate for a request (`lean_poll`, `lean_notify`), or
        None for the full handlers. `fields`: the request's headers by
        lower-case name."""
        method = start_line.method
        if method == "GET":
            return self.lean_poll(start_line, fields, conn)
        if method == "POST" and start_line.path == NOTIFY_PATH:
            return self.lean_notify(start_line, fields, conn)
        return None

    def _plain(
        self,
        conn: tornado.httputil.HTTPConnection,
        start_line: tornado.httputil.RequestStartLine,
        fields: Mapping[str, str],
    ) -> TypeGuard[Exchange | tornado.http1connection.HTTP1Connection]:
        """What both lean paths ask of a request: HTTP/1.1 on a connection
        they can answer, a plain Host, and a server not shutting down."""
        host = fields.get("host")
        return (
            not self.server.stopping
            and start_line.version == "HTTP/1.1"
            and isinstance(conn, (Exchange, tornado.http1connection.HTTP1Connection))
            and host is not None
            and PLAIN_HOST.fullmatch(host) is not None
        )

    def lean_notify(
        self,
        start_line: tornado.httputil.RequestStartLine,
        fields: Mapping[str, str],
        conn: tornado.httputil.HTTPConnection,
    ) -> LeanNotify | None:
        """A `LeanNotify` for a notice posted as a form or as JSON, of a
        known length within the internal limit, by a caller of this machine
        (or the internal networks) with no proxy between; else None."""
        server = self.server
        if not self._plain(conn, start_line, fields):
            return None
        length = fields.get("content-length")
        content_type = fields.get("content-type", "")
        form = content_type.startswith(_FORM)
        json = not form and is_json(content_type)
        if (
            length is None
            or not _NOT_LEAN_NOTIFY.isdisjoint(fields)
            or not (form or json)
            # ASCII digits only ("²" is a digit to str.isdigit), as many as
            # the full handler takes: anything else is its 400.
            or not (length.isascii() and length.isdigit() and len(length) <= 18)
            or int(length) > server.settings.max_internal_request_bytes
        ):
            return None
        context = getattr(conn, "context", None)
        peer = getattr(context, "remote_ip", None) or ""
        if not is_internal(peer, server.settings.sharding):
            return None  # refused by the full handler, which logs it
        return LeanNotify(server, conn, json, fields.get("authorization") if json else None)

    def lean_poll(
        self,
        start_line: tornado.httputil.RequestStartLine,
        fields: Mapping[str, str],
        conn: tornado.httputil.HTTPConnection,
    ) -> LeanPoll | None:
        """A `LeanPoll` for a poll of an existing queue by a user whose
        credentials are cached, of this shard, without a body; else None.
        `fields`: the request's headers by lower-case name."""
        path, _, query = start_line.path.partition("?")
        api = _POLL_PATHS.get(path)
        if start_line.method != "GET" or api is None or not self._plain(conn, start_line, fields):
            return None
        server = self.server
        authorization = fields.get("authorization")
        if (
            authorization is None
            or query.count("&") > _MAX_QUERY_SEPARATORS
            or "content-length" in fields
            or "transfer-encoding" in fields
            or _FORWARDED in fields
            or wants_stream(fields.get("accept"))
        ):
            return None
        settings = server.settings
        shard_map = settings.sharding
        failures = server.auth_failures
        if failures is not None:
            # As the full handler checks first: an address guessing keys is
            # refused even with valid credentials. The full handler answers.
            context = getattr(conn, "context", None)
            peer = getattr(context, "remote_ip", None) or ""
            address = client_address(peer, fields.get("x-real-ip"), shard_map)
            if failures.blocked(address, server.clock()):
                return None
        user = server.auth.cached(authorization)
        if user is None:
            return None
        if (
            shard_map is not None
            and shard_map.shard_for(user.realm_id, user.user_id) != settings.shard
        ):
            return None  # forwarded to its shard by the full handler
        arguments = query_arguments(query)
        if "queue_id" not in arguments:
            return None  # a new queue (or the error of a missing id)
        return LeanPoll(server, conn, start_line.path, arguments, user, api)


def query_arguments(query: str) -> dict[str, list[bytes]]:
    """`tornado.escape.parse_qs_bytes(query, keep_blank_values=True)` (what a
    RequestHandler's query arguments are), without the cost of its general
    case for a query with nothing to unquote."""
    if "%" in query or "+" in query:
        return tornado.escape.parse_qs_bytes(query, keep_blank_values=True)
    arguments: dict[str, list[bytes]] = {}
    for field in query.split("&"):
        if field:
            name, _, value = field.partition("=")
            values = arguments.get(name)
            if values is None:
                arguments[name] = [value.encode("latin1")]
            else:
                values.append(value.encode("latin1"))
    return arguments


def header_fields(headers: tornado.httputil.HTTPHeaders) -> dict[str, str]:
    """`headers` by lower-case name (a repeated one's values joined by commas)."""
    return {name.lower(): value for name, value in headers.items()}


class _Route(tornado.httputil.HTTPMessageDelegate):
    """One request on its way to the lean poll or the application."""

    __slots__ = ("dispatcher", "request_conn", "server_conn", "target")

    def __init__(
        self,
        dispatcher: Dispatcher,
        server_conn: object,
        request_conn: tornado.httputil.HTTPConnection,
    ):
        self.dispatcher = dispatcher
        self.server_conn = server_conn
        self.request_conn = request_conn
        self.target: tornado.httputil.HTTPMessageDelegate | None = None

    def headers_received(
        self,
        start_line: tornado.httputil.RequestStartLine | tornado.httputil.ResponseStartLine,
        headers: tornado.httputil.HTTPHeaders,
    ) -> Awaitable[None] | None:
        assert isinstance(start_line, tornado.httputil.RequestStartLine)
        dispatcher = self.dispatcher
        lean: LeanPoll | LeanNotify | None = None
        method, path = start_line.method, start_line.path
        if (method == "GET" and path.partition("?")[0] in _POLL_PATHS) or (
            method == "POST" and path == NOTIFY_PATH
        ):
            lean = dispatcher.lean(start_line, header_fields(headers), self.request_conn)
        if lean is not None:
            self.target = lean
            return None
        target = dispatcher.application.start_request(self.server_conn, self.request_conn)
        self.target = target
        return target.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        assert self.target is not None
        return self.target.data_received(chunk)

    def finish(self) -> None:
        assert self.target is not None
        self.target.finish()

    def on_connection_close(self) -> None:
        if self.target is not None:
            self.target.on_connection_close()


def make_dispatcher(server: ServerApi) -> Dispatcher:
    return Dispatcher(make_application(server), server)
