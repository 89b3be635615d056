"""The URL map: Zulip's paths under /api/v1/ (Basic auth) and /json/ (browser
sessions; until those exist, Basic credentials are accepted there too)."""

from __future__ import annotations

import logging

import tornado.web

from server.handlers.base import NotFoundHandler, logged_uri
from server.handlers.domain import ROUTES as DOMAIN_ROUTES
from server.handlers.events import EventsHandler
from server.handlers.internal import NotifyHandler, StatsHandler
from server.handlers.metrics import MetricsHandler
from server.handlers.openapi import OpenApiHandler
from server.handlers.register import RegisterHandler
from server.handlers.settings import ServerSettingsHandler
from server.interface import ServerApi

access_log = logging.getLogger("eventq.access")


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """Successes at DEBUG (a busy shard answers hundreds of polls a second),
    client errors at INFO, server errors at ERROR."""
    status = handler.get_status()
    level = logging.DEBUG if status < 400 else logging.INFO if status < 500 else logging.ERROR
    if access_log.isEnabledFor(level):
        request = handler.request
        access_log.log(
            level,
            "%d %s %s (%s) %.1fms",
            status,
            request.method,
            logged_uri(request.uri or ""),
            request.remote_ip,
            1000.0 * request.request_time(),
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
            (r"/api/v1/openapi.json", OpenApiHandler, api),
            (r"/api/internal/notify_tornado", NotifyHandler, api),
            (r"/api/internal/stats", StatsHandler, api),
            (r"/metrics", MetricsHandler, api),
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=api,
        log_function=_log_request,
        compress_response=False,
    )
