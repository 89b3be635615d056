"""The register options and client capabilities that change what a client
receives, honoured on live events as in register's state: two clients of one
user, one with and one without, get the shapes Zulip gives each."""

from __future__ import annotations

from generation.events.users import gravatar_url
from tests.support import ok


def test_client_gravatar_nulls_the_avatar_in_messages_and_new_people(apis, domain):
    hamlet, iago = apis["hamlet"], apis["iago"]
    computing = hamlet.register(event_types=["message", "realm_user"], client_gravatar=True)
    given = hamlet.register(event_types=["message", "realm_user"], client_gravatar=False)

    ok(iago.request("POST", "messages", type="stream", to="Denmark", topic="t", content="hi"))
    ok(iago.request("POST", "users", email="yorick@example.com", full_name="Yorick"))

    message, person = hamlet.events(computing["queue_id"], -1)
    assert message["message"]["avatar_url"] is None
    assert person["op"] == "add"
    assert person["person"]["avatar_url"] is None
    message, person = hamlet.events(given["queue_id"], -1)
    assert message["message"]["avatar_url"] == gravatar_url(domain.users["iago"].email)
    assert person["person"]["avatar_url"] == gravatar_url("yorick@example.com")

    # as register gives the people to each
    [yorick] = [
        p
        for p in hamlet.register(fetch_event_types=["realm_user"], client_gravatar=True)[
            "realm_users"
        ]
        if p["email"] == "yorick@example.com"
    ]
    assert yorick["avatar_url"] is None


def test_simplified_presence_events_get_the_modern_form_the_others_the_legacy(apis, domain):
    hamlet, iago = apis["hamlet"], apis["iago"]
    simplified = {"notification_settings_null": False, "simplified_presence_events": True}
    modern = hamlet.register(event_types=["presence"], client_capabilities=simplified)
    legacy = hamlet.register(event_types=["presence"], slim_presence=False)
    slim = hamlet.register(event_types=["presence"], slim_presence=True)

    ok(iago.request("POST", "users/me/presence", status="active"))

    iago_id = domain.id("iago")
    [event] = hamlet.events(modern["queue_id"], -1)
    assert set(event) == {"id", "type", "presences"}
    times = event["presences"][str(iago_id)]
    assert set(times) == {"active_timestamp", "idle_timestamp"}
    [event] = hamlet.events(legacy["queue_id"], -1)
    assert (event["user_id"], event["email"]) == (iago_id, domain.users["iago"].email)
    assert event["presence"]["website"]["status"] == "active"
    assert event["presence"]["website"]["timestamp"] == times["active_timestamp"]
    assert "presences" not in event
    [event] = hamlet.events(slim["queue_id"], -1)
    assert "email" not in event
    assert "presences" not in event
    assert event["user_id"] == iago_id
