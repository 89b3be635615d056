"""verify_action for a user's own preferences and words: status, topic
policies (and the legacy muted topics), muted users, alert words, drafts
and saved snippets; the flags they give new messages; and their refusals."""

from __future__ import annotations

import psycopg
import pytest

from generation.actions import personal
from generation.actions.base import ActionError
from generation.actions.messages import do_send_direct_message, do_send_stream_message
from generation.actions.personal import DraftData
from generation.actions.streams import do_remove_subscriptions, do_rename_stream
from generation.actions.users import (
    do_change_user_setting,
    do_deactivate_user,
    do_reactivate_user,
)
from tests.domain.harness import covers

MUTED, UNMUTED, FOLLOWED = 1, 2, 3


# -- status --------------------------------------------------------------------------


@covers(("user_status", None))
def test_a_status_reaches_every_user_and_clears_field_by_field(domain):
    hamlet = domain.id("hamlet")
    for observer in ("hamlet", "othello", "polonius"):
        [event] = domain.verify(
            lambda ctx: personal.do_update_user_status(
                ctx, hamlet, status_text=" In a meeting ", emoji_name="coffee"
            ),
            user=observer,
            state_change_expected=observer == "hamlet",
        )
    assert event == {
        "type": "user_status",
        "user_id": hamlet,
        "status_text": "In a meeting",
        "emoji_name": "coffee",
        "emoji_code": "2615",
        "reaction_type": "unicode_emoji",
        "id": event["id"],
    }
    domain.verify(lambda ctx: personal.do_update_user_status(ctx, hamlet, away=True))
    assert domain.fetch()["user_status"][str(hamlet)] == {
        "away": True,
        "status_text": "In a meeting",
        "emoji_name": "coffee",
        "emoji_code": "2615",
        "reaction_type": "unicode_emoji",
    }
    domain.verify(lambda ctx: personal.do_update_user_status(ctx, hamlet, emoji_name=""))
    domain.verify(lambda ctx: personal.do_update_user_status(ctx, hamlet, status_text=""))
    domain.verify(lambda ctx: personal.do_update_user_status(ctx, hamlet, away=False))
    assert domain.fetch()["user_status"] == {}


@covers(("realm_user", "update"))
def test_a_deactivated_users_status_is_hidden_until_they_return(domain):
    othello = domain.id("othello")
    domain.run(lambda ctx: personal.do_update_user_status(ctx, othello, status_text="away"))
    for change in (do_deactivate_user, do_reactivate_user):
        domain.verify(
            lambda ctx, c=change: c(ctx, None, domain.realm_id, othello),
            event_types=["realm_user"],
            fetch_event_types=["user_status", "realm_user"],
        )
    assert domain.fetch()["user_status"] == {str(othello): {"status_text": "away"}}


def test_status_refusals(domain):
    hamlet = domain.id("hamlet")
    for kwargs, message in (
        ({}, "Client did not pass any new values."),
        ({"status_text": "x" * 61}, "status_text is too long"),
        ({"status_text": "x", "emoji_code": "1f4bb"}, "Client must pass emoji_name"),
        ({"emoji_name": "no_such_emoji"}, "Emoji 'no_such_emoji' does not exist"),
        ({"emoji_name": "coffee", "emoji_code": "1f4bb"}, "Invalid emoji name."),
        ({"emoji_name": "coffee", "reaction_type": "realm_emoji"}, "Invalid custom emoji."),
        ({"emoji_name": "coffee", "reaction_type": "other"}, "Invalid emoji type"),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(lambda ctx, k=kwargs: personal.do_update_user_status(ctx, hamlet, **k))
    assert domain.fetch()["user_status"] == {}


# -- topics --------------------------------------------------------------------------


def _set(domain, user, stream, topic, policy):
    return lambda ctx: personal.do_set_user_topic_visibility_policy(
        ctx, domain.id(user), domain.streams[stream], topic, policy
    )


@covers(("muted_topics", None), ("user_topic", None))
def test_topic_policies_and_the_legacy_muted_list(domain):
    denmark = domain.streams["Denmark"]
    legacy, event = domain.verify(_set(domain, "hamlet", "Denmark", "castle", MUTED), num_events=2)
    assert legacy["muted_topics"] == [["Denmark", "castle", event["last_updated"]]]
    assert (event["stream_id"], event["topic_name"], event["visibility_policy"]) == (
        denmark,
        "castle",
        MUTED,
    )
    # Another letter case is the same topic; the row takes the new spelling.
    domain.verify(_set(domain, "hamlet", "Denmark", "Castle", FOLLOWED), num_events=2)
    domain.verify(_set(domain, "hamlet", "Verona", "balcony", UNMUTED), num_events=2)
    state = domain.fetch()
    assert [(t["topic_name"], t["visibility_policy"]) for t in state["user_topics"]] == [
        ("Castle", FOLLOWED),
        ("balcony", UNMUTED),
    ]
    assert state["muted_topics"] == []
    domain.verify(_set(domain, "hamlet", "Denmark", "CASTLE", 0), num_events=2)
    assert len(domain.fetch()["user_topics"]) == 1
    # Nothing to change: nothing sent.
    assert not domain.run(_set(domain, "hamlet", "Denmark", "castle", 0))
    assert not domain.run(_set(domain, "hamlet", "Verona", "balcony", UNMUTED))


@covers(("muted_topics", None), ("user_topic", None))
def test_the_legacy_endpoints_ops(domain):
    hamlet = domain.id("hamlet")
    domain.verify(
        lambda ctx: personal.do_mute_topic_legacy(ctx, hamlet, "denmark", "castle", "add"),
        num_events=2,
    )
    with pytest.raises(ActionError, match="Topic already muted"):
        domain.run(
            lambda ctx: personal.do_mute_topic_legacy(ctx, hamlet, "Denmark", "castle", "add")
        )
    domain.verify(
        lambda ctx: personal.do_mute_topic_legacy(
            ctx, hamlet, domain.streams["Denmark"], "castle", "remove"
        ),
        num_events=2,
    )
    with pytest.raises(ActionError, match="Topic is not muted"):
        domain.run(
            lambda ctx: personal.do_mute_topic_legacy(ctx, hamlet, "Denmark", "castle", "remove")
        )
    with pytest.raises(ActionError, match="Invalid channel name 'Scotland'"):
        domain.run(lambda ctx: personal.do_mute_topic_legacy(ctx, hamlet, "Scotland", "x", "add"))


@covers(("stream", "update"))
def test_a_renamed_channel_renames_the_legacy_muted_topics(domain):
    domain.run(_set(domain, "hamlet", "Denmark", "castle", MUTED))
    domain.verify(
        lambda ctx: do_rename_stream(
            ctx, None, domain.realm_id, domain.streams["Denmark"], "Elsinore"
        ),
        event_types=["stream"],
        fetch_event_types=["muted_topics", "stream"],
    )
    assert [entry[0] for entry in domain.fetch()["muted_topics"]] == ["Elsinore"]


@covers(("stream", "delete"), ("subscription", "remove"))
def test_a_channel_one_leaves_leaves_the_legacy_list_but_not_user_topics(domain):
    othello = domain.id("othello")
    domain.run(_set(domain, "othello", "Scotland", "highlands", MUTED))
    domain.verify(
        lambda ctx: do_remove_subscriptions(ctx, othello, domain.realm_id, ["Scotland"]),
        user="othello",
        event_types=["stream", "subscription"],
        fetch_event_types=["muted_topics", "user_topic", "stream", "subscription"],
        num_events=2,
    )
    state = domain.fetch("othello")
    assert state["muted_topics"] == []
    assert [t["topic_name"] for t in state["user_topics"]] == ["highlands"]


def test_topic_refusals(domain):
    # hamlet is not in the private Scotland; polonius (a guest) only sees his channels.
    for user, stream in (("hamlet", "Scotland"), ("polonius", "Denmark")):
        with pytest.raises(ActionError, match="Invalid channel ID"):
            domain.run(_set(domain, user, stream, "t", MUTED))
    with pytest.raises(ActionError, match="Invalid visibility_policy"):
        domain.run(_set(domain, "hamlet", "Denmark", "t", 4))
    with pytest.raises(ActionError, match="Invalid op"):
        domain.run(
            lambda ctx: personal.do_mute_topic_legacy(ctx, domain.id("hamlet"), "Denmark", "t", "x")
        )


def test_the_number_of_topic_policies_is_bounded(domain, monkeypatch):
    monkeypatch.setattr(personal.topics, "MAX_USER_TOPICS", 2)
    for topic in ("a", "b"):
        domain.run(_set(domain, "hamlet", "Denmark", topic, MUTED))
    with pytest.raises(ActionError, match="at most 2 topics"):
        domain.run(_set(domain, "hamlet", "Denmark", "c", MUTED))
    # Changing an existing one is no new row.
    assert domain.run(_set(domain, "hamlet", "Denmark", "a", FOLLOWED))


# -- muted users ---------------------------------------------------------------------------


@covers(("muted_users", None), ("update_message_flags", "add"))
def test_muting_reads_the_muted_users_messages_and_unmuting_keeps_them_read(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    sent = domain.run(lambda ctx: do_send_direct_message(ctx, othello, [hamlet], "psst"))
    flags, event = domain.verify(
        lambda ctx: personal.do_mute_user(ctx, hamlet, othello), num_events=2
    )
    assert flags["messages"] == [sent]
    assert flags["flag"] == "read"
    assert event["muted_users"] == [
        {"id": othello, "timestamp": event["muted_users"][0]["timestamp"]}
    ]
    [event] = domain.verify(lambda ctx: personal.do_unmute_user(ctx, hamlet, othello))
    assert event["muted_users"] == []
    assert domain.fetch()["unread_msgs"]["count"] == 0


@covers(("message", None))
def test_a_muted_senders_new_message_arrives_read(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    domain.run(lambda ctx: personal.do_mute_user(ctx, hamlet, othello))
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, othello, "Denmark", "t", "@**King Hamlet** hi")
    )
    assert event["flags"] == ["read", "mentioned"]
    assert domain.fetch()["unread_msgs"]["count"] == 0


def test_muting_refusals(domain):
    hamlet = domain.id("hamlet")
    for action, target, message in (
        (personal.do_mute_user, hamlet, "Cannot mute self"),
        (personal.do_mute_user, 10**15, "No such user"),
        (personal.do_unmute_user, domain.id("iago"), "User is not muted"),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(lambda ctx, a=action, t=target: a(ctx, hamlet, t))
    domain.run(lambda ctx: personal.do_mute_user(ctx, hamlet, domain.id("iago")))
    with pytest.raises(ActionError, match="User already muted"):
        domain.run(lambda ctx: personal.do_mute_user(ctx, hamlet, domain.id("iago")))


# -- alert words -----------------------------------------------------------------------------


@covers(("alert_words", None))
def test_alert_words_are_added_once_whatever_the_case_and_removed(domain):
    hamlet = domain.id("hamlet")
    [event] = domain.verify(
        lambda ctx: personal.do_add_alert_words(ctx, hamlet, [" Ghost ", "", "skull", "GHOST"])
    )
    assert event["alert_words"] == ["Ghost", "skull"]
    domain.verify(
        lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["ghost"]),
        state_change_expected=False,
    )
    [event] = domain.verify(lambda ctx: personal.do_remove_alert_words(ctx, hamlet, ["GHOST"]))
    assert event["alert_words"] == ["skull"]


@covers(("message", None))
def test_a_message_with_a_recipients_alert_word_is_flagged_for_them(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    domain.run(lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["ghost"]))
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, othello, "Denmark", "t", "The GHOST walks.")
    )
    assert event["flags"] == ["has_alert_word"]
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, othello, "Denmark", "t", "ghostly"),
    )
    assert event["flags"] == []
    # letter case folded as the server folds it, beyond ASCII too
    domain.run(lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["Ærø"]))
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, othello, "Denmark", "t", "off to ÆRØ today")
    )
    assert event["flags"] == ["has_alert_word"]


def test_alert_word_boundaries():
    match = personal.contains_alert_word
    assert match("a ghost!", "ghost")
    assert match("(Ghost)", "ghost")
    assert match("ghost", "GHOST")
    assert not match("ghostly", "ghost")
    assert not match("aghost", "ghost")
    assert match("ghostly ghost", "ghost")


def test_alert_word_refusals(domain, monkeypatch):
    hamlet = domain.id("hamlet")
    with pytest.raises(ActionError, match=r"alert_words\[0\] is too long"):
        domain.run(lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["x" * 101]))
    monkeypatch.setattr(personal.alert_words, "MAX_ALERT_WORDS", 2)
    with pytest.raises(ActionError, match="at most 2 alert words"):
        domain.run(lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["a", "b", "c"]))
    assert domain.fetch()["alert_words"] == []


# -- drafts --------------------------------------------------------------------------------


def _draft(domain, **overrides):
    values = {
        "type": "stream",
        "to": [domain.streams["Denmark"]],
        "topic": "castle",
        "content": "To be",
        "timestamp": 1_700_000_000.5,
    }
    values.update(overrides)
    return DraftData(**values)


@covers(("drafts", "add"), ("drafts", "update"), ("drafts", "remove"))
def test_drafts_are_added_edited_and_removed(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    [event] = domain.verify(
        lambda ctx: personal.do_create_drafts(
            ctx,
            hamlet,
            [_draft(domain), _draft(domain, type="private", to=[othello, hamlet], topic="x")],
        )
    )
    first, second = event["drafts"]
    assert first["timestamp"] == 1_700_000_000
    assert (second["type"], second["to"], second["topic"]) == ("private", [othello], "")
    [event] = domain.verify(
        lambda ctx: personal.do_edit_draft(ctx, hamlet, first["id"], _draft(domain, content="Not"))
    )
    assert event["draft"]["content"] == "Not"
    domain.verify(lambda ctx: personal.do_delete_draft(ctx, hamlet, second["id"]))
    assert [d["id"] for d in domain.fetch()["drafts"]] == [first["id"]]


@covers(("user_settings", "update"))
def test_turning_draft_synchronization_off_deletes_the_drafts(domain):
    hamlet = domain.id("hamlet")
    domain.run(lambda ctx: personal.do_create_drafts(ctx, hamlet, [_draft(domain)]))
    domain.verify(
        lambda ctx: do_change_user_setting(ctx, hamlet, "enable_drafts_synchronization", False)
    )
    assert domain.fetch()["drafts"] == []
    with pytest.raises(ActionError, match=r"User has disabled synchronizing drafts\."):
        domain.run(lambda ctx: personal.do_create_drafts(ctx, hamlet, [_draft(domain)]))
    domain.verify(
        lambda ctx: do_change_user_setting(ctx, hamlet, "enable_drafts_synchronization", True)
    )
    assert domain.fetch()["drafts"] == []


def test_draft_refusals(domain, monkeypatch):
    hamlet = domain.id("hamlet")
    for draft, message in (
        (_draft(domain, to=[]), "Must specify exactly 1 channel ID"),
        (_draft(domain, to=[domain.streams["Scotland"]]), "Invalid channel ID"),
        (_draft(domain, type="private", to=[10**15]), f"Invalid user ID {10**15}"),
        (_draft(domain, timestamp=-1), "Timestamp must not be negative."),
        (_draft(domain, timestamp=1e300), "Timestamp is too large."),
        (_draft(domain, content="  "), "Message must not be empty"),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(lambda ctx, d=draft: personal.do_create_drafts(ctx, hamlet, [d]))
    for action in (
        lambda ctx: personal.do_edit_draft(ctx, hamlet, 10**15, _draft(domain)),
        lambda ctx: personal.do_delete_draft(ctx, hamlet, 10**15),
    ):
        with pytest.raises(ActionError, match="Draft does not exist") as refused:
            domain.run(action)
        assert refused.value.status == 404
    monkeypatch.setattr(personal.drafts, "MAX_DRAFTS", 1)
    with pytest.raises(ActionError, match="at most 1 drafts"):
        domain.run(lambda ctx: personal.do_create_drafts(ctx, hamlet, [_draft(domain)] * 2))
    assert domain.fetch()["drafts"] == []


def test_another_users_draft_does_not_exist_for_one(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    [draft_id] = domain.run(lambda ctx: personal.do_create_drafts(ctx, othello, [_draft(domain)]))
    with pytest.raises(ActionError, match="Draft does not exist"):
        domain.run(lambda ctx: personal.do_delete_draft(ctx, hamlet, draft_id))


# -- saved snippets ---------------------------------------------------------------------------


@covers(("saved_snippets", "add"), ("saved_snippets", "update"), ("saved_snippets", "remove"))
def test_saved_snippets_are_added_edited_and_removed(domain):
    hamlet = domain.id("hamlet")
    [event] = domain.verify(
        lambda ctx: personal.do_create_saved_snippet(ctx, hamlet, " Greeting ", " Hello! ")
    )
    snippet = event["saved_snippet"]
    assert (snippet["title"], snippet["content"]) == ("Greeting", "Hello!")
    [event] = domain.verify(
        lambda ctx: personal.do_edit_saved_snippet(ctx, hamlet, snippet["id"], None, "Hi!")
    )
    assert (event["saved_snippet"]["title"], event["saved_snippet"]["content"]) == (
        "Greeting",
        "Hi!",
    )
    assert not domain.run(
        lambda ctx: personal.do_edit_saved_snippet(ctx, hamlet, snippet["id"], None, None)
    )
    domain.verify(lambda ctx: personal.do_delete_saved_snippet(ctx, hamlet, snippet["id"]))
    assert domain.fetch()["saved_snippets"] == []


def test_saved_snippet_refusals(domain, monkeypatch):
    hamlet = domain.id("hamlet")
    for title, content, message in (
        (" ", "x", "title cannot be blank."),
        ("x" * 61, "x", "title is too long"),
        ("t", "", "content cannot be blank."),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(
                lambda ctx, t=title, c=content: personal.do_create_saved_snippet(ctx, hamlet, t, c)
            )
    with pytest.raises(ActionError, match=r"Saved snippet does not exist\."):
        domain.run(lambda ctx: personal.do_delete_saved_snippet(ctx, hamlet, 10**15))
    monkeypatch.setattr(personal.snippets, "MAX_SAVED_SNIPPETS", 1)
    domain.run(lambda ctx: personal.do_create_saved_snippet(ctx, hamlet, "a", "b"))
    with pytest.raises(ActionError, match="at most 1 saved snippets"):
        domain.run(lambda ctx: personal.do_create_saved_snippet(ctx, hamlet, "c", "d"))


def test_personal_rows_are_the_users_own(domain, database_url):
    """Nothing of one user's reaches another's state."""
    hamlet = domain.id("hamlet")
    domain.run(lambda ctx: personal.do_add_alert_words(ctx, hamlet, ["ghost"]))
    domain.run(lambda ctx: personal.do_create_saved_snippet(ctx, hamlet, "a", "b"))
    domain.run(lambda ctx: personal.do_mute_user(ctx, hamlet, domain.id("iago")))
    state = domain.fetch("othello")
    assert (state["alert_words"], state["saved_snippets"], state["muted_users"]) == ([], [], [])
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM alert_words WHERE user_id = %s", (hamlet,))
        assert row.fetchone() == (1,)
