"""The long poll's lean path (server/handlers/poll.py) against the full
handler (server/handlers/events.py): which requests take it, and that a
client cannot tell which one answered."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import socket

import pytest
import requests
import tornado.httputil
import tornado.web

from server.delivery.longpoll import AnswerSlices
from server.http.http1 import Exchange, FastHTTPServer
from server.http.httpserver import EventHTTPServer, Refusals
from tests.support import raw_exchange, wait_for

# A GET with a (zero) Content-Length is served by the full handler: the
# lean path takes no request with a body.
FULL = {"Content-Length": "0"}


def _paths(server) -> dict[str, int]:
    paths: dict[str, int] = server.stats()["poll_paths"]
    return paths


def _same_answer(lean: requests.Response, full: requests.Response) -> None:
    assert lean.status_code == full.status_code
    assert lean.json() == full.json()
    assert lean.reason == full.reason
    drop = {"Date"}
    assert {k: v for k, v in lean.headers.items() if k not in drop} == {
        k: v for k, v in full.headers.items() if k not in drop
    }


def test_a_poll_with_cached_credentials_takes_the_lean_path(api, server):
    client = api()
    queue_id = client.register()["queue_id"]  # caches the credentials
    before = _paths(server)
    assert client.events(queue_id, -1) == []
    after = _paths(server)
    assert after["lean"] == before["lean"] + 1
    assert after["full"] == before["full"]


def _both_paths(server, client, url: str, params: dict[str, str]):
    """The same poll answered by the lean path, then by the full handler."""
    before = _paths(server)
    lean = client.session.get(url, params=params, timeout=10)
    full = client.session.get(url, params=params, headers=FULL, timeout=10)
    after = _paths(server)
    assert (after["lean"] - before["lean"], after["full"] - before["full"]) == (1, 1)
    _same_answer(lean, full)
    return lean


@pytest.mark.parametrize("prefix", ["/api/v1", "/json"])
def test_lean_and_full_answers_are_the_same(api, server, prefix):
    client = api(prefix=prefix)
    queue_id = client.register()["queue_id"]
    server.notify({"type": "test", "n": 1}, [client.user.user_id])
    url = f"{server.url}{prefix}/events"
    params = {"queue_id": queue_id, "last_event_id": "-1", "dont_block": "true"}
    lean = _both_paths(server, client, url, params)
    assert lean.json()["events"] == [{"type": "test", "n": 1, "id": 0}]
    # A poll that finds events waiting, each in its turn among the woken
    # requests (an idle server: at once), as one answered at once is:
    # without the queue id, and unparked.
    lean = _both_paths(server, client, url, {"queue_id": queue_id, "last_event_id": "-1"})
    assert lean.json()["events"] == [{"type": "test", "n": 1, "id": 0}]
    assert "queue_id" not in lean.json()
    assert server.stats(client.user.user_id)["user_queues"][0]["parked"] is False
    # Errors as well: an unknown queue, a malformed id, a missing argument.
    for bad in (
        {"queue_id": "nope", "last_event_id": "-1"},
        {"queue_id": queue_id, "last_event_id": "x"},
        {"queue_id": queue_id},
        {"queue_id": "q" * 1001, "last_event_id": "-1"},
    ):
        lean = client.session.get(url, params=bad, timeout=10)
        full = client.session.get(url, params=bad, headers=FULL, timeout=10)
        assert lean.status_code == 400, lean.text
        _same_answer(lean, full)


def test_a_parked_lean_poll_is_answered_displaced_and_after_its_client_left(api, server):
    client = api()
    queue_id = client.register()["queue_id"]
    before = _paths(server)["lean"]
    parked = client.park(queue_id, -1)
    assert _paths(server)["lean"] == before + 1
    # A second poll displaces the first, which is told so.
    second = client.park(queue_id, -1)
    first = parked.result(timeout=10)
    assert first.status_code == 200
    assert first.json() == {
        "result": "success",
        "msg": "",
        "events": [],
        "queue_id": queue_id,
        "displaced": True,
    }  # no stream_position: the answer carries none of the queue's events
    server.notify({"type": "test"}, [client.user.user_id])
    assert second.result(timeout=10).json()["events"] == [{"type": "test", "id": 0}]
    # A parked poll whose connection closes is unparked; the queue stays.
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        credentials = f"{client.user.email}:{client.user.api_key}".encode()
        token = "Basic " + base64.b64encode(credentials).decode()
        sock.sendall(
            f"GET /api/v1/events?queue_id={queue_id}&last_event_id=0 HTTP/1.1\r\n"
            f"Host: x\r\nAuthorization: {token}\r\n\r\n".encode()
        )
        server.wait_parked(client.user.user_id, queue_id)
    wait_for(
        lambda: not server.stats(client.user.user_id)["user_queues"][0]["parked"],
        what="the closed poll to be unparked",
    )
    wait_for(lambda: server.stats()["in_flight"] == 1, what="no request but stats' own")


@pytest.mark.parametrize(
    ("host", "query_tail"),
    [(None, ""), ("a,b", ""), ("a b", ""), ("x", "&x" * 1000)],
    ids=["no Host", "two hosts", "bad host", "1,001 query fields"],
)
def test_a_poll_tornado_would_refuse_is_refused_as_before(api, server, host, query_tail):
    """What Tornado's request parser refuses (an HTTP/1.1 request without a
    valid Host, a query of more than 1,000 fields) is not taken by the lean
    path: it gets the server's JSON 400, as any request does."""
    client = api()
    queue_id = client.register()["queue_id"]  # caches the credentials
    credentials = f"{client.user.email}:{client.user.api_key}".encode()
    head = (
        f"GET /api/v1/events?queue_id={queue_id}&last_event_id=-1&dont_block=true{query_tail}"
        f" HTTP/1.1\r\nAuthorization: Basic {base64.b64encode(credentials).decode()}\r\n"
    )
    if host is not None:
        head += f"Host: {host}\r\n"
    before = _paths(server)
    status, headers, body = raw_exchange(server.port, (head + "\r\n").encode())
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["code"] == "BAD_REQUEST"
    assert _paths(server) == before


def test_answers_to_a_fan_out_leave_the_loop_between_slices():
    """Woken requests are answered a slice at a time: a callback scheduled
    after the wake-ups runs before the last of them is answered."""

    async def scenario() -> list[str]:
        slices = AnswerSlices(slice_secs=0.0)  # the smallest slice: 16 answers
        order: list[str] = []
        done = asyncio.Event()

        def answer(n: int) -> None:
            order.append(f"answer {n}")
            if n == 99:
                done.set()

        for n in range(100):
            slices.add(lambda reason, n=n: answer(n), "events")
        asyncio.get_running_loop().call_soon(order.append, "other work")
        await asyncio.wait_for(done.wait(), 5)
        assert len(slices) == 0
        return order

    order = asyncio.run(scenario())
    assert [entry for entry in order if entry.startswith("answer")] == [
        f"answer {n}" for n in range(100)
    ]
    assert 0 < order.index("other work") < 100


class _Slow(tornado.web.RequestHandler):
    async def get(self) -> None:
        await asyncio.sleep(0.6)
        self.write("done")


def test_connections_idle_past_the_timeout_are_closed_and_busy_ones_are_not():
    async def scenario() -> tuple[bytes, bytes]:
        server = EventHTTPServer(
            tornado.web.Application([(r"/slow", _Slow)]),
            refusals=Refusals(64 * 1024),
            idle_connection_timeout=0.2,
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        port = sock.getsockname()[1]
        server.add_socket(sock)
        loop = asyncio.get_running_loop()
        try:
            idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
            busy_r, busy_w = await asyncio.open_connection("127.0.0.1", port)
            # A request answered after three idle timeouts: not idle meanwhile.
            busy_w.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            idle = await asyncio.wait_for(idle_r.read(), 5)  # closed: b""
            busy = await asyncio.wait_for(busy_r.readuntil(b"done"), 5)
            started = loop.time()
            assert await asyncio.wait_for(busy_r.read(), 5) == b""  # idle after it
            assert loop.time() - started < 2
            idle_w.close()
            busy_w.close()
            return idle, busy
        finally:
            server.stop()
            await server.close_all_connections()

    idle, busy = asyncio.run(scenario())
    assert idle == b""
    assert busy.startswith(b"HTTP/1.1 200 OK")
    assert busy.endswith(b"done")


class _Answers(tornado.httputil.HTTPMessageDelegate):
    """A lean delegate as the long poll's is: it keeps its exchange and
    answers through it."""

    def __init__(self, exchange: Exchange):
        self.exchange = exchange

    def finish(self) -> None:
        self.exchange.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def test_answered_requests_leave_nothing_for_the_cyclic_gc():
    """An exchange and its delegate hold each other until the delegate is
    done: then the exchange lets it go, so both are freed at once rather
    than by Python's cyclic GC, whose collections stop the IO loop."""

    async def scenario() -> tuple[bytes, int]:
        tornado_server = EventHTTPServer(tornado.web.Application([]), refusals=Refusals(64 * 1024))
        fast = FastHTTPServer(
            tornado_server,
            lambda start_line, fields, exchange: _Answers(exchange),
            tornado_server,
            max_body_size=1024,
            idle_timeout=None,
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        await fast.add_sockets([sock], 128)
        try:
            reader, writer = await asyncio.open_connection(*sock.getsockname())
            writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n" * 200)
            answers = await asyncio.wait_for(reader.readexactly(200 * 40), 10)
            writer.close()
            exchanges = sum(
                isinstance(each, Exchange) and each.protocol.server is fast
                for each in gc.get_objects()
            )
            return answers, exchanges
        finally:
            fast.stop()
            await fast.close_all_connections()

    gc.collect()
    gc.disable()
    try:
        answers, exchanges = asyncio.run(scenario())
    finally:
        gc.enable()
    assert answers == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 200
    assert exchanges == 0
