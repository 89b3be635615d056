"""The lean path's own parsing, against what Tornado makes of the same bytes:
a request head (`HTTP1Protocol._parse` beside `HTTPHeaders.parse`) and a
query string (`routes.query_arguments` beside `parse_qs_bytes`)."""

from __future__ import annotations

import random
import types

import pytest
import tornado.escape
from tornado.httputil import HTTPHeaders

from server.http1 import HTTP1Protocol
from server.routes import query_arguments


def parse(head: bytes, max_body_size: int = 1000) -> object:
    server = types.SimpleNamespace(max_body_size=max_body_size)
    return HTTP1Protocol(server)._parse(head)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "lines",
    [
        ["Host: a"],
        ["host: a", "AUTHORIZATION: Basic eA==", "user-agent: x/1"],
        ["Host:a", "X-A:   spaced value \t ", "X-Empty:", "X-Tab:\tv\t"],
        ["Host: a", "Accept: a", "accept: b", "ACCEPT: c"],
        ["Host: a", "Content-Length: 12", "Connection: Close"],
        ["Host: a:8080", "Connection: keep-alive", "X-Odd: !#$%&'*+.^_`|~"],
    ],
)
def test_a_head_gives_the_headers_tornado_reads_from_it(lines):
    head = "\r\n".join(["GET /api/v1/events?queue_id=q HTTP/1.1", *lines]).encode()
    parsed = parse(head)
    assert parsed is not None
    start_line, fields, pairs, length, keep_alive = parsed
    assert (start_line.method, start_line.path, start_line.version) == (
        "GET",
        "/api/v1/events?queue_id=q",
        "HTTP/1.1",
    )
    tornados = HTTPHeaders.parse("\r\n".join(lines) + "\r\n")
    assert fields == {name.lower(): value for name, value in tornados.items()}
    rebuilt = HTTPHeaders()
    for name, value in pairs:
        rebuilt.add(name, value)
    assert list(rebuilt.get_all()) == list(tornados.get_all())
    assert length == int(tornados.get("Content-Length", "0"))
    assert keep_alive == (tornados.get("Connection", "").lower() != "close")


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.0\r\nHost: a",  # HTTP/1.0
        b"GET / HTTP/1.1x\r\nHost: a",  # junk after the version
        b"BREW / HTTP/1.1\r\nHost: a",  # a method we do not answer
        b"GET / HTTP/1.1",  # no Host
        b"GET / HTTP/1.1\r\nHost: a b",  # a Host Tornado may refuse
        b"GET / HTTP/1.1\r\nHost: a\r\n folded",  # obsolete line folding
        b"GET / HTTP/1.1\r\nHost: a\r\nNo-Colon",
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: v",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9",  # past ASCII
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b",  # a control character
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb",
        b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked",
        b"GET / HTTP/1.1\r\nHost: a\r\nexpect: 100-continue",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1001",  # past the limit
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b",  # two hosts: "a,b"
    ],
)
def test_a_head_this_server_does_not_serve_goes_to_tornado(head):
    assert parse(head) is None


QUERIES = [
    "",
    "queue_id=abc&last_event_id=5",
    "queue_id=abc&last_event_id=5&dont_block=true",
    "a=1&a=2&a=",
    "a&b=&=c&&x=y=z",
    "queue_id=a%20b&last_event_id=-1",
    "queue_id=a+b",
    "q=%E2%82%AC&r=%ZZ&s=%",
    "é=ü",
]


@pytest.mark.parametrize("query", QUERIES)
def test_query_arguments_are_tornados(query):
    assert query_arguments(query) == tornado.escape.parse_qs_bytes(query, keep_blank_values=True)


def test_query_arguments_are_tornados_for_random_queries():
    rng = random.Random(14)
    alphabet = "ab=&%+;2F_-.~é"
    for _ in range(5000):
        query = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert query_arguments(query) == tornado.escape.parse_qs_bytes(
            query, keep_blank_values=True
        ), query
