"""Malformed requests: always a 4xx JSON error with a code, never a 500, and
never a changed queue."""

from __future__ import annotations

import base64
import socket

import pytest
import requests


@pytest.fixture
def loaded(api, server):
    """A client whose queue holds two unacknowledged events."""
    client = api()
    queue_id = client.register()["queue_id"]
    for n in range(2):
        server.notify({"type": "test", "n": n}, [client.user.user_id])
    return client, queue_id


def _unchanged(client, queue_id):
    assert [e["id"] for e in client.events(queue_id, -1)] == [0, 1]


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"last_event_id": "abc"}, 'Argument "last_event_id" is not valid JSON.'),
        ({"last_event_id": "true"}, "last_event_id is not an integer"),
        ({"last_event_id": "1.5"}, "last_event_id is not an integer"),
        ({"last_event_id": "1e30"}, "last_event_id is too large (maximum: 9223372036854775807)"),
        ({"last_event_id": "-99999999999999999999999"}, "last_event_id is too small"),
        ({"last_event_id": "-1", "dont_block": "yes"}, 'Argument "dont_block" is not valid JSON.'),
        ({"last_event_id": "-1", "dont_block": "1"}, "dont_block is not a boolean"),
        ({"last_event_id": "0", "queue_id": "q" * 1001}, "queue_id is too long"),
    ],
)
def test_malformed_get_parameters(loaded, params, msg):
    client, queue_id = loaded
    query = {"queue_id": queue_id, **params}
    response = client.session.get(f"{client.server.url}/api/v1/events", params=query, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["result"] == "error"
    assert response.json()["code"] == "BAD_REQUEST"
    assert response.json()["msg"].startswith(msg)
    _unchanged(client, queue_id)


def test_a_long_unknown_queue_id_is_bad_event_queue_id_so_clients_re_register(api):
    client = api()
    response = client.get_events(queue_id="q" * 500, last_event_id=-1)
    assert response.status_code == 400
    assert response.json()["code"] == "BAD_EVENT_QUEUE_ID"


def test_malformed_implicit_registration_creates_nothing(api):
    client = api()
    for params in (
        {"dont_block": True, "event_types": "x"},
        {"dont_block": True, "narrow": [["nope", "x"]]},
        {"dont_block": True, "lifespan_secs": -5},
        {"dont_block": True, "bulk_message_deletion": "maybe"},
    ):
        response = client.get_events(**params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["code"] == "BAD_REQUEST"
    assert client.server.user_queues(client.user.user_id) == []


def test_oversized_body_is_413_before_it_is_read(loaded):
    client, queue_id = loaded
    response = client.session.post(
        f"{client.server.url}/api/v1/register",
        data={"narrow": "x" * (2 * 1024 * 1024)},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.json() == {
        "result": "error",
        "msg": "Request body too large (limit: 1048576 bytes)",
        "code": "REQUEST_TOO_LARGE",
    }
    assert [q["queue_id"] for q in client.server.user_queues(client.user.user_id)] == [queue_id]


def test_a_json_body_is_415(loaded):
    client, queue_id = loaded
    response = client.session.delete(
        f"{client.server.url}/api/v1/events", json={"queue_id": queue_id}, timeout=10
    )
    assert response.status_code == 415
    assert response.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
    _unchanged(client, queue_id)


def test_invalid_utf8_parameter(loaded):
    client, queue_id = loaded
    response = client.session.delete(
        f"{client.server.url}/api/v1/events",
        data=b"queue_id=%ff%fe",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["msg"] == "Argument 'queue_id' is not valid UTF-8"
    _unchanged(client, queue_id)


def test_a_bad_content_length_is_400(server, world):
    user = world.user()
    credentials = base64.b64encode(f"{user.email}:{user.api_key}".encode()).decode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/v1/register HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n"
            + f"Authorization: Basic {credentials}\r\n\r\n".encode()
        )
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 400")


def test_no_request_reaches_a_500(server, api):
    """A sweep of odd requests: every answer is JSON with a 4xx status."""
    client = api()
    odd = [
        ("GET", "/api/v1/events", {"queue_id": "", "last_event_id": "-1"}),
        ("GET", "/api/v1/events", {"dont_block": "null"}),
        ("DELETE", "/api/v1/events", {"queue_id": "x" * 50}),
        ("POST", "/api/v1/register", {"narrow": "[[1, 2]]"}),
        ("POST", "/api/v1/register", {"narrow": "[" * 5000}),
        ("POST", "/api/v1/register", {"client_capabilities": "[]"}),
        ("POST", "/api/v1/register", {"event_types": '["' + "a" * 200 + '"]'}),
        ("GET", "/api/v1/events", {"queue_id": "\x00", "last_event_id": "0"}),
    ]
    for method, path, params in odd:
        response = client.session.request(
            method,
            f"{server.url}{path}",
            params=params if method == "GET" else None,
            data=params if method != "GET" else None,
            timeout=10,
        )
        assert 400 <= response.status_code < 500, (method, path, params, response.text)
        assert response.json()["result"] == "error"
        assert response.json()["code"]
    # The server is still healthy.
    assert requests.get(f"{server.url}/api/v1/server_settings", timeout=10).status_code == 200


def test_a_non_ascii_content_length_is_400(server, world):
    user = world.user()
    credentials = base64.b64encode(f"{user.email}:{user.api_key}".encode()).decode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/v1/register HTTP/1.1\r\nHost: x\r\nContent-Length: \xc2\xb2\r\n"
            + f"Authorization: Basic {credentials}\r\n\r\n".encode()
        )
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


def test_an_oversized_chunked_body_is_a_json_413(loaded):
    client, queue_id = loaded

    def chunks():
        for _ in range(40):
            yield b"narrow=" + b"x" * 65536

    response = client.session.post(
        f"{client.server.url}/api/v1/register",
        data=chunks(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=30,
    )
    assert response.status_code == 413
    assert response.json()["code"] == "REQUEST_TOO_LARGE"
    _unchanged(client, queue_id)


def test_a_malformed_last_event_id_is_refused_even_when_a_queue_is_created(api):
    """Found by schemathesis: the implicit registration ignored it."""
    client = api()
    response = client.get_events(dont_block=True, last_event_id="[1]")
    assert response.status_code == 400
    assert response.json()["msg"] == "last_event_id is not an integer"
    assert client.server.user_queues(client.user.user_id) == []
