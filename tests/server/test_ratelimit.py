"""Per-user rate limiting (Zulip's api_by_user: 200 requests per 60 s): 429
RATE_LIMIT_HIT with Retry-After, other users unaffected, requests allowed
again as the bucket refills (issue 7)."""

from __future__ import annotations

import requests

from server.ratelimit import RateLimiter
from tests.support import Api, ServerProcess, World, wait_for


def test_a_burst_of_the_limit_then_one_request_per_refill():
    limiter = RateLimiter(200, 60.0)
    assert all(limiter.hit(7, 100.0) == 0.0 for _ in range(200))
    wait = limiter.hit(7, 100.0)
    assert 0.29 < wait <= 0.3  # one token comes back every 0.3 s
    assert limiter.hit(8, 100.0) == 0.0  # another user is not affected
    assert limiter.hit(7, 100.0 + wait) == 0.0
    assert limiter.hit(7, 100.0 + wait) > 0.0
    assert limiter.refused == 2


def test_refused_requests_do_not_count_and_idle_buckets_are_forgotten():
    limiter = RateLimiter(2, 1.0)
    assert limiter.hit(1, 0.0) == limiter.hit(1, 0.0) == 0.0
    for _ in range(100):
        assert limiter.hit(1, 0.0) > 0.0
    assert limiter.hit(1, 0.5) == 0.0  # refused attempts did not dig a hole
    limiter.hit(2, 0.5)
    assert limiter.forget_idle(0.6) == 0
    assert limiter.forget_idle(1.5) == 2
    assert len(limiter) == 0


def test_the_server_answers_429_past_the_default_limit(start_server, world: World):
    # The default limit (the tests' servers otherwise run with a high one).
    server: ServerProcess = start_server(EVENTQ_RATE_LIMIT_REQUESTS="")
    busy = Api(server, world.user())
    calm = Api(server, world.user())
    try:
        for _ in range(200):
            response = busy.get_events(queue_id="none", last_event_id=-1, dont_block=True)
            assert response.status_code == 400  # authenticated and counted
        refused = busy.get_events(queue_id="none", last_event_id=-1, dont_block=True)
        assert refused.status_code == 429
        body = refused.json()
        assert body["result"] == "error"
        assert body["code"] == "RATE_LIMIT_HIT"
        assert body["msg"] == "API usage exceeded rate limit"
        assert 0 < body["retry-after"] <= 0.3
        assert refused.headers["Retry-After"] == "1"
        # Register is limited the same way; another user is not.
        assert busy.request("POST", "register").status_code == 429
        assert calm.request("POST", "register").status_code == 200
        # The bucket refills: a request is allowed again within a second.
        wait_for(
            lambda: busy.request("POST", "register").status_code == 200,
            5,
            "the rate limit to let a request through",
        )
        metrics = requests.get(f"{server.url}/metrics", timeout=10).text
        assert "eventq_rate_limited_requests_total" in metrics
        assert "reached the rate limit (200 requests per 60 s)" in server.log()
    finally:
        busy.close()
        calm.close()
