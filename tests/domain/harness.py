"""`verify_action` (docs/architecture.md, "Register"; Zulip's test of the same
name in zerver/tests/test_events.py), and the world it runs in.

For one action and one client configuration: fetch the state, run the action,
capture the events that reach the client's queue (through the real registry,
so per-client forms are what is checked), validate each against its strict
schema, apply them to the stale state, fetch again, and compare, printing a
readable diff on failure.

Every test that verifies actions declares the event kinds it covers with
`@covers(...)`; the kinds its events actually have must be exactly those, and
`test_event_coverage.py` fails if a kind of the catalogue has no test.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import jsonschema
import orjson
import psycopg

from apply_events.engine import apply_events, fetch_initial_state, post_process_state
from apply_events.state import State, StateContext, make_want
from generation import accounts
from generation.actions.base import ActionContext
from generation.events import CATALOGUE, CLIENT_RULES, EventKind, kind_of
from generation.notice import Notice
from generation.schema import schema_of
from queues.client import CAPABILITIES, QueueOptions
from queues.registry import QueueRegistry

Action = Callable[[ActionContext], Awaitable[Any]]

# Every capability a modern client declares (the defaults of Zulip's verify_action).
MODERN = frozenset(CAPABILITIES - {"user_list_incomplete", "simplified_presence_events"})

# kinds declared by every @covers test, filled at import
DECLARED: set[EventKind] = set()
_current: list[set[EventKind]] = []
_seen: list[set[EventKind]] = []


def covers(*kinds: EventKind) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the event kinds a test's verified actions emit."""
    declared = set(kinds)
    unknown = declared - set(CATALOGUE)
    assert not unknown, f"not in the event catalogue: {unknown}"
    DECLARED.update(declared)

    def decorate(test: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(test)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _current.append(declared)
            _seen.append(set())
            try:
                result = test(*args, **kwargs)
                missing = declared - _seen[-1]
                assert not missing, f"declared but never emitted by a verified action: {missing}"
                return result
            finally:
                _current.pop()
                _seen.pop()

        return wrapper

    return decorate


def encode(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


@functools.cache
def _validator(kind: EventKind) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema_of(CATALOGUE[kind]))


def check_schema(event: dict[str, Any]) -> EventKind:
    """Validate an event against its catalogue schema (strict: unknown keys
    fail); returns its kind."""
    kind = kind_of(event)
    assert kind in CATALOGUE, f"event kind {kind} is not in the catalogue: {event}"
    errors = sorted(_validator(kind).iter_errors(event), key=lambda e: list(e.path))
    assert not errors, (
        f"{kind} event does not match its schema:\n"
        + "\n".join(f"  at {list(e.path)}: {e.message}" for e in errors)
        + f"\nevent: {json.dumps(event, indent=1, default=str)}"
    )
    return kind


def diff(left: Any, right: Any, path: str = "state") -> list[str]:
    """Where two JSON-like values differ, as readable lines."""
    if isinstance(left, dict) and isinstance(right, dict):
        lines: list[str] = []
        for key in sorted(set(left) | set(right), key=str):
            if key not in right:
                lines.append(f"{path}[{key!r}] only in the applied state: {left[key]!r:.300}")
            elif key not in left:
                lines.append(f"{path}[{key!r}] only in the fresh fetch: {right[key]!r:.300}")
            else:
                lines.extend(diff(left[key], right[key], f"{path}[{key!r}]"))
        return lines
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        lines = []
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            lines.extend(diff(a, b, f"{path}[{index}]"))
        return lines
    if left != right:
        return [f"{path}: applied {left!r:.300} != fresh {right!r:.300}"]
    return []


@dataclasses.dataclass(frozen=True)
class Member:
    id: int
    email: str
    full_name: str
    role: str
    api_key: str


class Domain:
    """A realm of its own with people and streams, for one test.

    iago (administrator), hamlet, othello (members), polonius (guest);
    streams Denmark (public: iago, hamlet, othello), Verona (public: hamlet;
    a default stream), Scotland (private: iago, othello).
    """

    def __init__(self, database_url: str):
        self.database_url = database_url
        self.subdomain = f"d{uuid.uuid4().hex[:12]}"
        self.users: dict[str, Member] = {}
        # The same people as `accounts.CreatedUser`, for tests.support.Api.
        self.accounts: dict[str, accounts.CreatedUser] = {}
        self.streams: dict[str, int] = {}
        with psycopg.connect(database_url, autocommit=True) as conn:
            self.realm_id = accounts.create_realm(conn, self.subdomain, "Domain test realm")
            for name, full_name, role in (
                ("iago", "Iago", "administrator"),
                ("hamlet", "King Hamlet", "member"),
                ("othello", "Othello, the Moor of Venice", "member"),
                ("polonius", "Polonius", "guest"),
            ):
                created = accounts.create_user(
                    conn, self.subdomain, f"{name}@{self.subdomain}.example", full_name, role
                )
                self.users[name] = Member(
                    created.user_id, created.email, full_name, role, created.api_key
                )
                self.accounts[name] = created
            for stream, invite_only, members in (
                ("Denmark", False, ("iago", "hamlet", "othello")),
                ("Verona", False, ("hamlet",)),
                ("Scotland", True, ("iago", "othello")),
            ):
                row = conn.execute(
                    "INSERT INTO streams (realm_id, name, description, invite_only)"
                    " VALUES (%s, %s, %s, %s) RETURNING id",
                    (self.realm_id, stream, f"The {stream} stream", invite_only),
                ).fetchone()
                assert row is not None
                self.streams[stream] = row[0]
                for member in members:
                    conn.execute(
                        "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
                        (self.users[member].id, row[0]),
                    )
            conn.execute(
                "INSERT INTO default_streams (realm_id, stream_id) VALUES (%s, %s)",
                (self.realm_id, self.streams["Verona"]),
            )

    def id(self, name: str) -> int:
        return self.users[name].id

    # -- running actions ----------------------------------------------------

    def run(self, action: Action) -> Any:
        """Run an action for setup; its events go nowhere."""

        async def sink(notice: Notice) -> None:
            pass

        async def go() -> Any:
            async with await psycopg.AsyncConnection.connect(
                self.database_url, autocommit=True
            ) as conn:
                return await action(ActionContext(conn, sink))

        return asyncio.run(go())

    def fetch(self, user: str = "hamlet", **options: Any) -> State:
        """A fresh, post-processed initial state, as register returns it."""

        async def go() -> State:
            ctx, want = self._context(user, "q", **options)
            async with await psycopg.AsyncConnection.connect(
                self.database_url, autocommit=True
            ) as conn:
                state = await fetch_initial_state(conn, ctx, want)
            post_process_state(state, want, ctx)
            return state

        return asyncio.run(go())

    def _context(
        self,
        user: str,
        queue_id: str,
        *,
        fetch_event_types: Iterable[str] | None = None,
        apply_markdown: bool = True,
        client_gravatar: bool = True,
        slim_presence: bool = False,
        include_subscribers: bool = True,
        capabilities: frozenset[str] = MODERN,
        **_queue_options: Any,
    ) -> tuple[StateContext, Callable[[str], bool]]:
        ctx = StateContext(
            user_id=self.id(user),
            realm_id=self.realm_id,
            queue_id=queue_id,
            apply_markdown=apply_markdown,
            client_gravatar=client_gravatar,
            slim_presence=slim_presence,
            include_subscribers=include_subscribers,
            capabilities=capabilities,
            server_generation=1,
            longpoll_timeout_secs=90,
        )
        want = make_want(frozenset(fetch_event_types) if fetch_event_types is not None else None)
        return ctx, want

    def verify(
        self,
        action: Action,
        *,
        user: str = "hamlet",
        num_events: int = 1,
        state_change_expected: bool = True,
        event_types: Iterable[str] | None = None,
        narrow: tuple[tuple[str, str], ...] = (),
        all_public_streams: bool = False,
        **options: Any,
    ) -> list[dict[str, Any]]:
        """verify_action for `user` with the given client options (those of
        `_context`, plus the queue's `event_types`, `narrow` and
        `all_public_streams`). Returns the events the client received."""
        return asyncio.run(
            self._verify(
                action,
                user,
                num_events,
                state_change_expected,
                event_types,
                narrow,
                all_public_streams,
                options,
            )
        )

    async def _verify(
        self,
        action: Action,
        user: str,
        num_events: int,
        state_change_expected: bool,
        event_types: Iterable[str] | None,
        narrow: tuple[tuple[str, str], ...],
        all_public_streams: bool,
        options: dict[str, Any],
    ) -> list[dict[str, Any]]:
        registry = QueueRegistry(encode, rules=CLIENT_RULES)
        ctx, want = self._context(user, "pending", **options)
        queue_options = QueueOptions(
            event_types=frozenset(event_types) if event_types is not None else None,
            narrow=narrow,
            all_public_streams=all_public_streams,
            apply_markdown=ctx.apply_markdown,
            client_gravatar=ctx.client_gravatar,
            slim_presence=ctx.slim_presence,
            capabilities=ctx.capabilities,
        )
        client = registry.allocate(ctx.user_id, self.realm_id, queue_options, 0.0)
        ctx = dataclasses.replace(ctx, queue_id=client.queue_id)

        async def sink(notice: Notice) -> None:
            registry.deliver(notice.event, notice.users, notice.realm_id, 0.0)

        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            hybrid = await fetch_initial_state(conn, ctx, want)
            await action(ActionContext(conn, sink))
            fresh = await fetch_initial_state(conn, ctx, want)

        events = [payload.client_event(i) for i, payload in client.event_queue.contents()]
        assert len(events) == num_events, (
            f"expected {num_events} events, got {len(events)}:\n"
            + json.dumps(events, indent=1, default=str)
        )
        for event in events:
            kind = check_schema(event)
            if _current:
                assert kind in _current[-1], f"{kind} emitted but not declared in @covers"
                _seen[-1].add(kind)

        before = copy.deepcopy(hybrid)
        post_process_state(before, want, ctx)
        apply_events(hybrid, events, want, ctx)
        post_process_state(hybrid, want, ctx)
        post_process_state(fresh, want, ctx)
        if state_change_expected:
            assert before != hybrid, "Test does not exercise enough code: the state did not change"
        else:
            assert not diff(before, hybrid), "\n".join(diff(before, hybrid))
        differences = diff(hybrid, fresh)
        assert not differences, (
            "stale state + events != fresh fetch:\n"
            + "\n".join(differences)
            + "\nevents: "
            + json.dumps(events, indent=1, default=str)
        )
        return events
