"""The register options and client capabilities that change what a client
receives, honoured on live events as in register's state: two clients of one
user, one with and one without, get the shapes Zulip gives each."""

from __future__ import annotations

from generation.events.users import gravatar_url
from tests.support import ok, wait_for


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


def test_the_empty_topic_is_general_chat_for_clients_without_empty_topic_name(apis, domain):
    hamlet, iago = apis["hamlet"], apis["iago"]
    types = ["message", "update_message", "delete_message", "update_message_flags",
             "user_topic", "typing"]  # fmt: skip
    legacy_capabilities = {"notification_settings_null": False, "bulk_message_deletion": True,
                           "stream_typing_notifications": True}  # fmt: skip
    modern = hamlet.register(
        event_types=types, client_capabilities={**legacy_capabilities, "empty_topic_name": True}
    )
    legacy = hamlet.register(event_types=types, client_capabilities=legacy_capabilities)
    denmark = domain.streams["Denmark"]

    def send(topic):
        body = ok(iago.request("POST", "messages", type="stream", to="Denmark", topic=topic,
                               content="hi"))  # fmt: skip
        return body["id"]

    first, second = send(""), send("general chat")
    ok(iago.request("POST", "typing", type="stream", op="start", stream_id=denmark, topic=""))
    ok(hamlet.request("POST", "user_topics", stream_id=denmark, topic="", visibility_policy=1))
    ok(hamlet.request("POST", "messages/flags", messages=[first], op="add", flag="read"))
    ok(hamlet.request("POST", "messages/flags", messages=[first], op="remove", flag="read"))
    ok(iago.request("PATCH", f"messages/{second}", topic="moved", propagate_mode="change_one"))
    ok(iago.request("DELETE", f"messages/{first}"))

    def topics(queue_id):
        found = []
        for event in hamlet.events(queue_id, -1):
            kind = event["type"]
            if kind == "message":
                found.append((kind, event["message"]["subject"]))
            elif kind in ("typing", "delete_message"):
                found.append((kind, event["topic"]))
            elif kind == "user_topic":
                found.append((kind, event["topic_name"]))
            elif kind == "update_message_flags" and event["op"] == "remove":
                found.append((kind, event["message_details"][str(first)]["topic"]))
            elif kind == "update_message":
                found.append((kind, (event["orig_subject"], event["subject"])))
        return found

    assert topics(modern["queue_id"]) == [
        ("message", ""), ("message", ""), ("typing", ""), ("user_topic", ""),
        ("update_message_flags", ""), ("update_message", ("", "moved")),
        ("delete_message", ""),
    ]  # fmt: skip
    name = "general chat"
    assert topics(legacy["queue_id"]) == [
        ("message", name), ("message", name), ("typing", name), ("user_topic", name),
        ("update_message_flags", name), ("update_message", (name, "moved")),
        ("delete_message", name),
    ]  # fmt: skip

    # as register gives each its state
    ok(iago.request("POST", "messages", type="stream", to="Denmark", topic="", content="again"))
    sections = ["realm", "message", "update_message_flags", "user_topic"]
    for capabilities, shown in ((legacy_capabilities, name), ({"empty_topic_name": True}, "")):
        state = hamlet.register(
            fetch_event_types=sections,
            client_capabilities={"notification_settings_null": False, **capabilities},
        )
        assert state["realm_empty_topic_display_name"] == "general chat"
        assert [(t["stream_id"], t["topic_name"]) for t in state["user_topics"]] == [
            (denmark, shown)
        ]
        assert [s["topic"] for s in state["unread_msgs"]["streams"]] == [shown, "moved"]


def test_archived_channels_keep_an_archived_channel_the_others_lose_it(apis, domain):
    hamlet, iago = apis["hamlet"], apis["iago"]
    types = ["stream", "subscription"]
    modern = hamlet.register(
        event_types=types,
        client_capabilities={"notification_settings_null": False, "archived_channels": True},
    )
    legacy = hamlet.register(event_types=types)
    denmark = domain.streams["Denmark"]

    ok(iago.request("DELETE", f"streams/{denmark}"))

    def arrived(queue_id, after, count):
        def read():
            events = hamlet.events(queue_id, after)
            return events if len(events) >= count else None

        return wait_for(read, what=f"{count} events")

    [kept] = arrived(modern["queue_id"], -1, 1)
    assert {k: kept[k] for k in ("type", "op", "stream_id", "property", "value")} == {
        "type": "stream",
        "op": "update",
        "stream_id": denmark,
        "property": "is_archived",
        "value": True,
    }
    [gone] = arrived(legacy["queue_id"], -1, 1)
    assert (gone["type"], gone["op"], gone["stream_ids"]) == ("stream", "delete", [denmark])
    assert gone["streams"] == [{"stream_id": denmark}]

    # as register gives them to each
    with_it = hamlet.register(
        fetch_event_types=["subscription"],
        client_capabilities={"notification_settings_null": False, "archived_channels": True},
    )
    [archived] = [s for s in with_it["subscriptions"] if s["stream_id"] == denmark]
    assert archived["is_archived"] is True
    without = hamlet.register(fetch_event_types=["subscription"])
    assert denmark not in {s["stream_id"] for s in without["subscriptions"]}

    ok(iago.request("PATCH", f"streams/{denmark}", is_archived=False))
    [back] = arrived(modern["queue_id"], kept["id"], 1)
    assert (back["op"], back["property"], back["value"]) == ("update", "is_archived", False)
    events = arrived(legacy["queue_id"], gone["id"], 3)
    assert [(e["type"], e["op"]) for e in events] == [
        ("stream", "create"),
        ("subscription", "peer_add"),
        ("subscription", "add"),
    ]
    assert all("only_without_archived_channels" not in e for e in events)
    assert events[0]["streams"][0]["is_archived"] is False
    [subscription] = events[2]["subscriptions"]
    assert (subscription["stream_id"], subscription["is_archived"]) == (denmark, False)


def test_pronouns_fields_are_short_text_for_clients_without_the_capability(apis, domain):
    hamlet, iago = apis["hamlet"], apis["iago"]
    pronouns, short_text = 8, 1  # Zulip's field types
    # Zulip counts a client that does not say as supporting the type.
    supported = {"notification_settings_null": False}
    unsupported = {**supported, "pronouns_field_type_supported": False}
    modern = hamlet.register(event_types=["custom_profile_fields"], client_capabilities=supported)
    legacy = hamlet.register(event_types=["custom_profile_fields"], client_capabilities=unsupported)

    ok(iago.request("POST", "realm/profile_fields", name="Pronouns", field_type=pronouns))
    ok(iago.request("POST", "realm/profile_fields", name="Nickname", field_type=short_text))

    def both(queue_id):
        return wait_for(
            lambda: (events := hamlet.events(queue_id, -1)) and len(events) == 2 and events,
            what=f"two events on {queue_id}",
        )

    assert [[f["type"] for f in e["fields"]] for e in both(modern["queue_id"])] == [
        [pronouns],
        [pronouns, short_text],
    ]
    assert [[f["type"] for f in e["fields"]] for e in both(legacy["queue_id"])] == [
        [short_text],
        [short_text, short_text],
    ]
    # as register gives the fields (and the table of types) to each
    with_it = hamlet.register(
        fetch_event_types=["custom_profile_fields"], client_capabilities=supported
    )
    without = hamlet.register(
        fetch_event_types=["custom_profile_fields"], client_capabilities=unsupported
    )
    assert [f["type"] for f in with_it["custom_profile_fields"]] == [pronouns, short_text]
    assert [f["type"] for f in without["custom_profile_fields"]] == [short_text, short_text]
    assert "PRONOUNS" in with_it["custom_profile_field_types"]
    assert "PRONOUNS" not in without["custom_profile_field_types"]
