"""GET /metrics: Prometheus' text format, for callers on this machine (or the
sharding config's internal networks) only, figures that follow what the
server did."""

from __future__ import annotations

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import error, external_address, wait_for


def scrape(server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = requests.get(f"{server.url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_follow_the_servers_work(start_server, api):
    server = start_server(EVENTQ_GC_INTERVAL_SECS="0.2")
    # A server listens after at most 5 s even if its consumer is not up yet.
    server.wait_consuming()
    client = api(on=server)
    first = client.register()["queue_id"]
    client.register()
    before = scrape(server)
    assert value(before, "eventq_queues") == 2
    assert value(before, "eventq_register_latency_seconds_count") == 2
    assert value(before, "eventq_register_latency_seconds_sum") > 0

    user_id = client.user.user_id
    for n in range(3):
        server.notify({"type": "metrics_test", "n": n}, [user_id])
    assert [e["n"] for e in client.events(first, -1)] == [0, 1, 2]
    error(client.get_events(queue_id="no-such-queue", last_event_id=-1))

    after = scrape(server)
    assert value(after, "eventq_notices_delivered_total") == 3
    # Three events, each into both queues.
    assert value(after, "eventq_events_delivered_total", type="metrics_test") == 6
    assert value(after, "eventq_polls_total", outcome="events") == 1
    assert value(after, "eventq_events_sent_total") == 3
    assert value(after, "eventq_response_bytes_total") > 0
    assert value(after, "eventq_poll_errors_total", code="BAD_EVENT_QUEUE_ID") == 1
    assert value(after, "eventq_polls_total", outcome="error") == 1
    assert value(after, "eventq_events_held") == 6
    assert value(after, "eventq_consumer_consuming") == 1
    assert value(after, "eventq_loop_lag_max_seconds") >= 0
    for generation in ("0", "1", "2"):
        label = (("generation", generation),)
        assert ("eventq_gc_pause_seconds_total", label) in after
        assert ("eventq_gc_pause_max_seconds", label) in after

    parked = client.park(first, 2)
    server.wait_parked(user_id, first)
    assert value(scrape(server), "eventq_parked_requests") == 1
    server.notify({"type": "metrics_test", "n": 3}, [user_id])
    assert parked.result(timeout=10).status_code == 200

    # A third queue, idle past its 1 s lifespan, is collected by the GC
    # (registered only now: the two above must outlive every step before).
    third = client.register(queue_lifespan_secs=1)["queue_id"]
    wait_for(
        lambda: value(scrape(server), "eventq_queues_ended_total", reason="expired") == 1,
        what="the idle queue to be collected",
    )
    final = scrape(server)
    assert value(final, "eventq_gc_collected_queues_total") == 1
    assert value(final, "eventq_gc_duration_seconds_count") >= 1
    assert value(final, "eventq_queues") == 2
    assert third not in str(server.user_queues(user_id))


def test_metrics_are_refused_to_callers_off_this_machine(start_server):
    external = external_address()
    if external is None:
        pytest.skip("this machine has no non-loopback IPv4 address to call from")
    server = start_server(EVENTQ_HOST="0.0.0.0")
    response = requests.get(f"http://{external}:{server.port}/metrics", timeout=10)
    assert response.status_code == 403
    assert response.json() == {"result": "error", "msg": "Access denied", "code": "BAD_REQUEST"}
    refusal = f"internal request to /metrics from {external} refused"
    wait_for(lambda: refusal in server.log(), what="the refusal logged")
    assert requests.get(f"{server.url}/metrics", timeout=10).status_code == 200


def test_behind_our_proxy_metrics_judge_the_address_it_forwards(server):
    """nginx calls from loopback and puts its own caller in X-Real-IP: an
    outsider through it is refused, this machine through it is served."""
    url = f"{server.url}/metrics"
    outsider = requests.get(url, headers={"X-Real-IP": "203.0.113.9"}, timeout=10)
    assert outsider.status_code == 403
    assert outsider.json() == {"result": "error", "msg": "Access denied", "code": "BAD_REQUEST"}
    refusal = "internal request to /metrics from 203.0.113.9 (through 127.0.0.1) refused"
    wait_for(lambda: refusal in server.log(), what="the refusal logged")
    local = requests.get(url, headers={"X-Real-IP": "127.0.0.1"}, timeout=10)
    assert local.status_code == 200
    assert local.headers["Content-Type"].startswith("text/plain; version=")
