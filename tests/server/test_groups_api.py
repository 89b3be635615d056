"""User groups over HTTP against the real server: each endpoint, the events
other clients see (with and without `include_deactivated_groups`), the
register state, and bad input (4xx JSON, never 500)."""

from __future__ import annotations

import pytest
import requests

from tests.support import Api, wait_for


@pytest.fixture
def clients(server, domain):
    made: list[Api] = []

    def make(name: str, prefix: str = "/api/v1") -> Api:
        client = Api(server, domain.accounts[name], prefix)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def ok(response: requests.Response) -> dict:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["result"] == "success"
    return body


def error(response: requests.Response, msg: str, status: int = 400, code: str = "BAD_REQUEST"):
    assert response.status_code == status, response.text
    body = response.json()
    assert (body["result"], body["msg"], body["code"]) == ("error", msg, code)


def wait_events(client: Api, queue_id: str, count: int) -> list[dict]:
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def capabilities(include_deactivated: bool) -> dict:
    return {
        "notification_settings_null": False,
        "include_deactivated_groups": include_deactivated,
    }


def test_a_group_over_http_from_creation_to_deactivation(domain, clients):
    hamlet, othello = clients("hamlet"), clients("othello", "/json")
    iago = clients("iago")
    modern = othello.register(
        event_types=["user_group"],
        fetch_event_types=["realm_user_groups"],
        client_capabilities=capabilities(True),
    )
    legacy = iago.register(event_types=["user_group"], client_capabilities=capabilities(False))
    system = {group["name"]: group["id"] for group in modern["realm_user_groups"]}
    created = ok(
        hamlet.request(
            "POST",
            "user_groups/create",
            name="Poets",
            description="Who writes",
            members=[domain.id("hamlet")],
            subgroups=[system["role:moderators"]],
            can_mention_group=system["role:members"],
        )
    )
    group_id = created["group_id"]
    ok(hamlet.request("PATCH", f"user_groups/{group_id}", name="Bards", description="Sing"))
    ok(
        hamlet.request(
            "POST",
            f"user_groups/{group_id}/members",
            add=[domain.id("othello")],
            delete=[domain.id("hamlet")],
        )
    )
    ok(
        hamlet.request(
            "POST", f"user_groups/{group_id}/subgroups", delete=[system["role:moderators"]]
        )
    )
    members = ok(hamlet.request("GET", f"user_groups/{group_id}/members"))
    assert members["members"] == [domain.id("othello")]
    listed = ok(hamlet.request("GET", "user_groups"))["user_groups"]
    [group] = [group for group in listed if group["id"] == group_id]
    assert (group["name"], group["description"], group["can_mention_group"]) == (
        "Bards",
        "Sing",
        system["role:members"],
    )
    ok(hamlet.request("POST", f"user_groups/{group_id}/deactivate"))
    ops = ["add", "add_subgroups", "update", "update", "add_members", "remove_members"]
    ops.append("remove_subgroups")
    events = wait_events(othello, modern["queue_id"], len(ops) + 1)
    assert [event["op"] for event in events] == [*ops, "update"]
    assert events[-1]["data"] == {"deactivated": True}
    events = wait_events(iago, legacy["queue_id"], len(ops) + 1)
    assert [event["op"] for event in events] == [*ops, "remove"]
    # Registered afresh: only the client that handles deactivated groups has it.
    names = {g["name"] for g in othello.register(client_capabilities=capabilities(True))[
        "realm_user_groups"]}  # fmt: skip
    assert "Bards" in names
    names = {g["name"] for g in iago.register(client_capabilities=capabilities(False))[
        "realm_user_groups"]}  # fmt: skip
    assert "Bards" not in names
    listed = ok(hamlet.request("GET", "user_groups", include_deactivated_groups=True))
    assert group_id in {group["id"] for group in listed["user_groups"]}
    assert group_id not in {group["id"] for group in ok(hamlet.request("GET", "user_groups"))[
        "user_groups"]}  # fmt: skip


def test_system_group_members_over_http(domain, clients):
    hamlet = clients("hamlet")
    groups = {g["name"]: g for g in ok(hamlet.request("GET", "user_groups"))["user_groups"]}
    everyone = groups["role:everyone"]["id"]
    # Recursive by default: everyone holds members, moderators, ... too.
    every = ok(hamlet.request("GET", f"user_groups/{everyone}/members"))["members"]
    assert every == sorted(domain.id(name) for name in ("iago", "hamlet", "othello", "polonius"))
    direct = ok(hamlet.request("GET", f"user_groups/{everyone}/members", direct_member_only=True))
    assert direct["members"] == [domain.id("polonius")]


def test_bad_group_requests_are_refused(domain, clients):
    hamlet, polonius = clients("hamlet"), clients("polonius")
    error(polonius.request("GET", "user_groups"), "Not allowed for guest users")
    error(
        polonius.request("POST", "user_groups/create", name="G", description="", members=[]),
        "Insufficient permission",
    )
    error(
        hamlet.request("POST", "user_groups/create", description="", members=[]),
        "Missing 'name' argument",
        code="REQUEST_VARIABLE_MISSING",
    )
    response = hamlet.request("POST", "user_groups/create", name="G", description="", members=["x"])
    error(response, "members[0] is not an integer")
    response = hamlet.request(
        "POST", "user_groups/create", name="G", description="", members=list(range(1, 1002))
    )
    error(response, "members has more than 1000 items")
    error(hamlet.request("PATCH", "user_groups/99999999"), "No new data supplied")
    error(hamlet.request("PATCH", "user_groups/99999999", name="X"), "Invalid user group")
    error(hamlet.request("PATCH", "user_groups/0", name="X"), "Invalid user group")
    error(
        hamlet.request("GET", "user_groups/99999999/members"),
        "Invalid user group",
    )
    error(
        hamlet.request("POST", "user_groups/99999999/members"),
        'Nothing to do. Specify at least one of "add", "delete", "add_subgroups" or'
        ' "delete_subgroups".',
    )
    error(
        hamlet.request("POST", "user_groups/99999999/subgroups"),
        'Nothing to do. Specify at least one of "add" or "delete".',
    )
    error(hamlet.request("POST", "user_groups/99999999/deactivate"), "Invalid user group")
