"""The lean path's own parsing, against what the general path makes of the
same bytes: a request head (`HTTP1Protocol._parse` beside Tornado's
`HTTPHeaders.parse`), a query string (`routes.query_arguments` beside
`parse_qs_bytes`), a form body (`params.form_fields` beside `parse_qs_bytes`)
and a poll's arguments (`poll_arguments` beside `Params`)."""

from __future__ import annotations

import random

import pytest
import tornado.escape
import tornado.web
from tornado.httputil import HTTPHeaders

from server.errors import ApiError
from server.handlers.poll import MAX_QUEUE_ID, poll_arguments
from server.http.http1 import FastHTTPServer, HTTP1Protocol
from server.http.httpserver import EventHTTPServer, Refusals
from server.http.params import Params, form_fields
from server.routes import query_arguments


def fast_server(max_body_size: int = 1000) -> FastHTTPServer:
    """eventq's HTTP server, not listening: what a connection reads of it."""
    tornado_server = EventHTTPServer(tornado.web.Application([]), refusals=Refusals(64 * 1024))
    return FastHTTPServer(
        tornado_server,
        lambda start_line, fields, exchange: None,
        tornado_server,
        max_body_size=max_body_size,
        idle_timeout=None,
    )


def parse(head: bytes, max_body_size: int = 1000) -> object:
    protocol = HTTP1Protocol(fast_server(max_body_size))
    parsed = protocol._parse(head)
    # A second request with the same headers is served from what the first left.
    assert protocol._parse(head) == parsed
    return parsed


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


@pytest.mark.parametrize(
    "body",
    [
        b"secret=s&data=%7B%22event%22%3A%7B%7D%7D",
        b"data=a+b%20c&data=%41",
        b"a&b=&=c&&d=1",
        b"x=%5Cx41%25%3D%26",
        b"x=%E9%C3%A9\xe9",
        b"",
    ],
)
def test_a_form_is_taken_apart_as_tornado_does_or_left_to_it(body):
    fields = form_fields(body)
    tornados = tornado.escape.parse_qs_bytes(body, keep_blank_values=True)
    assert fields is None or fields == tornados


@pytest.mark.parametrize(
    "body",
    [b"x=%zz", b"x=%4", b"x=a%", b"x=\\x41", b"%41=x", b"a b=c", b"&".join([b"a=1"] * 20)],
)
def test_a_form_with_a_bad_escape_a_backslash_or_an_odd_name_is_left_to_tornado(body):
    assert form_fields(body) is None


def test_form_fields_are_tornados_for_random_bodies():
    rng = random.Random(36)
    alphabet = [*b"ab=&%+;2F4g_\\x", 0xE9]
    taken = 0
    for _ in range(20000):
        body = bytes(rng.choice(alphabet) for _ in range(rng.randrange(14)))
        fields = form_fields(body)
        if fields is not None:
            taken += 1
            assert fields == tornado.escape.parse_qs_bytes(body, keep_blank_values=True), body
    assert taken > 2000  # the common cases are taken, not left to Tornado


def test_query_arguments_are_tornados_for_random_queries():
    rng = random.Random(14)
    alphabet = "ab=&%+;2F_-.~é"
    for _ in range(5000):
        query = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert query_arguments(query) == tornado.escape.parse_qs_bytes(
            query, keep_blank_values=True
        ), query


def test_header_blocks_taken_apart_are_remembered_within_bounds():
    server = fast_server()
    protocol = HTTP1Protocol(server)
    for n in range(5000):
        head = b"GET /?n=%d HTTP/1.1\r\nHost: a\r\nX-N: %d" % (n, n % 4500)
        parsed = protocol._parse(head)
        assert parsed is not None
        assert parsed[0].path == f"/?n={n}"
        assert parsed[1] == {"host": "a", "x-n": str(n % 4500)}
        assert 0 < len(server.heads) <= 4096
    server.heads.clear()
    long_value = b"v" * 3000
    assert protocol._parse(b"GET / HTTP/1.1\r\nHost: a\r\nX: " + long_value) is not None
    assert protocol._parse(b"GET / HTTP/1.0\r\nHost: a") is None
    many_lines = b"GET / HTTP/1.1\r\nHost: a" + b"\r\nA:" * 40
    assert protocol._parse(many_lines) is not None
    # A long block, a refused request line and a block of many lines are not kept.
    assert server.heads == {}


def test_a_value_of_many_spaces_is_taken_apart_as_tornado_does():
    value = "a" + " " * 60_000 + "b"
    lines = ["Host: a", f"X:  {value} \t ", "Y:" + " " * 60_000]
    head = "\r\n".join(["GET / HTTP/1.1", *lines]).encode()
    parsed = parse(head, max_body_size=1000)
    assert parsed is not None
    tornados = HTTPHeaders.parse("\r\n".join(lines) + "\r\n")
    assert parsed[1] == {"host": "a", "x": value, "y": ""}
    assert parsed[1] == {name.lower(): each for name, each in tornados.items()}


def params_reading(query: dict[str, list[bytes]]) -> object:
    try:
        params = Params(query)
        return (
            params.string("queue_id", max_length=MAX_QUEUE_ID),
            params.boolean("dont_block", False),
            params.integer("last_event_id"),
        )
    except ApiError as exc:
        return exc.msg


def lean_reading(query: dict[str, list[bytes]]) -> object:
    try:
        return poll_arguments(query)
    except ApiError as exc:
        return exc.msg


@pytest.mark.parametrize(
    "query",
    [
        "queue_id=q&last_event_id=5",
        "queue_id=q&last_event_id=-1&dont_block=true",
        "queue_id=q&dont_block=false",
        "queue_id=q",
        "queue_id=q&last_event_id=007",
        "queue_id=q&last_event_id=-0",
        "queue_id=q&last_event_id=999999999999999999",
        "queue_id=q&last_event_id=9999999999999999999",
        "queue_id=q&last_event_id=1.5",
        "queue_id=q&last_event_id=null",
        "queue_id=q&last_event_id=",
        "queue_id=q&last_event_id=1&last_event_id=2",
        "queue_id=q&dont_block=True",
        "queue_id=q&dont_block=1",
        "queue_id=q&dont_block=true&dont_block=false",
        "queue_id=%FF&last_event_id=1",
        "queue_id=%C3%A9&last_event_id=1",
        "queue_id=q&last_event_id=1&other=%FF",
        "queue_id=q&last_event_id=1&other=x",
        "queue_id=" + "q" * 1001,
        "queue_id=" + "q" * 1000,
        "queue_id=&last_event_id=1",
    ],
)
def test_a_lean_poll_reads_its_arguments_as_params_does(query):
    arguments = query_arguments(query)
    assert lean_reading(arguments) == params_reading(arguments)
