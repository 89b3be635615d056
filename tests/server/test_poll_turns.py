"""A long poll that finds events waiting (server/handlers/poll.py) is answered
in its turn among the woken requests (server/delivery/longpoll.py's AnswerSlices), not
at once: what arrives before its turn goes out in the same answer, a newer
poll or the queue's end still reaches it, and a client that leaves gets
nothing. Driven step by step on one event loop, with the real registry and
answer slices and a stand-in for the rest of the server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
import tornado.httputil

from queues.client import ClientDescriptor
from queues.event_queue import Item
from queues.registry import QueueRegistry
from server.delivery.longpoll import AnswerSlices, Heartbeats
from server.handlers.poll import LeanPoll, note_end
from server.http.auth import AuthUser
from tests.queues.helpers import make_registry, options

USER = AuthUser(user_id=7, realm_id=1, email="u@example.test", full_name="U", role=400)


class _Stream:
    """What the long poll reads of the event log's reader."""

    position: int = 0

    @property
    def handed(self) -> int:
        return self.position


class _Server:
    """What LeanPoll uses of the server (server.interface.ServerApi)."""

    rate_limiter = None

    def __init__(self, **limits: Any) -> None:
        self.registry: QueueRegistry = make_registry(**limits)
        self.answer_slices = AnswerSlices()
        self.heartbeats = Heartbeats(lambda client: None, 45.0, 10.0)
        self.eventlog = _Stream()
        self.poll_paths = {"lean": 0, "full": 0}
        self.now = itertools.count(100.0)
        # (outcome, events answered, waited seconds) of every answered poll.
        self.responses: list[tuple[str, int, float]] = []
        self.failures: list[str] = []

    def clock(self) -> float:
        return float(next(self.now))

    def request_started(self) -> None:
        pass

    def request_finished(self) -> None:
        pass

    def observe_response(
        self,
        client: ClientDescriptor,
        items: list[Item],
        response_bytes: int,
        outcome: str,
        waited_secs: float,
    ) -> None:
        self.responses.append((outcome, len(items), waited_secs))

    def observe_poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str
    ) -> None:
        self.failures.append(code)

    def deliver(self, event: dict[str, Any]) -> None:
        self.registry.deliver(event, [USER.user_id], USER.realm_id, self.clock())


class _Connection:
    """A connection as Tornado's HTTP1Connection is to a delegate."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.close_callback: Callable[[], None] | None = None

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self.close_callback = callback

    def write_headers(
        self,
        start_line: tornado.httputil.ResponseStartLine,
        headers: tornado.httputil.HTTPHeaders,
        chunk: bytes,
    ) -> None:
        self.answers.append((start_line.code, orjson.loads(chunk)))

    def finish(self) -> None:
        pass


def _poll(server: _Server, queue_id: str, last_event_id: int) -> tuple[LeanPoll, _Connection]:
    conn = _Connection()
    query = {"queue_id": [queue_id.encode()], "last_event_id": [str(last_event_id).encode()]}
    poll = LeanPoll(server, conn, "/api/v1/events", query, USER, True)  # type: ignore[arg-type]
    poll.finish()
    return poll, conn


def _ready_poll(waiting: int = 1, **limits: Any) -> tuple[_Server, str, _Connection]:
    """A server whose new queue holds `waiting` events, polled from -1."""
    server = _Server(**limits)
    queue_id = _queue(server, waiting)
    _, conn = _poll(server, queue_id, -1)
    return server, queue_id, conn


def _run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


async def _turns() -> None:
    """Every answer slice scheduled so far has run."""
    for _ in range(3):
        await asyncio.sleep(0)


def _queue(server: _Server, waiting: int = 0) -> str:
    """A new queue of USER's, holding `waiting` events."""
    client = server.registry.allocate(USER.user_id, USER.realm_id, options(), server.clock())
    for n in range(waiting):
        server.deliver({"type": "test", "n": n + 1})
    return client.queue_id


def test_a_poll_with_events_waiting_is_answered_in_its_turn_then_its_queue_is_idle():
    async def scenario() -> None:
        server, queue_id, conn = _ready_poll(1)
        assert conn.answers == []
        assert (server.registry.parked, len(server.answer_slices)) == (1, 1)
        assert len(server.heartbeats) == 0  # parked only until its turn
        await _turns()
        assert conn.answers == [
            (200, {"result": "success", "msg": "", "events": [{"id": 0, "type": "test", "n": 1}],
                   "stream_position": 0})
        ]  # fmt: skip
        assert server.responses[0][:2] == ("events", 1)
        assert server.registry.parked == 0
        # Idle again: collected once its lifespan (600 s) has passed.
        expired = server.registry.collect_expired(server.clock() + 601)
        assert [client.queue_id for client in expired] == [queue_id]

    _run(scenario)


def test_events_that_arrive_before_its_turn_go_out_in_the_same_answer():
    async def scenario() -> None:
        server, queue_id, conn = _ready_poll(1)
        assert conn.answers == []  # not at once: in its turn
        server.deliver({"type": "test", "n": 2})
        # The wake-up takes no second turn: the poll keeps its place.
        assert (server.registry.parked, len(server.answer_slices)) == (0, 1)
        await _turns()
        # As a poll answered at once is: no queue id in the answer.
        assert conn.answers == [
            (200, {"result": "success", "msg": "", "events": [
                {"id": 0, "type": "test", "n": 1}, {"id": 1, "type": "test", "n": 2},
            ], "stream_position": 0})
        ]  # fmt: skip
        assert server.responses[0][:2] == ("events", 2)
        assert server.registry.parked == 0
        # The queue is idle again (not parked) until the next poll.
        assert server.registry.get(queue_id, USER.user_id).waiter is None

    _run(scenario)


def test_a_poll_with_an_empty_queue_parks_until_an_event():
    async def scenario() -> None:
        server = _Server()
        queue_id = _queue(server)
        _, conn = _poll(server, queue_id, -1)
        await _turns()
        assert conn.answers == []
        assert server.registry.parked == 1
        server.deliver({"type": "test"})
        await _turns()
        [(status, body)] = conn.answers
        assert (status, body["events"], body["queue_id"]) == (
            200,
            [{"id": 0, "type": "test"}],
            queue_id,
        )

    _run(scenario)


def test_a_newer_poll_before_its_turn_displaces_it():
    async def scenario() -> None:
        server = _Server()
        queue_id = _queue(server, waiting=1)
        _, first = _poll(server, queue_id, -1)
        _, second = _poll(server, queue_id, -1)
        await _turns()
        assert first.answers == [
            (200, {"result": "success", "msg": "", "events": [], "queue_id": queue_id,
                   "displaced": True})
        ]  # fmt: skip
        assert [body["events"] for _, body in second.answers] == [
            [{"id": 0, "type": "test", "n": 1}]
        ]
        assert [outcome for outcome, _, _ in server.responses] == ["displaced", "events"]

    _run(scenario)


def test_a_queue_deleted_before_its_turn_answers_with_what_it_held():
    async def scenario() -> None:
        server, queue_id, conn = _ready_poll(1)
        server.registry.delete(queue_id, USER.user_id, server.clock())
        await _turns()
        [(status, body)] = conn.answers
        assert status == 200
        assert body["events"] == [{"id": 0, "type": "test", "n": 1}]
        assert [outcome for outcome, _, _ in server.responses] == ["deleted"]

    _run(scenario)


def test_a_client_that_leaves_before_its_turn_gets_nothing_and_its_events_stay():
    async def scenario() -> None:
        server, queue_id, conn = _ready_poll(1)
        assert conn.close_callback is not None
        conn.close_callback()
        await _turns()
        assert conn.answers == []
        assert server.registry.parked == 0
        client = server.registry.get(queue_id, USER.user_id)
        assert len(client.event_queue.contents()) == 1

    _run(scenario)


def test_an_overflow_before_its_turn_answers_bad_queue_id():
    async def scenario() -> None:
        server, _, conn = _ready_poll(2, max_events=2)
        server.deliver({"type": "test", "n": 3})  # over the bound: the queue ends
        await _turns()
        [(status, body)] = conn.answers
        assert (status, body["code"]) == (400, "BAD_EVENT_QUEUE_ID")
        assert server.failures == ["BAD_EVENT_QUEUE_ID"]

    _run(scenario)


def test_a_heartbeat_wake_up_before_its_turn_answers_its_events():
    """As at shutdown, when every parked request is woken for a heartbeat."""

    async def scenario() -> None:
        server, queue_id, conn = _ready_poll(1)
        client = server.registry.get(queue_id, USER.user_id)
        server.registry.wake_for_heartbeat(client, server.clock())
        await _turns()
        assert [body for _, body in conn.answers] == [
            {"result": "success", "msg": "", "events": [{"id": 0, "type": "test", "n": 1}],
             "stream_position": 0}
        ]  # fmt: skip

    _run(scenario)


def test_a_queue_ended_under_a_parked_poll_answers_the_position_it_ended_at():
    """Events logged after the queue ended never reach it: its last answer
    must not claim them (a client resuming from that position would skip
    them)."""

    async def scenario() -> None:
        server = _Server()
        server.eventlog.position = 5
        server.registry.end_hooks.append(lambda client, reason, last: note_end(server, client))  # type: ignore[arg-type]
        queue_id = _queue(server)
        _, conn = _poll(server, queue_id, -1)
        await _turns()
        server.registry.delete(queue_id, USER.user_id, server.clock())
        server.eventlog.position = 7  # two more events logged before the poll's turn
        await _turns()
        [(status, body)] = conn.answers
        assert (status, body["events"], body["stream_position"]) == (200, [], 5)
        # A live queue's answer gives the stream's position.
        other = _queue(server)
        _, conn = _poll(server, other, -1)
        await _turns()
        server.deliver({"type": "test"})
        server.eventlog.position = 8
        await _turns()
        [(_, body)] = conn.answers
        assert (len(body["events"]), body["stream_position"]) == (1, 8)
        # A displaced poll gives no position: the events are the newer poll's.
        server.deliver({"type": "test"})
        _, first = _poll(server, other, 0)
        _, second = _poll(server, other, 0)
        await _turns()
        [(_, displaced)] = first.answers
        assert displaced["displaced"] is True
        assert "stream_position" not in displaced
        [(_, newer)] = second.answers
        assert (len(newer["events"]), newer["stream_position"]) == (1, 8)

    _run(scenario)
