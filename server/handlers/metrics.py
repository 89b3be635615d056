"""`GET /metrics`: the shard's figures for Prometheus, to callers on this
machine only (a scraper elsewhere goes through an exporter or a tunnel; the
figures name realms' event types and load, which outsiders need not see)."""

from __future__ import annotations

import ipaddress
import logging

from prometheus_client import CONTENT_TYPE_LATEST

from server.errors import ApiError
from server.handlers.base import BaseHandler
from server.metrics import exposition

log = logging.getLogger("eventq.internal")


class MetricsHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET",)
    internal = True

    def get(self) -> None:
        try:
            local = ipaddress.ip_address(self.request.remote_ip or "").is_loopback
        except ValueError:
            local = False
        if not local:
            log.warning("metrics request from %s refused", self.request.remote_ip)
            raise ApiError("Access denied", "BAD_REQUEST", 403)
        # A browser on this machine must not read it for a page that pointed
        # its own name here (DNS rebinding).
        self.refuse_other_hosts()
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.write_body(exposition(self.server.metrics_registry))
