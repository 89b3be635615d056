"""A state section: one part of register's initial state, declared by what
fetches it and how events change it. The register algorithm only iterates
sections (`apply_events.sections.SECTIONS`): adding state means adding a
section, never touching the algorithm."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from apply_events.state import Event, State, StateContext, Want

# Called with a psycopg AsyncConnection (typed loosely so that this module,
# like the appliers, does not import psycopg).
Fetcher = Callable[[Any, StateContext], Awaitable[State]]
Applier = Callable[[State, Event, StateContext], None]
PostProcess = Callable[[State, StateContext], None]


@dataclasses.dataclass(frozen=True)
class Section:
    """`name` is the `fetch_event_types` entry that selects the section; it
    is fetched only if `name` and every name in `requires` are wanted."""

    name: str
    fetch: Fetcher
    # event type -> how it changes this section's keys; each such type names
    # this section in its declaration's `state` (generation.events; checked
    # by tests/test_event_types.py)
    appliers: Mapping[str, Applier] = dataclasses.field(default_factory=dict)
    # Turns intermediate structures (raw_*) into the keys clients read.
    post_process: PostProcess | None = None
    requires: tuple[str, ...] = ()
    # A TypedDict (total=False) of the keys this section puts in register's
    # response, after post-processing: the OpenAPI document's source.
    state: type | None = None

    def wanted(self, want: Want) -> bool:
        return want(self.name) and all(want(name) for name in self.requires)
