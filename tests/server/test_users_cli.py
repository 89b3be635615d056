"""The operator's user and realm commands: they run the domain's actions, so
connected clients see the changes as events (through RabbitMQ to the
server), and they keep their JSON output and exit statuses."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests

from tests.support import Api, run_eventq, wait_for


def eventq(database_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_eventq(*args, EVENTQ_DATABASE_URL=database_url, **env)


@pytest.fixture
def run(database_url, server):
    """`eventq` publishing to the shared server's queue in the session's vhost."""
    server.wait_consuming()

    def go(*args: str) -> subprocess.CompletedProcess[str]:
        return eventq(
            database_url,
            *args,
            EVENTQ_AMQP_URL=server.amqp_url,
            EVENTQ_NOTIFY_QUEUE=server.notify_queue,
        )

    return go


@pytest.fixture
def watcher(server, domain):
    """hamlet's (or `name`'s) client with a queue for the given event types."""
    clients: list[Api] = []

    def watch(*event_types: str, name: str = "hamlet") -> tuple[Api, str]:
        client = Api(server, domain.accounts[name])
        clients.append(client)
        return client, client.register(event_types=list(event_types))["queue_id"]

    yield watch
    for client in clients:
        client.close()


def wait_events(client: Api, queue_id: str, count: int) -> list[dict]:
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events",
    )


def test_user_create_tells_connected_clients_and_prints_a_working_key(run, server, domain, watcher):
    hamlet, queue = watcher("realm_user", "subscription")
    made = run(
        "user", "create", "--realm", domain.subdomain, "--email", "ada@x.example",
        "--full-name", "Ada Lovelace", "--role", "moderator",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    user = json.loads(made.stdout)
    assert set(user) == {"user_id", "realm_id", "email", "full_name", "role", "api_key"}
    assert (user["email"], user["role"], user["realm_id"]) == (
        "ada@x.example",
        "moderator",
        domain.realm_id,
    )
    added, peer_add = wait_events(hamlet, queue, 2)
    assert added["op"] == "add"
    assert added["person"]["user_id"] == user["user_id"]
    assert added["person"]["role"] == 300
    # Verona is a default stream hamlet is in: he sees Ada join it.
    assert peer_add["op"] == "peer_add"
    assert peer_add["user_ids"] == [user["user_id"]]

    response = requests.post(
        f"{server.url}/api/v1/register", auth=(user["email"], user["api_key"]), timeout=10
    )
    assert response.status_code == 200
    subscribed = {sub["name"] for sub in response.json()["subscriptions"]}
    assert subscribed == {"Verona"}


def test_user_deactivate_and_reactivate_tell_connected_clients(run, domain, watcher):
    hamlet, queue = watcher("realm_user")
    othello = domain.users["othello"]
    args = ("--realm", domain.subdomain, "--email", othello.email.upper())
    gone = run("user", "deactivate", *args)
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout) == {"email": othello.email.upper(), "active": False}
    # Already deactivated: still a success, and nobody is told twice.
    assert run("user", "deactivate", *args).returncode == 0
    back = run("user", "reactivate", *args)
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["active"] is True
    events = wait_events(hamlet, queue, 2)
    assert [event["person"] for event in events] == [
        {"user_id": othello.id, "is_active": False},
        {"user_id": othello.id, "is_active": True},
    ]
    assert hamlet.events(queue, events[-1]["id"]) == []


def test_realm_update_changes_settings_and_tells_connected_clients(run, domain, watcher):
    hamlet, queue = watcher("realm")
    changed = run(
        "realm", "update", "--subdomain", domain.subdomain, "--name", "Elsinore",
        "--allow-message-editing", "false", "--mandatory-topics", "TRUE",
        "--message-edit-limit", "none",
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout) == {
        "realm_id": domain.realm_id,
        "subdomain": domain.subdomain,
        "changed": {
            "name": "Elsinore",
            "allow_message_editing": False,
            "mandatory_topics": True,
            "message_content_edit_limit_seconds": None,
        },
    }
    events = wait_events(hamlet, queue, 4)
    assert [(e["op"], e.get("property"), e.get("value")) for e in events] == [
        ("update", "name", "Elsinore"),
        ("update", "allow_message_editing", False),
        ("update", "mandatory_topics", True),
        ("update_dict", "default", None),
    ]
    state = hamlet.register(fetch_event_types=["realm"])
    assert state["realm_name"] == "Elsinore"
    assert state["realm_message_content_edit_limit_seconds"] is None
    limited = run("realm", "update", "--subdomain", domain.subdomain, "--message-edit-limit", "60")
    assert limited.returncode == 0, limited.stderr
    assert (
        hamlet.register(fetch_event_types=["realm"])["realm_message_content_edit_limit_seconds"]
        == 60
    )


def test_realm_update_restricts_what_guests_see(run, domain, watcher):
    polonius, queue = watcher("realm", name="polonius")
    args = ("realm", "update", "--subdomain", domain.subdomain, "--can-access-all-users-group")
    changed = run(*args, "role:members")
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["changed"] == {"can_access_all_users_group": "role:members"}
    state = polonius.register(fetch_event_types=["realm", "realm_user"])
    groups = {group["name"]: group["id"] for group in polonius.register()["realm_user_groups"]}
    assert state["realm_can_access_all_users_group"] == groups["role:members"]
    event = wait_events(polonius, queue, 1)[0]
    assert event["data"] == {"can_access_all_users_group": groups["role:members"]}
    assert run(*args, "role:everyone").returncode == 0
    assert polonius.register()["realm_can_access_all_users_group"] == groups["role:everyone"]


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("--can-access-all-users-group", "role:admins"), 2, "invalid choice"),
        (("--allow-message-editing", "maybe"), 2, "expected true or false"),
        (("--message-edit-limit", "-5"), 2, "positive number of seconds"),
        (("--message-edit-limit", "soon"), 2, "expected seconds or none"),
        ((), 2, "nothing to change"),
        (("--name", "x" * 201), 1, "name is longer than 200 characters"),
        (("--name", "   "), 1, "A realm name cannot be empty"),
    ],
)
def test_realm_update_refuses_bad_input(database_url, domain, args, status, message):
    result = eventq(database_url, "realm", "update", "--subdomain", domain.subdomain, *args)
    assert result.returncode == status
    assert message in result.stderr


def test_user_and_realm_errors_exit_1_with_a_message(database_url, domain):
    hamlet = domain.users["hamlet"]
    again = eventq(
        database_url, "user", "create", "--realm", domain.subdomain, "--email", hamlet.email,
        "--full-name", "Twin",
    )  # fmt: skip
    assert again.returncode == 1
    assert f"Email '{hamlet.email}' already in use" in again.stderr
    unknown = eventq(
        database_url, "user", "deactivate", "--realm", domain.subdomain, "--email", "no@x.example"
    )
    assert unknown.returncode == 1
    assert "No such user: no@x.example" in unknown.stderr
    nowhere = eventq(database_url, "realm", "update", "--subdomain", "no-such-realm", "--name", "X")
    assert nowhere.returncode == 1
    assert "no realm with subdomain 'no-such-realm'" in nowhere.stderr


def test_user_create_succeeds_when_no_server_hears_it(database_url, domain):
    """The user exists once committed: an undeliverable event is a warning,
    and the key is still printed (it cannot be shown again)."""
    made = eventq(
        database_url, "user", "create", "--realm", domain.subdomain, "--email", "lone@x.example",
        "--full-name", "Lone", EVENTQ_AMQP_URL="",
        EVENTQ_NOTIFY_URL="http://127.0.0.1:1/api/internal/notify_tornado",
        EVENTQ_SHARED_SECRET="whatever",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["email"] == "lone@x.example"
    assert "connected clients were not told" in made.stderr
