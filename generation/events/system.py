"""Events the server itself produces: heartbeats and restarts."""

from __future__ import annotations

from typing import Literal, TypedDict

from generation.events.declaration import EventType, Transient


class HeartbeatEvent(TypedDict):
    """Sent to a parked request that waited 45-55 s without an event."""

    id: int
    type: Literal["heartbeat"]


class RestartEvent(TypedDict):
    """Sent to every queue restored after a server restart."""

    id: int
    type: Literal["restart"]
    zulip_version: str
    zulip_merge_base: str
    zulip_feature_level: int
    server_generation: int


TYPES: tuple[EventType, ...] = (
    EventType(
        "heartbeat",
        {None: HeartbeatEvent},
        state=Transient("the server's keep-alive for a parked request"),
        capability=None,
    ),
    EventType(
        "restart",
        {None: RestartEvent},
        state=Transient("says the server restarted; the client's state is still current"),
        capability=None,
    ),
)
