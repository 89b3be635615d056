"""The users area over HTTP against the real server: the `zulip` client's
profile, members, presence and user-administration methods, the settings
endpoint, the events other clients see, and bad input (4xx JSON, never 500)."""

from __future__ import annotations

import pytest
import requests
import zulip

from generation.events.users import gravatar_url
from tests.domain.harness import Domain
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


def zulip_client(server, domain, name: str) -> zulip.Client:
    account = domain.accounts[name]
    return zulip.Client(email=account.email, api_key=account.api_key, site=server.url)


def wait_events(client: Api, queue_id: str, count: int) -> list[dict]:
    """The first `count` events of a queue (waiting for them to arrive)."""
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def error(response: requests.Response, status: int, code: str | None = None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["result"] == "error"
    if code is not None:
        assert body["code"] == code
    return str(body["msg"])


# -- the zulip client ----------------------------------------------------------


def test_get_profile_and_get_members(server, domain):
    client = zulip_client(server, domain, "hamlet")
    profile = client.get_profile()
    assert profile["result"] == "success"
    hamlet = domain.users["hamlet"]
    assert profile["user_id"] == hamlet.id
    assert profile["email"] == hamlet.email
    assert profile["full_name"] == "King Hamlet"
    assert (profile["role"], profile["is_admin"], profile["is_active"]) == (400, False, True)
    assert profile["avatar_url"] == gravatar_url(hamlet.email)

    members = client.get_members()
    assert members["result"] == "success"
    by_id = {member["user_id"]: member for member in members["members"]}
    assert set(by_id) == {user.id for user in domain.users.values()}
    assert by_id[domain.id("polonius")]["is_guest"] is True
    assert by_id[domain.id("iago")]["is_admin"] is True
    assert all(member["avatar_url"] is None for member in members["members"])
    with_urls = client.get_members({"client_gravatar": False})["members"]
    assert {m["avatar_url"] for m in with_urls} == {
        gravatar_url(u.email) for u in domain.users.values()
    }
    one = client.get_user_by_id(domain.id("othello"))
    assert one["user"]["full_name"] == "Othello, the Moor of Venice"


def test_update_presence_answers_the_realms_presence_and_tells_everyone(server, domain, clients):
    othello = clients("othello")
    legacy = othello.register(event_types=["presence"])
    slim = othello.register(event_types=["presence"], slim_presence=True)
    client = zulip_client(server, domain, "hamlet")
    answer = client.update_presence(
        {"status": "active", "ping_only": False, "new_user_input": True}
    )
    assert answer["result"] == "success"
    hamlet = domain.users["hamlet"]
    website = answer["presences"][hamlet.email]["website"]
    assert (website["status"], website["client"]) == ("active", "website")
    assert isinstance(answer["server_timestamp"], float)

    [event] = wait_events(othello, legacy["queue_id"], 1)
    assert (event["type"], event["user_id"], event["email"]) == (
        "presence",
        hamlet.id,
        hamlet.email,
    )
    assert event["presence"]["website"]["status"] == "active"
    [event] = wait_events(othello, slim["queue_id"], 1)
    assert "email" not in event

    again = client.update_presence({"status": "idle", "ping_only": True})
    assert again == {"result": "success", "msg": ""}
    # Within a minute of the last update: nothing new stored, nobody told.
    assert othello.events(legacy["queue_id"], 0) == []
    registered = othello.register(fetch_event_types=["presence"], slim_presence=True)
    assert set(registered["presences"][str(hamlet.id)]) == {"active_timestamp", "idle_timestamp"}


def test_administrators_manage_users_with_the_zulip_client(server, domain, clients):
    hamlet = clients("hamlet")
    queue = hamlet.register(event_types=["realm_user"])["queue_id"]
    iago = zulip_client(server, domain, "iago")
    othello = domain.id("othello")

    assert iago.update_user_by_id(othello, full_name="Othello the Great")["result"] == "success"
    assert iago.update_user_by_id(othello, role=300)["result"] == "success"
    assert iago.deactivate_user_by_id(othello)["result"] == "success"
    assert iago.reactivate_user_by_id(othello)["result"] == "success"
    created = iago.create_user(
        {"email": "newbie@x.example", "password": "unused", "full_name": "Newbie"}
    )
    assert created["result"] == "success"
    assert created["ignored_parameters_unsupported"] == ["password"]

    events = wait_events(hamlet, queue, 5)
    assert [event["person"] for event in events[:4]] == [
        {"user_id": othello, "full_name": "Othello the Great"},
        {"user_id": othello, "role": 300},
        {"user_id": othello, "is_active": False},
        {"user_id": othello, "is_active": True},
    ]
    assert events[4]["op"] == "add"
    assert events[4]["person"]["user_id"] == created["user_id"]
    members = {m["user_id"]: m for m in iago.get_members()["members"]}
    assert members[created["user_id"]]["full_name"] == "Newbie"
    assert members[othello]["role"] == 300


def test_deactivated_users_are_listed_as_such(server, domain):
    iago = zulip_client(server, domain, "iago")
    othello = domain.id("othello")
    assert iago.deactivate_user_by_id(othello)["result"] == "success"
    members = {m["user_id"]: m for m in iago.get_members()["members"]}
    assert members[othello]["is_active"] is False
    state = Api(server, domain.accounts["iago"]).register(fetch_event_types=["realm_user"])
    assert othello in {user["user_id"] for user in state["realm_non_active_users"]}
    assert othello not in {user["user_id"] for user in state["realm_users"]}
    again = iago.deactivate_user_by_id(othello)
    assert again["result"] == "error"
    assert again["msg"] == "User is already deactivated"


# -- settings --------------------------------------------------------------------


def test_patch_settings_changes_name_and_settings_for_the_users_own_clients(domain, clients):
    hamlet, othello = clients("hamlet"), clients("othello")
    mine = hamlet.register(event_types=["user_settings", "realm_user"])["queue_id"]
    theirs = othello.register(event_types=["user_settings", "realm_user"])["queue_id"]
    response = hamlet.request(
        "PATCH",
        "settings",
        full_name="Prince Hamlet",
        twenty_four_hour_time=True,
        color_scheme=3,
        default_language="fr",
        enter_sends=False,  # unchanged: no event
        emojiset="google",
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "result": "success",
        "msg": "",
        "ignored_parameters_unsupported": ["emojiset"],
    }
    events = wait_events(hamlet, mine, 4)
    assert [(e["type"], e.get("property")) for e in events] == [
        ("realm_user", None),
        ("user_settings", "twenty_four_hour_time"),
        ("user_settings", "color_scheme"),
        ("user_settings", "default_language"),
    ]
    assert events[3]["language_name"] == "French"
    # Others see the new name, never the settings.
    [event] = wait_events(othello, theirs, 1)
    assert event["person"] == {"user_id": domain.id("hamlet"), "full_name": "Prince Hamlet"}
    state = hamlet.register(client_capabilities={"notification_settings_null": True})
    assert state["full_name"] == "Prince Hamlet"
    assert state["user_settings"]["default_language"] == "fr"
    assert state["color_scheme"] == 3  # the legacy copy, without user_settings_object
    modern = hamlet.register(
        client_capabilities={"notification_settings_null": True, "user_settings_object": True}
    )
    assert "color_scheme" not in modern
    # A JSON-encoded language (older clients) is understood too.
    assert hamlet.request("PATCH", "settings", default_language='"de"').status_code == 200


def test_a_failed_setting_changes_nothing(domain, clients):
    hamlet = clients("hamlet")
    queue = hamlet.register(event_types=["user_settings"])["queue_id"]
    response = hamlet.request("PATCH", "settings", enter_sends=True, color_scheme=9)
    assert error(response, 400, "BAD_REQUEST") == "Invalid color_scheme"
    assert (
        hamlet.register(fetch_event_types=["user_settings"])["user_settings"]["enter_sends"]
        is False
    )
    assert hamlet.events(queue, -1) == []


# -- permissions and bad input -----------------------------------------------------


def test_members_cannot_administer_users(domain, clients):
    hamlet = clients("hamlet")
    othello = domain.id("othello")
    for method, path, params in (
        ("PATCH", f"users/{othello}", {"full_name": "Puppet"}),
        ("PATCH", f"users/{othello}", {"role": 200}),
        ("DELETE", f"users/{othello}", {}),
        ("POST", f"users/{othello}/reactivate", {}),
        ("POST", "users", {"email": "x@x.example", "full_name": "X"}),
    ):
        msg = error(hamlet.request(method, path, **params), 403, "UNAUTHORIZED")
        assert msg == "Must be an organization administrator"
    iago = clients("iago")
    msg = error(iago.request("PATCH", f"users/{othello}", role=100), 403, "UNAUTHORIZED")
    assert msg == "Must be an organization owner"


@pytest.mark.parametrize(
    ("method", "path", "params", "status", "message"),
    [
        ("PATCH", "settings", {"color_scheme": 7}, 400, "Invalid color_scheme"),
        (
            "PATCH",
            "settings",
            {"color_scheme": "dark"},
            400,
            'Argument "color_scheme" is not valid JSON.',
        ),
        (
            "PATCH",
            "settings",
            {"color_scheme": '"dark"'},
            400,
            "color_scheme is not an integer",
        ),
        (
            "PATCH",
            "settings",
            {"enter_sends": "yes"},
            400,
            'Argument "enter_sends" is not valid JSON.',
        ),
        ("PATCH", "settings", {"enter_sends": 1}, 400, "enter_sends is not a boolean"),
        ("PATCH", "settings", {"default_language": "xx"}, 400, "Invalid default_language: 'xx'"),
        ("PATCH", "settings", {"full_name": "  "}, 400, "Name too short!"),
        ("PATCH", "settings", {"full_name": "n" * 101}, 400, "Name too long!"),
        ("POST", "users/me/presence", {}, 400, "Missing 'status' argument"),
        ("POST", "users/me/presence", {"status": "away"}, 400, "Invalid status: away"),
        ("POST", "users/me/presence", {"status": "idle", "ping_only": "x"}, 400, None),
        ("GET", "users/99999999999999999999", {}, 400, "No such user"),
        ("GET", "users/123456789012", {}, 400, "No such user"),
        ("PATCH", "users/{othello}", {"role": "admin"}, 400, None),
        ("PATCH", "users/{othello}", {"role": 500}, 400, "Invalid role"),
        ("PATCH", "users/{othello}", {"full_name": "x\x00y"}, 400, None),
        ("DELETE", "users/123456789012", {}, 400, "No such user"),
        ("POST", "users/{iago}/reactivate", {}, 400, "User is already active"),
        ("POST", "users", {"full_name": "No Email"}, 400, "Missing 'email' argument"),
        ("POST", "users", {"email": "a@x.example"}, 400, "Missing 'full_name' argument"),
        ("POST", "users", {"email": "not-an-email", "full_name": "X"}, 400, None),
        ("POST", "users", {"email": "{hamlet_email}", "full_name": "X"}, 400, None),
        ("PUT", "users/me", {}, 405, "Method Not Allowed"),
        ("GET", "users/abc", {}, 404, None),
    ],
)
def test_bad_input_is_a_json_client_error(domain, clients, method, path, params, status, message):
    iago = clients("iago")
    path = path.format(othello=domain.id("othello"), iago=domain.id("iago"))
    params = {
        k: v.format(hamlet_email=domain.users["hamlet"].email) if isinstance(v, str) else v
        for k, v in params.items()
    }
    response = iago.request(method, path, **params)
    msg = error(response, status)
    if message is not None:
        assert msg == message


def test_another_realms_user_is_no_such_user(database_url, domain, clients):
    stranger = Domain(database_url).id("hamlet")
    iago = clients("iago")
    for method, path in (
        ("GET", f"users/{stranger}"),
        ("PATCH", f"users/{stranger}"),
        ("DELETE", f"users/{stranger}"),
        ("POST", f"users/{stranger}/reactivate"),
    ):
        params = {"full_name": "Mine now"} if method == "PATCH" else {}
        assert error(iago.request(method, path, **params), 400) == "No such user"


def test_json_paths_need_credentials(server):
    response = requests.get(f"{server.url}/json/users/me", timeout=10)
    error(response, 401, "UNAUTHORIZED")
    response = requests.patch(f"{server.url}/api/v1/settings", timeout=10)
    error(response, 401)
