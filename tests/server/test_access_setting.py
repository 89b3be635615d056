"""Zulip's `can_access_all_users_group` over HTTP (`PATCH realm`, register's
`realm_can_access_all_users_group`): turning it to role:members and back
tells a guest's client which users it no longer sees and sees again; bad
values get Zulip's errors. (polonius, the guest, shares no channel with
anyone in this realm.)"""

from __future__ import annotations

import json

import requests

from tests.support import Api, error, ok, wait_for


def refused(response: requests.Response, msg: str, status: int = 400, code: str = "BAD_REQUEST"):
    body = error(response, status)
    assert (body["msg"], body["code"]) == (msg, code)


def events_until(client: Api, queue_id: str, done) -> list[dict]:
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and done(events) and events,
        what=f"events on {queue_id}",
    )


def change(group_id: int, old: int | None = None) -> str:
    value = {"new": group_id} if old is None else {"new": group_id, "old": old}
    return json.dumps(value)


def test_restricting_and_unrestricting_tells_the_guest_whom_it_sees(domain, apis):
    iago, polonius = apis["iago"], apis["polonius"]
    before = polonius.register(event_types=["realm", "realm_user"])
    groups = {
        group["name"]: group["id"]
        for group in iago.register(fetch_event_types=["realm_user_groups"])["realm_user_groups"]
    }
    everyone, members = groups["role:everyone"], groups["role:members"]
    assert before["realm_can_access_all_users_group"] == everyone
    others = sorted(domain.id(name) for name in ("iago", "hamlet", "othello"))

    answer = ok(
        iago.request("PATCH", "realm", can_access_all_users_group=change(members, everyone))
    )
    assert answer["can_access_all_users_group"] == members
    events = events_until(
        polonius,
        before["queue_id"],
        lambda got: len([e for e in got if e["op"] == "remove"]) >= len(others),
    )
    assert events[0] == {
        "id": events[0]["id"],
        "type": "realm",
        "op": "update_dict",
        "property": "default",
        "data": {"can_access_all_users_group": members},
    }
    removed = [e["person"] for e in events if e["type"] == "realm_user"]
    assert removed == [{"user_id": uid, "full_name": "Unknown user"} for uid in others]
    assert polonius.register()["realm_can_access_all_users_group"] == members
    # Unchanged: nothing is sent; Zulip's check of `old` refuses a stale view.
    answer = ok(iago.request("PATCH", "realm", can_access_all_users_group=change(members)))
    assert "can_access_all_users_group" not in answer
    refused(
        iago.request("PATCH", "realm", can_access_all_users_group=change(everyone, everyone)),
        "'old' value does not match the expected value.",
    )

    after = polonius.register(event_types=["realm_user"])
    ok(iago.request("PATCH", "realm", can_access_all_users_group=change(everyone)))
    events = events_until(polonius, after["queue_id"], lambda got: len(got) >= len(others))
    added = {e["person"]["user_id"]: e["person"] for e in events if e["op"] == "add"}
    assert sorted(added) == others
    assert added[domain.id("hamlet")]["full_name"] != "Unknown user"


def test_only_administrators_and_only_the_two_groups(domain, apis):
    iago, hamlet = apis["iago"], apis["hamlet"]
    groups = {
        group["name"]: group["id"]
        for group in iago.register(fetch_event_types=["realm_user_groups"])["realm_user_groups"]
    }
    refused(
        hamlet.request("PATCH", "realm", can_access_all_users_group=change(groups["role:members"])),
        "Must be an organization administrator",
        403,
        "UNAUTHORIZED",
    )
    refused(
        iago.request(
            "PATCH", "realm", can_access_all_users_group=change(groups["role:administrators"])
        ),
        "'can_access_all_users_group' setting cannot be set to 'role:administrators' group.",
    )
    refused(
        iago.request("PATCH", "realm", can_access_all_users_group=change(2**40)),
        "Invalid user group",
    )
    refused(
        iago.request("PATCH", "realm", can_access_all_users_group="[1]"),
        'can_access_all_users_group is not a dict with keys "new" and optionally "old"',
    )
    refused(
        iago.request("PATCH", "realm", can_access_all_users_group="{"),
        'Argument "can_access_all_users_group" is not valid JSON.',
    )
    refused(
        iago.request("PATCH", "realm", can_access_all_users_group='{"new": true}'),
        "can_access_all_users_group['new'] is not an integer",
    )
    # The other settings, in the same request.
    body = ok(iago.request("PATCH", "realm", name="Elsinore", mandatory_topics=True))
    assert (body["name"], body["mandatory_topics"]) == ("Elsinore", True)
    state = hamlet.register(fetch_event_types=["realm"])
    assert (state["realm_name"], state["realm_mandatory_topics"]) == ("Elsinore", True)
