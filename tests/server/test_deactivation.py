"""A deactivated user is cut off at once: queues ended, credentials refused."""

from __future__ import annotations

from tests.domain.harness import Domain
from tests.support import Api


def test_deactivation_ends_the_users_queues_and_refuses_their_key(server, database_url):
    server.wait_consuming()
    domain = Domain(database_url)
    hamlet = Api(server, domain.accounts["hamlet"])
    iago = Api(server, domain.accounts["iago"])
    queue_id = hamlet.register()["queue_id"]
    parked = hamlet.park(queue_id, -1)
    response = iago.request("DELETE", f"users/{domain.id('hamlet')}")
    assert response.status_code == 200, response.text
    assert parked.result(timeout=10).status_code == 200  # answered, not left hanging
    assert server.user_queues(domain.id("hamlet")) == []
    again = hamlet.get_events(queue_id=queue_id, last_event_id=-1)
    assert again.status_code == 401
    assert again.json()["code"] == "USER_DEACTIVATED"
    assert f"user {domain.id('hamlet')} deactivated: 1 queues ended" in server.settled_log()
    hamlet.close()
    iago.close()
