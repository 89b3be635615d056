"""Internal endpoints: the shared secret, from this machine (or the sharding
config's internal networks) only, with Zulip's answers (400 without the
secret, 403 "Access denied")."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import urllib.parse

import pytest
import requests

from tests.support import REPO, SECRET, external_address, raw_exchange, wait_for

ACCESS_DENIED = {"result": "error", "msg": "Access denied", "code": "BAD_REQUEST"}
# EVENTQ_MAX_INTERNAL_REQUEST_BYTES' default; a body just under it is no 413.
INTERNAL_LIMIT = 64 * 1024 * 1024
ALMOST_THE_LIMIT = INTERNAL_LIMIT - 1
# How long the client waits for the answer to a head whose body it never
# sends: far longer than a refusal takes, even on a slow machine; a server
# that waits for the body never answers within it.
ANSWER_SECS = 30.0


def _post(server, path, data):
    return requests.post(f"{server.url}/api/internal/{path}", data=data, timeout=10)


def _answer_to_the_head_alone(
    host: str, port: int, method: str, path: str, length: int = ALMOST_THE_LIMIT
) -> tuple[int, dict[str, str], bytes]:
    """Send only the head of a request announcing a body of `length` bytes,
    then read until the server closes the connection: (status, headers by
    lowercase name, body)."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    received = b""
    with socket.create_connection((host, port), timeout=ANSWER_SECS) as conn:
        conn.sendall(head.encode())
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except TimeoutError:
            raise AssertionError(
                f"{method} {path}: no answer and no close within {ANSWER_SECS:g} s"
                f" of the head (the server waits for the body); got {received!r}"
            ) from None
    assert received, f"{method} {path}: the connection closed without an answer"
    answer_head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = answer_head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def test_notify_checks_the_secret_then_the_data(server, api):
    client = api()
    queue_id = client.register()["queue_id"]
    notice = json.dumps({"event": {"type": "test"}, "users": [client.user.user_id]})

    missing = _post(server, "notify_tornado", {"data": notice})
    assert missing.status_code == 400
    assert missing.json() == {
        "result": "error",
        "msg": "Missing 'secret' argument",
        "code": "REQUEST_VARIABLE_MISSING",
        "var_name": "secret",
    }
    wrong = _post(server, "notify_tornado", {"data": notice, "secret": "guess"})
    assert wrong.status_code == 403
    assert wrong.json() == {"result": "error", "msg": "Access denied", "code": "BAD_REQUEST"}
    no_data = _post(server, "notify_tornado", {"secret": SECRET})
    assert no_data.status_code == 400
    assert no_data.json()["msg"] == "Missing 'data' argument"
    assert client.events(queue_id, -1) == []

    ok = _post(server, "notify_tornado", {"data": notice, "secret": SECRET})
    assert ok.status_code == 200
    assert ok.json() == {"result": "success", "msg": "", "queues": 1}
    assert client.events(queue_id, -1) == [{"type": "test", "id": 0}]
    assert SECRET not in server.settled_log()
    assert "guess" not in server.settled_log()


@pytest.mark.parametrize(
    ("data", "msg"),
    [
        ("not json", "Invalid notice: notice is not valid JSON"),
        ("[]", "Invalid notice: notice is not an object"),
        ('{"event": {"type": "x"}}', "Invalid notice: notice needs 'event' and 'users'"),
        ('{"event": {}, "users": [1]}', "Invalid notice: event has no string 'type'"),
        ('{"event": {"type": "x"}, "users": [true]}', "Invalid notice: users[0] is neither"),
        ('{"event": {"type": "x", "id": 3}, "users": []}', "Invalid notice: event must not"),
    ],
)
def test_malformed_notices_are_400(server, data, msg):
    response = _post(server, "notify_tornado", {"data": data, "secret": SECRET})
    assert response.status_code == 400
    assert response.json()["msg"].startswith(msg)


def test_internal_endpoints_refuse_callers_off_this_machine(start_server):
    """A caller on another address gets 403 even with the right secret."""
    external = external_address()
    if external is None:
        pytest.skip("this machine has no non-loopback IPv4 address to call from")
    server = start_server(EVENTQ_HOST="0.0.0.0")
    url = f"http://{external}:{server.port}/api/internal/stats"
    response = requests.post(url, data={"secret": SECRET}, timeout=10)
    assert response.status_code == 403
    assert response.json()["msg"] == "Access denied"
    assert _post(server, "stats", {"secret": SECRET}).status_code == 200


def test_stats_needs_the_secret_and_reports_queues(server, api):
    assert _post(server, "stats", {}).status_code == 400
    assert _post(server, "stats", {"secret": "nope"}).status_code == 403
    client = api()
    queue_id = client.register()["queue_id"]
    stats = server.stats(client.user.user_id)
    assert stats["queues"] >= 1
    assert stats["user_queues"][0]["queue_id"] == queue_id
    assert set(stats["loop_lag"]) == {
        "p50_ms",
        "p99_ms",
        "window_max_ms",
        "max_ms",
        "own_window_max_ms",
        "own_window_max_ran_ms",
        "own_window_max_others_ms",
        "own_max_ms",
    }


@pytest.mark.parametrize("http_server", ["eventq", "tornado"])
def test_an_outsider_is_refused_before_the_body_is_read(start_server, http_server):
    """An internal endpoint refuses a caller off this machine from the
    request head: it never reads (nor waits for) a body of up to 64 MiB."""
    external = external_address()
    if external is None:
        pytest.skip("this machine has no non-loopback IPv4 address to call from")
    server = start_server(EVENTQ_HOST="0.0.0.0", EVENTQ_HTTP_SERVER=http_server)
    for method, path in [
        ("POST", "/api/internal/notify_tornado"),
        ("POST", "/api/internal/stats"),
        ("GET", "/metrics"),  # internal too: the same rule, the same limit
    ]:
        status, headers, body = _answer_to_the_head_alone(external, server.port, method, path)
        assert status == 403, (path, body)
        assert json.loads(body) == ACCESS_DENIED, path
        # The body was not read: the connection cannot carry another request.
        assert headers["connection"] == "close", path
        refusal = f"WARNING eventq.internal: internal request to {path} from {external} refused"
        wait_for(lambda refusal=refusal: refusal in server.log(), what=f"'{refusal}' logged")
        warnings = [
            line
            for line in server.settled_log().splitlines()
            if " WARNING " in line and path in line
        ]
        assert len(warnings) == 1, warnings  # one line per refusal, none other
        assert refusal in warnings[0]
    # Still serving, this machine included.
    assert _post(server, "stats", {"secret": SECRET}).status_code == 200


def test_behind_our_proxy_the_address_it_forwards_is_judged(server):
    """nginx calls from loopback and puts its own caller in X-Real-IP: an
    outsider through it is refused even with the right secret, this machine
    through it is served."""
    url = f"{server.url}/api/internal/stats"
    outsider = requests.post(
        url, data={"secret": SECRET}, headers={"X-Real-IP": "203.0.113.9"}, timeout=10
    )
    assert outsider.status_code == 403
    assert outsider.json() == ACCESS_DENIED
    assert outsider.headers["Connection"] == "close"
    refusal = "internal request to /api/internal/stats from 203.0.113.9 (through 127.0.0.1)"
    wait_for(lambda: refusal in server.log(), what="the refusal logged")
    local = requests.post(
        url, data={"secret": SECRET}, headers={"X-Real-IP": "127.0.0.1"}, timeout=10
    )
    assert local.status_code == 200
    assert local.json()["result"] == "success"
    # The secret is still checked for a caller that passes the address check.
    wrong = requests.post(
        url, data={"secret": "guess"}, headers={"X-Real-IP": "127.0.0.1"}, timeout=10
    )
    assert wrong.status_code == 403
    assert wrong.json() == ACCESS_DENIED


@pytest.mark.parametrize("http_server", ["eventq", "tornado"])
def test_a_body_past_the_internal_limit_is_413_before_it_is_read(start_server, http_server):
    """From this machine, a body announced past the internal limit is
    refused from the head, and the connection closes (and says so)."""
    server = start_server(EVENTQ_HTTP_SERVER=http_server)
    status, headers, body = _answer_to_the_head_alone(
        "127.0.0.1", server.port, "POST", "/api/internal/notify_tornado", INTERNAL_LIMIT + 1
    )
    assert status == 413
    assert json.loads(body) == {
        "result": "error",
        "msg": f"Request body too large (limit: {INTERNAL_LIMIT} bytes)",
        "code": "REQUEST_TOO_LARGE",
    }
    assert headers["connection"] == "close"


# -- the notify endpoint's lean path (server/handlers/internal.py, LeanNotify) --

# Through our own proxy (a loopback peer forwarding a loopback caller): the
# same caller, served by the full handler.
PROXIED = {"X-Real-IP": "127.0.0.1"}


def _notify_paths(server) -> dict[str, int]:
    paths: dict[str, int] = server.stats()["notify_paths"]
    return paths


def _post_both_ways(server, body: bytes, headers: dict[str, str]) -> tuple[requests.Response, ...]:
    """`body` posted to notify_tornado with `headers` as a producer does (the
    lean path), then through a proxy (the full handler)."""
    url = f"{server.url}/api/internal/notify_tornado"
    before = _notify_paths(server)
    lean = requests.post(url, data=body, headers=headers, timeout=10)
    full = requests.post(url, data=body, headers={**headers, **PROXIED}, timeout=10)
    after = _notify_paths(server)
    assert (after["lean"] - before["lean"], after["full"] - before["full"]) == (1, 1)
    return lean, full


def _notify_both_ways(server, form: dict[str, str | bytes]) -> tuple[requests.Response, ...]:
    """`form` posted both ways."""
    body = urllib.parse.urlencode(form).encode()
    return _post_both_ways(server, body, {"Content-Type": "application/x-www-form-urlencoded"})


def _same_answer(lean: requests.Response, full: requests.Response) -> None:
    assert lean.status_code == full.status_code
    assert lean.reason == full.reason
    assert lean.json() == full.json()
    drop = {"Date"}
    assert {k: v for k, v in lean.headers.items() if k not in drop} == {
        k: v for k, v in full.headers.items() if k not in drop
    }


@pytest.mark.parametrize(
    "form",
    [
        pytest.param({"secret": SECRET, "data": "{}"}, id="a-bad-notice"),
        pytest.param({"data": "{}"}, id="no-secret"),
        pytest.param({"secret": "guess", "data": "{}"}, id="a-wrong-secret"),
        pytest.param({"secret": SECRET}, id="no-data"),
        pytest.param({"secret": SECRET, "data": b"\xff"}, id="not-utf-8"),
        pytest.param({"other": "x"}, id="neither"),
    ],
)
def test_a_lean_notice_is_refused_as_the_full_handler_refuses_it(server, form):
    lean, full = _notify_both_ways(server, form)
    assert lean.status_code >= 400
    _same_answer(lean, full)


def test_a_lean_notice_is_delivered_and_answered_as_the_full_handlers(server, api):
    client = api()
    queue_id = client.register()["queue_id"]
    notice = json.dumps({"event": {"type": "test"}, "users": [client.user.user_id]})
    lean, full = _notify_both_ways(server, {"secret": SECRET, "data": notice})
    assert lean.json() == {"result": "success", "msg": "", "queues": 1}
    _same_answer(lean, full)
    assert client.events(queue_id, -1) == [{"type": "test", "id": 0}, {"type": "test", "id": 1}]


def _notify_json_both_ways(
    server, body: bytes, headers: dict[str, str]
) -> tuple[requests.Response, ...]:
    """A notice sent as JSON with `headers`, both ways."""
    return _post_both_ways(server, body, {"Content-Type": "application/json", **headers})


BEARER = {"Authorization": f"Bearer {SECRET}"}


def test_a_notice_sent_as_json_is_delivered_both_ways(server, api):
    client = api()
    queue_id = client.register()["queue_id"]
    notice = json.dumps({"event": {"type": "test"}, "users": [client.user.user_id]}).encode()
    lean, full = _notify_json_both_ways(server, notice, BEARER)
    assert lean.status_code == 200
    assert lean.json() == {"result": "success", "msg": "", "queues": 1}
    _same_answer(lean, full)
    # A charset parameter and the scheme's case change nothing.
    url = f"{server.url}/api/internal/notify_tornado"
    headers = {
        "Content-Type": "Application/JSON; charset=utf-8",
        "Authorization": f"bearer {SECRET}",
    }
    assert requests.post(url, data=notice, headers=headers, timeout=10).status_code == 200
    # Nor does a tab, or more than one space, after the scheme.
    for spaced in (f"Bearer\t{SECRET}", f"Bearer   {SECRET} "):
        headers = {"Content-Type": "application/json", "Authorization": spaced}
        assert requests.post(url, data=notice, headers=headers, timeout=10).status_code == 200
    assert client.events(queue_id, -1) == [{"type": "test", "id": i} for i in range(5)]
    # A type that only looks like JSON is neither form nor JSON.
    headers = {"Content-Type": "application/json-seq", **BEARER}
    other = requests.post(url, data=notice, headers=headers, timeout=10)
    assert other.status_code == 415
    assert other.json() == {
        "result": "error",
        "msg": "Unsupported Content-Type: send the notice as JSON (application/json)"
        " or as a form of 'secret' and 'data'",
        "code": "UNSUPPORTED_MEDIA_TYPE",
    }
    assert SECRET not in server.settled_log()


NO_SECRET = {
    "result": "error",
    "msg": "A notice sent as JSON needs the shared secret in 'Authorization: Bearer <secret>'",
    "code": "REQUEST_VARIABLE_MISSING",
    "var_name": "secret",
}


@pytest.mark.parametrize(
    ("body", "headers", "status", "answer"),
    [
        pytest.param(b'{"event": {"type": "x"}, "users": []}', {}, 400, NO_SECRET, id="no-secret"),
        pytest.param(
            b'{"event": {"type": "x"}, "users": []}',
            {"Authorization": f"Basic {SECRET}"},
            400,
            NO_SECRET,
            id="not-bearer",
        ),
        pytest.param(
            b'{"event": {"type": "x"}, "users": []}',
            {"Authorization": "Bearer "},
            400,
            NO_SECRET,
            id="empty-bearer",
        ),
        pytest.param(
            b'{"event": {"type": "x"}, "users": []}',
            {"Authorization": "Bearer guess"},
            403,
            ACCESS_DENIED,
            id="a-wrong-secret",
        ),
        pytest.param(b"", BEARER, 400, None, id="empty"),
        pytest.param(b"secret=x&data={}", BEARER, 400, None, id="a-form"),
        pytest.param(b"{}", BEARER, 400, None, id="a-bad-notice"),
        pytest.param(b"\xff", BEARER, 400, None, id="not-utf-8"),
    ],
)
def test_a_json_notice_is_refused_the_same_way_both_ways(server, body, headers, status, answer):
    lean, full = _notify_json_both_ways(server, body, headers)
    assert lean.status_code == status
    if answer is not None:
        assert lean.json() == answer
    else:
        assert lean.json()["msg"].startswith("Invalid notice: ")
    _same_answer(lean, full)
    assert "guess" not in server.settled_log()


def test_a_json_notice_with_an_encoded_body_is_refused(server):
    url = f"{server.url}/api/internal/notify_tornado"
    headers = {"Content-Type": "application/json", "Content-Encoding": "br", **BEARER}
    response = requests.post(url, data=b"\x0b\x00\x80{}\x03", headers=headers, timeout=10)
    assert response.status_code == 415
    assert response.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"


def _readme_curl() -> str:
    """The README's curl command that posts a notice as JSON."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(curl .*?)```", readme, re.S)
    [command] = [block for block in blocks if "notify_tornado" in block]
    return command


def test_the_readmes_curl_command_delivers_a_notice(server, api, tmp_path):
    client = api()
    queue_id = client.register()["queue_id"]
    command = _readme_curl()
    assert "Authorization: Bearer" in command
    command = command.replace("http://127.0.0.1:9800", server.url)
    command = command.replace('"users": [2]', f'"users": [{client.user.user_id}]')
    (tmp_path / "var" / "state").mkdir(parents=True)
    (tmp_path / "var" / "state" / "shared_secret").write_text(SECRET + "\n")
    done = subprocess.run(
        ["bash", "-c", command],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"result": "success", "msg": "", "queues": 1}
    assert client.events(queue_id, -1) == [{"type": "test", "hello": "world", "id": 0}]


def _notice_request(body: bytes, extra: bytes = b"") -> tuple[bytes, bytes]:
    """A notify_tornado request's head and body."""
    head = (
        b"POST /api/internal/notify_tornado HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n%s\r\n" % (len(body), extra)
    )
    return head, body


def _read_answers(conn: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """`count` answers read from `conn`: (status, body)."""
    data = b""
    answers: list[tuple[int, bytes]] = []
    while len(answers) < count:
        while b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(rest) < length:
                break
            answers.append((int(head.split()[1]), rest[:length]))
            data = rest[length:]
        if len(answers) < count:
            chunk = conn.recv(65536)
            assert chunk, f"closed after {len(answers)} answers"
            data += chunk
    return answers


def test_pipelined_and_split_notices_are_each_delivered_once_in_order(server, api):
    """Three notices in one write, then one whose body arrives after its
    head, then one whose body arrives in two writes: every one answered, in
    order, on the one connection, and delivered once."""
    client = api()
    queue_id = client.register()["queue_id"]
    user_id = client.user.user_id

    def body(number: int) -> bytes:
        notice = json.dumps({"event": {"type": "test", "n": number}, "users": [user_id]})
        return urllib.parse.urlencode({"secret": SECRET, "data": notice}).encode()

    before = _notify_paths(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(b"".join(b"".join(_notice_request(body(n))) for n in range(3)))
        answers = _read_answers(conn, 3)
        head, rest = _notice_request(body(3))
        conn.sendall(head)
        server.stats()  # a round trip: the server has had its turn to read that
        conn.sendall(rest)
        answers += _read_answers(conn, 1)
        head, rest = _notice_request(body(4))
        conn.sendall(head + rest[:10])
        server.stats()  # a round trip: the server has had its turn to read that
        conn.sendall(rest[10:])
        answers += _read_answers(conn, 1)
    assert [status for status, _ in answers] == [200] * 5
    assert all(json.loads(answer)["queues"] == 1 for _, answer in answers)
    assert _notify_paths(server)["lean"] - before["lean"] == 5
    events = client.events(queue_id, -1)
    assert [event["n"] for event in events] == [0, 1, 2, 3, 4]


def test_a_notice_whose_body_is_coming_is_in_flight_from_its_head(server, api):
    """As the full handler counts it: a shutdown waits for it before it saves
    the queues. (A stats request counts itself: one in flight is none.)"""
    client = api()
    queue_id = client.register()["queue_id"]
    notice = json.dumps({"event": {"type": "test"}, "users": [client.user.user_id]})
    form = urllib.parse.urlencode({"secret": SECRET, "data": notice}).encode()
    head, body = _notice_request(form)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(head + body[:10])
        wait_for(lambda: server.stats()["in_flight"] == 2, what="the notice in flight")
        conn.sendall(body[10:])
        assert [status for status, _ in _read_answers(conn, 1)] == [200]
    wait_for(lambda: server.stats()["in_flight"] == 1, what="the notice answered")
    # A notice whose client left before its body came is no longer in flight.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(head + body[:10])
        wait_for(lambda: server.stats()["in_flight"] == 2, what="the notice in flight")
    wait_for(lambda: server.stats()["in_flight"] == 1, what="the notice let go")
    assert client.events(queue_id, -1) == [{"type": "test", "id": 0}]


@pytest.mark.parametrize("length", [b"\xb2", b"1" * 30, b"-1", b" 5x"])
def test_a_notice_of_an_odd_content_length_gets_the_full_handlers_400(server, length):
    """A head eventq's parser leaves to Tornado (not ASCII), or one llhttp
    refuses: never the lean path, always an answer."""
    head = (
        b"POST /api/internal/notify_tornado HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %s\r\n\r\n" % length
    )
    status, _, body = raw_exchange(server.port, head)
    assert status == 400
    assert json.loads(body)["result"] == "error"
