"""The long poll both paths run (server/handlers/longpoll_flow.py), seen
through the full handler's `ParkedRequest`: the same turns as the lean
path's (tests/server/test_poll_turns.py), and the same answers
(`answer_for`). Driven step by step on one event loop, with the real
registry and answer slices and test_poll_turns' stand-in for the server."""

from __future__ import annotations

import asyncio

import pytest

from server.errors import ApiError
from server.handlers.headers import DEFAULTS, shutting_down
from server.handlers.longpoll_flow import ParkedRequest, begin_poll
from tests.server.test_poll_turns import USER, _queue, _run, _Server, _turns


def _parked(server: _Server, queue_id: str) -> ParkedRequest:
    """A full-path poll of `queue_id` from -1, parked."""
    client = begin_poll(server, USER, queue_id, -1, "full")  # type: ignore[arg-type]
    waiter = ParkedRequest(server)  # type: ignore[arg-type]
    waiter.park(client)
    return waiter


def test_a_poll_with_events_waiting_resolves_in_its_turn_and_answers_without_its_queue_id():
    async def scenario() -> None:
        server = _Server()
        queue_id = _queue(server, waiting=1)
        waiter = _parked(server, queue_id)
        assert server.poll_paths == {"lean": 0, "full": 1}
        assert not waiter.outcome.done()
        assert len(server.heartbeats) == 0  # parked only until its turn
        server.deliver({"type": "test", "n": 2})  # before its turn: in the same answer
        await _turns()
        assert waiter.outcome.result() == "events"
        assert server.registry.parked == 0
        items, outcome, _, answer_queue_id, extra = waiter.answer_for("events")
        assert [i for i, _ in items] == [0, 1]
        assert (outcome, answer_queue_id, extra) == ("events", None, None)

    _run(scenario)


def test_a_poll_that_waited_answers_with_its_queue_id_and_a_displaced_one_says_so():
    async def scenario() -> None:
        server = _Server()
        queue_id = _queue(server)
        waiter = _parked(server, queue_id)
        assert len(server.heartbeats) == 1
        server.deliver({"type": "test"})
        await _turns()
        assert waiter.outcome.result() == "events"
        assert len(server.heartbeats) == 0
        _, outcome, waited, answer_queue_id, _ = waiter.answer_for("events")
        assert (outcome, answer_queue_id) == ("events", queue_id)
        assert waited > 0
        other = _queue(server)
        older = _parked(server, other)
        newer = _parked(server, other)
        await _turns()
        assert (older.outcome.result(), newer.outcome.done()) == ("displaced", False)
        items, outcome, _, answer_queue_id, extra = older.answer_for("displaced")
        assert (items, outcome, answer_queue_id, extra) == (
            [],
            "displaced",
            other,
            {"displaced": True},
        )

    _run(scenario)


def test_an_overflow_answers_bad_queue_id():
    async def scenario() -> None:
        server = _Server(max_events=2)
        queue_id = _queue(server, waiting=2)
        waiter = _parked(server, queue_id)
        server.deliver({"type": "test", "n": 3})  # over the bound: the queue ends
        await _turns()
        assert waiter.outcome.result() == "overflow"
        with pytest.raises(ApiError) as caught:
            waiter.answer_for("overflow")
        assert caught.value.code == "BAD_EVENT_QUEUE_ID"
        assert caught.value.data == {"queue_id": queue_id, "reason": "overflow"}

    _run(scenario)


def test_a_client_that_leaves_before_its_turn_is_unparked_and_keeps_its_events():
    async def scenario() -> None:
        server = _Server()
        queue_id = _queue(server, waiting=1)
        waiter = _parked(server, queue_id)
        waiter.disconnected()
        assert waiter.outcome.result() == "disconnected"
        assert server.registry.parked == 0
        await _turns()  # its turn does nothing
        client = server.registry.get(queue_id, USER.user_id)
        assert (client.waiter, len(client.event_queue.contents())) == (None, 1)

    _run(scenario)


def test_a_parked_poll_that_leaves_cancels_its_heartbeat():
    async def scenario() -> None:
        server = _Server()
        waiter = _parked(server, _queue(server))
        assert len(server.heartbeats) == 1
        waiter.disconnected()
        assert len(server.heartbeats) == 0
        await asyncio.sleep(0)
        assert server.registry.parked == 0

    _run(scenario)


def test_the_headers_every_answer_carries():
    assert DEFAULTS == (
        ("Content-Type", "application/json"),
        ("Vary", "Accept-Language, Cookie"),
        ("Cache-Control", "no-store"),
    )
    assert shutting_down().headers == {"Retry-After": "1", "Connection": "close"}
    refusal = shutting_down(close=False)
    assert (refusal.status_code, refusal.code, refusal.headers) == (
        503,
        "SERVER_SHUTTING_DOWN",
        {"Retry-After": "1"},
    )
