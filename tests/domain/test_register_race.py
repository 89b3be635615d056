"""Register under concurrent changes: random action sequences interleaved at
every step of the register algorithm (after the queue is created, between
each section's fetch, before the queue's events are taken, and after register
returns). After each register, its state plus every event its queue received
up to a quiet point must equal a fresh fetch.

Events reach the registry as the server's would from several writers: late
(held back a random while, so one committed before the state's snapshot may
arrive after the queue was made, or after register returned), reordered
(released in a random order, put back in position order by a PositionReader),
and duplicated (a copy redelivered). Register is exact by position: an event
whose change the snapshot has is neither replayed nor delivered, and no
event is applied twice, which the test checks by position, not by the
appliers being idempotent.

EVENTQ_RACE_ITERATIONS (default 1000) and EVENTQ_RACE_SEED choose the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from apply_events.engine import (
    apply_events,
    fetch_at_snapshot,
    fetch_initial_state,
    post_process_state,
)
from apply_events.register import register
from apply_events.state import StateContext, make_want
from generation.accounts import ROLE_GUEST
from generation.actions.base import ActionContext
from generation.events import CLIENT_RULES
from generation.events.users import access_change
from generation.notice import Notice
from queues.client import QueueOptions
from queues.positions import PositionReader
from queues.registry import QueueRegistry
from tests.domain.harness import MODERN, Domain, diff, encode
from tests.domain.race_actions import ACTIONS

ITERATIONS = int(os.environ.get("EVENTQ_RACE_ITERATIONS", "1000"))
SEED = int(os.environ.get("EVENTQ_RACE_SEED", "20261122"))

RaceAction = Callable[[ActionContext, Domain, random.Random], Awaitable[Any]]

# fetch_event_types a client may ask for (None: everything).
FETCH_CHOICES: list[frozenset[str] | None] = [
    None,
    None,
    frozenset({"realm"}),
    frozenset(
        {
            "message",
            "update_message_flags",
            "starred_messages",
            "update_message",
            "delete_message",
            "subscription",
            "stream",
        }
    ),
    frozenset({"message", "delete_message"}),
    frozenset({"starred_messages", "update_message_flags", "delete_message"}),
    frozenset({"stream", "subscription", "default_streams"}),
    frozenset({"stream"}),
    # The people with their profile data, and the list of fields whose
    # event drops a deleted field's values (Zulip's clients ask for both;
    # docs/behaviour.md says what one asking only for the people keeps).
    frozenset({"realm_user", "presence", "custom_profile_fields"}),
    frozenset({"user_settings", "default_streams", "realm"}),
]


async def _run_actions(ctx: ActionContext, domain: Domain, rng: random.Random, count: int) -> None:
    for _ in range(count):
        action = rng.choice(ACTIONS)
        await action(ctx, domain, rng)


async def _one_register(
    domain: Domain,
    rng: random.Random,
    actions: ActionContext,
    fetch_conn: Any,
    registry: QueueRegistry,
    wire: Wire,
) -> list[str]:
    """One register with interleaved actions; the differences found (none
    when correct). `actions` delivers its events into `registry`."""
    cur = await fetch_conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND is_active ORDER BY id", (domain.realm_id,)
    )
    user_id = rng.choice([row[0] for row in await cur.fetchall()])  # only active users register
    fetch_event_types = rng.choice(FETCH_CHOICES)
    want = make_want(fetch_event_types)
    options = QueueOptions(
        apply_markdown=rng.random() < 0.5,
        client_gravatar=rng.random() < 0.5,
        slim_presence=rng.random() < 0.5,
        capabilities=MODERN if rng.random() < 0.7 else frozenset(),
    )
    base = StateContext(
        user_id=user_id,
        realm_id=domain.realm_id,
        queue_id="",
        apply_markdown=options.apply_markdown,
        client_gravatar=options.client_gravatar,
        slim_presence=options.slim_presence,
        include_subscribers=rng.random() < 0.5,
        capabilities=options.capabilities,
        server_generation=1,
        longpoll_timeout_secs=90,
    )
    client_box: list[Any] = []

    since: list[int] = []
    covered: list[frozenset[int]] = []
    in_snapshot: list[frozenset[int]] = []

    def allocate() -> str:
        since.append(wire.reader.current)
        client = registry.allocate(base.user_id, domain.realm_id, options, 0.0)
        client_box.append(client)
        return client.queue_id

    async def between(_section: str) -> None:
        await _run_actions(actions, domain, rng, rng.randint(0, 2))
        wire.release_some()

    async def fetch(ctx: StateContext, want_: Callable[[str], bool]) -> dict[str, Any]:
        await between("before")
        # What the snapshot must have, known independently of the log: every
        # event committed by now (actions run only between the test's steps).
        in_snapshot.append(frozenset(p for p in wire.committed if p > since[0]))
        state, seen = await fetch_at_snapshot(
            fetch_conn, ctx, want_, since[0], wire.reader.late(), between=between
        )
        covered.append(seen)
        await between("after")
        return state

    replay: list[Any] = []

    def queue_events(queue_id: str) -> list[dict[str, Any]]:
        client_box[0].covered = covered[0]
        replay.extend(
            (i, p) for i, p in client_box[0].event_queue.contents() if p.origin not in covered[0]
        )
        return [p.client_event(i) for i, p in replay]

    state = await register(
        fetch_event_types=fetch_event_types,
        allocate_queue=allocate,
        make_context=lambda queue_id: dataclasses.replace(base, queue_id=queue_id),
        fetch_state=fetch,
        queue_events=queue_events,
        drop_queue=lambda queue_id: None,
        post_process=False,
        newest_id=lambda queue_id: client_box[0].event_queue.last_id(),
    )
    ctx = dataclasses.replace(base, queue_id=client_box[0].queue_id)
    # More changes after register, then a quiet point: the client's first
    # polls acknowledge the replayed events and get the rest.
    await _run_actions(actions, domain, rng, rng.randint(0, 3))
    wire.release_all()
    queue = client_box[0].event_queue
    queue.prune(state["last_event_id"])
    after = queue.contents()
    later = [p.client_event(i) for i, p in after]
    # Exact by position: nothing the snapshot has, nothing twice. (One
    # notice may be several events: a client without bulk_message_deletion
    # gets one per deleted message; the same event twice is what counts.)
    applied = [
        (p.origin, encode({k: v for k, v in p.client_event(i).items() if k != "id"}))
        for i, p in [*replay, *after]
    ]
    twice = sorted({pos for pos, body in applied if applied.count((pos, body)) > 1})
    again = sorted({pos for pos, _ in applied} & in_snapshot[0])
    if twice or again:
        return [f"applied twice: {twice}; applied though in the snapshot: {again}"]
    apply_events(state, later, want, ctx)
    post_process_state(state, want, ctx)
    fresh = await fetch_initial_state(fetch_conn, ctx, want)
    post_process_state(fresh, want, ctx)
    for key in ("queue_id", "last_event_id"):
        state.pop(key)
    if client_box[0].queue_id not in {c.queue_id for c in registry}:
        return []  # its user was deactivated: the queue ended, the client is refused
    differences = diff(state, fresh)
    if differences:
        replayed = [p.client_event(i) for i, p in replay]
        differences.insert(0, f"user {user_id}, fetch_event_types={fetch_event_types}")
        differences.append(f"replayed by register: {replayed}")
        differences.append(f"after register: {later}")
    return differences


class Wire:
    """Between the writers and the registry: holds notices back, releases them
    in random order and sometimes twice; a PositionReader puts them in order."""

    def __init__(self, registry: QueueRegistry, rng: random.Random, start: int):
        self.registry = registry
        self.rng = rng
        self.reader: PositionReader[Notice] = PositionReader(start)
        self.pending: list[Notice] = []
        self.committed: list[int] = []

    async def sink(self, notice: Notice) -> None:
        assert notice.position is not None, "every action's event is logged"
        self.committed.append(notice.position)
        self.pending.append(notice)
        if self.rng.random() < 0.2:
            self.pending.append(notice)  # redelivered

    def release_some(self) -> None:
        self.rng.shuffle(self.pending)
        count = self.rng.randint(0, len(self.pending))
        released, self.pending = self.pending[:count], self.pending[count:]
        for notice in released:
            self._offer(notice)

    def release_all(self) -> None:
        self.rng.shuffle(self.pending)
        released, self.pending = self.pending, []
        for notice in released:
            self._offer(notice)
        assert not self.reader.held, self.reader

    def _offer(self, notice: Notice) -> None:
        assert notice.position is not None
        for position, ready in self.reader.offer(notice.position, notice, 0.0):
            # As the server does (EventServer._access_changed): a deactivated
            # user's queues end, and a new guest's all_public_streams ones.
            self.registry.deliver(
                ready.event, ready.users, ready.realm_id, 0.0, origin=position, position=position
            )
            change = access_change(ready.event)
            if change is not None and change.deactivated:
                self.registry.end_user(change.user_id, "deactivated", 0.0)
            elif change is not None and change.role == ROLE_GUEST:
                self.registry.end_user(change.user_id, "role_changed", 0.0, all_public_only=True)


def test_register_state_plus_events_equals_a_fresh_fetch(domain):
    rng = random.Random(SEED)

    async def go() -> None:
        registry = QueueRegistry(encode, rules=CLIENT_RULES)
        async with (
            await psycopg.AsyncConnection.connect(domain.database_url, autocommit=True) as conn,
            await psycopg.AsyncConnection.connect(domain.database_url, autocommit=True) as fetch,
        ):
            # Positions taken before (holes included) are behind the wire.
            cur = await conn.execute(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM event_log_position"
            )
            row = await cur.fetchone()
            assert row is not None
            wire = Wire(registry, rng, int(row[0]))
            actions = ActionContext(conn, wire.sink)
            for iteration in range(ITERATIONS):
                differences = await _one_register(domain, rng, actions, fetch, registry, wire)
                assert not differences, (
                    f"iteration {iteration} (EVENTQ_RACE_SEED={SEED}):\n"
                    + "\n".join(differences[:30])
                )
                # Keep the registry small: the queues of past iterations go.
                for client in list(registry):
                    registry.end(client, "deleted", 0.0)

    asyncio.run(go())
