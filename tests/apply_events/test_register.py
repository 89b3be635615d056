"""The register algorithm (Zulip's order, and its replay of events that reached
the queue meanwhile), run against a real
pure QueueRegistry and fake fetch callables that can inject events mid-fetch."""

from __future__ import annotations

import asyncio

import pytest

from apply_events.register import register
from apply_events.state import StateContext
from tests.queues.helpers import make_registry, options

USER = 1
REALM = 1
FETCHED = {"realm_name": "Old name", "realm_description": "Old description"}


def _rename(value):
    return {"type": "realm", "op": "update", "property": "name", "value": value}


class World:
    """A registry plus the injected callables of `register`, recording calls."""

    def __init__(self, event_types=None):
        self.registry = make_registry()
        self.event_types = event_types
        self.calls = []
        self.dropped = []
        self.contexts = []

    def allocate_queue(self):
        client = self.registry.allocate(USER, REALM, options(event_types=self.event_types), 0.0)
        self.calls.append(("allocate", client.queue_id))
        return client.queue_id

    def make_context(self, queue_id):
        ctx = StateContext(user_id=USER, realm_id=REALM, queue_id=queue_id)
        self.contexts.append(ctx)
        return ctx

    def queue_events(self, queue_id):
        self.calls.append(("events", queue_id))
        queue = self.registry.get(queue_id, USER).event_queue
        return [payload.client_event(event_id) for event_id, payload in queue.contents()]

    def drop_queue(self, queue_id):
        self.dropped.append(queue_id)
        self.registry.delete(queue_id, USER, 1.0)

    def deliver(self, event):
        self.registry.deliver(event, [USER], REALM, 0.5)

    def run(self, fetch_state, fetch_event_types=None):
        return asyncio.run(
            register(
                fetch_event_types=fetch_event_types,
                allocate_queue=self.allocate_queue,
                make_context=self.make_context,
                fetch_state=fetch_state,
                queue_events=self.queue_events,
                drop_queue=self.drop_queue,
            )
        )


def test_register_without_events_returns_minus_one():
    world = World()
    seen = []

    async def fetch(ctx, want):
        seen.append((ctx.queue_id, want("realm")))
        world.calls.append(("fetch", ctx.queue_id))
        return dict(FETCHED)

    state = world.run(fetch)

    assert state == {**FETCHED, "queue_id": "q0", "last_event_id": -1}
    assert world.calls == [("allocate", "q0"), ("fetch", "q0"), ("events", "q0")]
    assert seen == [("q0", True)]
    assert world.contexts[0].queue_id == "q0"
    assert world.registry.get("q0", USER).event_queue.empty()


def test_event_arriving_during_fetch_is_applied_and_its_id_returned():
    # Scenario 54: the fetch reads stale data, then an event lands in the queue.
    world = World()

    async def fetch(ctx, want):
        state = dict(FETCHED)
        world.deliver(_rename("New name"))
        await asyncio.sleep(0)
        return state

    state = world.run(fetch)

    assert state["realm_name"] == "New name"
    assert state["last_event_id"] == 0
    assert state["queue_id"] == "q0"
    # The replayed event stays queued until the client's first GET acknowledges it.
    queue = world.registry.get("q0", USER).event_queue
    assert [event_id for event_id, _ in queue.contents()] == [0]
    queue.prune(state["last_event_id"])
    assert queue.empty()


def test_event_already_reflected_in_the_fetch_gives_the_same_state():
    world = World()

    async def fetch(ctx, want):
        world.deliver(_rename("New name"))
        return {**FETCHED, "realm_name": "New name"}  # the fetch already saw it

    state = world.run(fetch)

    assert state == {
        **FETCHED,
        "realm_name": "New name",
        "queue_id": "q0",
        "last_event_id": 0,
    }


def test_events_not_in_fetch_event_types_are_skipped_but_counted_in_last_event_id():
    # Scenario 55: the state ignores unwanted events, last_event_id does not.
    world = World()

    async def fetch(ctx, want):
        assert not want("realm")
        world.deliver(_rename("New name"))
        world.deliver({"type": "message", "message": {"id": 1, "type": "private"}})
        world.deliver({"type": "custom"})
        return {"max_message_id": 0}

    state = world.run(fetch, fetch_event_types=frozenset({"message"}))

    assert state == {"max_message_id": 0, "queue_id": "q0", "last_event_id": 2}


def test_last_event_id_is_the_newest_id_of_several_events():
    world = World()

    async def fetch(ctx, want):
        for name in ("A", "B", "C"):
            world.deliver(_rename(name))
        return dict(FETCHED)

    state = world.run(fetch)

    assert (state["realm_name"], state["last_event_id"]) == ("C", 2)


def test_queue_event_types_decide_what_is_replayed():
    world = World(event_types=["message"])

    async def fetch(ctx, want):
        world.deliver(_rename("New name"))
        return dict(FETCHED)

    state = world.run(fetch)

    assert state == {**FETCHED, "queue_id": "q0", "last_event_id": -1}


def test_fetch_failure_drops_the_queue_and_reraises():
    world = World()
    failure = RuntimeError("database went away")

    async def fetch(ctx, want):
        world.deliver(_rename("New name"))
        raise failure

    with pytest.raises(RuntimeError) as info:
        world.run(fetch)

    assert info.value is failure
    assert world.dropped == ["q0"]
    assert len(world.registry) == 0
    assert ("events", "q0") not in world.calls


def test_cancelled_fetch_drops_the_queue():
    world = World()

    async def fetch(ctx, want):
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        world.run(fetch)

    assert world.dropped == ["q0"]
    assert len(world.registry) == 0
