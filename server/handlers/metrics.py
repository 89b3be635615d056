"""`GET /metrics`: the shard's figures for Prometheus, to callers on this
machine or, with several shards, the sharding config's internal networks
(behind our nginx, judged by the address it forwards in X-Real-IP); anyone
else is refused before the request's body is read (`BaseHandler.prepare`).
A scraper elsewhere goes through an exporter or a tunnel: the figures name
realms' event types and load, which outsiders need not see."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST

from server.handlers.base import BaseHandler
from server.interface import MetricsApi
from server.observability.metrics import exposition


class MetricsHandler(BaseHandler):
    server: MetricsApi
    SUPPORTED_METHODS = ("GET",)
    internal = True

    def get(self) -> None:
        # A browser on this machine must not read it for a page that pointed
        # its own name here (DNS rebinding).
        self.refuse_other_hosts()
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.write_body(exposition(self.server.metrics_registry))
