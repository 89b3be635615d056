"""The routes of the domain's endpoints, collected from each area's module."""

from __future__ import annotations

from typing import Any

from server.handlers import history, messages, streams, users

# (path pattern, handler class) pairs; each is served under /api/v1/ and /json/.
ROUTES: list[tuple[str, Any]] = [*history.ROUTES, *messages.ROUTES, *streams.ROUTES, *users.ROUTES]
