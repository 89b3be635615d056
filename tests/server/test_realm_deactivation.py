"""A deactivated realm is cut off at once: its users' parked polls answer
with Zulip's `realm` deactivated event, their queues end, every request of
theirs is refused (REALM_DEACTIVATED), and reactivation lets them back in."""

from __future__ import annotations

from tests.domain.harness import Domain
from tests.support import Api, ok, run_eventq


def eventq(server, database_url: str, *args: str):
    """`eventq` publishing to the shared server's queue."""
    return run_eventq(
        *args,
        EVENTQ_DATABASE_URL=database_url,
        EVENTQ_AMQP_URL=server.amqp_url,
        EVENTQ_NOTIFY_QUEUE=server.notify_queue,
    )


def test_a_parked_poll_gets_the_deactivation_then_every_request_is_refused(server, database_url):
    server.wait_consuming()
    domain = Domain(database_url)
    hamlet = Api(server, domain.accounts["hamlet"])
    iago = Api(server, domain.accounts["iago"])
    try:
        queue_id = hamlet.register()["queue_id"]
        iago.register()  # authenticated, so in the server's cache
        parked = hamlet.park(queue_id, -1)
        server.wait_parked(domain.id("hamlet"), queue_id)

        done = eventq(server, database_url, "realm", "deactivate", "--subdomain", domain.subdomain)
        assert done.returncode == 0, done.stderr

        answer = parked.result(timeout=30)
        assert answer.status_code == 200, answer.text
        [event] = answer.json()["events"]
        assert event == {
            "id": 0,
            "type": "realm",
            "op": "deactivated",
            "realm_id": domain.realm_id,
        }
        assert server.user_queues(domain.id("hamlet")) == []
        assert server.user_queues(domain.id("iago")) == []
        for client, response in (
            (hamlet, hamlet.get_events(queue_id=queue_id, last_event_id=0)),
            (iago, iago.request("GET", "users/me")),
        ):
            assert response.status_code == 401, (client, response.text)
            assert response.json()["code"] == "REALM_DEACTIVATED"
            assert response.json()["msg"] == "This organization has been deactivated"
        assert f"realm {domain.realm_id} deactivated: 2 queues ended" in server.settled_log()

        # Again: nothing to do, and the command still succeeds.
        again = eventq(server, database_url, "realm", "deactivate", "--subdomain", domain.subdomain)
        assert again.returncode == 0, again.stderr

        back = eventq(server, database_url, "realm", "reactivate", "--subdomain", domain.subdomain)
        assert back.returncode == 0, back.stderr
        assert ok(hamlet.request("GET", "users/me"))["user_id"] == domain.id("hamlet")
        assert "queue_id" in hamlet.register()
    finally:
        hamlet.close()
        iago.close()


def test_deactivating_an_unknown_realm_fails(server, database_url):
    done = eventq(server, database_url, "realm", "deactivate", "--subdomain", "no-such-realm")
    assert done.returncode != 0
    assert "no-such-realm" in done.stderr
