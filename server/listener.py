"""The server's listening sockets and its HTTP servers, from bind to close.

`Listener.bind` comes first in a start, before any saved state is touched, so
that a taken port fails the start cleanly; `serve` then accepts connections
once the queues are back. eventq's own connections (server/http/http1.py)
serve the long poll and hand the rest to Tornado's server
(server/http/httpserver.py); with `EVENTQ_HTTP_SERVER=tornado`, Tornado's
serves everything.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any

import tornado.netutil

from server.http.http1 import FastHTTPServer
from server.http.httpserver import EventHTTPServer, Refusals

if TYPE_CHECKING:
    from server.config import Settings
    from server.routes import Dispatcher

# Connections waiting this long for a request head are closed.
IDLE_CONNECTION_SECS = 3600.0
LISTEN_BACKLOG = 4096


class StartupError(RuntimeError):
    """Raised by `EventServer.start` when the server cannot serve at all; the
    message says what to do."""


class Listener:
    """The sockets and HTTP servers of one server process (on the IO loop)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        # Requests whose head cannot be served (too large, not HTTP) are
        # answered, counted and closed here (server/http/httpserver.py).
        self.refusals = Refusals(settings.max_header_bytes)
        self.port: int | None = None
        self._sockets: list[socket.socket] = []
        self._http: EventHTTPServer | None = None
        self._fast: FastHTTPServer | None = None
        # Requests being served (including parked ones); shutdown waits for 0.
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def request_started(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def request_finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def requests_done(self) -> None:
        """Return once no request is being served."""
        await self._idle.wait()

    def bind(self, port: int | None, host: str | None) -> int:
        """Bind the listening socket (connections wait in the backlog until
        `serve`); `port` 0 picks a free port. Returns the port bound."""
        host = host or self.settings.host
        port = self.settings.port if port is None else port
        try:
            self._sockets = tornado.netutil.bind_sockets(
                port,
                host,
                family=socket.AF_INET,
                backlog=LISTEN_BACKLOG,
            )
        except OSError as exc:
            raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.port = self._sockets[0].getsockname()[1]
        return self.port

    def unbind(self) -> None:
        """Close the sockets of a start that failed before `serve`."""
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    def make_servers(self, dispatcher: Dispatcher) -> None:
        """Build the HTTP servers for `dispatcher`'s routes."""
        self._http = EventHTTPServer(
            dispatcher,
            # The handlers enforce their own (smaller) limits with a JSON 413;
            # this is the hard cap for a body without a Content-Length.
            max_body_size=self.settings.max_internal_request_bytes,
            refusals=self.refusals,
            idle_connection_timeout=IDLE_CONNECTION_SECS,
        )
        if self.settings.http_server == "eventq":
            # eventq's connections; Tornado's server gets those they hand over.
            self._fast = FastHTTPServer(
                dispatcher.application,
                dispatcher.lean,
                self._http,
                max_body_size=self.settings.max_internal_request_bytes,
                idle_timeout=IDLE_CONNECTION_SECS,
                backlog=dispatcher.server.answer_slices,
            )

    async def serve(self) -> None:
        """Accept connections on the bound sockets."""
        assert self._http is not None, "make_servers first"
        if self._fast is not None:
            await self._fast.add_sockets(self._sockets, LISTEN_BACKLOG)
        else:
            self._http.add_sockets(self._sockets)

    def stop_accepting(self) -> None:
        """No new connections; those open stay until `close`."""
        if self._fast is not None:
            self._fast.stop()
        if self._http is not None:
            self._http.stop()

    async def close(self) -> None:
        """Close every connection, refused ones included."""
        if self._fast is not None:
            await self._fast.close_all_connections()
        if self._http is not None:
            await self._http.close_all_connections()
        await self.refusals.close()

    def stats(self) -> dict[str, Any]:
        """Which HTTP server serves connections; for eventq's, how many are
        open and how many it handed to Tornado's (server/http/http1.py)."""
        fast = self._fast
        if fast is None:
            return {"server": "tornado"}
        return {
            "server": "eventq",
            "connections": len(fast.connections),
            "handed_off": fast.handed_off,
            "write_buffer_bytes": fast.write_buffered(),
        }
