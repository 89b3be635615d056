"""The empty topic over HTTP: "general chat" and "(no topic)" name it when
sending, editing, typing and narrowing; history shows it as "general chat"
unless `allow_empty_topic_name` (Zulip 10, feature levels 334 and 370)."""

from __future__ import annotations

from typing import Any

from generation.actions.realm import do_set_realm_property
from tests.support import Api, error, ok


def _send(api: Api, topic: str, content: str = "hi") -> int:
    body = ok(api.request("POST", "messages", type="stream", to="Denmark", topic=topic,
                          content=content))  # fmt: skip
    return int(body["id"])


def _messages(api: Api, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("anchor", "newest")
    params.setdefault("num_before", 10)
    messages: list[dict[str, Any]] = ok(api.request("GET", "messages", **params))["messages"]
    return messages


def test_the_display_name_and_no_topic_are_sent_to_the_empty_topic(apis, domain):
    iago, hamlet = apis["iago"], apis["hamlet"]
    empty = _send(iago, "")
    named = _send(iago, "general chat")
    spaced = _send(iago, "  general chat ")
    legacy = _send(iago, "(no topic)")
    other = _send(iago, "General chatter")

    ids = [empty, named, spaced, legacy]
    found = _messages(hamlet, narrow=[["channel", "Denmark"]], allow_empty_topic_name=True)
    assert {m["id"]: m["subject"] for m in found} == {**dict.fromkeys(ids, ""),
                                                       other: "General chatter"}  # fmt: skip


def test_history_names_the_empty_topic_unless_allowed(apis, domain):
    iago, hamlet = apis["iago"], apis["hamlet"]
    empty = _send(iago, "")
    other = _send(iago, "lunch")
    dm = ok(iago.request("POST", "messages", type="private", to=[domain.id("hamlet")],
                         content="psst"))["id"]  # fmt: skip

    subjects = {m["id"]: m["subject"] for m in _messages(hamlet)}
    assert subjects == {empty: "general chat", other: "lunch", dm: ""}
    subjects = {m["id"]: m["subject"] for m in _messages(hamlet, allow_empty_topic_name=True)}
    assert subjects == {empty: "", other: "lunch", dm: ""}

    one = ok(hamlet.request("GET", f"messages/{empty}"))["message"]
    assert one["subject"] == "general chat"
    one = ok(hamlet.request("GET", f"messages/{empty}", allow_empty_topic_name=True))["message"]
    assert one["subject"] == ""


def test_a_topic_narrow_of_the_display_name_finds_the_empty_topic(apis, domain):
    iago, hamlet = apis["iago"], apis["hamlet"]
    empty = _send(iago, "")
    _send(iago, "lunch")

    for operand in ("general chat", ""):
        found = _messages(hamlet, narrow=[{"operator": "channel", "operand": "Denmark"},
                                          {"operator": "topic", "operand": operand}])  # fmt: skip
        assert [m["id"] for m in found] == [empty]
        assert found[0]["subject"] == "general chat"


def test_topics_name_the_empty_topic_unless_allowed(apis, domain):
    iago, hamlet = apis["iago"], apis["hamlet"]
    empty = _send(iago, "")
    lunch = _send(iago, "lunch")
    denmark = domain.streams["Denmark"]

    topics = ok(hamlet.request("GET", f"users/me/{denmark}/topics"))["topics"]
    assert topics == [{"name": "lunch", "max_id": lunch}, {"name": "general chat", "max_id": empty}]
    topics = ok(hamlet.request("GET", f"users/me/{denmark}/topics", allow_empty_topic_name=True))[
        "topics"
    ]
    assert topics == [{"name": "lunch", "max_id": lunch}, {"name": "", "max_id": empty}]
    body = error(hamlet.request("GET", f"users/me/{denmark}/topics", allow_empty_topic_name="x"))
    assert body["code"] == "BAD_REQUEST"


def test_editing_to_the_display_name_moves_to_the_empty_topic(apis, domain):
    iago, hamlet = apis["iago"], apis["hamlet"]
    message_id = _send(iago, "lunch")
    ok(iago.request("PATCH", f"messages/{message_id}", topic="general chat"))
    [message] = _messages(hamlet, allow_empty_topic_name=True)
    assert (message["id"], message["subject"]) == (message_id, "")


def test_mandatory_topics_refuse_the_display_name_and_no_topic(apis, domain):
    iago = apis["iago"]
    domain.run(
        lambda ctx: do_set_realm_property(
            ctx, domain.id("iago"), domain.realm_id, "mandatory_topics", True
        )
    )
    for topic in ("", "general chat", "(no topic)"):
        body = error(iago.request("POST", "messages", type="stream", to="Denmark", topic=topic,
                                  content="hi"))  # fmt: skip
        assert body["msg"] == "Topics are required in this organization."
        assert body["code"] == "BAD_REQUEST"
