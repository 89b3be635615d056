"""What register fetches and replays, shared by fetch, apply and register."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

State = dict[str, Any]
Event = dict[str, Any]

# Whether a state section / event type was asked for (`fetch_event_types`).
Want = Callable[[str], bool]


def make_want(fetch_event_types: frozenset[str] | None) -> Want:
    """None means every section and every event type."""
    if fetch_event_types is None:
        return lambda _name: True
    return fetch_event_types.__contains__


@dataclasses.dataclass(frozen=True, slots=True)
class StateContext:
    """Who registers and with which options; read by fetch and apply."""

    user_id: int
    realm_id: int
    queue_id: str
    apply_markdown: bool = False
    client_gravatar: bool = False
    slim_presence: bool = False
    include_subscribers: bool = False
    capabilities: frozenset[str] = frozenset()
    # Server facts reported in the `realm` section.
    server_generation: int = 0
    longpoll_timeout_secs: int = 90


def event_int(value: object) -> int | None:
    """An integer field of an event (an id, a timestamp), or None for
    anything else: JSON's booleans are not integers here."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
