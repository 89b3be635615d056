"""What a guest of a realm that restricts guests (Zulip's
`can_access_all_users_group` role:members) reads over HTTP: `GET users`
with "Unknown user" for those they may not see, `GET users/{id}` and `GET
users/{id}/status` refused for them with Zulip's error, presence only of
those they may see, and register's people with and without
`user_list_incomplete`."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from generation.actions import bots
from generation.actions.access import INACCESSIBLE_AVATAR_URL, inaccessible_person
from tests.domain.harness import Domain
from tests.support import Api, zulip_client

REFUSED = {"result": "error", "code": "BAD_REQUEST", "msg": "Insufficient permission"}


@pytest.fixture
def apis(server, domain: Domain) -> Iterator[dict[str, Api]]:
    """polonius (the guest) shares Verona with hamlet, nothing with iago and
    othello; iago owns a bot; the realm restricts guests."""
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
            (domain.id("polonius"), domain.streams["Verona"]),
        )
        conn.execute(
            "UPDATE realms SET guests_see_all_users = false WHERE id = %s", (domain.realm_id,)
        )
    clients = {name: Api(server, account) for name, account in domain.accounts.items()}
    yield clients
    for client in clients.values():
        client.close()


def bot(domain: Domain) -> int:
    created = domain.run(
        lambda ctx: bots.do_create_bot(ctx, domain.id("iago"), domain.realm_id, "Helper", "helper")
    )
    return int(created.user_id)


def test_a_guest_is_refused_a_user_they_may_not_see_with_zulips_error(domain, apis):
    polonius = apis["polonius"]
    for name in ("iago", "othello"):
        response = polonius.request("GET", f"users/{domain.id(name)}")
        assert response.status_code == 400, response.text
        assert response.json() == REFUSED
    # An id of no user of the realm is still no such user.
    response = polonius.request("GET", "users/999999999")
    assert (response.status_code, response.json()["msg"]) == (400, "No such user")


def test_a_guest_is_refused_the_status_of_a_user_they_may_not_see(domain, apis):
    ok = apis["iago"].request("POST", "users/me/status", status_text="At court")
    assert ok.status_code == 200, ok.text
    polonius = apis["polonius"]
    response = polonius.request("GET", f"users/{domain.id('iago')}/status")
    assert (response.status_code, response.json()) == (400, REFUSED)
    # hamlet shares Verona with him; a member sees iago's.
    assert polonius.request("GET", f"users/{domain.id('hamlet')}/status").json()["status"] == {}
    seen = apis["othello"].request("GET", f"users/{domain.id('iago')}/status").json()
    assert seen["status"] == {"status_text": "At court"}


def test_a_guest_reads_themselves_those_they_share_a_channel_with_and_bots(domain, apis):
    polonius = apis["polonius"]
    helper = bot(domain)
    for user_id, full_name in (
        (domain.id("hamlet"), "King Hamlet"),
        (domain.id("polonius"), "Polonius"),
        (helper, "Helper"),
    ):
        response = polonius.request("GET", f"users/{user_id}")
        assert response.status_code == 200, response.text
        assert response.json()["user"]["full_name"] == full_name
    me = polonius.request("GET", "users/me")
    assert me.status_code == 200, me.text


def test_a_member_reads_everyone(domain, apis):
    hamlet = apis["hamlet"]
    for name in ("iago", "polonius"):
        response = hamlet.request("GET", f"users/{domain.id(name)}")
        assert response.status_code == 200, response.text
    members = hamlet.request("GET", "users").json()["members"]
    assert all(member["full_name"] != "Unknown user" for member in members)


def test_get_users_shows_a_guest_unknown_users_as_zulip_does(domain, apis):
    helper = bot(domain)
    response = apis["polonius"].request("GET", "users", client_gravatar=True)
    assert response.status_code == 200, response.text
    members = {member["user_id"]: member for member in response.json()["members"]}
    assert set(members) == {user.id for user in domain.users.values()} | {helper}
    for name in ("iago", "othello"):
        user_id = domain.id(name)
        assert members[user_id] == inaccessible_person(user_id, domain.subdomain)
        assert members[user_id]["avatar_url"] == INACCESSIBLE_AVATAR_URL
    assert members[domain.id("hamlet")]["full_name"] == "King Hamlet"
    assert members[helper]["full_name"] == "Helper"
    # The picture is served, as a client fetching it finds it.
    picture = apis["polonius"].session.get(
        apis["polonius"].server.url + INACCESSIBLE_AVATAR_URL, timeout=30
    )
    assert picture.status_code == 200, picture.text
    assert picture.headers["Content-Type"] == "image/svg+xml"
    assert picture.text.startswith("<svg")


def test_a_guest_sees_the_presence_only_of_those_they_may_see(domain, apis):
    for name in ("hamlet", "iago"):
        response = apis[name].request("POST", "users/me/presence", status="active")
        assert response.status_code == 200, response.text
    presences = apis["polonius"].request("GET", "realm/presence").json()["presences"]
    assert set(presences) == {domain.users["hamlet"].email}
    answer = apis["polonius"].request(
        "POST", "users/me/presence", status="active", slim_presence=True
    )
    assert set(answer.json()["presences"]) == {str(domain.id(n)) for n in ("hamlet", "polonius")}
    everyone = apis["othello"].request("GET", "realm/presence").json()["presences"]
    assert set(everyone) == {domain.users[n].email for n in ("hamlet", "iago", "polonius")}


def test_register_shows_unknown_users_unless_the_client_says_its_list_is_incomplete(domain, apis):
    polonius = apis["polonius"]
    iago = domain.id("iago")
    state = polonius.register(event_types=["realm_user"])
    people = {user["user_id"]: user for user in state["realm_users"]}
    assert people[iago]["full_name"] == "Unknown user"
    assert people[domain.id("hamlet")]["full_name"] == "King Hamlet"
    state = polonius.register(
        event_types=["realm_user"],
        client_capabilities={"notification_settings_null": False, "user_list_incomplete": True},
    )
    people = {user["user_id"]: user for user in state["realm_users"]}
    assert iago not in people
    assert domain.id("othello") not in people
    assert domain.id("hamlet") in people


def test_zulips_own_bindings_as_a_restricted_guest(server, domain, apis):
    """The `zulip` package (not ours) as polonius: register and get_members
    show "Unknown user" for iago, get_user_by_id is refused with Zulip's
    error, and hamlet (Verona) is shown."""
    client = zulip_client(server, domain.accounts["polonius"])
    state = client.register(event_types=["realm_user"], fetch_event_types=["realm_user"])
    assert state["result"] == "success", state
    people = {user["user_id"]: user["full_name"] for user in state["realm_users"]}
    assert people[domain.id("iago")] == "Unknown user"
    assert people[domain.id("hamlet")] == "King Hamlet"
    members = {m["user_id"]: m["full_name"] for m in client.get_members()["members"]}
    assert members[domain.id("iago")] == "Unknown user"
    refused = client.get_user_by_id(domain.id("iago"))
    assert (refused["result"], refused["msg"]) == ("error", "Insufficient permission")
