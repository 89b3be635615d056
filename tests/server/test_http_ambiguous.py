"""Ambiguous request heads, the ones requests are smuggled in, sent on the
wire to eventq's own HTTP/1.1 connections (llhttp parses the head,
server/http/http1.py) and to Tornado's HTTP server on the same database.

Each gets a 400, or the answers Tornado's server gives to the same bytes;
and none has a request inside its body answered as a request of its own.
A connection carries the case, then, once its first answer is read (when
the connection stays open), a last request with `Connection: close`: a
smuggled request would be answered between them."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from tests.support import ServerProcess

# The request a smuggling case hides; its answer (404) must never come.
CANARY = b"GET /api/v1/smuggled-canary HTTP/1.1\r\nHost: a\r\n\r\n"
# The answer to it, whichever server: an unknown endpoint.
CANARY_STATUS = 404
LAST = b"GET /api/v1/server_settings HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
SETTINGS = b"GET /api/v1/server_settings HTTP/1.1\r\nHost: a\r\n"


# The internal endpoints whose POSTs carry the cases: stats, served by its
# full handler, and notify_tornado, whose common case the lean path serves
# (server/handlers/internal.py, LeanNotify).
POST_PATHS = {"stats": b"/api/internal/stats", "notify": b"/api/internal/notify_tornado"}


def _cases(path: bytes) -> dict[str, bytes]:
    """Every case, its POSTs to `path`."""

    def _post(headers: bytes, body: bytes) -> bytes:
        """A POST whose body is read before it is answered: an internal
        endpoint from loopback without the shared secret (a 400 once its form
        is read, the connection kept open)."""
        return (
            b"POST %s HTTP/1.1\r\nHost: a\r\n" % path
            + b"Content-Type: application/x-www-form-urlencoded\r\n"
            + headers
            + b"\r\n"
            + body
        )

    return {
        # The body by Content-Length is the canary; by chunked, empty.
        "content-length-and-transfer-encoding": _post(
            b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % (5 + len(CANARY)),
            b"0\r\n\r\n" + CANARY,
        ),
        "transfer-encoding-and-content-length": _post(
            b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            b"0\r\n\r\n" + CANARY,
        ),
        # The first says no body (the canary is the next request), the second
        # that the canary is the body.
        "two-content-lengths": _post(
            b"Content-Length: 0\r\nContent-Length: %d\r\n" % len(CANARY), CANARY
        ),
        "two-equal-content-lengths": _post(
            b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(CANARY), len(CANARY)), CANARY
        ),
        "a-list-of-content-lengths": _post(
            b"Content-Length: %d, 0\r\n" % len(CANARY),
            CANARY,
        ),
        "a-signed-content-length": _post(b"Content-Length: +%d\r\n" % len(CANARY), CANARY),
        # A folded line that reads as a Content-Length to a parser that does not
        # fold: the canary its body.
        "obsolete-line-folding": _post(
            b"X-Folded: a\r\n Content-Length: %d\r\n" % len(CANARY), CANARY
        ),
        "a-folded-content-length": _post(b"Content-Length:\r\n %d\r\n" % len(CANARY), CANARY),
        "bare-lf-line-ends": SETTINGS.replace(b"\r\n", b"\n") + b"\n",
        "a-bare-lf-in-a-header": _post(b"X-A: b\nContent-Length: %d\r\n" % len(CANARY), CANARY),
        "a-bare-cr-in-a-header": _post(b"X-A: b\rContent-Length: %d\r\n" % len(CANARY), CANARY),
        "a-space-before-the-colon": _post(b"Content-Length : %d\r\n" % len(CANARY), CANARY),
        "a-space-before-transfer-encodings-colon": _post(
            b"Content-Length: 5\r\nTransfer-Encoding : chunked\r\n", b"0\r\n\r\n" + CANARY
        ),
        "a-request-line-with-two-spaces": SETTINGS.replace(b"GET ", b"GET  ") + b"\r\n",
        "a-request-line-with-a-space-in-the-target": SETTINGS.replace(
            b"server_settings", b"server_settings " + b"x"
        )
        + b"\r\n",
        "a-transfer-encoding-not-chunked-last": _post(
            b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n" + CANARY
        ),
        # Plain pipelining: both answered, in order, and a body that looks like
        # a request is a body.
        "pipelined-requests": SETTINGS + b"\r\n" + SETTINGS + b"\r\n",
        "pipelined-after-a-body": _post(b"Content-Length: %d\r\n" % len(CANARY), CANARY)
        + SETTINGS
        + b"\r\n",
    }


_BY_PATH = {name: _cases(path) for name, path in POST_PATHS.items()}
# Each case once: those without a POST are the same for both paths.
CASES = {
    **_BY_PATH["stats"],
    **{
        f"{name}-to-notify": case
        for name, case in _BY_PATH["notify"].items()
        if case != _BY_PATH["stats"][name]
    },
}


def _answers(port: int, case: bytes) -> list[int]:
    """The statuses of every answer on a connection carrying `case`, then
    (if it stays open after the first answer) `LAST`."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(case)
        data = b""
        statuses: list[int] = []
        sent_last = False
        while True:
            answers, rest = _split(data)
            if answers and not sent_last:
                sent_last = True
                if not answers[0][1]:  # open after its first answer
                    # Closed meanwhile: its answers are read below.
                    with contextlib.suppress(OSError):
                        sock.sendall(LAST)
            if answers and answers[-1][1]:
                statuses.extend(status for status, _ in answers)
                return statuses
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                statuses.extend(status for status, _ in answers)
                assert not rest, f"a partial answer before the close: {rest!r}"
                return statuses
            data += chunk
    finally:
        sock.close()


def _split(data: bytes) -> tuple[list[tuple[int, bool]], bytes]:
    """The complete answers at the front of `data` (status, whether the
    connection closes after it), and what follows them."""
    answers: list[tuple[int, bool]] = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
        if headers.get("transfer-encoding") == "chunked":
            body_end = rest.find(b"0\r\n\r\n")
            if body_end < 0:
                break
            rest = rest[body_end + 5 :]
        else:
            length = int(headers.get("content-length", "0"))
            if len(rest) < length:
                break
            rest = rest[length:]
        closes = headers.get("connection", "").lower() == "close"
        answers.append((int(status_line.split()[1]), closes))
        data = rest
    return answers, data


@pytest.fixture(scope="module")
def tornado_server(
    database_url: str, amqp_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The same server with Tornado's HTTP server on every connection."""
    process = ServerProcess(
        database_url,
        tmp_path_factory.mktemp("tornado-state"),
        {"EVENTQ_HTTP_SERVER": "tornado"},
        amqp_url,
    )
    process.start()
    yield process
    process.stop()


def test_the_canary_is_an_unknown_endpoint(server):
    assert _answers(server.port, CANARY) == [CANARY_STATUS]


@pytest.mark.parametrize("path", sorted(POST_PATHS))
def test_a_post_of_the_cases_reads_its_body_and_keeps_the_connection(server, path):
    """What a smuggled request would hide behind: a refusal after the body is
    read, on a connection that stays open for the next request."""
    case = (
        b"POST %s HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n" % POST_PATHS[path]
        + b"Content-Type: application/x-www-form-urlencoded\r\n\r\nuser_id=1"
    )
    assert _answers(server.port, case) == [400, 200]  # "Missing 'secret' argument"


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_ambiguous_request_gets_a_400_or_tornados_answers_and_smuggles_nothing(
    name, server, tornado_server
):
    case = CASES[name]
    ours = _answers(server.port, case)
    tornados = _answers(tornado_server.port, case)
    assert CANARY_STATUS not in tornados, f"Tornado answered a smuggled request: {tornados}"
    assert CANARY_STATUS not in ours, f"a smuggled request was answered: {ours}"
    assert ours in (tornados, [400]), f"eventq {ours}, Tornado {tornados}"


def test_the_lean_path_takes_none_of_the_ambiguous_heads(server):
    """Every head llhttp or eventq's checks refuse is Tornado's to answer:
    no ambiguous case is served by the lean path, whose answers would not
    be Tornado's."""
    http = server.stats()["http"]
    if http["server"] != "eventq":
        pytest.skip("Tornado's HTTP server serves every connection")
    plain = {"pipelined-requests", "pipelined-after-a-body", "pipelined-after-a-body-to-notify"}
    for name, case in sorted(CASES.items()):
        before = server.stats()
        _answers(server.port, case)
        after = server.stats()
        assert (after["http"]["handed_off"] == before["http"]["handed_off"]) == (name in plain), (
            name
        )
        if name in plain:
            # Served by eventq's connection: the notice by the lean path.
            lean = after["notify_paths"]["lean"] - before["notify_paths"]["lean"]
            assert lean == name.endswith("-to-notify"), name
