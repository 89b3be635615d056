"""The notification settings over HTTP against the real server, at Zulip's
paths: `PATCH settings` for the user's own, `POST
users/me/subscriptions/properties` for a channel's; what register, `GET
users/me/subscriptions` and the events show of them; and bad input, with
Zulip's error strings (4xx JSON, never 500)."""

from __future__ import annotations

import pytest

from tests.support import error, ok, wait_for, zulip_client

USER_SETTINGS = {
    "enable_offline_email_notifications": False,
    "enable_offline_push_notifications": False,
    "wildcard_mentions_notify": False,
    "enable_stream_email_notifications": True,
    "enable_stream_push_notifications": True,
    "email_notifications_batching_period_seconds": 600,
}


def events_of(client, queue_id, count):
    """The first `count` events of a queue (waiting for them to arrive)."""
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def test_patch_settings_changes_them_in_register_and_sends_the_events(apis):
    hamlet = apis["hamlet"]
    queue = hamlet.register(event_types=["user_settings"])["queue_id"]
    ok(hamlet.request("PATCH", "settings", **USER_SETTINGS))
    events = events_of(hamlet, queue, len(USER_SETTINGS))
    assert {event["property"]: event["value"] for event in events} == USER_SETTINGS
    assert {(event["type"], event["op"]) for event in events} == {("user_settings", "update")}

    modern = hamlet.register(
        fetch_event_types=["user_settings", "update_global_notifications"],
        client_capabilities={"notification_settings_null": True, "user_settings_object": True},
    )
    assert {name: modern["user_settings"][name] for name in USER_SETTINGS} == USER_SETTINGS
    assert not set(USER_SETTINGS) & set(modern)
    # A client without the settings object reads Zulip's top-level copies.
    legacy = hamlet.register(fetch_event_types=["update_global_notifications"])
    assert {name: legacy[name] for name in USER_SETTINGS} == USER_SETTINGS

    # The same values again change nothing and send nothing: the next event
    # is that of the next real change (the queue receives them in order).
    ok(hamlet.request("PATCH", "settings", **USER_SETTINGS))
    ok(hamlet.request("PATCH", "settings", wildcard_mentions_notify=True))
    [after] = wait_for(
        lambda: hamlet.events(queue, events[-1]["id"]), what="the next settings event"
    )
    assert (after["property"], after["value"]) == ("wildcard_mentions_notify", True)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"email_notifications_batching_period_seconds": -1},
            "Invalid email batching period: -1 seconds",
        ),
        (
            {"email_notifications_batching_period_seconds": 0},
            "Invalid email batching period: 0 seconds",
        ),
        (
            {"email_notifications_batching_period_seconds": 7 * 24 * 60 * 60 + 10},
            "Invalid email batching period: 604810 seconds",
        ),
        (
            {"email_notifications_batching_period_seconds": True},
            "email_notifications_batching_period_seconds is not an integer",
        ),
        (
            {"enable_offline_email_notifications": 1},
            "enable_offline_email_notifications is not a boolean",
        ),
        (
            {"enable_offline_push_notifications": '"true"'},
            "enable_offline_push_notifications is not a boolean",
        ),
        ({"wildcard_mentions_notify": "null"}, "wildcard_mentions_notify is not a boolean"),
        (
            {"enable_stream_email_notifications": "yes"},
            'Argument "enable_stream_email_notifications" is not valid JSON.',
        ),
    ],
)
def test_bad_settings_are_refused_and_change_nothing(apis, params, message):
    hamlet = apis["hamlet"]
    # With a valid change beside it: all or nothing.
    body = error(
        hamlet.request("PATCH", "settings", enable_stream_push_notifications=True, **params)
    )
    assert body["msg"] == message
    settings = hamlet.register(fetch_event_types=["user_settings"])["user_settings"]
    assert settings["enable_stream_push_notifications"] is False
    assert settings["email_notifications_batching_period_seconds"] == 120


def test_channel_settings_are_stored_shown_and_sent(apis, domain):
    hamlet = apis["hamlet"]
    denmark, verona = domain.streams["Denmark"], domain.streams["Verona"]
    queue = hamlet.register(event_types=["subscription"])["queue_id"]
    changes = [
        {"stream_id": denmark, "property": "email_notifications", "value": True},
        {"stream_id": denmark, "property": "push_notifications", "value": False},
        {"stream_id": denmark, "property": "wildcard_mentions_notify", "value": False},
        {"stream_id": verona, "property": "desktop_notifications", "value": True},
        {"stream_id": verona, "property": "audible_notifications", "value": True},
    ]
    body = ok(
        hamlet.request("POST", "users/me/subscriptions/properties", subscription_data=changes)
    )
    assert body["subscription_data"] == changes
    events = events_of(hamlet, queue, len(changes))
    assert [
        {"stream_id": e["stream_id"], "property": e["property"], "value": e["value"]}
        for e in events
    ] == changes

    expected = {
        denmark: {
            "desktop_notifications": None,
            "audible_notifications": None,
            "push_notifications": False,
            "email_notifications": True,
            "wildcard_mentions_notify": False,
        },
        verona: {
            "desktop_notifications": True,
            "audible_notifications": True,
            "push_notifications": None,
            "email_notifications": None,
            "wildcard_mentions_notify": None,
        },
    }

    def shown(subscriptions):
        return {
            sub["stream_id"]: {name: sub[name] for name in expected[denmark]}
            for sub in subscriptions
        }

    listed = ok(hamlet.request("GET", "users/me/subscriptions"))["subscriptions"]
    assert shown(listed) == expected
    registered = hamlet.register(fetch_event_types=["subscription"])["subscriptions"]
    assert shown(registered) == expected
    # Othello's Denmark is his own.
    othello = ok(apis["othello"].request("GET", "users/me/subscriptions"))["subscriptions"]
    assert shown(othello)[denmark]["email_notifications"] is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "push_notifications is not a boolean"),
        (1, "push_notifications is not a boolean"),
        ("true", "push_notifications is not a boolean"),
    ],
)
def test_a_channel_setting_that_is_not_a_boolean_is_refused(apis, domain, value, message):
    hamlet = apis["hamlet"]
    denmark = domain.streams["Denmark"]
    changes = [
        {"stream_id": denmark, "property": "email_notifications", "value": True},
        {"stream_id": denmark, "property": "push_notifications", "value": value},
    ]
    body = error(
        hamlet.request("POST", "users/me/subscriptions/properties", subscription_data=changes)
    )
    assert body["msg"] == message
    listed = ok(hamlet.request("GET", "users/me/subscriptions"))["subscriptions"]
    entry = next(sub for sub in listed if sub["stream_id"] == denmark)
    assert (entry["email_notifications"], entry["push_notifications"]) == (None, None)


def test_the_zulip_client_changes_them(server, domain):
    """The real `zulip` client, as Zulip's API documentation calls these
    endpoints (`call_endpoint` for PATCH settings)."""
    hamlet = zulip_client(server, domain.accounts["hamlet"])

    def update_settings(request):
        return hamlet.call_endpoint(url="settings", method="PATCH", request=request)

    result = update_settings(
        {
            "enable_offline_push_notifications": False,
            "email_notifications_batching_period_seconds": 60,
        }
    )
    assert result["result"] == "success", result
    denmark = domain.streams["Denmark"]
    result = hamlet.update_subscription_settings(
        [{"stream_id": denmark, "property": "push_notifications", "value": True}]
    )
    assert result["result"] == "success", result
    state = hamlet.register(
        event_types=["subscription", "user_settings"],
        client_capabilities={"notification_settings_null": True, "user_settings_object": True},
    )
    assert state["user_settings"]["enable_offline_push_notifications"] is False
    assert state["user_settings"]["email_notifications_batching_period_seconds"] == 60
    entry = next(sub for sub in state["subscriptions"] if sub["stream_id"] == denmark)
    assert entry["push_notifications"] is True
    result = update_settings({"email_notifications_batching_period_seconds": 604801})
    assert (result["result"], result["msg"]) == (
        "error",
        "Invalid email batching period: 604801 seconds",
    )
