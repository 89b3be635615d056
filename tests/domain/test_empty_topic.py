"""verify_action for clients without `empty_topic_name`: register's state
names the empty topic "general chat" as their events do (unread_msgs,
user_topics), so stale state plus those events equals a fresh fetch; and
for clients with it, "" throughout."""

from __future__ import annotations

import pytest

from generation.actions import messages, personal
from generation.events.personal import FOLLOWED, INHERIT, MUTED
from tests.domain.harness import MODERN, covers

LEGACY = MODERN - {"empty_topic_name"}
SHOWN = {LEGACY: "general chat", MODERN: ""}


def _send(domain, topic=""):
    return lambda ctx: messages.do_send_stream_message(
        ctx, domain.id("iago"), "Denmark", topic, "hello"
    )


def _unread_topics(state):
    return [(s["topic"], len(s["unread_message_ids"])) for s in state["unread_msgs"]["streams"]]


@pytest.mark.parametrize("capabilities", [LEGACY, MODERN], ids=["legacy", "modern"])
@covers(("message", None), ("update_message", None), ("update_message_flags", "add"),
        ("update_message_flags", "remove"), ("delete_message", None))  # fmt: skip
def test_unread_messages_in_the_empty_topic(domain, capabilities):
    shown = SHOWN[capabilities]
    # the types of the events replayed are asked for too (else skipped)
    sections = ["message", "update_message_flags", "update_message", "delete_message"]
    opts = {"capabilities": capabilities, "fetch_event_types": sections}
    domain.run(_send(domain))
    [event] = domain.verify(_send(domain), **opts)
    assert event["message"]["subject"] == shown
    assert _unread_topics(domain.fetch(**opts)) == [(shown, 2)]
    message_id = event["message"]["id"]
    hamlet = domain.id("hamlet")

    domain.verify(
        lambda ctx: messages.do_update_message_flags(ctx, hamlet, "add", "read", [message_id]),
        **opts,
    )
    [event] = domain.verify(
        lambda ctx: messages.do_update_message_flags(ctx, hamlet, "remove", "read", [message_id]),
        **opts,
    )
    assert event["message_details"][str(message_id)]["topic"] == shown
    # moved out of the empty topic and back
    [event] = domain.verify(
        lambda ctx: messages.do_update_message(
            ctx, domain.id("iago"), message_id, topic="lunch", propagate_mode="change_one"
        ),
        **opts,
    )
    assert (event["orig_subject"], event["subject"]) == (shown, "lunch")
    assert _unread_topics(domain.fetch(**opts)) == sorted([(shown, 1), ("lunch", 1)])
    [event] = domain.verify(
        lambda ctx: messages.do_update_message(
            ctx, domain.id("iago"), message_id, topic="", propagate_mode="change_one"
        ),
        **opts,
    )
    assert (event["orig_subject"], event["subject"]) == ("lunch", shown)
    [event] = domain.verify(
        lambda ctx: messages.do_delete_messages(ctx, domain.id("iago"), [message_id]), **opts
    )
    assert event["topic"] == shown
    assert _unread_topics(domain.fetch(**opts)) == [(shown, 1)]


@pytest.mark.parametrize("capabilities", [LEGACY, MODERN], ids=["legacy", "modern"])
@covers(("user_topic", None))
def test_a_policy_for_the_empty_topic(domain, capabilities):
    shown = SHOWN[capabilities]
    denmark = domain.streams["Denmark"]
    opts = {"capabilities": capabilities, "fetch_event_types": ["user_topic"]}

    def policy(value):
        return lambda ctx: personal.do_set_user_topic_visibility_policy(
            ctx, domain.id("hamlet"), denmark, "", value
        )

    for value in (MUTED, FOLLOWED, INHERIT):
        [event] = domain.verify(policy(value), event_types=["user_topic"], **opts)
        assert (event["topic_name"], event["visibility_policy"]) == (shown, value)
        topics = domain.fetch(**opts)["user_topics"]
        expected = [] if value == INHERIT else [(denmark, shown, value)]
        assert [(t["stream_id"], t["topic_name"], t["visibility_policy"]) for t in topics] == (
            expected
        )


def test_the_realm_reports_the_display_name(domain):
    for capabilities in (LEGACY, MODERN):
        state = domain.fetch(capabilities=capabilities, fetch_event_types=["realm"])
        assert state["realm_empty_topic_display_name"] == "general chat"
