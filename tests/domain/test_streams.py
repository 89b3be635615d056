"""verify_action for streams, subscriptions and default streams, seen by each
kind of user: a subscriber, a member who is not, a guest, and users who gain
or lose sight of a stream. Plus the refusals.

The Domain realm: iago (admin), hamlet, othello (members), polonius (guest);
Denmark (public: iago, hamlet, othello), Verona (public: hamlet; default),
Scotland (private: iago, othello). Stream actions raced against register
are in tests/domain/test_register_race.py, with every area's.
"""

from __future__ import annotations

import itertools

import pytest

from apply_events.appliers.streams import SUBSCRIPTION_LISTS
from generation import accounts
from generation.actions.base import ActionContext, ActionError
from generation.actions.messages import do_send_stream_message
from generation.actions.personal import do_mute_topic_legacy
from generation.actions.streams import (
    StreamRequest,
    do_add_default_stream,
    do_add_subscriptions,
    do_change_stream_description,
    do_change_stream_invite_only,
    do_create_stream,
    do_delete_stream,
    do_remove_default_stream,
    do_remove_subscriptions,
    do_rename_stream,
    do_unarchive_stream,
    do_update_subscription_properties,
    send_stream_access_for_role,
    send_subscriber_activity,
    subscribe_to_default_streams,
)
from tests.domain.harness import MODERN, covers

STREAM_SECTIONS = ["stream", "subscription", "default_streams"]
_names = (f"Rome {n}" for n in itertools.count())


def _by_id(entries):
    return {entry["stream_id"]: entry for entry in entries}


def _subscribe(domain, actor, stream, *users):
    principals = [domain.id(user) for user in users] if users else None
    return lambda ctx: do_add_subscriptions(
        ctx, domain.id(actor), domain.realm_id, [StreamRequest(stream)], principals=principals
    )


def _unsubscribe(domain, actor, stream, *users):
    principals = [domain.id(user) for user in users] if users else None
    return lambda ctx: do_remove_subscriptions(
        ctx, domain.id(actor), domain.realm_id, [stream], principals=principals
    )


# -- creating streams -----------------------------------------------------------


@covers(("stream", "create"), ("subscription", "add"), ("subscription", "peer_add"))
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_creating_a_public_stream(domain, include_subscribers):
    hamlet = domain.id("hamlet")

    def create(ctx):
        return do_create_stream(ctx, hamlet, domain.realm_id, next(_names), description="Roman")

    creator = domain.verify(create, num_events=2, include_subscribers=include_subscribers)
    assert [e["type"] for e in creator] == ["stream", "subscription"]
    [subscription] = creator[1]["subscriptions"]
    assert subscription["subscribers"] == [hamlet]
    assert subscription["rendered_description"] == "<p>Roman</p>"
    # Another member sees it appear, never subscribed, with its subscriber.
    other = domain.verify(
        create, user="othello", num_events=2, include_subscribers=include_subscribers
    )
    assert [(e["type"], e["op"]) for e in other] == [
        ("stream", "create"),
        ("subscription", "peer_add"),
    ]
    assert other[1]["user_ids"] == [hamlet]
    # A guest sees nothing of a public stream they are not in.
    domain.verify(create, user="polonius", num_events=0, state_change_expected=False)
    state = domain.fetch("othello")
    never = {entry["name"]: entry for entry in state["never_subscribed"]}
    assert never[creator[0]["streams"][0]["name"]]["subscribers"] == [hamlet]


@covers(("stream", "create"), ("subscription", "add"))
def test_creating_a_private_stream_tells_only_its_subscribers(domain):
    iago, othello = domain.id("iago"), domain.id("othello")

    def create(ctx):
        return do_create_stream(
            ctx, iago, domain.realm_id, next(_names), invite_only=True, subscribers=[iago, othello]
        )

    events = domain.verify(create, user="othello", num_events=2)
    assert events[0]["streams"][0]["invite_only"] is True
    assert events[1]["subscriptions"][0]["subscribers"] == [iago, othello]
    for outsider in ("hamlet", "polonius"):
        domain.verify(create, user=outsider, num_events=0, state_change_expected=False)


@covers(("stream", "create"), ("subscription", "add"), ("subscription", "peer_add"))
def test_subscribing_to_several_streams_creates_the_missing_ones(domain):
    def subscribe(actor, name):
        return lambda ctx: do_add_subscriptions(
            ctx,
            domain.id(actor),
            domain.realm_id,
            [StreamRequest("verona"), StreamRequest(name), StreamRequest("Denmark")],
        )

    name = next(_names)
    events = domain.verify(subscribe("othello", name), user="othello", num_events=2)
    assert [s["name"] for s in events[1]["subscriptions"]] == ["Verona", name]
    state = domain.fetch("othello")
    assert {s["name"] for s in state["subscriptions"]} == {"Denmark", "Verona", "Scotland", name}
    # Others: the new stream appears; one peer_add covers both streams.
    name = next(_names)
    events = domain.verify(subscribe("iago", name), num_events=2)
    assert events[0]["streams"][0]["name"] == name
    assert events[1]["user_ids"] == [domain.id("iago")]
    assert len(events[1]["stream_ids"]) == 2


# -- subscribing ----------------------------------------------------------------


@covers(("subscription", "add"), ("subscription", "peer_add"))
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_subscribing_to_a_public_stream(domain, include_subscribers):
    othello, verona = domain.id("othello"), domain.streams["Verona"]
    before = domain.fetch("othello", include_subscribers=include_subscribers)
    assert verona in _by_id(before["never_subscribed"])
    [add] = domain.verify(
        _subscribe(domain, "othello", "Verona"),
        user="othello",
        include_subscribers=include_subscribers,
    )
    assert add["subscriptions"][0]["subscribers"] == [domain.id("hamlet"), othello]
    state = domain.fetch("othello", include_subscribers=include_subscribers)
    assert verona in _by_id(state["subscriptions"])
    assert verona not in _by_id(state["never_subscribed"])
    assert ("subscribers" in _by_id(state["subscriptions"])[verona]) is include_subscribers
    domain.run(_unsubscribe(domain, "othello", "Verona"))
    # Peers: a subscriber, and a member who can see the subscriber list.
    for viewer in ("hamlet", "iago"):
        [peer_add] = domain.verify(
            _subscribe(domain, "othello", "Verona"),
            user=viewer,
            include_subscribers=include_subscribers,
            state_change_expected=include_subscribers,
        )
        assert (peer_add["stream_ids"], peer_add["user_ids"]) == ([verona], [othello])
        domain.run(_unsubscribe(domain, "othello", "Verona"))
    domain.verify(
        _subscribe(domain, "othello", "Verona"),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )


@covers(("subscription", "add"), ("subscription", "peer_add"))
def test_resubscribing_keeps_the_old_settings(domain):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]
    domain.run(
        lambda ctx: do_update_subscription_properties(ctx, hamlet, [(denmark, "color", "#123456")])
    )
    domain.run(_unsubscribe(domain, "hamlet", "Denmark"))
    assert _by_id(domain.fetch()["unsubscribed"])[denmark]["color"] == "#123456"
    [add] = domain.verify(_subscribe(domain, "hamlet", "Denmark"))
    assert add["subscriptions"][0]["color"] == "#123456"
    domain.run(_unsubscribe(domain, "hamlet", "Denmark"))
    domain.verify(_subscribe(domain, "hamlet", "Denmark"), user="othello")


@covers(("stream", "create"), ("subscription", "add"), ("subscription", "peer_add"))
def test_a_guest_added_to_a_public_stream_gains_sight_of_it(domain):
    polonius, verona = domain.id("polonius"), domain.streams["Verona"]
    assert verona not in _by_id(domain.fetch("polonius")["streams"])
    events = domain.verify(
        _subscribe(domain, "iago", "Verona", "polonius"), user="polonius", num_events=2
    )
    assert [(e["type"], e["op"]) for e in events] == [("stream", "create"), ("subscription", "add")]
    assert verona in _by_id(domain.fetch("polonius")["streams"])
    domain.run(_unsubscribe(domain, "iago", "Verona", "polonius"))
    [peer_add] = domain.verify(_subscribe(domain, "iago", "Verona", "polonius"), user="hamlet")
    assert peer_add["user_ids"] == [polonius]


@covers(("stream", "create"), ("subscription", "add"), ("subscription", "peer_add"))
def test_a_member_added_to_a_private_stream_gains_sight_of_it(domain):
    hamlet, scotland = domain.id("hamlet"), domain.streams["Scotland"]
    assert scotland not in _by_id(domain.fetch()["streams"])
    events = domain.verify(_subscribe(domain, "iago", "Scotland", "hamlet"), num_events=2)
    assert events[1]["subscriptions"][0]["subscribers"] == [
        domain.id("iago"),
        hamlet,
        domain.id("othello"),
    ]
    domain.run(_unsubscribe(domain, "iago", "Scotland", "hamlet"))
    [peer_add] = domain.verify(_subscribe(domain, "iago", "Scotland", "hamlet"), user="othello")
    assert peer_add["user_ids"] == [hamlet]
    domain.run(_unsubscribe(domain, "iago", "Scotland", "hamlet"))
    domain.verify(
        _subscribe(domain, "iago", "Scotland", "hamlet"),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )


def test_subscribing_twice_reports_already_subscribed(domain):
    hamlet = domain.id("hamlet")
    result = domain.run(_subscribe(domain, "hamlet", "Denmark"))
    assert result.subscribed == {}
    assert result.already_subscribed == {hamlet: ["Denmark"]}


# -- unsubscribing ----------------------------------------------------------------


@covers(("subscription", "remove"), ("subscription", "peer_remove"))
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_leaving_a_public_stream(domain, include_subscribers):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]
    [remove] = domain.verify(
        _unsubscribe(domain, "hamlet", "Denmark"), include_subscribers=include_subscribers
    )
    assert remove["subscriptions"] == [{"name": "Denmark", "stream_id": denmark}]
    state = domain.fetch(include_subscribers=include_subscribers)
    assert denmark in _by_id(state["unsubscribed"])
    assert denmark in _by_id(state["streams"])
    domain.run(_subscribe(domain, "hamlet", "Denmark"))
    [peer_remove] = domain.verify(
        _unsubscribe(domain, "hamlet", "Denmark"),
        user="othello",
        include_subscribers=include_subscribers,
        state_change_expected=include_subscribers,
    )
    assert (peer_remove["stream_ids"], peer_remove["user_ids"]) == ([denmark], [hamlet])


@covers(("subscription", "remove"), ("stream", "delete"), ("subscription", "peer_remove"))
def test_leaving_a_private_stream_loses_sight_of_it(domain):
    othello, scotland = domain.id("othello"), domain.streams["Scotland"]
    events = domain.verify(
        _unsubscribe(domain, "othello", "Scotland"), user="othello", num_events=2
    )
    assert [(e["type"], e["op"]) for e in events] == [
        ("subscription", "remove"),
        ("stream", "delete"),
    ]
    state = domain.fetch("othello")
    assert all(
        scotland not in _by_id(state[key])
        for key in ("streams", "subscriptions", "unsubscribed", "never_subscribed")
    )
    domain.run(_subscribe(domain, "iago", "Scotland", "othello"))
    [peer_remove] = domain.verify(_unsubscribe(domain, "othello", "Scotland"), user="iago")
    assert peer_remove["user_ids"] == [othello]
    domain.run(_subscribe(domain, "iago", "Scotland", "othello"))
    for outsider in ("hamlet", "polonius"):
        domain.verify(
            _unsubscribe(domain, "othello", "Scotland"),
            user=outsider,
            num_events=0,
            state_change_expected=False,
        )
        domain.run(_subscribe(domain, "iago", "Scotland", "othello"))


@covers(("subscription", "remove"), ("stream", "delete"))
def test_a_guest_leaving_a_public_stream_loses_sight_of_it(domain):
    domain.run(_subscribe(domain, "iago", "Verona", "polonius"))
    domain.verify(_unsubscribe(domain, "polonius", "Verona"), user="polonius", num_events=2)
    assert domain.streams["Verona"] not in _by_id(domain.fetch("polonius")["streams"])


@covers(("subscription", "remove"), ("subscription", "peer_remove"))
def test_users_who_leave_together_learn_about_each_other(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    events = domain.verify(
        _unsubscribe(domain, "iago", "Denmark", "hamlet", "othello"), num_events=2
    )
    assert events[1]["user_ids"] == [hamlet, othello]
    unsubscribed = _by_id(domain.fetch()["unsubscribed"])[domain.streams["Denmark"]]
    assert unsubscribed["subscribers"] == [domain.id("iago")]


def test_unsubscribing_reports_what_was_not_subscribed(domain):
    result = domain.run(_unsubscribe(domain, "iago", "Verona"))
    assert (result.removed, result.not_removed) == ([], ["Verona"])


# -- subscription settings ----------------------------------------------------------


@covers(("subscription", "update"))
def test_subscription_properties(domain):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]

    def change(prop, value):
        return lambda ctx: do_update_subscription_properties(ctx, hamlet, [(denmark, prop, value)])

    [color] = domain.verify(change("color", "#F00"))
    assert color["value"] == "#ff0000"
    domain.verify(change("pin_to_top", True))
    muted = domain.verify(change("is_muted", True), num_events=2)
    assert [(e["property"], e["value"]) for e in muted] == [
        ("in_home_view", False),
        ("is_muted", True),
    ]
    unmuted = domain.verify(change("in_home_view", True), num_events=2)
    assert [(e["property"], e["value"]) for e in unmuted] == [
        ("in_home_view", True),
        ("is_muted", False),
    ]
    entry = _by_id(domain.fetch()["subscriptions"])[denmark]
    assert (entry["color"], entry["pin_to_top"], entry["is_muted"], entry["in_home_view"]) == (
        "#ff0000",
        True,
        False,
        True,
    )
    # Only the user's own clients hear of it.
    domain.verify(
        change("pin_to_top", False), user="othello", num_events=0, state_change_expected=False
    )


# -- stream administration ----------------------------------------------------------


@covers(("stream", "update"))
def test_renaming_a_stream(domain):
    iago, denmark = domain.id("iago"), domain.streams["Denmark"]
    [event] = domain.verify(
        lambda ctx: do_rename_stream(ctx, iago, domain.realm_id, denmark, "Jutland")
    )
    assert (event["name"], event["value"]) == ("Denmark", "Jutland")
    domain.verify(
        lambda ctx: do_rename_stream(ctx, iago, domain.realm_id, denmark, "Zealand"), user="iago"
    )
    # Seen also by members who never joined; a case-only rename is allowed.
    domain.verify(
        lambda ctx: do_rename_stream(
            ctx, iago, domain.realm_id, domain.streams["Verona"], "VERONA"
        ),
        user="othello",
    )
    domain.verify(
        lambda ctx: do_rename_stream(ctx, iago, domain.realm_id, denmark, "Funen"),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )
    assert "Funen" in {s["name"] for s in domain.fetch()["subscriptions"]}


@covers(("stream", "update"))
def test_renaming_a_private_stream_tells_only_its_subscribers(domain):
    iago, scotland = domain.id("iago"), domain.streams["Scotland"]
    domain.verify(
        lambda ctx: do_rename_stream(ctx, iago, domain.realm_id, scotland, "Caledonia"),
        user="othello",
    )
    for outsider in ("hamlet", "polonius"):
        domain.verify(
            lambda ctx, name=f"Alba {outsider}": do_rename_stream(
                ctx, iago, domain.realm_id, scotland, name
            ),
            user=outsider,
            num_events=0,
            state_change_expected=False,
        )


@covers(("stream", "update"))
def test_changing_a_description(domain):
    iago, verona = domain.id("iago"), domain.streams["Verona"]
    [event] = domain.verify(
        lambda ctx: do_change_stream_description(
            ctx, iago, domain.realm_id, verona, "Fair <Verona>\nwhere we lay our scene"
        ),
        user="othello",
    )
    assert event["value"] == "Fair <Verona> where we lay our scene"
    assert event["rendered_description"] == "<p>Fair &lt;Verona&gt; where we lay our scene</p>"
    domain.verify(
        lambda ctx: do_change_stream_description(ctx, iago, domain.realm_id, verona, ""),
    )
    assert _by_id(domain.fetch()["streams"])[verona]["rendered_description"] == ""


@covers(("stream", "update"))
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_making_a_stream_private_keeps_its_subscribers_informed(domain, include_subscribers):
    iago, denmark = domain.id("iago"), domain.streams["Denmark"]
    [event] = domain.verify(
        lambda ctx: do_change_stream_invite_only(ctx, iago, domain.realm_id, denmark, True),
        include_subscribers=include_subscribers,
    )
    assert (event["property"], event["value"]) == ("invite_only", True)
    # Unchanged: nothing is sent.
    domain.verify(
        lambda ctx: do_change_stream_invite_only(ctx, iago, domain.realm_id, denmark, True),
        num_events=0,
        state_change_expected=False,
    )


@covers(("stream", "delete"))
def test_making_a_stream_private_hides_it_from_non_subscribers(domain):
    hamlet = domain.id("hamlet")
    stream_id = domain.run(lambda ctx: do_create_stream(ctx, hamlet, domain.realm_id, "Rome"))
    # othello never subscribed; iago left it earlier (an unsubscribed row).
    domain.run(_subscribe(domain, "iago", "Rome"))
    domain.run(_unsubscribe(domain, "iago", "Rome"))
    assert stream_id in _by_id(domain.fetch("iago")["unsubscribed"])

    def make_private(ctx):
        return do_change_stream_invite_only(ctx, None, domain.realm_id, stream_id, True)

    [event] = domain.verify(make_private, user="othello")
    assert event["stream_ids"] == [stream_id]
    domain.run(
        lambda ctx: do_change_stream_invite_only(ctx, None, domain.realm_id, stream_id, False)
    )
    domain.run(_subscribe(domain, "iago", "Rome"))
    domain.run(_unsubscribe(domain, "iago", "Rome"))
    domain.verify(make_private, user="iago")
    state = domain.fetch("iago")
    assert stream_id not in _by_id(state["unsubscribed"]) | _by_id(state["streams"])
    domain.verify(
        lambda ctx: do_change_stream_invite_only(ctx, None, domain.realm_id, stream_id, False),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )


@covers(("stream", "create"), ("subscription", "peer_add"), ("stream", "update"))
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_making_a_stream_public_shows_it_with_its_subscribers(domain, include_subscribers):
    iago, scotland = domain.id("iago"), domain.streams["Scotland"]

    def make(invite_only):
        return lambda ctx: do_change_stream_invite_only(
            ctx, iago, domain.realm_id, scotland, invite_only
        )

    events = domain.verify(make(False), num_events=2, include_subscribers=include_subscribers)
    assert [(e["type"], e["op"]) for e in events] == [
        ("stream", "create"),
        ("subscription", "peer_add"),
    ]
    assert events[1]["user_ids"] == [iago, domain.id("othello")]
    never = _by_id(domain.fetch(include_subscribers=include_subscribers)["never_subscribed"])
    assert never[scotland]["invite_only"] is False
    domain.run(make(True))
    [update] = domain.verify(make(False), user="othello", include_subscribers=include_subscribers)
    assert (update["property"], update["value"]) == ("invite_only", False)
    domain.run(make(True))
    domain.verify(make(False), user="polonius", num_events=0, state_change_expected=False)


# -- archiving and unarchiving --------------------------------------------------------
# Zulip since feature level 315: an archived stream keeps its subscriptions;
# clients with `archived_channels` (MODERN) keep it, with `is_archived`, the
# others (LEGACY) lose it as before and get it back as a new stream.

LEGACY = MODERN - {"archived_channels"}


def _archive(domain, stream, actor=None):
    return lambda ctx: do_delete_stream(ctx, actor, domain.realm_id, stream)


def _unarchive(domain, stream, actor=None):
    return lambda ctx: do_unarchive_stream(ctx, actor, domain.realm_id, stream)


@covers(("stream", "update"), ("stream", "delete"))
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_archiving_a_stream_with_and_without_archived_channels(domain, include_subscribers):
    iago, denmark = domain.id("iago"), domain.streams["Denmark"]
    options = {"include_subscribers": include_subscribers}
    for user in ("hamlet", "polonius"):  # subscribers: a member, and a guest
        domain.run(_subscribe(domain, "iago", "Denmark", "polonius"))
        [update] = domain.verify(_archive(domain, denmark, iago), user=user, **options)
        assert {k: update[k] for k in ("op", "stream_id", "name", "property", "value")} == {
            "op": "update",
            "stream_id": denmark,
            "name": "Denmark",
            "property": "is_archived",
            "value": True,
        }
        state = domain.fetch(user, **options)
        kept = _by_id(state["subscriptions"])[denmark]
        assert kept["is_archived"] is True
        assert _by_id(state["streams"])[denmark]["is_archived"] is True
        if include_subscribers:
            assert kept["subscribers"] == sorted(
                domain.id(u) for u in ("iago", "hamlet", "othello", "polonius")
            )
        domain.run(_unarchive(domain, denmark))
        [delete] = domain.verify(
            _archive(domain, denmark, iago), user=user, capabilities=LEGACY, **options
        )
        assert (delete["op"], delete["streams"], delete["stream_ids"]) == (
            "delete",
            [{"stream_id": denmark}],
            [denmark],
        )
        state = domain.fetch(user, capabilities=LEGACY, **options)
        assert denmark not in _by_id(state["streams"])
        assert all(denmark not in _by_id(state[key]) for key in SUBSCRIPTION_LISTS)
        domain.run(_unarchive(domain, denmark))
        domain.run(_unsubscribe(domain, "iago", "Denmark", "polonius"))


@covers(("stream", "update"), ("stream", "delete"), ("default_streams", None))
def test_archiving_a_default_stream(domain):
    verona = domain.streams["Verona"]
    for user, capabilities in (("hamlet", MODERN), ("othello", MODERN), ("othello", LEGACY)):
        events = domain.verify(
            _archive(domain, verona), user=user, capabilities=capabilities, num_events=2
        )
        assert [(e["type"], e.get("op")) for e in events] == [
            ("default_streams", None),
            ("stream", "update" if capabilities is MODERN else "delete"),
        ]
        assert events[0]["default_streams"] == []
        domain.run(_unarchive(domain, verona))
        # Unarchiving does not make it a default stream again (Zulip's neither).
        assert domain.fetch()["realm_default_streams"] == []
        domain.run(lambda ctx: do_add_default_stream(ctx, None, domain.realm_id, verona))


@covers(
    ("stream", "update"),
    ("stream", "delete"),
    ("stream", "create"),
    ("subscription", "peer_add"),
    ("subscription", "add"),
)
def test_archiving_and_unarchiving_keep_muted_channels_and_topics(domain):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]
    domain.run(
        lambda ctx: do_update_subscription_properties(ctx, hamlet, [(denmark, "is_muted", True)])
    )
    domain.run(lambda ctx: do_mute_topic_legacy(ctx, hamlet, denmark, "walls", "add"))
    domain.run(lambda ctx: do_send_stream_message(ctx, domain.id("othello"), denmark, "t", "hi"))
    for capabilities in (MODERN, LEGACY):
        domain.verify(
            _archive(domain, denmark),
            capabilities=capabilities,
            fetch_event_types=["stream", "update_message_flags", "muted_topics", "subscription"],
        )
        events = domain.verify(
            _unarchive(domain, denmark),
            capabilities=capabilities,
            fetch_event_types=["stream", "update_message_flags", "muted_topics", "subscription"],
            num_events=1 if capabilities is MODERN else 3,
        )
        if capabilities is MODERN:
            assert (events[0]["property"], events[0]["value"]) == ("is_archived", False)


@covers(
    ("stream", "update"),
    ("stream", "create"),
    ("subscription", "peer_add"),
    ("subscription", "add"),
    ("subscription", "remove"),
)
@pytest.mark.parametrize("include_subscribers", [True, False])
def test_unarchiving_a_stream_with_and_without_archived_channels(domain, include_subscribers):
    iago, verona = domain.id("iago"), domain.streams["Verona"]
    options = {"include_subscribers": include_subscribers}
    # othello left Verona (an unsubscribed row); iago never joined it.
    domain.run(_subscribe(domain, "iago", "Verona", "othello"))
    domain.run(_unsubscribe(domain, "iago", "Verona", "othello"))
    for user, legacy_events in (
        ("hamlet", [("stream", "create"), ("subscription", "peer_add"), ("subscription", "add")]),
        (
            "othello",
            [
                ("stream", "create"),
                ("subscription", "peer_add"),
                ("subscription", "add"),
                ("subscription", "remove"),
            ],
        ),
        ("iago", [("stream", "create"), ("subscription", "peer_add")]),
    ):
        domain.run(_archive(domain, verona))
        [update] = domain.verify(_unarchive(domain, verona, iago), user=user, **options)
        assert (update["op"], update["property"], update["value"]) == (
            "update",
            "is_archived",
            False,
        )
        domain.run(_archive(domain, verona))
        events = domain.verify(
            _unarchive(domain, verona, iago),
            user=user,
            capabilities=LEGACY,
            num_events=len(legacy_events),
            **options,
        )
        assert [(e["type"], e["op"]) for e in events] == legacy_events
        assert events[0]["streams"][0]["is_archived"] is False
        assert events[1]["user_ids"] == [domain.id("hamlet")]
    # Nobody who cannot see it hears of it.
    domain.run(_archive(domain, verona))
    domain.verify(
        _unarchive(domain, verona), user="polonius", num_events=0, state_change_expected=False
    )


@covers(("stream", "update"))
def test_archiving_a_private_stream_tells_no_outsider(domain):
    for outsider, capabilities in itertools.product(("hamlet", "polonius"), (MODERN, LEGACY)):
        scotland = domain.run(
            lambda ctx: do_create_stream(
                ctx,
                None,
                domain.realm_id,
                next(_names),
                invite_only=True,
                subscribers=[domain.id("iago")],
            )
        )
        for action in (_archive(domain, scotland), _unarchive(domain, scotland)):
            domain.verify(
                action,
                user=outsider,
                capabilities=capabilities,
                num_events=0,
                state_change_expected=False,
            )
    # Its subscriber keeps it.
    [event] = domain.verify(_archive(domain, scotland), user="iago")
    assert event["value"] is True


@covers(("subscription", "peer_remove"), ("subscription", "peer_add"))
def test_subscriber_lists_of_archived_streams_follow_deactivation(domain):
    othello, denmark = domain.id("othello"), domain.streams["Denmark"]
    domain.run(_archive(domain, denmark))

    def activity(active):
        return _set_user(
            domain,
            "othello",
            "is_active",
            active,
            lambda ctx: send_subscriber_activity(ctx, othello),
        )

    for capabilities in (MODERN, LEGACY):
        [gone] = domain.verify(
            activity(False),
            capabilities=capabilities,
            fetch_event_types=STREAM_SECTIONS,
            state_change_expected=capabilities is MODERN,
        )
        assert (gone["op"], gone["stream_ids"]) == ("peer_remove", [denmark])
        domain.verify(
            activity(True),
            capabilities=capabilities,
            fetch_event_types=STREAM_SECTIONS,
            state_change_expected=capabilities is MODERN,
        )


@covers(("stream", "create"), ("subscription", "peer_add"), ("default_streams", None))
def test_a_member_again_sees_archived_streams_only_with_archived_channels(domain):
    othello, denmark = domain.id("othello"), domain.streams["Denmark"]
    domain.run(_unsubscribe(domain, "iago", "Denmark", "othello"))
    domain.run(_archive(domain, denmark))
    guest, member = accounts.ROLES["guest"], accounts.ROLES["member"]

    def role(new_role, was_guest):
        return _set_user(
            domain,
            "othello",
            "role",
            new_role,
            lambda ctx: send_stream_access_for_role(ctx, othello, was_guest),
        )

    for capabilities in (MODERN, LEGACY):
        domain.run(role(guest, False))
        # Verona and Denmark, the latter's subscribers as a peer_add of their own
        events = domain.verify(
            role(member, True),
            user="othello",
            capabilities=capabilities,
            num_events=4,
            fetch_event_types=STREAM_SECTIONS,
        )
        created = _by_id(events[0]["streams"])
        assert (denmark in created) is (capabilities is MODERN)


@covers(("subscription", "remove"))
def test_leaving_an_archived_stream(domain):
    denmark = domain.streams["Denmark"]
    domain.run(_archive(domain, denmark))
    [removed] = domain.verify(_unsubscribe(domain, "hamlet", "Denmark"))
    assert removed["subscriptions"] == [{"name": "Denmark", "stream_id": denmark}]
    left = _by_id(domain.fetch()["unsubscribed"])[denmark]
    assert left["is_archived"] is True
    domain.verify(
        _unsubscribe(domain, "othello", "Denmark"),
        user="othello",
        capabilities=LEGACY,
        state_change_expected=False,
    )


# -- refusals of archived streams ----------------------------------------------------


def test_archived_streams_refuse_what_zulip_refuses(domain):
    iago, hamlet, denmark, realm = (
        domain.id("iago"),
        domain.id("hamlet"),
        domain.streams["Denmark"],
        domain.realm_id,
    )
    _refused(domain, _unarchive(domain, denmark, iago), "Channel is not currently deactivated")
    domain.run(_archive(domain, denmark, iago))
    _refused(domain, _archive(domain, denmark, iago), "Channel is already deactivated")
    _refused(
        domain,
        _unarchive(domain, denmark, hamlet),
        "Must be an organization administrator",
        "UNAUTHORIZED",
    )
    _refused(domain, _unarchive(domain, 10**15, iago), "Invalid channel ID")
    # Nobody subscribes to it; its name stays taken.
    _refused(
        domain, _subscribe(domain, "hamlet", "denmark"), r"Unable to access channel \(Denmark\)\."
    )
    _refused(
        domain,
        lambda ctx: do_create_stream(ctx, iago, realm, "Denmark"),
        r"Unable to access channel \(Denmark\)\.",
    )
    result = domain.run(
        lambda ctx: do_add_subscriptions(
            ctx, hamlet, realm, [StreamRequest("Denmark")], authorization_errors_fatal=False
        )
    )
    assert result.unauthorized == ["Denmark"]
    # Nobody sends to it.
    _refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, hamlet, denmark, "t", "hello"),
        "Not authorized to send to channel 'Denmark'",
    )
    _refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, hamlet, "Denmark", "t", "hello"),
        "Not authorized to send to channel 'Denmark'",
    )
    # A stream that took its name meanwhile keeps it.
    domain.run(lambda ctx: do_rename_stream(ctx, iago, realm, domain.streams["Verona"], "Denmark"))
    _refused(domain, _unarchive(domain, denmark, iago), "Channel named Denmark already exists")
    # A private stream nobody is subscribed to stays archived.
    lonely = domain.run(
        lambda ctx: do_create_stream(
            ctx, None, realm, next(_names), invite_only=True, subscribers=[domain.id("othello")]
        )
    )
    domain.run(_archive(domain, lonely))
    domain.run(
        lambda ctx: ctx.conn.execute(
            "UPDATE subscriptions SET active = false WHERE stream_id = %s", (lonely,)
        )
    )
    _refused(domain, _unarchive(domain, lonely), "Channel is private and have no subscribers")


# -- default streams ----------------------------------------------------------------


@covers(("default_streams", None))
def test_default_streams(domain):
    iago, denmark, verona = domain.id("iago"), domain.streams["Denmark"], domain.streams["Verona"]
    assert domain.fetch()["realm_default_streams"] == [verona]
    [event] = domain.verify(lambda ctx: do_add_default_stream(ctx, iago, domain.realm_id, denmark))
    assert event["default_streams"] == sorted([denmark, verona])
    domain.verify(lambda ctx: do_remove_default_stream(ctx, iago, domain.realm_id, verona))
    assert domain.fetch()["realm_default_streams"] == [denmark]
    # Already default / not default: nothing happens.
    for action in (do_add_default_stream, do_remove_default_stream):
        stream = denmark if action is do_add_default_stream else verona
        domain.verify(
            lambda ctx, a=action, s=stream: a(ctx, iago, domain.realm_id, s),
            num_events=0,
            state_change_expected=False,
        )
    # Guests know of no default streams and are not told.
    assert domain.fetch("polonius")["realm_default_streams"] == []
    domain.verify(
        lambda ctx: do_add_default_stream(ctx, iago, domain.realm_id, verona),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )


@covers(("subscription", "peer_add"))
def test_new_users_join_the_default_streams(domain):
    verona = domain.streams["Verona"]
    created: list[int] = []

    async def create_user(ctx: ActionContext) -> None:
        async with ctx.transaction():
            key = accounts.new_api_key()
            cur = await ctx.conn.execute(
                "INSERT INTO users (realm_id, email, full_name, api_key_id, api_key_hash,"
                " api_key_hash_scheme) VALUES (%s, %s, 'Newcomer', %s, %s, 2) RETURNING id",
                (
                    domain.realm_id,
                    f"new{len(created)}@{domain.subdomain}.example",
                    accounts.api_key_id(key),
                    accounts.hash_api_key(key),
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            created.append(row[0])
            assert await subscribe_to_default_streams(ctx, row[0]) == [verona]

    # The users area tells about the user; this test looks at streams only.
    [peer_add] = domain.verify(create_user, fetch_event_types=STREAM_SECTIONS)
    assert (peer_add["stream_ids"], peer_add["user_ids"]) == ([verona], created)
    domain.verify(create_user, user="othello", fetch_event_types=STREAM_SECTIONS)


# -- the users area's hooks ---------------------------------------------------------


_SET_USER = {
    "is_active": "UPDATE users SET is_active = %s WHERE id = %s",
    "role": "UPDATE users SET role = %s WHERE id = %s",
}


def _set_user(domain, name, column, value, hook):
    """What the users area does: change the user, then call our hook, in
    one transaction."""

    async def change(ctx: ActionContext) -> None:
        async with ctx.transaction():
            await ctx.conn.execute(_SET_USER[column], (value, domain.id(name)))
            await hook(ctx)

    return change


@covers(("subscription", "peer_remove"), ("subscription", "peer_add"))
def test_deactivated_users_leave_the_subscriber_lists(domain):
    othello, denmark = domain.id("othello"), domain.streams["Denmark"]

    def activity(active):
        return _set_user(
            domain,
            "othello",
            "is_active",
            active,
            lambda ctx: send_subscriber_activity(ctx, othello),
        )

    [gone] = domain.verify(activity(False), fetch_event_types=STREAM_SECTIONS)
    assert (gone["op"], gone["stream_ids"], gone["user_ids"]) == (
        "peer_remove",
        [denmark],
        [othello],
    )
    assert othello not in _by_id(domain.fetch()["subscriptions"])[denmark]["subscribers"]
    [back] = domain.verify(activity(True), fetch_event_types=STREAM_SECTIONS)
    assert back["op"] == "peer_add"
    # iago also sees Scotland's subscribers.
    events = domain.verify(
        activity(False), user="iago", num_events=2, fetch_event_types=STREAM_SECTIONS
    )
    assert sorted(e["stream_ids"][0] for e in events) == sorted(
        [denmark, domain.streams["Scotland"]]
    )


@covers(
    ("stream", "delete"),
    ("default_streams", None),
    ("stream", "create"),
    ("subscription", "peer_add"),
)
def test_a_role_change_to_or_from_guest_changes_what_the_user_sees(domain):
    othello = domain.id("othello")
    domain.run(_subscribe(domain, "othello", "Verona"))
    domain.run(_unsubscribe(domain, "othello", "Verona"))

    def role(new_role, was_guest):
        return _set_user(
            domain,
            "othello",
            "role",
            new_role,
            lambda ctx: send_stream_access_for_role(ctx, othello, was_guest),
        )

    guest, member = accounts.ROLES["guest"], accounts.ROLES["member"]
    events = domain.verify(
        role(guest, False), user="othello", num_events=2, fetch_event_types=STREAM_SECTIONS
    )
    assert events[0]["stream_ids"] == [domain.streams["Verona"]]
    state = domain.fetch("othello")
    assert state["unsubscribed"] == []
    assert state["realm_default_streams"] == []
    events = domain.verify(
        role(member, True), user="othello", num_events=3, fetch_event_types=STREAM_SECTIONS
    )
    assert [e["type"] for e in events] == ["stream", "subscription", "default_streams"]
    # Nobody else's view changes.
    domain.verify(
        role(guest, False),
        user="hamlet",
        num_events=0,
        state_change_expected=False,
        fetch_event_types=STREAM_SECTIONS,
    )


@covers(("stream", "update"))
def test_an_event_outside_fetch_event_types_changes_nothing(domain):
    iago, denmark = domain.id("iago"), domain.streams["Denmark"]
    domain.verify(
        lambda ctx: do_rename_stream(ctx, iago, domain.realm_id, denmark, "Jutland"),
        fetch_event_types=["realm"],
        state_change_expected=False,
    )


# -- refusals -------------------------------------------------------------------------


def _refused(domain, action, message, code="BAD_REQUEST"):
    with pytest.raises(ActionError, match=message) as caught:
        domain.run(action)
    assert caught.value.code == code


def test_only_administrators_manage_streams(domain):
    hamlet, denmark, realm = domain.id("hamlet"), domain.streams["Denmark"], domain.realm_id
    for action in (
        lambda ctx: do_rename_stream(ctx, hamlet, realm, denmark, "Mine"),
        lambda ctx: do_change_stream_description(ctx, hamlet, realm, denmark, "Mine"),
        lambda ctx: do_change_stream_invite_only(ctx, hamlet, realm, denmark, True),
        lambda ctx: do_delete_stream(ctx, hamlet, realm, denmark),
        lambda ctx: do_add_default_stream(ctx, hamlet, realm, denmark),
        lambda ctx: do_remove_default_stream(ctx, hamlet, realm, denmark),
        _subscribe(domain, "hamlet", "Denmark", "polonius"),
        _unsubscribe(domain, "hamlet", "Denmark", "othello"),
    ):
        _refused(domain, action, "Must be an organization administrator", "UNAUTHORIZED")


def test_guests_neither_create_nor_join_streams(domain):
    _refused(
        domain,
        _subscribe(domain, "polonius", "Verona"),
        "Not allowed for guest users",
        "UNAUTHORIZED",
    )
    _refused(
        domain,
        _subscribe(domain, "polonius", "Athens"),
        "Not allowed for guest users",
        "UNAUTHORIZED",
    )


def test_a_private_stream_is_invisible_to_outsiders(domain):
    hamlet, scotland, realm = domain.id("hamlet"), domain.streams["Scotland"], domain.realm_id
    # Subscribing by name: the name is taken, nothing more is said.
    _refused(
        domain, _subscribe(domain, "hamlet", "scotland"), r"Unable to access channel \(Scotland\)\."
    )
    result = domain.run(
        lambda ctx: do_add_subscriptions(
            ctx,
            hamlet,
            realm,
            [StreamRequest("Scotland"), StreamRequest("Denmark")],
            authorization_errors_fatal=False,
        )
    )
    assert result.unauthorized == ["Scotland"]
    assert result.already_subscribed == {hamlet: ["Denmark"]}
    # Everywhere else it does not exist, exactly like an unknown stream.
    _refused(
        domain,
        _unsubscribe(domain, "hamlet", "Scotland"),
        r"Channel\(s\) \(Scotland\) do not exist",
    )
    _refused(
        domain, _unsubscribe(domain, "hamlet", "Nowhere"), r"Channel\(s\) \(Nowhere\) do not exist"
    )
    _refused(
        domain,
        lambda ctx: do_update_subscription_properties(
            ctx, hamlet, [(scotland, "pin_to_top", True)]
        ),
        "Invalid channel ID",
    )
    # An administrator who is not subscribed cannot manage it either.
    private = domain.run(
        lambda ctx: do_create_stream(
            ctx,
            None,
            realm,
            "Secret",
            invite_only=True,
            subscribers=[domain.users["othello"].email],
        )
    )
    _refused(
        domain,
        lambda ctx: do_rename_stream(ctx, domain.id("iago"), realm, private, "X"),
        "Invalid channel ID",
    )
    _refused(
        domain,
        lambda ctx: do_delete_stream(ctx, domain.id("iago"), realm, 10**15),
        "Invalid channel ID",
    )


def test_stream_names_are_checked(domain):
    iago, denmark, realm = domain.id("iago"), domain.streams["Denmark"], domain.realm_id
    for name, message in (
        ("  ", "Channel name can't be empty."),
        ("x" * 61, r"Channel name too long \(limit: 60 characters\)\."),
        ("bad\x00name", "Invalid character in channel name, at position 4."),
        ("dEnMaRk", "Channel name 'Denmark' is already taken."),
    ):
        _refused(domain, lambda ctx, n=name: do_create_stream(ctx, iago, realm, n), message)
    _refused(
        domain,
        lambda ctx: do_rename_stream(ctx, iago, realm, denmark, "verona"),
        "Channel name 'verona' is already taken.",
    )
    _refused(
        domain,
        lambda ctx: do_rename_stream(ctx, iago, realm, denmark, "Denmark"),
        "Channel already has that name.",
    )
    _refused(
        domain,
        lambda ctx: do_change_stream_description(ctx, iago, realm, denmark, "d" * 1025),
        r"description is too long \(limit: 1024 characters\)",
    )


def test_subscription_properties_are_checked(domain):
    hamlet, denmark, verona = (
        domain.id("hamlet"),
        domain.streams["Denmark"],
        domain.streams["Verona"],
    )
    othello = domain.id("othello")
    for change, message in (
        ((denmark, "colour", "#fff"), "Unknown subscription property: colour"),
        ((denmark, "color", "red"), "color is not a valid hex color code"),
        ((denmark, "is_muted", "yes"), "is_muted is not a boolean"),
    ):
        _refused(
            domain,
            lambda ctx, c=change: do_update_subscription_properties(ctx, hamlet, [c]),
            message,
        )
    _refused(
        domain,
        lambda ctx: do_update_subscription_properties(ctx, othello, [(verona, "pin_to_top", True)]),
        f"Not subscribed to channel ID {verona}",
    )
    # All or nothing: the valid first change was not kept.
    _refused(
        domain,
        lambda ctx: do_update_subscription_properties(
            ctx, othello, [(denmark, "pin_to_top", True), (verona, "pin_to_top", True)]
        ),
        "Not subscribed",
    )
    assert _by_id(domain.fetch("othello")["subscriptions"])[denmark]["pin_to_top"] is False


def test_default_streams_are_public(domain):
    iago, scotland, verona = domain.id("iago"), domain.streams["Scotland"], domain.streams["Verona"]
    _refused(
        domain,
        lambda ctx: do_add_default_stream(ctx, iago, domain.realm_id, scotland),
        "Private channels cannot be made default.",
    )
    _refused(
        domain,
        lambda ctx: do_change_stream_invite_only(ctx, iago, domain.realm_id, verona, True),
        "A default channel cannot be private.",
    )


def test_principals_must_be_users_of_the_realm(domain):
    _refused(
        domain,
        lambda ctx: do_add_subscriptions(
            ctx,
            domain.id("iago"),
            domain.realm_id,
            [StreamRequest("Denmark")],
            principals=["nobody@example.com"],
        ),
        "No such user",
    )
