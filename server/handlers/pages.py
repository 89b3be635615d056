"""The browser's side: static files (`/static/eventq.js`, the pages' scripts),
the demo page (`/demo`, only with EVENTQ_DEMO=1) and the operator page
(`/operator`, its JSON figures at `/operator/stats`, the latest analytics
report under `/operator/report/`, the dated ones the analytics keep under
`/operator/reports/`).

The operator's paths answer only callers on this machine or the internal
networks of the sharding config (through our nginx: the address it puts in
X-Real-IP), or holders of EVENTQ_OPERATOR_TOKEN (`Authorization: Bearer`, or
the cookie that `/operator?token=...` sets: only that page takes the token in
its address, and only to turn it into the cookie). Pages carry a Content
Security Policy that allows scripts, styles and requests of this origin only.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.resources
import logging
import re
import time
from pathlib import Path
from typing import Any

from server.errors import ApiError
from server.handlers.base import BaseHandler
from server.interface import PagesApi

log = logging.getLogger("eventq.pages")

OPERATOR_COOKIE = "eventq_operator"

# name under /static/ -> (file under server/static/, content type)
_STATIC = {
    "eventq.js": ("eventq-client/eventq.js", "text/javascript; charset=utf-8"),
    "eventq.d.ts": ("eventq-client/eventq.d.ts", "text/plain; charset=utf-8"),
    "demo.js": ("demo.js", "text/javascript; charset=utf-8"),
    "operator.js": ("operator.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
    # The picture of a user a guest may not see (generation/actions/access.py).
    "unknown-user-avatar.svg": ("unknown-user-avatar.svg", "image/svg+xml"),
}
_PAGES = {"demo": "demo.html", "operator": "operator.html"}
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".png": "image/png",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
}
_REPORT_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}")
# A dated report's directory (analytics/history.py: the run's UTC time, and
# -NNN for a second run of the same second).
_DATED_REPORT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[0-9]{2}Z(?:-[0-9]{3})?")
_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
    " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
# The analytics report: its own styles, no scripts at all.
_REPORT_POLICY = (
    "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline';"
    " frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
# The dated reports: the index shows the latest in a frame of this origin.
_REPORTS_POLICY = (
    "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline';"
    " frame-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
)
_cache: dict[str, bytes] = {}


def _etag(body: bytes) -> str:
    """A file's ETag: a digest of its content (tens of microseconds for the
    largest, eventq.js)."""
    return f'"{hashlib.sha256(body).hexdigest()[:32]}"'


def static_file(path: str) -> bytes:
    """A file of server/static/ (in the wheel as package data), read once."""
    body = _cache.get(path)
    if body is None:
        body = (importlib.resources.files("server") / "static" / path).read_bytes()
        _cache[path] = body
    return body


class BrowserHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET", "HEAD")

    file_etag: str | None = None

    def compute_etag(self) -> str | None:  # type: ignore[override]
        """Files (not the JSON answers) revalidate with an ETag of their
        content (for HEAD too): a page load that has them gets 304s."""
        return self.file_etag

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")

    def send_file(
        self, body: bytes, content_type: str, *, page: bool = False, policy: str = _POLICY
    ) -> None:
        self.file_etag = _etag(body)
        self.set_header("Content-Type", content_type)
        # Revalidated each time (cheaply: ETag): a new version is picked up at once.
        self.set_header("Cache-Control", "no-cache")
        if page:
            self.set_header("Content-Security-Policy", policy)
            # The same rule for browsers that read only the older header.
            framed = "frame-ancestors 'self'" in policy
            self.set_header("X-Frame-Options", "SAMEORIGIN" if framed else "DENY")
        if self.request.method == "HEAD":
            self.set_header("Content-Length", str(len(body)))
            self.finish()
            return
        self.finish(body)

    def head(self, *args: str) -> Any:
        return self.get(*args)  # send_file leaves the body out


class StaticHandler(BrowserHandler):
    def get(self, name: str) -> None:
        entry = _STATIC.get(name)
        if entry is None:
            raise ApiError(f"Invalid API path: {self.request.path}", "NOT_FOUND", 404)
        path, content_type = entry
        self.send_file(static_file(path), content_type)


class DemoPageHandler(BrowserHandler):
    def get(self) -> None:
        if not self.server.settings.demo:
            raise ApiError(
                "The demo page is off: run the server with EVENTQ_DEMO=1 (deploy/run.sh does)",
                "NOT_FOUND",
                404,
            )
        self.send_file(static_file(_PAGES["demo"]), _CONTENT_TYPES[".html"], page=True)


class OperatorHandler(BrowserHandler):
    """What every operator path checks first."""

    # Whether `?token=` is read: only by the page that moves it into a
    # cookie. A token in the address ends up in histories, bookmarks and
    # Referer headers; taken everywhere, links carrying it would work and
    # get shared.
    token_in_query = False

    def prepare(self) -> None:
        super().prepare()
        if not self.operator_allowed():
            log.warning("operator page %s refused to %s", self.request.path, self.client_address())
            raise ApiError(
                "The operator pages are for this machine, the internal networks,"
                " or holders of the operator token",
                "UNAUTHORIZED",
                403,
            )

    def operator_allowed(self) -> bool:
        expected = self.server.settings.operator_token
        if expected:
            given = self.get_cookie(OPERATOR_COOKIE)
            if self.token_in_query:
                given = self.get_query_argument("token", None) or given
            authorization = self.request.headers.get("Authorization", "")
            if authorization.startswith("Bearer "):
                given = authorization[len("Bearer ") :].strip()
            if given and hmac.compare_digest(given.encode(), expected.encode()):
                return True
        if not self.caller_is_internal():
            return False
        # Trusted for where it calls from: only under a name of this server.
        self.refuse_other_hosts()
        return True


class OperatorPageHandler(OperatorHandler):
    token_in_query = True

    def get(self) -> None:
        token = self.get_query_argument("token", None)
        if token is not None:
            expected = self.server.settings.operator_token
            if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
                raise ApiError("Wrong operator token", "UNAUTHORIZED", 403)
            # Kept in a cookie of the operator's paths, out of the address bar.
            self.set_cookie(
                OPERATOR_COOKIE,
                token,
                path="/operator",
                httponly=True,
                secure=self.over_tls(),
                samesite="Strict",
            )
            self.set_status(303)
            self.set_header("Location", "/operator")
            self.finish()
            return
        self.send_file(static_file(_PAGES["operator"]), _CONTENT_TYPES[".html"], page=True)


class OperatorStatsHandler(OperatorHandler):
    server: PagesApi

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write_success(operator_figures(self.server))


def operator_figures(server: PagesApi) -> dict[str, Any]:
    """The operator page's figures: what the shard holds now, and counters
    since it started (the page turns them into rates)."""
    stats = server.stats()
    consumer = stats.get("consumer") or {}
    background = server.background
    analytics = server.settings.analytics_dir
    return {
        "at": time.time(),
        "shard": server.settings.shard_name,
        "server_generation": stats["server_generation"],
        "uptime_secs": stats["uptime_secs"],
        "queues": stats["queues"],
        "users": stats["users"],
        "parked": stats["parked"],
        "events_held": stats["events_held"],
        "bytes_held": stats["bytes_held"],
        "in_flight": stats["in_flight"],
        "loop_lag_ms": stats["loop_lag"],
        "events_sent": server.metrics.events_sent,
        "polls_answered": sum(server.metrics.polls.values()),
        "notices_consumed": consumer.get("processed", 0),
        "dead_lettered": consumer.get("dead_lettered", 0),
        "consuming": bool(consumer.get("consuming", False)),
        "stream_position": server.eventlog.position,
        "background_updates": []
        if background is None
        else [s.to_dict() for s in background.status],
        "report": analytics is not None and (analytics / "report" / "report.html").is_file(),
        "notifications": notification_figures(stats.get("notifications")),
    }


def notification_figures(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Notifications panel (None: this shard enqueues none, being
    without a broker or with EVENTQ_NOTIFICATIONS=0): what this shard
    enqueued since it started, what waits in its memory for RabbitMQ, and
    the workers' figures as the shard last read them (every 15 s; each with
    its `read_at`, None until a first read succeeds): their totals and what
    waits for a batch in PostgreSQL, the queue's depth in RabbitMQ."""
    if stats is None:
        return None
    return {
        "enqueued": stats["enqueued"],
        "published": stats["published"],
        "unpublished": stats["pending"],
        "dropped": stats["dropped"],
        "publish_failures": stats["publish_failures"],
        "worker": stats.get("worker"),
        "queue": stats.get("queue"),
    }


class OperatorReportHandler(OperatorHandler):
    """The latest analytics report (`<EVENTQ_ANALYTICS_DIR>/report/`)."""

    async def get(self, name: str) -> None:
        if not name:
            self.redirect("/operator/report/report.html", status=303)
            return
        if not _REPORT_FILE.fullmatch(name):
            raise ApiError("No such report file", "NOT_FOUND", 404)
        await self._send("report", name, _REPORT_POLICY)

    async def _send(self, directory: str, name: str, policy: str) -> None:
        analytics = self.server.settings.analytics_dir
        suffix = Path(name).suffix
        if analytics is None or suffix not in _CONTENT_TYPES:
            raise ApiError("No such report file", "NOT_FOUND", 404)
        path = analytics / directory / name
        try:
            body = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            missing = (
                "No analytics report yet: `eventq analytics run` writes it"
                if directory == "report"
                else "No such report file (older reports are pruned)"
            )
            raise ApiError(missing, "NOT_FOUND", 404) from None
        self.send_file(body, _CONTENT_TYPES[suffix], page=True, policy=policy)


class OperatorReportsHandler(OperatorReportHandler):
    """The dated reports the analytics keep (`<EVENTQ_ANALYTICS_DIR>/reports/`):
    their index, and each one's files under its directory."""

    async def get(self, name: str | None) -> None:
        if not name:
            self.redirect("/operator/reports/index.html", status=303)
            return
        dated, _, file = name.rpartition("/")
        if not _REPORT_FILE.fullmatch(file) or (dated != "" and not _DATED_REPORT.fullmatch(dated)):
            raise ApiError("No such report file", "NOT_FOUND", 404)
        await self._send("reports", name, _REPORTS_POLICY)
