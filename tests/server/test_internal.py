"""Internal endpoints: shared secret and loopback only (reference 1.5, scenario 58)."""

from __future__ import annotations

import json

import pytest
import requests

from tests.support import SECRET, external_address


def _post(server, path, data):
    return requests.post(f"{server.url}/api/internal/{path}", data=data, timeout=10)


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
    assert SECRET not in server.log()
    assert "guess" not in server.log()


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
    assert set(stats["loop_lag"]) == {"p50_ms", "p99_ms", "window_max_ms", "max_ms"}
