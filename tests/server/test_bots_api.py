"""Bots over HTTP against the real server: creating one (its key in the
answer only), running as it, listing, renaming and giving it away,
regenerating its key (the old one refused at once), deactivating it (its
queues end, its key refused), the events its owner and the administrators
see, and bad input (4xx JSON, never 500)."""

from __future__ import annotations

import pytest
import requests

from generation import accounts
from generation.events.bots import BOT_INCOMING_WEBHOOK
from tests.domain.harness import Domain
from tests.support import Api, ok, wait_for


@pytest.fixture
def clients(server, domain):
    made: list[Api] = []

    def make(account: str | accounts.CreatedUser, prefix: str = "/api/v1") -> Api:
        user = domain.accounts[account] if isinstance(account, str) else account
        client = Api(server, user, prefix)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def error(response: requests.Response, status: int = 400, code: str = "BAD_REQUEST") -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert (body["result"], body["code"]) == ("error", code)
    return str(body["msg"])


def wait_events(client: Api, queue_id: str, count: int) -> list[dict]:
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def create_bot(
    client: Api, domain: Domain, short_name: str = "helper", **params
) -> accounts.CreatedUser:
    """A bot made through POST /bots, as an account the tests' Api can use."""
    made = ok(
        client.request(
            "POST", "bots", full_name=f"The {short_name}", short_name=short_name, **params
        )
    )
    email = f"{short_name}-bot@{domain.subdomain}.eventq.invalid"
    return accounts.CreatedUser(
        made["user_id"], domain.realm_id, email, f"The {short_name}", "member", made["api_key"]
    )


def test_a_bot_is_created_listed_and_runs_with_its_own_key(server, domain, clients):
    iago = clients("iago")
    watching = iago.register(event_types=["realm_bot"])["queue_id"]
    hamlet = clients("hamlet")
    answer = ok(hamlet.request("POST", "bots", full_name="Helper", short_name="helper",
                               bot_type=BOT_INCOMING_WEBHOOK))  # fmt: skip
    assert set(answer) >= {"user_id", "api_key", "avatar_url"}
    assert (answer["default_sending_stream"], answer["default_all_public_streams"]) == (None, False)
    [event] = wait_events(iago, watching, 1)
    assert (event["type"], event["op"], event["bot"]["user_id"]) == (
        "realm_bot",
        "add",
        answer["user_id"],
    )
    assert event["bot"]["bot_type"] == BOT_INCOMING_WEBHOOK
    assert "api_key" not in event["bot"]

    listed = ok(hamlet.request("GET", "bots"))["bots"]
    email = f"helper-bot@{domain.subdomain}.eventq.invalid"
    assert [(b["username"], b["full_name"]) for b in listed] == [(email, "Helper")]
    assert "api_key" not in listed[0]
    assert ok(clients("othello").request("GET", "bots"))["bots"] == []

    bot = clients(accounts.CreatedUser(answer["user_id"], domain.realm_id, email, "Helper",
                                       "member", answer["api_key"]))  # fmt: skip
    me = ok(bot.request("GET", "users/me"))
    assert (me["is_bot"], me["bot_type"], me["bot_owner_id"]) == (
        True,
        BOT_INCOMING_WEBHOOK,
        domain.id("hamlet"),
    )
    registered = bot.register(fetch_event_types=["realm_bot", "realm_user"])
    assert registered["realm_bots"] == []  # a bot administers no bot
    owner_state = hamlet.register(fetch_event_types=["realm_bot"])
    assert [b["user_id"] for b in owner_state["realm_bots"]] == [answer["user_id"]]
    # Through /json/ as well.
    assert ok(clients("hamlet", "/json").request("GET", "bots"))["bots"] == listed


def test_patch_renames_and_gives_a_bot_away(server, domain, clients):
    hamlet, othello = clients("hamlet"), clients("othello")
    bot = create_bot(hamlet, domain)
    queue = othello.register(event_types=["realm_bot"])["queue_id"]
    answer = ok(hamlet.request("PATCH", f"bots/{bot.user_id}", full_name="Renamed",
                               bot_owner_id=domain.id("othello")))  # fmt: skip
    assert (answer["full_name"], answer["bot_owner"]) == ("Renamed", domain.users["othello"].email)
    [added] = wait_events(othello, queue, 1)
    assert (added["op"], added["bot"]["owner_id"], added["bot"]["full_name"]) == (
        "add",
        domain.id("othello"),
        "Renamed",
    )
    # hamlet no longer administers it.
    assert error(hamlet.request("PATCH", f"bots/{bot.user_id}", full_name="Mine")) == (
        "Insufficient permission"
    )
    assert ok(othello.request("GET", "bots"))["bots"][0]["full_name"] == "Renamed"


def test_a_regenerated_key_replaces_the_old_one_at_once(server, domain, clients):
    hamlet = clients("hamlet")
    bot = create_bot(hamlet, domain)
    old = clients(bot)
    assert ok(old.request("GET", "users/me"))["user_id"] == bot.user_id  # cached now
    new_key = ok(hamlet.request("POST", f"bots/{bot.user_id}/api_key/regenerate"))["api_key"]
    assert new_key != bot.api_key
    wait_for(lambda: old.request("GET", "users/me").status_code == 401, what="the old key refused")
    assert error(old.request("GET", "users/me"), 401, "INVALID_API_KEY") == "Invalid API key"
    renewed = clients(accounts.CreatedUser(bot.user_id, bot.realm_id, bot.email, bot.full_name,
                                           "member", new_key))  # fmt: skip
    assert ok(renewed.request("GET", "users/me"))["user_id"] == bot.user_id


def test_deleting_a_bot_ends_its_queues_and_refuses_its_key(server, domain, clients):
    hamlet = clients("hamlet")
    bot = create_bot(hamlet, domain)
    runner = clients(bot)
    queue_id = runner.register()["queue_id"]
    parked = runner.park(queue_id, -1)
    server.wait_parked(bot.user_id, queue_id)
    ok(hamlet.request("DELETE", f"bots/{bot.user_id}"))
    assert parked.result(timeout=30).status_code == 200  # answered, not left hanging
    assert server.user_queues(bot.user_id) == []
    assert error(runner.request("GET", "users/me"), 401, "USER_DEACTIVATED") == (
        "Account is deactivated"
    )
    assert ok(hamlet.request("GET", "bots"))["bots"] == []
    ok(hamlet.request("DELETE", f"bots/{bot.user_id}"))  # already inactive: left alone
    # Reactivated like any user, by an administrator.
    ok(clients("iago").request("POST", f"users/{bot.user_id}/reactivate"))
    assert ok(runner.request("GET", "users/me"))["is_active"] is True


def test_bad_requests_are_refused_with_zulips_errors(server, domain, clients):
    hamlet = clients("hamlet")
    bot = create_bot(hamlet, domain)
    for client, method, path, params, message in (
        ("polonius", "POST", "bots", {"full_name": "G", "short_name": "g"},
         "Not allowed for guest users"),
        ("hamlet", "POST", "bots", {"full_name": "X", "short_name": "x y"}, "Bad name or username"),
        ("hamlet", "POST", "bots", {"full_name": "Y", "short_name": "helper"},
         "Username already in use"),
        ("hamlet", "POST", "bots", {"full_name": "Z", "short_name": "z", "bot_type": 4},
         "Embedded bots are not enabled."),
        ("hamlet", "POST", "bots", {"full_name": "Z", "short_name": "z", "bot_type": 3},
         "Invalid bot type"),
        ("othello", "PATCH", f"bots/{bot.user_id}", {"full_name": "Mine"},
         "Insufficient permission"),
        ("othello", "DELETE", f"bots/{bot.user_id}", {}, "Insufficient permission"),
        ("othello", "POST", f"bots/{bot.user_id}/api_key/regenerate", {},
         "Insufficient permission"),
        ("hamlet", "PATCH", f"bots/{domain.id('othello')}", {"full_name": "N"}, "No such bot"),
        ("hamlet", "DELETE", "bots/0", {}, "No such bot"),
        ("hamlet", "DELETE", f"bots/{'9' * 40}", {}, "No such bot"),
        ("hamlet", "PATCH", f"bots/{bot.user_id}", {"bot_owner_id": domain.id("polonius") + 10**6},
         "Failed to change owner, no such user"),
    ):  # fmt: skip
        response = clients(client).request(method, path, **params)
        assert error(response) == message, (method, path, params)
    missing = hamlet.request("POST", "bots", full_name="X")
    assert error(missing, code="REQUEST_VARIABLE_MISSING") == "Missing 'short_name' argument"
    # A bot cannot use the bots endpoints.
    assert (
        error(clients(bot).request("GET", "bots")) == "This endpoint does not accept bot requests."
    )
    # Parameters eventq does not model are reported back, as Zulip does.
    answer = ok(hamlet.request("PATCH", f"bots/{bot.user_id}", default_sending_stream="Verona"))
    assert answer["ignored_parameters_unsupported"] == ["default_sending_stream"]
