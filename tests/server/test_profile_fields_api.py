"""Custom profile fields over HTTP against the real server: administrators
create, edit, reorder and delete fields; users set and remove their own
values, administrators anyone's (`PATCH users/{id}`); the events each
sends and to whom, what register and GET users show; and bad input (4xx
JSON with Zulip's messages, never 500)."""

from __future__ import annotations

import orjson

from generation import accounts
from generation.events.profile_fields import LONG_TEXT, SELECT, SHORT_TEXT, USER
from tests.support import Api, error, ok, wait_for

OPTIONS = {"0": {"text": "Vim", "order": "1"}, "1": {"text": "Emacs", "order": "2"}}


def events_of(client, queue_id, count):
    """The first `count` events of a queue (waiting for them to arrive)."""
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def create(client, name, field_type, **params):
    return ok(
        client.request("POST", "realm/profile_fields", name=name, field_type=field_type, **params)
    )["id"]


def person(state, user_id):
    [found] = [p for p in state["realm_users"] if p["user_id"] == user_id]
    return found


def test_fields_are_created_edited_reordered_and_deleted_by_administrators(apis, domain):
    iago, othello = apis["iago"], apis["othello"]
    queue = othello.register(event_types=["custom_profile_fields"])["queue_id"]
    bio = create(iago, " Biography ", LONG_TEXT, hint="A few words")
    editor = create(iago, "Editor", SELECT, field_data=OPTIONS, display_in_profile_summary=True)
    first, second = events_of(othello, queue, 2)
    assert [f["name"] for f in first["fields"]] == ["Biography"]
    assert [f["id"] for f in second["fields"]] == [bio, editor]
    assert orjson.loads(second["fields"][1]["field_data"]) == OPTIONS
    assert second["fields"][1]["display_in_profile_summary"] is True

    fields = ok(othello.request("GET", "realm/profile_fields"))["custom_fields"]
    assert fields == second["fields"]

    ok(iago.request("PATCH", f"realm/profile_fields/{bio}", name="About", required=True))
    ok(iago.request("PATCH", "realm/profile_fields", order=[editor, bio]))
    ok(iago.request("DELETE", f"realm/profile_fields/{editor}"))
    edited, reordered, deleted = events_of(othello, queue, 5)[2:]
    assert (edited["fields"][0]["name"], edited["fields"][0]["required"]) == ("About", True)
    assert [f["id"] for f in reordered["fields"]] == [editor, bio]
    assert [(f["id"], f["order"]) for f in deleted["fields"]] == [(bio, 1)]
    state = othello.register(fetch_event_types=["custom_profile_fields"])
    assert state["custom_profile_fields"] == deleted["fields"]
    assert state["custom_profile_field_types"]["SELECT"] == {
        "id": SELECT,
        "name": "List of options",
    }


def test_users_set_and_remove_their_values_and_everyone_is_told(apis, domain):
    iago, hamlet, othello = apis["iago"], apis["hamlet"], apis["othello"]
    short = create(iago, "Nickname", SHORT_TEXT)
    users = create(iago, "Friends", USER)
    queue = othello.register(event_types=["realm_user"])["queue_id"]
    ok(
        hamlet.request(
            "PATCH",
            "users/me/profile_data",
            data=[
                {"id": short, "value": "*Sweet* prince"},
                {"id": users, "value": [domain.id("othello")]},
            ],
        )
    )
    first, second = events_of(othello, queue, 2)
    assert first["person"] == {
        "user_id": domain.id("hamlet"),
        "custom_profile_field": {
            "id": short,
            "value": "*Sweet* prince",
            "rendered_value": "<p><em>Sweet</em> prince</p>",
        },
    }
    assert second["person"]["custom_profile_field"] == {
        "id": users,
        "value": f"[{domain.id('othello')}]",
    }
    data = person(othello.register(fetch_event_types=["realm_user"]), domain.id("hamlet"))[
        "profile_data"
    ]
    assert data == {
        str(short): {"value": "*Sweet* prince", "rendered_value": "<p><em>Sweet</em> prince</p>"},
        str(users): {"value": f"[{domain.id('othello')}]"},
    }
    ok(hamlet.request("DELETE", "users/me/profile_data", data=[short]))
    [*_, removed] = events_of(othello, queue, 3)
    assert removed["person"]["custom_profile_field"] == {"id": short, "value": None}

    # GET users shows them when asked; GET users/me always (Zulip's).
    members = ok(hamlet.request("GET", "users", include_custom_profile_fields=True))["members"]
    [me] = [m for m in members if m["user_id"] == domain.id("hamlet")]
    assert me["profile_data"] == {str(users): {"value": f"[{domain.id('othello')}]"}}
    plain = ok(hamlet.request("GET", "users"))["members"]
    assert all("profile_data" not in m for m in plain)
    assert ok(hamlet.request("GET", "users/me"))["profile_data"] == me["profile_data"]
    one = ok(
        othello.request("GET", f"users/{domain.id('hamlet')}", include_custom_profile_fields=True)
    )
    assert one["user"]["profile_data"] == me["profile_data"]


def test_administrators_set_anyones_values_with_patch_users(apis, domain):
    iago, hamlet, othello = apis["iago"], apis["hamlet"], apis["othello"]
    team = create(iago, "Team", SHORT_TEXT, editable_by_user=False)
    note = create(iago, "Note", SHORT_TEXT)
    refused = error(
        hamlet.request("PATCH", "users/me/profile_data", data=[{"id": team, "value": "x"}])
    )
    assert refused["msg"] == (
        "You are not allowed to change this field. Contact an administrator to update it."
    )
    queue = othello.register(event_types=["realm_user"])["queue_id"]
    hamlet_id = domain.id("hamlet")
    ok(
        iago.request(
            "PATCH",
            f"users/{hamlet_id}",
            profile_data=[{"id": team, "value": "Players"}, {"id": note, "value": "n"}],
        )
    )
    ok(iago.request("PATCH", f"users/{hamlet_id}", profile_data=[{"id": note, "value": None}]))
    events = events_of(othello, queue, 3)
    assert [e["person"]["custom_profile_field"]["value"] for e in events] == ["Players", "n", None]
    data = person(othello.register(fetch_event_types=["realm_user"]), hamlet_id)["profile_data"]
    assert data == {str(team): {"value": "Players", "rendered_value": "<p>Players</p>"}}
    body = error(
        othello.request("PATCH", f"users/{hamlet_id}", profile_data=[{"id": note, "value": "x"}]),
        403,
    )
    assert (body["code"], body["msg"]) == ("UNAUTHORIZED", "Must be an organization administrator")


def test_bad_input_gets_zulips_errors_and_changes_nothing(apis, domain, server):
    iago, hamlet = apis["iago"], apis["hamlet"]
    field = create(iago, "Field", SHORT_TEXT)
    for client, method, path, params, status, message in (
        (hamlet, "POST", "realm/profile_fields", {"name": "x", "field_type": 1}, 403,
         "Must be an organization administrator"),
        (iago, "POST", "realm/profile_fields", {"name": "x"}, 400,
         "Missing 'field_type' argument"),
        (iago, "POST", "realm/profile_fields", {"name": "x", "field_type": 99}, 400,
         "Invalid field type."),
        (iago, "POST", "realm/profile_fields", {"name": "Field", "field_type": 1}, 400,
         "A field with that label already exists."),
        (iago, "POST", "realm/profile_fields", {"name": "x", "field_type": 3, "field_data": "[]"},
         400, "field_data is not a dict"),
        (iago, "POST", "realm/profile_fields", {"name": "x", "field_type": 3, "field_data": "{"},
         400, 'Argument "field_data" is not valid JSON.'),
        (iago, "PATCH", "realm/profile_fields/424242", {"name": "y"}, 400,
         "Field id 424242 not found."),
        (iago, "DELETE", "realm/profile_fields/0", {}, 400, "Field id 0 not found."),
        (iago, "PATCH", "realm/profile_fields", {"order": "[1, true]"}, 400,
         "order[1] is not an integer"),
        (iago, "PATCH", "realm/profile_fields", {"order": []}, 400, "Invalid order mapping."),
        (hamlet, "PATCH", "users/me/profile_data", {"data": {"id": field}}, 400,
         "data is not a list"),
        (hamlet, "PATCH", "users/me/profile_data", {"data": [{"id": field}]}, 400,
         "value key is missing from data[0]"),
        (hamlet, "PATCH", "users/me/profile_data", {"data": [{"id": field, "value": 5}]}, 400,
         'data[0]["value"] is not a string or a list'),
        (hamlet, "PATCH", "users/me/profile_data", {"data": [{"id": field, "value": "x" * 51}]},
         400, "Field is too long (limit: 50 characters)"),
        (hamlet, "PATCH", "users/me/profile_data", {"data": [{"id": 424242, "value": "x"}]}, 400,
         "Field id 424242 not found."),
        (hamlet, "DELETE", "users/me/profile_data", {"data": ["x"]}, 400,
         "data[0] is not an integer"),
    ):  # fmt: skip
        body = error(client.request(method, path, **params), status)
        assert body["msg"] == message, (path, params)
    bot_made = ok(hamlet.request("POST", "bots", full_name="The helper", short_name="helper"))
    bot = accounts.CreatedUser(
        bot_made["user_id"],
        domain.realm_id,
        f"helper-bot@{domain.subdomain}.eventq.invalid",
        "The helper",
        "member",
        bot_made["api_key"],
    )
    as_bot = Api(server, bot)
    try:
        body = error(
            as_bot.request("PATCH", "users/me/profile_data", data=[{"id": field, "value": "x"}])
        )
        assert body["msg"] == "This endpoint does not accept bot requests."
    finally:
        as_bot.close()
    state = hamlet.register(fetch_event_types=["realm_user", "custom_profile_fields"])
    assert [f["name"] for f in state["custom_profile_fields"]] == ["Field"]
    assert person(state, domain.id("hamlet"))["profile_data"] == {}
