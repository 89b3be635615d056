"""narrow: parsing a client's narrow and filtering message events with it
(Zulip's narrow predicate), alone and through the registry's delivery."""

from __future__ import annotations

import pytest

from queues.errors import BadNarrow
from queues.narrow import MAX_OPERAND_LENGTH, MAX_TERMS, narrow_matches, parse_narrow
from tests.queues.helpers import client_events, make_registry, message_event, options

STREAM_MESSAGE = message_event(stream="Denmark", topic="Castle tour", sender_email="Hamlet@Ex.com")
DM = message_event(stream=None, sender_email="othello@ex.com")


def _matches(raw_narrow, event=STREAM_MESSAGE, flags=()):
    return narrow_matches(parse_narrow(raw_narrow), event["message"], list(flags))


# -- parsing ----------------------------------------------------------------


def test_parse_narrow_returns_terms_as_tuples():
    assert parse_narrow([["stream", "denmark"], ["is", "starred"]]) == (
        ("stream", "denmark"),
        ("is", "starred"),
    )
    assert parse_narrow([]) == ()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("stream:denmark", "narrow is not a list"),
        ({"stream": "denmark"}, "narrow is not a list"),
        ([["stream"]], r"narrow\[0\] is not a list of two strings"),
        ([["is", "dm"], ["stream", "a", "b"]], r"narrow\[1\] is not a list of two strings"),
        ([["stream", 5]], r"narrow\[0\] is not a list of two strings"),
        ([("stream", "denmark")], r"narrow\[0\] is not a list of two strings"),
        ([["search", "x"]], r"^Operator search not supported\.$"),
        ([["near", "12"]], r"^Operator near not supported\.$"),
        ([["is", "followed"]], r"^Operand followed not supported\.$"),
        ([["is", "Starred"]], r"^Operand Starred not supported\.$"),
        ([["is", "dm"]] * (MAX_TERMS + 1), f"more than {MAX_TERMS} terms"),
        ([["topic", "x" * (MAX_OPERAND_LENGTH + 1)]], r"narrow\[0\] operand is too long"),
    ],
)
def test_parse_narrow_rejects_bad_narrows(raw, message):
    with pytest.raises(BadNarrow, match=message):
        parse_narrow(raw)


def test_parse_narrow_accepts_the_limits():
    assert len(parse_narrow([["is", "dm"]] * MAX_TERMS)) == MAX_TERMS
    assert parse_narrow([["topic", "x" * MAX_OPERAND_LENGTH]]) == (
        ("topic", "x" * MAX_OPERAND_LENGTH),
    )
    with pytest.raises(BadNarrow):
        parse_narrow([["is", "dm"]] * (MAX_TERMS + 1))
    with pytest.raises(BadNarrow):
        parse_narrow([["topic", "x" * (MAX_OPERAND_LENGTH + 1)]])


def test_exact_topic_is_case_sensitive_and_whole():
    assert _matches([["exact-topic", "Castle tour"]])
    assert not _matches([["exact-topic", "castle tour"]])
    assert not _matches([["exact-topic", "Castle"]])
    assert not _matches([["exact-topic", "Castle tour"]], DM)


# -- matching ---------------------------------------------------------------


def test_empty_narrow_matches_everything():
    assert _matches([])
    assert _matches([], DM)


@pytest.mark.parametrize("operator", ["stream", "channel"])
def test_stream_matches_channel_name_case_insensitively(operator):
    assert _matches([[operator, "denmark"]])
    assert _matches([[operator, "DENMARK"]])
    assert not _matches([[operator, "Denmar"]])
    assert not _matches([[operator, "Verona"]])


def test_stream_never_matches_a_direct_message():
    assert not _matches([["stream", "denmark"]], DM)


def test_topic_matches_whole_topic_or_one_of_its_words():
    assert _matches([["topic", "castle tour"]])
    assert _matches([["topic", "CASTLE"]])
    assert _matches([["topic", "tour"]])
    assert not _matches([["topic", "cast"]])
    assert not _matches([["topic", "castle tou"]])
    assert not _matches([["topic", "verona"]])


def test_topic_word_rule_splits_on_any_whitespace():
    event = message_event(topic="castle\ttour  plans")

    assert _matches([["topic", "tour"]], event)
    assert _matches([["topic", "plans"]], event)
    assert not _matches([["topic", "tour plans"]], event)


def test_topic_is_read_from_topic_key_when_there_is_no_subject():
    event = message_event(topic="x")
    del event["message"]["subject"]
    event["message"]["topic"] = "castle tour"

    assert _matches([["topic", "castle"]], event)


def test_topic_never_matches_a_direct_message():
    assert not _matches([["topic", ""]], DM)


def test_sender_matches_email_case_insensitively():
    assert _matches([["sender", "hamlet@ex.com"]])
    assert not _matches([["sender", "othello@ex.com"]])
    assert _matches([["sender", "OTHELLO@ex.com"]], DM)


@pytest.mark.parametrize("operand", ["dm", "private"])
def test_is_dm_matches_only_direct_messages(operand):
    assert _matches([["is", operand]], DM)
    assert not _matches([["is", operand]])


def test_is_starred_uses_the_users_flags():
    assert _matches([["is", "starred"]], flags=["starred"])
    assert not _matches([["is", "starred"]], flags=["read"])


def test_is_unread_means_no_read_flag():
    assert _matches([["is", "unread"]], flags=[])
    assert _matches([["is", "unread"]], flags=["starred"])
    assert not _matches([["is", "unread"]], flags=["read"])


@pytest.mark.parametrize("operand", ["mentioned", "alerted"])
def test_is_mentioned_uses_the_mentioned_flag(operand):
    assert _matches([["is", operand]], flags=["mentioned"])
    assert not _matches([["is", operand]], flags=["wildcard_mentioned"])


def test_is_resolved_matches_topics_with_the_resolved_prefix():
    resolved = message_event(topic="\u2714 castle tour")

    assert _matches([["is", "resolved"]], resolved)
    assert not _matches([["is", "resolved"]])
    assert not _matches([["is", "resolved"]], message_event(topic="\u2714castle"))


def test_all_terms_must_match():
    narrow = [["stream", "denmark"], ["topic", "castle"], ["is", "starred"]]

    assert _matches(narrow, flags=["starred"])
    assert not _matches(narrow, flags=[])
    assert not _matches([["stream", "denmark"], ["topic", "verona"]], flags=["starred"])


# -- through delivery -------------------------------------------------------


def test_narrowed_queue_receives_only_matching_messages():
    # Scenario 60: a DM and a Denmark message give exactly one event.
    registry = make_registry()
    narrowed = registry.allocate(1, 1, options(narrow=parse_narrow([["stream", "denmark"]])), 0.0)
    plain = registry.allocate(1, 1, options(), 0.0)

    registry.deliver(message_event(1, stream=None), [1], 1, 1.0)
    registry.deliver(message_event(2, stream="Denmark"), [1], 1, 2.0)

    assert [e["message"]["id"] for e in client_events(narrowed)] == [2]
    assert [e["message"]["id"] for e in client_events(plain)] == [1, 2]


def test_narrow_uses_each_users_own_flags():
    registry = make_registry()
    starred_only = options(narrow=parse_narrow([["is", "starred"]]))
    alice = registry.allocate(1, 1, starred_only, 0.0)
    bob = registry.allocate(2, 1, starred_only, 0.0)

    registry.deliver(
        message_event(), [{"id": 1, "flags": ["starred"]}, {"id": 2, "flags": []}], 1, 1.0
    )

    assert [e["flags"] for e in client_events(alice)] == [["starred"]]
    assert client_events(bob) == []


def test_narrow_does_not_filter_other_event_types():
    registry = make_registry()
    narrowed = registry.allocate(1, 1, options(narrow=parse_narrow([["is", "dm"]])), 0.0)

    report = registry.deliver({"type": "realm", "op": "update"}, [1], 1, 1.0)

    assert report.queues == 1
    assert client_events(narrowed) == [{"id": 0, "type": "realm", "op": "update"}]


def test_narrow_never_widens_delivery_to_non_recipients():
    registry = make_registry()
    registry.allocate(1, 1, options(), 0.0)
    outsider = registry.allocate(2, 1, options(narrow=parse_narrow([["stream", "denmark"]])), 0.0)

    report = registry.deliver(message_event(stream="Denmark"), [1], 1, 1.0)

    assert report.queues == 1
    assert client_events(outsider) == []
