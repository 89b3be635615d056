"""Per-user rate limiting (Zulip's api_by_user: 200 requests per 60 s): 429
RATE_LIMIT_HIT with Retry-After, other users unaffected, requests allowed
again as the window slides: one user's flood must not cost the others."""

from __future__ import annotations

import time

import requests

from server.http.ratelimit import RateLimiter
from tests.support import Api, ServerProcess, World, wait_for


def test_no_window_of_the_length_holds_more_than_the_limit():
    limiter = RateLimiter(200, 60.0)
    # A request every 10 ms for three minutes: about 200 a minute get through,
    # not a burst of 200 plus a refill.
    allowed = [t / 100 for t in range(18_000) if limiter.hit("u", 100.0 + t / 100) == 0.0]
    for start in range(0, 120, 7):
        in_window = [t for t in allowed if start <= t < start + 60]
        assert len(in_window) <= 201, (start, len(in_window))
    assert 590 <= len(allowed) <= 602
    assert limiter.hit("other", 100.0) == 0.0  # another key is not affected


def test_the_wait_is_until_the_window_has_slid_enough():
    limiter = RateLimiter(200, 60.0)
    assert all(limiter.hit(7, 100.0) == 0.0 for _ in range(200))
    wait = limiter.hit(7, 100.0)
    assert 59.9 < wait <= 60.01
    assert limiter.hit(7, 100.0 + wait) == 0.0  # exactly when it said
    assert limiter.hit(7, 100.0 + wait) > 0.0
    # One more request's worth slides out every 0.3 s.
    assert limiter.hit(7, 160.31) == 0.0
    assert limiter.hit(7, 160.31) > 0.0
    assert limiter.refused == 3


def test_refused_requests_do_not_count_and_idle_keys_are_forgotten():
    limiter = RateLimiter(2, 1.0)
    assert limiter.hit(1, 0.0) == limiter.hit(1, 0.0) == 0.0
    for _ in range(100):
        assert limiter.hit(1, 0.5) > 0.0
    assert limiter.hit(1, 1.6) == 0.0  # refused attempts did not dig a hole
    limiter.hit(2, 1.6)
    assert limiter.forget_idle(2.5) == 0
    assert limiter.forget_idle(3.7) == 2
    assert len(limiter) == 0


def test_the_server_answers_429_past_the_default_limit(start_server, world: World):
    # The default limit (the tests' servers otherwise run with a high one).
    server: ServerProcess = start_server(EVENTQ_RATE_LIMIT_REQUESTS="")
    busy = Api(server, world.user())
    calm = Api(server, world.user())
    try:
        started = time.monotonic()
        for _ in range(200):
            response = busy.get_events(queue_id="none", last_event_id=-1, dont_block=True)
            assert response.status_code == 400  # authenticated and counted
        refused = busy.get_events(queue_id="none", last_event_id=-1, dont_block=True)
        took = time.monotonic() - started
        assert refused.status_code == 429
        body = refused.json()
        assert body["result"] == "error"
        assert body["code"] == "RATE_LIMIT_HIT"
        assert body["msg"] == "API usage exceeded rate limit"
        # Until the minute's requests have slid out of the window: 60 s from
        # the first, which came less than `took` (measured) before the refusal.
        assert 60 - took < body["retry-after"] <= 60.01
        assert 60 - took < int(refused.headers["Retry-After"]) <= 61
        # Register is limited the same way; another user is not.
        assert busy.request("POST", "register").status_code == 429
        assert calm.request("POST", "register").status_code == 200
        metrics = requests.get(f"{server.url}/metrics", timeout=10).text
        assert "eventq_rate_limited_requests_total" in metrics
        expected = f"user {busy.user.user_id} reached the rate limit (200 requests per 60 s)"
        assert expected in server.settled_log()
    finally:
        busy.close()
        calm.close()


def test_requests_are_allowed_again_as_the_window_slides(start_server, world: World):
    # 2 s: six of the cheapest counted requests (a poll of no queue, 3 ms
    # each here) fit in it on a machine many times slower; the test waits
    # out the window once.
    server: ServerProcess = start_server(
        EVENTQ_RATE_LIMIT_REQUESTS="5", EVENTQ_RATE_LIMIT_WINDOW_SECS="2"
    )
    client = Api(server, world.user())
    try:
        statuses = [
            client.get_events(queue_id="none", last_event_id=-1, dont_block=True).status_code
            for _ in range(6)
        ]
        assert statuses == [400] * 5 + [429]
        # The registers refused meanwhile do not count: one goes through once
        # the window has slid.
        wait_for(
            lambda: client.request("POST", "register").status_code == 200,
            30,
            "the window to let a request through",
        )
    finally:
        client.close()


def test_guessing_keys_from_one_address_is_limited(start_server, world: World):
    server: ServerProcess = start_server(EVENTQ_AUTH_FAILURE_LIMIT="10")
    user = world.user()
    wrong = (user.email, "x" * 32)
    url = f"{server.url}/api/v1/events"
    statuses = [
        requests.get(url, params={"dont_block": "true"}, auth=wrong, timeout=10).status_code
        for _ in range(10)
    ]
    assert statuses == [401] * 10
    refused = requests.get(url, params={"dont_block": "true"}, auth=wrong, timeout=10)
    assert refused.status_code == 429
    assert refused.json()["code"] == "RATE_LIMIT_HIT"
    # The right key from that address waits too; another address behind our
    # own proxy (X-Real-IP from a loopback peer) does not.
    right = (user.email, user.api_key)
    blocked = requests.get(url, params={"dont_block": "true"}, auth=right, timeout=10)
    assert blocked.status_code == 429
    other = requests.get(
        url, params={"dont_block": "true"}, auth=right, headers={"X-Real-IP": "192.0.2.7"},
        timeout=10,
    )  # fmt: skip
    assert other.status_code == 200
    assert "address 127.0.0.1 reached the rate limit (10 requests per 60 s)" in server.settled_log()
