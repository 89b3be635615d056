"""Requests the server cannot parse still get an HTTP answer with the API's
JSON error (server/http/httpserver.py): a URL or headers past the head limit,
a head that is not HTTP/1.x. One log line each, never the request's bytes."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import uuid

import pytest
import requests
import tornado.web

from server.http.httpserver import EventHTTPServer, Refusals
from tests.support import raw_exchange, wait_for


def refusal_lines(log: str) -> list[str]:
    return re.findall(r"refused a request from [^\n]*", log)


def refusals_since(server, before: int, barrier: int = 431) -> list[str]:
    """The refusal lines logged after the first `before`, up to that of a
    later refusal of another status (`barrier`: 431 or 400) this sends: a
    tested request logged twice, the second time a moment late, shows."""
    if barrier == 431:
        response = requests.get(
            f"{server.url}/api/v1/server_settings", headers={"X-Big": "b" * 70_000}, timeout=10
        )
        assert response.status_code == 431
    else:
        assert raw_exchange(server.port, b"HELLO\r\n\r\n")[0] == 400

    def until_barrier() -> list[str] | None:
        lines = refusal_lines(server.log())[before:]
        ends = [n for n, line in enumerate(lines) if f" with {barrier}: " in line]
        return lines[: ends[-1]] if ends else None

    return wait_for(until_barrier, what=f"the {barrier} refusal's log line")


def refused_total(server, status: int) -> float:
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(rf'^eventq_requests_refused_total{{status="{status}"}} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


def test_a_url_past_the_head_limit_gets_414_json_and_one_log_line(api, server):
    client = api()
    before_lines = len(refusal_lines(server.settled_log()))
    before_count = refused_total(server, 414)
    # A client with a runaway queue id: 500 KB, far past the 64 KiB head.
    # The client sends all of it before reading: the server's answer must
    # survive that (it reads and drops the rest instead of resetting).
    marker = uuid.uuid4().hex
    response = client.session.get(
        f"{server.url}/api/v1/events",
        params={"queue_id": marker * (500_000 // len(marker)), "last_event_id": "-1"},
        timeout=10,
    )
    assert response.status_code == 414
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Connection"] == "close"
    assert response.json() == {
        "result": "error",
        "msg": "Request URI too long: request line longer than 65536 bytes",
        "code": "URI_TOO_LONG",
    }
    assert refusals_since(server, before_lines) == [
        "refused a request from 127.0.0.1 with 414: request line longer than 65536 bytes"
    ]
    assert marker not in server.settled_log()
    assert refused_total(server, 414) == before_count + 1
    # The server goes on serving, on a new connection.
    assert client.register()["queue_id"]


def test_the_access_log_cuts_a_long_url(api, server):
    """Within the head limit a long URL is served (here refused by the
    handler); its log line keeps the first 300 characters and says how long
    it was."""
    client = api()
    response = client.get_events(queue_id="z" * 5000, last_event_id=-1)
    assert response.status_code == 400
    line = wait_for(
        lambda: re.search(r"^.*400 GET /api/v1/events\?queue_id=z+\.\.\. \(\d+ characters\).*$",
                          server.log(), re.M),
        what="the access log line",
    ).group(0)  # fmt: skip
    assert "z" * 301 not in line
    assert (
        f"({len('/api/v1/events?queue_id=') + 5000 + len('&last_event_id=-1')} characters)" in line
    )
    assert "z" * 1001 not in server.settled_log()


def test_headers_past_the_head_limit_get_431_json_and_one_log_line(api, server):
    client = api()
    before_lines = len(refusal_lines(server.settled_log()))
    before = refused_total(server, 431)
    marker = uuid.uuid4().hex
    response = client.session.get(
        f"{server.url}/api/v1/server_settings",
        headers={"X-Tracking": marker * (100_000 // len(marker))},
        timeout=10,
    )
    assert response.status_code == 431
    assert response.json() == {
        "result": "error",
        "msg": "Request headers too large: request head (request line and headers)"
        " over 65536 bytes",
        "code": "HEADERS_TOO_LARGE",
    }
    assert refusals_since(server, before_lines, barrier=400) == [
        "refused a request from 127.0.0.1 with 431: request head (request line and headers)"
        " over 65536 bytes"
    ]
    assert marker not in server.settled_log()
    assert refused_total(server, 431) == before + 1


@pytest.mark.parametrize(
    "head",
    [
        b"HELLO\r\n\r\n",
        b"GET /api/v1/server_settings HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET /api/v1/server_settings\r\n\r\n",
        b"GET /api/v1/server_settings HTTP/1.1\r\nthis line has no colon\r\n\r\n",
        b"GET /api/v1/server_settings HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET /api/v1/server_settings HTTP/1.1\r\n folded\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ],
    ids=[
        "not-http",
        "http-2.0",
        "no-version",
        "header-without-colon",
        "space-in-name",
        "leading-fold",
        "h2-preface",
    ],
)
def test_a_head_that_is_not_http_gets_400_json(server, head):
    before_lines = len(refusal_lines(server.settled_log()))
    status, headers, body = raw_exchange(server.port, head)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    assert json.loads(body) == {
        "result": "error",
        "msg": "Malformed HTTP request: not an HTTP/1.x request (request line or headers"
        " do not parse)",
        "code": "BAD_REQUEST",
    }
    lines = refusals_since(server, before_lines)
    assert len(lines) == 1
    assert "with 400: not an HTTP/1.x request" in lines[0]
    # Tornado's own line about it is replaced by ours.
    assert "Malformed HTTP message" not in server.settled_log()


def test_a_valid_request_after_a_refused_one_on_another_connection_is_served(server):
    raw_exchange(server.port, b"HELLO\r\n\r\n")
    status, _, body = raw_exchange(
        server.port,
        b"GET /api/v1/server_settings HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    assert status == 200
    assert json.loads(body)["result"] == "success"


class _Ok(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write({"result": "success"})


@pytest.fixture
def small_head_server():
    """An EventHTTPServer with a 2 KiB head limit, on a loop in a thread."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    def run():
        asyncio.set_event_loop(loop)

        async def start():
            refusals = Refusals(2048)
            server = EventHTTPServer(tornado.web.Application([(r"/.*", _Ok)]), refusals=refusals)
            sock = socket.socket()
            # Small receive buffers (accepted sockets inherit them): a large
            # refused head cannot sit in the kernel unread, so a close
            # without draining would reset the client mid-send.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            sock.setblocking(False)
            server.add_sockets([sock])
            holder.update(server=server, port=sock.getsockname()[1], refusals=refusals)
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield holder

    async def stop():
        holder["server"].stop()
        await holder["server"].close_all_connections()
        await holder["refusals"].close()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def request_head(path_len: int, header_len: int) -> bytes:
    return (
        b"GET /" + b"p" * path_len + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"X-Pad: " + b"h" * header_len + b"\r\n\r\n"
    )


def test_the_head_limit_is_the_whole_head_and_414_is_for_the_request_line(small_head_server):
    port, refusals = small_head_server["port"], small_head_server["refusals"]
    # Just under the limit: served.
    fits = request_head(500, 2048 - 500 - 80)
    assert len(fits) <= 2048
    assert raw_exchange(port, fits)[0] == 200
    # Over it by headers, with a short request line: 431.
    assert raw_exchange(port, request_head(10, 4000))[0] == 431
    # A request line that alone does not fit: 414, whatever follows.
    assert raw_exchange(port, request_head(3000, 10))[0] == 414
    # A head that never ends (no blank line) is refused at the limit, not
    # waited on: the client is still connected and sending.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nX-Pad: " + b"h" * 5000)
        answer = conn.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert refusals.counts == {400: 0, 414: 1, 431: 2}


def test_a_chunked_body_with_an_endless_chunk_size_line_is_400_not_431(small_head_server):
    port, refusals = small_head_server["port"], small_head_server["refusals"]
    status, _, body = raw_exchange(
        port,
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 200 + b"\r\n",
    )
    # Tornado reads a chunk-size line of 64 bytes at most; the head was fine.
    assert status == 400
    assert json.loads(body)["msg"] == (
        "Malformed HTTP request: malformed chunked body (a chunk-size line over 64 bytes)"
    )
    assert refusals.counts == {400: 1, 414: 0, 431: 0}


def test_past_the_lingering_limit_a_refusal_is_still_sent(small_head_server, monkeypatch):
    """A flood of bad requests cannot hold sockets: past MAX_LINGERING the
    answer is sent at once (a small one always fits the socket's buffer) and
    the socket closed without draining."""
    from server.http import httpserver

    monkeypatch.setattr(httpserver, "MAX_LINGERING", 0)
    port, refusals = small_head_server["port"], small_head_server["refusals"]
    status, headers, _ = raw_exchange(port, request_head(3000, 10))
    assert status == 414
    assert headers["connection"] == "close"
    assert refusals.counts[414] == 1


def test_a_large_refused_head_sent_whole_before_reading_still_gets_its_answer(
    small_head_server,
):
    # 500 KB against a 2 KiB limit: the server answers after 2 KiB, then
    # reads and drops the rest. Closing at once would reset the connection
    # under the client's send, and the answer with it.
    port, refusals = small_head_server["port"], small_head_server["refusals"]
    # A small send buffer too: the client is still sending when the server
    # answers.
    status, headers, body = raw_exchange(port, request_head(500_000, 10), send_buffer=16384)
    assert status == 414
    assert headers["connection"] == "close"
    assert json.loads(body)["code"] == "URI_TOO_LONG"
    wait_for(lambda: not refusals._lingering or None, what="the drain to end")


def test_a_broken_chunked_body_after_100_continue_is_still_answered(small_head_server):
    port, refusals = small_head_server["port"], small_head_server["refusals"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += conn.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 ")
        conn.sendall(b"f" * 200 + b"\r\n")
        received = interim.partition(b"\r\n\r\n")[2]
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["code"] == "BAD_REQUEST"
    assert refusals.counts == {400: 1, 414: 0, 431: 0}


def test_a_chunk_size_that_is_not_hex_is_400_about_the_body(small_head_server):
    port, refusals = small_head_server["port"], small_head_server["refusals"]
    status, _, body = raw_exchange(
        port, b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n"
    )
    assert status == 400
    assert json.loads(body)["msg"] == (
        "Malformed HTTP request: request body framing does not parse or is over the size limit"
    )
    assert refusals.counts == {400: 1, 414: 0, 431: 0}
