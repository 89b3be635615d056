"""Next requests wait for the answers due (server/http/turns.py): a poll
that comes back while a fan-out's answers are still being written is served
once they are out, in the order the polls came, and never later than the
longest wait; a notice is served at once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import time
from collections.abc import AsyncIterator, Callable

import tornado.httputil
import tornado.web

from server.delivery.longpoll import AnswerSlices
from server.http.http1 import Exchange, FastHTTPServer
from server.http.httpserver import EventHTTPServer, Refusals
from server.http.turns import RequestTurns


class _Connection:
    """A connection whose next request is served by appending its name."""

    def __init__(self, name: str, served: list[str], cost_secs: float = 0.0):
        self.name = name
        self.served = served
        self.cost_secs = cost_secs

    def close(self) -> None:
        self.served.append(f"{self.name} closed")

    def next_request(self) -> None:
        if self.name == "broken":
            raise RuntimeError("a bug")
        if self.cost_secs:
            end = time.perf_counter() + self.cost_secs
            while time.perf_counter() < end:
                pass
        self.served.append(self.name)


class _Backlog:
    """Answers due until `drain`."""

    def __init__(self) -> None:
        self.due = 1
        self.callbacks: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return self.due

    def when_drained(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def drain(self) -> None:
        self.due = 0
        callbacks, self.callbacks = self.callbacks, []
        loop = asyncio.get_running_loop()
        for callback in callbacks:
            loop.call_soon(callback)


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


def test_a_request_with_nothing_due_is_served_at_once():
    async def scenario() -> list[str]:
        served: list[str] = []
        turns = RequestTurns(AnswerSlices())
        turns.ready(_Connection("a", served))
        return served

    assert asyncio.run(scenario()) == ["a"]


def test_requests_wait_for_every_answer_due_then_go_in_the_order_they_came():
    async def scenario() -> list[str]:
        served: list[str] = []
        answers = AnswerSlices(slice_secs=0.0)  # an answer per loop iteration
        # The answers' end, not the longest wait, lets them go.
        turns = RequestTurns(answers, max_wait_secs=60.0)
        for number in range(50):
            answers.add(lambda reason, n=number: served.append(f"answer {n}"), "events")
        second = _Connection("b", served)
        turns.ready(_Connection("a", served))
        turns.ready(second)
        turns.ready(_Connection("c", served))
        turns.ready(second)  # ready again while waiting: served once
        assert served == []
        await _until(lambda: len(served) == 53)
        # Again: the answers' end is told each time.
        answers.add(lambda reason: served.append("answer 50"), "events")
        turns.ready(_Connection("d", served))
        await _until(lambda: len(served) == 55)
        return served

    served = asyncio.run(scenario())
    assert served == [f"answer {n}" for n in range(50)] + ["a", "b", "c", "answer 50", "d"]


def test_no_request_waits_longer_than_the_longest_wait():
    async def scenario() -> float:
        served: list[str] = []
        backlog = _Backlog()  # never drained
        turns = RequestTurns(backlog, max_wait_secs=0.05)
        started = time.monotonic()
        turns.ready(_Connection("a", served))
        await _until(lambda: served == ["a"])
        waited = time.monotonic() - started
        # Another, once the first has been served: its own wait.
        turns.ready(_Connection("b", served))
        await _until(lambda: served == ["a", "b"])
        return waited

    waited = asyncio.run(scenario())
    assert 0.05 <= waited < 1.0


def test_a_request_that_fails_closes_its_connection_and_the_others_go_on():
    async def scenario() -> list[str]:
        served: list[str] = []
        backlog = _Backlog()
        turns = RequestTurns(backlog)
        turns.ready(_Connection("broken", served))
        turns.ready(_Connection("a", served))
        backlog.drain()
        await _until(lambda: len(served) == 2)
        return served

    assert asyncio.run(scenario()) == ["broken closed", "a"]


def test_when_the_server_stops_every_request_is_served_at_once():
    async def scenario() -> tuple[list[str], list[str]]:
        served: list[str] = []
        backlog = _Backlog()  # never drained
        turns = RequestTurns(backlog, max_wait_secs=60.0)
        turns.ready(_Connection("a", served))
        turns.ready(_Connection("b", served))
        before = list(served)
        turns.stop()
        turns.ready(_Connection("c", served))
        return before, served

    before, served = asyncio.run(scenario())
    assert before == []
    assert served == ["a", "b", "c"]


def test_waiting_requests_are_served_a_slice_at_a_time_and_all_of_them():
    async def scenario() -> tuple[list[str], list[int]]:
        served: list[str] = []
        backlog = _Backlog()
        turns = RequestTurns(backlog, slice_secs=0.004)
        for number in range(20):
            turns.ready(_Connection(str(number), served, cost_secs=0.001))
        # A turn ends with its slice; the loop turns between them.
        per_iteration: list[int] = []

        def count() -> None:
            per_iteration.append(len(served))
            if len(served) < 20:
                asyncio.get_running_loop().call_soon(count)

        backlog.drain()
        asyncio.get_running_loop().call_soon(count)
        await _until(lambda: len(served) == 20)
        return served, per_iteration

    served, per_iteration = asyncio.run(scenario())
    assert served == [str(number) for number in range(20)]
    steps = [b - a for a, b in itertools.pairwise(per_iteration)]
    assert max(steps) <= 5  # a slice of 4 ms holds at most 5 requests of 1 ms
    assert len([step for step in steps if step]) >= 4


class _Answers(tornado.httputil.HTTPMessageDelegate):
    """Answers its request with its method."""

    def __init__(self, exchange: Exchange, served: list[str]):
        self.exchange = exchange
        self.served = served

    def finish(self) -> None:
        method = self.exchange.start_line.method
        self.served.append(method)
        body = method.encode()
        self.exchange.answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


@contextlib.asynccontextmanager
async def _serving(
    backlog: _Backlog, served: list[str]
) -> AsyncIterator[tuple[FastHTTPServer, tuple[str, int]]]:
    """eventq's HTTP server on a loopback port, its requests answered by
    `_Answers`, its GETs waiting for `backlog` (never for long)."""
    tornado_server = EventHTTPServer(tornado.web.Application([]), refusals=Refusals(64 * 1024))
    fast = FastHTTPServer(
        tornado_server,
        lambda start_line, fields, exchange: _Answers(exchange, served),
        tornado_server,
        max_body_size=1024,
        idle_timeout=None,
        backlog=backlog,
    )
    fast.turns.max_wait_secs = 60.0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        await fast.add_sockets([sock], 128)
        try:
            yield fast, sock.getsockname()
        finally:
            fast.stop()
            await fast.close_all_connections()


def test_a_poll_waits_for_the_answers_due_and_a_notice_does_not():
    """On the wire: a GET that comes while answers are due is answered once
    they are out; a POST meanwhile is answered at once."""

    async def scenario() -> tuple[list[str], bytes, bytes]:
        served: list[str] = []
        backlog = _Backlog()
        async with _serving(backlog, served) as (fast, address):
            poll_r, poll_w = await asyncio.open_connection(*address)
            notice_r, notice_w = await asyncio.open_connection(*address)
            poll_w.write(b"GET /poll HTTP/1.1\r\nHost: x\r\n\r\n")
            await _until(lambda: len(fast.turns) == 1)
            notice_w.write(b"POST /notice HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            notice = await asyncio.wait_for(notice_r.readexactly(42), 10)
            waiting = list(served)
            backlog.drain()
            poll = await asyncio.wait_for(poll_r.readexactly(41), 10)
            poll_w.close()
            notice_w.close()
            return waiting, notice, poll

    waiting, notice, poll = asyncio.run(scenario())
    assert waiting == ["POST"]
    assert notice.endswith(b"\r\n\r\nPOST")
    assert poll.endswith(b"\r\n\r\nGET")


def test_a_waiting_poll_stops_reading_past_the_pending_limit():
    """A client that sends more behind a poll waiting its turn is read no
    further than a client behind a poll being served: the server's buffer
    stays bounded, and the poll is answered in its turn."""

    async def scenario() -> tuple[int, bytes]:
        served: list[str] = []
        backlog = _Backlog()
        async with _serving(backlog, served) as (fast, address):
            reader, writer = await asyncio.open_connection(*address)
            writer.write(b"GET /poll HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * (8 << 20))
            await _until(lambda: len(fast.turns) == 1)
            (connection,) = fast.connections
            await _until(lambda: not connection._reading)
            buffered = len(connection.buffer)
            backlog.drain()
            poll = await asyncio.wait_for(reader.readexactly(41), 10)
            writer.transport.abort()
            return buffered, poll

    buffered, poll = asyncio.run(scenario())
    assert buffered < 2 << 20
    assert poll.endswith(b"\r\n\r\nGET")
