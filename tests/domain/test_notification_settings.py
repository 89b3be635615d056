"""verify_action for the settings that decide the notifications of users who
are away (migration 0023): the user's own (`user_settings` update, and the
legacy top-level copies), a channel's own (`subscription` update), how
register and `subscription` add show them, and the values refused.

The Domain realm: iago (admin), hamlet, othello (members), polonius (guest);
Denmark (public: iago, hamlet, othello), Verona (public: hamlet; default),
Scotland (private: iago, othello)."""

from __future__ import annotations

import psycopg
import pytest

from generation.actions.base import ActionError
from generation.actions.streams import (
    StreamRequest,
    do_add_subscriptions,
    do_delete_stream,
    do_remove_subscriptions,
    do_unarchive_stream,
    do_update_subscription_properties,
)
from generation.actions.users import do_change_user_setting
from tests.domain.harness import MODERN, covers

# Zulip's defaults, as a fresh user's register shows them.
DEFAULTS = {
    "enable_offline_email_notifications": True,
    "enable_offline_push_notifications": True,
    "wildcard_mentions_notify": True,
    "enable_stream_email_notifications": False,
    "enable_stream_push_notifications": False,
    "email_notifications_batching_period_seconds": 120,
}
CHANGED = {
    "enable_offline_email_notifications": False,
    "enable_offline_push_notifications": False,
    "wildcard_mentions_notify": False,
    "enable_stream_email_notifications": True,
    "enable_stream_push_notifications": True,
    "email_notifications_batching_period_seconds": 300,
}
CHANNEL_SETTINGS = (
    "desktop_notifications",
    "audible_notifications",
    "push_notifications",
    "email_notifications",
    "wildcard_mentions_notify",
)
# A client without the settings object reads Zulip's top-level copies.
LEGACY = frozenset({"notification_settings_null"})


def _setting(user_id, setting, value):
    return lambda ctx: do_change_user_setting(ctx, user_id, setting, value)


def _channel(user_id, stream_id, prop, value):
    return lambda ctx: do_update_subscription_properties(ctx, user_id, [(stream_id, prop, value)])


def _by_id(entries):
    return {entry["stream_id"]: entry for entry in entries}


# -- the user's own --------------------------------------------------------------


def test_a_new_user_has_zulips_defaults_in_both_forms(domain):
    settings = domain.fetch(fetch_event_types=["user_settings"])["user_settings"]
    assert {name: settings[name] for name in DEFAULTS} == DEFAULTS
    legacy = domain.fetch(fetch_event_types=["update_global_notifications"], capabilities=LEGACY)
    assert {name: legacy[name] for name in DEFAULTS} == DEFAULTS
    # A modern client has them in `user_settings` only.
    modern = domain.fetch(fetch_event_types=["update_global_notifications"])
    assert not set(DEFAULTS) & set(modern)


@covers(("user_settings", "update"))
def test_each_notification_setting_reaches_the_users_own_state(domain):
    hamlet = domain.id("hamlet")
    for setting, value in CHANGED.items():
        [event] = domain.verify(_setting(hamlet, setting, value))
        assert (event["type"], event["op"], event["property"], event["value"]) == (
            "user_settings",
            "update",
            setting,
            value,
        )
    settings = domain.fetch()["user_settings"]
    assert {name: settings[name] for name in CHANGED} == CHANGED
    # Othello's are his own.
    othello = domain.fetch("othello")["user_settings"]
    assert {name: othello[name] for name in DEFAULTS} == DEFAULTS


@covers(("user_settings", "update"))
def test_legacy_clients_get_the_top_level_copies_updated(domain):
    hamlet = domain.id("hamlet")
    for setting, value in CHANGED.items():
        domain.verify(_setting(hamlet, setting, value), capabilities=LEGACY)
    state = domain.fetch(capabilities=LEGACY)
    assert {name: state[name] for name in CHANGED} == CHANGED


@covers()
def test_the_same_value_again_and_other_users_hear_nothing(domain):
    hamlet = domain.id("hamlet")
    domain.verify(
        _setting(hamlet, "wildcard_mentions_notify", True),
        num_events=0,
        state_change_expected=False,
    )
    domain.verify(
        _setting(hamlet, "enable_offline_push_notifications", False),
        user="othello",
        num_events=0,
        state_change_expected=False,
    )


def test_the_batching_period_is_one_second_to_a_week(domain):
    hamlet = domain.id("hamlet")
    for value, message in (
        (0, "Invalid email batching period: 0 seconds"),
        (-1, "Invalid email batching period: -1 seconds"),
        (7 * 24 * 60 * 60 + 10, "Invalid email batching period: 604810 seconds"),
        (True, "email_notifications_batching_period_seconds is not an integer"),
        ("300", "email_notifications_batching_period_seconds is not an integer"),
    ):
        with pytest.raises(ActionError, match=f"^{message}$"):
            domain.run(_setting(hamlet, "email_notifications_batching_period_seconds", value))
    for value in (1, 7 * 24 * 60 * 60):
        domain.run(_setting(hamlet, "email_notifications_batching_period_seconds", value))
        settings = domain.fetch(fetch_event_types=["user_settings"])["user_settings"]
        assert settings["email_notifications_batching_period_seconds"] == value


def test_the_boolean_settings_take_only_booleans(domain):
    hamlet = domain.id("hamlet")
    for setting in set(DEFAULTS) - {"email_notifications_batching_period_seconds"}:
        for value in (1, "true", None):
            with pytest.raises(ActionError, match=f"^{setting} is not a boolean$"):
                domain.run(_setting(hamlet, setting, value))
    settings = domain.fetch(fetch_event_types=["user_settings"])["user_settings"]
    assert {name: settings[name] for name in DEFAULTS} == DEFAULTS


def test_the_table_holds_the_batching_bounds_too(domain):
    """The column's CHECK: no writer outside the action stores a period
    Zulip would refuse."""
    hamlet = domain.id("hamlet")
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        for value in (0, 604801):
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(
                    "UPDATE user_settings SET email_notifications_batching_period_seconds = %s"
                    " WHERE user_id = %s",
                    (value, hamlet),
                )


# -- a channel's own ---------------------------------------------------------------


@covers(("subscription", "update"))
def test_each_channel_setting_is_stored_and_sent_to_the_user(domain):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]
    entry = _by_id(domain.fetch()["subscriptions"])[denmark]
    assert {name: entry[name] for name in CHANNEL_SETTINGS} == dict.fromkeys(CHANNEL_SETTINGS)
    for index, prop in enumerate(CHANNEL_SETTINGS):
        value = index % 2 == 0
        [event] = domain.verify(_channel(hamlet, denmark, prop, value))
        assert (event["op"], event["stream_id"], event["property"], event["value"]) == (
            "update",
            denmark,
            prop,
            value,
        )
    # Changed back: false after true is a change too.
    domain.verify(_channel(hamlet, denmark, "push_notifications", False))
    entry = _by_id(domain.fetch()["subscriptions"])[denmark]
    assert {name: entry[name] for name in CHANNEL_SETTINGS} == {
        "desktop_notifications": True,
        "audible_notifications": False,
        "push_notifications": False,
        "email_notifications": False,
        "wildcard_mentions_notify": True,
    }
    # Hamlet's other channels, and othello's Denmark, are untouched.
    assert (
        _by_id(domain.fetch()["subscriptions"])[domain.streams["Verona"]]["push_notifications"]
        is None
    )
    assert (
        _by_id(domain.fetch("othello")["subscriptions"])[denmark]["desktop_notifications"] is None
    )
    domain.verify(
        _channel(hamlet, denmark, "email_notifications", True),
        user="othello",
        num_events=0,
        state_change_expected=False,
    )


@covers(("subscription", "add"))
def test_a_returning_subscriber_gets_the_stored_settings_back(domain):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]
    domain.run(
        lambda ctx: do_update_subscription_properties(
            ctx,
            hamlet,
            [(denmark, "email_notifications", True), (denmark, "push_notifications", False)],
        )
    )
    domain.run(lambda ctx: do_remove_subscriptions(ctx, hamlet, domain.realm_id, ["Denmark"]))
    left = _by_id(domain.fetch()["unsubscribed"])[denmark]
    assert (left["email_notifications"], left["push_notifications"]) == (True, False)
    [add] = domain.verify(
        lambda ctx: do_add_subscriptions(ctx, hamlet, domain.realm_id, [StreamRequest("Denmark")])
    )
    [subscription] = add["subscriptions"]
    assert {name: subscription[name] for name in CHANNEL_SETTINGS} == {
        "desktop_notifications": None,
        "audible_notifications": None,
        "push_notifications": False,
        "email_notifications": True,
        "wildcard_mentions_notify": None,
    }


@covers(("stream", "create"), ("subscription", "peer_add"), ("subscription", "add"))
def test_an_unarchived_channel_comes_back_with_its_settings(domain):
    """A client without `archived_channels` learns the channel anew,
    subscription settings included."""
    iago, hamlet, verona = domain.id("iago"), domain.id("hamlet"), domain.streams["Verona"]
    domain.run(_channel(hamlet, verona, "wildcard_mentions_notify", False))
    domain.run(lambda ctx: do_delete_stream(ctx, iago, domain.realm_id, verona))
    events = domain.verify(
        lambda ctx: do_unarchive_stream(ctx, iago, domain.realm_id, verona),
        capabilities=MODERN - {"archived_channels"},
        num_events=3,
    )
    [subscription] = events[2]["subscriptions"]
    assert subscription["wildcard_mentions_notify"] is False


def test_channel_settings_take_only_booleans(domain):
    hamlet, denmark, verona = (
        domain.id("hamlet"),
        domain.streams["Denmark"],
        domain.streams["Verona"],
    )
    for prop in CHANNEL_SETTINGS:
        for value in (None, 1, "true"):
            with pytest.raises(ActionError, match=f"^{prop} is not a boolean$"):
                domain.run(_channel(hamlet, denmark, prop, value))
    with pytest.raises(ActionError, match=f"^Not subscribed to channel ID {verona}$"):
        domain.run(_channel(domain.id("othello"), verona, "push_notifications", True))
    entry = _by_id(domain.fetch()["subscriptions"])[denmark]
    assert {name: entry[name] for name in CHANNEL_SETTINGS} == dict.fromkeys(CHANNEL_SETTINGS)
