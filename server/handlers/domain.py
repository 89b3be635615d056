"""The routes of the domain's endpoints, collected from each area's module."""

from __future__ import annotations

from typing import Any

from server.handlers import (
    bots,
    groups,
    history,
    messages,
    personal,
    profile_fields,
    realm,
    realm_config,
    scheduled,
    streams,
    submessages,
    users,
)

# (path pattern, handler class) pairs; each is served under /api/v1/ and /json/.
ROUTES: list[tuple[str, Any]] = [
    *bots.ROUTES,
    *groups.ROUTES,
    *history.ROUTES,
    *messages.ROUTES,
    *personal.ROUTES,
    *profile_fields.ROUTES,
    *realm.ROUTES,
    *realm_config.ROUTES,
    *scheduled.ROUTES,
    *streams.ROUTES,
    *submessages.ROUTES,
    *users.ROUTES,
]
