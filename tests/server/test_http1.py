"""eventq's own HTTP/1.1 connections (server/http/http1.py): keep-alive,
pipelining, HEAD, closing, early answers, and the requests it hands to
Tornado's server on the same connection, as a client sees them on the wire.

Each test passes against Tornado's HTTP server too
(EVENTQ_TEST_HTTP_SERVER=tornado): what a client sees is the same."""

from __future__ import annotations

import base64
import json
import socket
import time

import pytest

from tests.support import wait_for


def handed_off(server) -> int | None:
    """Connections eventq's HTTP server handed to Tornado's; None when
    Tornado's serves them all."""
    http = server.stats()["http"]
    return http["handed_off"] if http["server"] == "eventq" else None


def plus(count: int | None, more: int) -> int | None:
    return None if count is None else count + more


class Wire:
    """A raw keep-alive connection, reading answers by their framing.
    `receive_buffer`: SO_RCVBUF, small for a client slow to read."""

    def __init__(self, port: int, receive_buffer: int | None = None):
        self.sock = socket.socket()
        if receive_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.data = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.data += chunk
        return bool(chunk)

    def answer(self, head_request: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.data:
            assert self._fill(), f"closed before an answer: {self.data!r}"
        head, _, self.data = self.data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        if head_request:
            return int(status_line.split()[1]), headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                while b"\r\n" not in self.data:
                    assert self._fill()
                size_line, _, self.data = self.data.partition(b"\r\n")
                size = int(size_line, 16)
                while len(self.data) < size + 2:
                    assert self._fill()
                body += self.data[:size]
                self.data = self.data[size + 2 :]
                if size == 0:
                    return int(status_line.split()[1]), headers, body
        length = int(headers["content-length"])
        while len(self.data) < length:
            assert self._fill()
        body, self.data = self.data[:length], self.data[length:]
        return int(status_line.split()[1]), headers, body

    def closed(self) -> bool:
        """Whether the server closed the connection (after what was read)."""
        return not self.data and not self._fill()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(server):
    opened: list[Wire] = []

    def make(receive_buffer: int | None = None) -> Wire:
        opened.append(Wire(server.port, receive_buffer))
        return opened[-1]

    yield make
    for each in opened:
        each.close()


def _auth(client) -> str:
    credentials = f"{client.user.email}:{client.user.api_key}".encode()
    return "Basic " + base64.b64encode(credentials).decode()


def _get(path: str, auth: str = "", extra: str = "") -> bytes:
    lines = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if auth:
        lines += f"Authorization: {auth}\r\n"
    return (lines + extra + "\r\n").encode()


def _registered_then_parked(conn: Wire, server, client, auth: str) -> None:
    """Read the answer to a register sent on `conn`, park a poll of the new
    queue on it, and see it answered with an event."""
    status, _, answer = conn.answer()
    assert status == 200, answer
    queue_id = json.loads(answer)["queue_id"]
    conn.send(_get(f"/api/v1/events?queue_id={queue_id}&last_event_id=-1", auth))
    server.wait_parked(client.user.user_id, queue_id)
    server.notify({"type": "test"}, [client.user.user_id])
    assert json.loads(conn.answer()[2])["events"] == [{"type": "test", "id": 0}]


def test_pipelined_requests_are_answered_in_order_on_one_connection(api, server, wire):
    client = api()
    queue_id = client.register()["queue_id"]
    auth = _auth(client)
    conn = wire()
    before = handed_off(server)
    conn.send(
        _get("/api/v1/server_settings")
        + _get(f"/api/v1/events?queue_id={queue_id}&last_event_id=-1&dont_block=true", auth)
        + _get("/api/v1/server_settings")
        + _get("/api/v1/nowhere")
    )
    status, _, body = conn.answer()
    assert status == 200
    assert "zulip_version" in json.loads(body)
    status, headers, body = conn.answer()
    assert (status, json.loads(body)["events"]) == (200, [])
    assert headers["content-type"] == "application/json"
    assert headers["access-control-allow-origin"] == "*"
    status, _, body = conn.answer()
    assert "zulip_version" in json.loads(body)
    status, _, body = conn.answer()
    assert status == 404
    assert json.loads(body)["result"] == "error"
    # Answered before its (empty) body was read, as every refusal of a
    # handler's `prepare` is: the connection closes after it.
    assert conn.closed()
    assert handed_off(server) == before


def test_a_post_body_is_read_and_a_parked_poll_is_answered_on_its_connection(api, server, wire):
    client = api()
    auth = _auth(client)
    conn = wire()
    body = b"event_types=%5B%22test%22%5D"
    conn.send(
        b"POST /api/v1/register HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
        + auth.encode()
        + b"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    conn.send(body)  # the body after the head, as a second segment
    _registered_then_parked(conn, server, client, auth)


def test_head_and_connection_close(server, wire):
    conn = wire()
    conn.send(b"HEAD /static/eventq.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, headers, _ = conn.answer(head_request=True)
    assert status == 200
    assert int(headers["content-length"]) > 0
    assert "etag" in headers
    conn.send(_get("/api/v1/server_settings", extra="Connection: close\r\n"))
    status, headers, body = conn.answer()
    assert status == 200
    assert headers["connection"] == "close"
    assert json.loads(body)["result"] == "success"
    assert conn.closed()


def test_a_body_refused_before_it_is_read_closes_the_connection(api, server, wire):
    client = api()
    conn = wire()
    too_large = 1024 * 1024 + 1  # EVENTQ_MAX_REQUEST_BYTES' default, plus one
    conn.send(
        b"POST /api/v1/register HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
        + _auth(client).encode()
        + b"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: "
        + str(too_large).encode()
        + b"\r\n\r\n"
        + b"x" * 1000
    )
    status, _, body = conn.answer()
    assert status == 413
    assert json.loads(body)["code"] == "REQUEST_TOO_LARGE"
    assert conn.closed()


@pytest.mark.parametrize(
    ("second", "status", "code"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400, "BAD_REQUEST"),
        (b"GET /" + b"x" * 70_000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414, "URI_TOO_LONG"),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\n" + b"X-Long: " + b"y" * 70_000 + b"\r\n\r\n",
            431,
            "HEADERS_TOO_LARGE",
        ),
    ],
    ids=["not HTTP", "URL past the limit", "headers past the limit"],
)
def test_a_refused_request_after_a_served_one_gets_the_json_refusal(
    server, wire, second, status, code
):
    """The connection is handed to Tornado's server, whose refusals answer."""
    before = handed_off(server)
    conn = wire()
    conn.send(_get("/api/v1/server_settings"))
    assert conn.answer()[0] == 200
    conn.send(second)
    got, headers, body = conn.answer()
    assert (got, json.loads(body)["code"]) == (status, code)
    assert headers["connection"] == "close"
    assert handed_off(server) == plus(before, 1)


def test_a_chunked_body_is_served_by_tornado_on_the_same_connection(api, server, wire):
    client = api()
    auth = _auth(client)
    conn = wire()
    conn.send(_get("/api/v1/server_settings"))
    assert conn.answer()[0] == 200
    before = handed_off(server)
    body = b"event_types=%5B%22test%22%5D"
    conn.send(
        b"POST /api/v1/register HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
        + auth.encode()
        + b"\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    # Tornado keeps serving the connection: a poll on it is answered.
    _registered_then_parked(conn, server, client, auth)
    assert handed_off(server) == plus(before, 1)


def test_a_client_leaving_mid_body_or_mid_poll_leaves_the_server_serving(api, server, wire):
    client = api()
    auth = _auth(client)
    queue_id = client.register()["queue_id"]
    first = wire()
    first.send(
        b"POST /api/v1/register HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
        + auth.encode()
        + b"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
        + b"event_types="
    )
    first.close()
    second = wire()
    second.send(_get(f"/api/v1/events?queue_id={queue_id}&last_event_id=-1", auth))
    server.wait_parked(client.user.user_id, queue_id)
    second.close()
    wait_for(
        lambda: not server.stats(client.user.user_id)["user_queues"][0]["parked"],
        what="the closed poll to be unparked",
    )
    wait_for(lambda: server.stats()["in_flight"] == 1, what="no request but stats' own")
    third = wire()
    third.send(_get("/api/v1/server_settings"))
    assert third.answer()[0] == 200


_OPENAPI = _get("/api/v1/openapi.json")  # a large answer (about 100 KB)


def _write_buffered(server) -> int | None:
    http = server.stats()["http"]
    return http.get("write_buffer_bytes")


def _never_above(server, limit: int, secs: float) -> int:
    """The most the server held unsent over `secs` (checked ten times a second)."""
    most = 0
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        most = max(most, _write_buffered(server) or 0)
        assert most <= limit, f"{most} bytes of answers held for a client not reading"
        time.sleep(0.1)
    return most


def test_a_client_not_reading_its_answers_is_not_read_either(server, wire):
    """As Tornado reads a connection's next request once the answer before
    it is written: 400 pipelined requests for large answers, none read, do
    not put 40 MB of answers in the server's memory."""
    conn = wire(receive_buffer=4096)
    conn.send(_OPENAPI * 400)
    if _write_buffered(server) is not None:
        wait_for(lambda: _write_buffered(server), what="answers waiting for the client")
        _never_above(server, 4 * 1024 * 1024, 2.0)
    for _ in range(400):
        status, _, body = conn.answer()
        assert status == 200
        assert json.loads(body)["openapi"]


def _wakeups(pid: int) -> int:
    """Times the server's main thread went to sleep (its loop waiting)."""
    with open(f"/proc/{pid}/task/{pid}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_a_handoff_waits_for_unread_answers_without_polling(server, wire):
    """A request for Tornado's server (HTTP/1.0) behind answers the client
    has not read yet is handed over once they have left, and the server's
    loop sleeps meanwhile; the client then gets every answer."""
    before = handed_off(server)
    pid = server.proc.pid
    start = _wakeups(pid)
    time.sleep(2.0)  # the loop's wake-ups when idle: the comparison
    idle = _wakeups(pid) - start
    conns = [wire(receive_buffer=4096) for _ in range(4)]
    for conn in conns:
        conn.send(_OPENAPI * 64 + b"GET /api/v1/server_settings HTTP/1.0\r\n\r\n")
    if before is not None:
        wait_for(lambda: _write_buffered(server), what="answers waiting for the clients")
    start = _wakeups(pid)
    time.sleep(2.0)
    waiting = _wakeups(pid) - start
    assert waiting < 2 * idle + 100, f"{waiting} loop wake-ups in 2 s ({idle} when idle)"
    for conn in conns:
        for _ in range(64):
            assert conn.answer()[0] == 200
        status, _, body = conn.answer()
        assert (status, json.loads(body)["result"]) == (200, "success")
        assert conn.closed()  # HTTP/1.0 without keep-alive
    assert handed_off(server) == plus(before, 4)
