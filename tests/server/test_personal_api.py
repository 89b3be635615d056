"""The personal area over HTTP against the real server: status, topic
policies (and the legacy muted-topics endpoint), muted users, alert words,
drafts and saved snippets; the events each sends and to whom; and bad input
(4xx JSON, never 500)."""

from __future__ import annotations

import pytest

from tests.support import error, ok, wait_for


def events_of(client, queue_id, count):
    """The first `count` events of a queue (waiting for them to arrive)."""
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def test_status_reaches_the_realm_and_register(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    queue = othello.register(event_types=["user_status"])["queue_id"]
    ok(hamlet.request("POST", "users/me/status", status_text="Busy", emoji_name="coffee"))
    [event] = events_of(othello, queue, 1)
    assert (event["user_id"], event["status_text"], event["emoji_code"]) == (
        domain.id("hamlet"),
        "Busy",
        "2615",
    )
    ok(hamlet.request("POST", "users/me/status", away=True))
    state = othello.register(fetch_event_types=["user_status"])
    assert state["user_status"][str(domain.id("hamlet"))] == {
        "away": True,
        "status_text": "Busy",
        "emoji_name": "coffee",
        "emoji_code": "2615",
        "reaction_type": "unicode_emoji",
    }
    message = error(hamlet.request("POST", "users/me/status"))["msg"]
    assert message == "Client did not pass any new values."


def test_user_topics_and_the_legacy_endpoint(apis, domain):
    hamlet = apis["hamlet"]
    denmark = domain.streams["Denmark"]
    queue = hamlet.register(event_types=["user_topic", "muted_topics"])["queue_id"]
    ok(
        hamlet.request(
            "POST", "user_topics", stream_id=denmark, topic="castle", visibility_policy=1
        )
    )
    legacy, event = events_of(hamlet, queue, 2)
    assert legacy["type"] == "muted_topics"
    assert legacy["muted_topics"][0][:2] == [
        "Denmark",
        "castle",
    ]
    assert (event["type"], event["visibility_policy"]) == ("user_topic", 1)
    state = hamlet.register(fetch_event_types=["user_topic", "muted_topics"])
    assert [t["topic_name"] for t in state["user_topics"]] == ["castle"]
    assert [m[:2] for m in state["muted_topics"]] == [["Denmark", "castle"]]
    path = "users/me/subscriptions/muted_topics"
    ok(hamlet.request("PATCH", path, stream="Denmark", topic="castle", op="remove"))
    ok(hamlet.request("PATCH", path, stream_id=denmark, topic="moat", op="add"))
    assert (
        error(hamlet.request("PATCH", path, stream_id=denmark, topic="moat", op="add"))["msg"]
        == "Topic already muted"
    )
    assert error(hamlet.request("PATCH", path, topic="moat", op="add"))["msg"] == (
        "Please supply 'stream'."
    )
    scotland = domain.streams["Scotland"]
    response = hamlet.request(
        "POST", "user_topics", stream_id=scotland, topic="x", visibility_policy=1
    )
    assert error(response)["msg"] == "Invalid channel ID"


def test_muting_a_user_over_http(apis, domain):
    hamlet = apis["hamlet"]
    othello = domain.id("othello")
    queue = hamlet.register(event_types=["muted_users"])["queue_id"]
    ok(hamlet.request("POST", f"users/me/muted_users/{othello}"))
    [event] = events_of(hamlet, queue, 1)
    assert [m["id"] for m in event["muted_users"]] == [othello]
    assert error(hamlet.request("POST", f"users/me/muted_users/{othello}"))["msg"] == (
        "User already muted"
    )
    ok(hamlet.request("DELETE", f"users/me/muted_users/{othello}"))
    assert error(hamlet.request("DELETE", f"users/me/muted_users/{othello}"))["msg"] == (
        "User is not muted"
    )
    me = domain.id("hamlet")
    assert error(hamlet.request("POST", f"users/me/muted_users/{me}"))["msg"] == "Cannot mute self"
    assert error(hamlet.request("POST", "users/me/muted_users/0"))["msg"] == "No such user"


def test_alert_words_flag_new_messages(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    body = ok(hamlet.request("POST", "users/me/alert_words", alert_words=["ghost", "Skull"]))
    assert body["alert_words"] == ["ghost", "Skull"]
    assert ok(hamlet.request("GET", "users/me/alert_words"))["alert_words"] == ["ghost", "Skull"]
    body = ok(hamlet.request("DELETE", "users/me/alert_words", alert_words=["skull"]))
    assert body["alert_words"] == ["ghost"]
    queue = hamlet.register(event_types=["message"])["queue_id"]
    ok(
        othello.request(
            "POST", "messages", type="stream", to="Denmark", topic="t", content="A ghost!"
        )
    )
    [event] = events_of(hamlet, queue, 1)
    assert event["flags"] == ["has_alert_word"]
    found = ok(
        hamlet.request(
            "GET", "messages", anchor="newest", num_before=5, num_after=0,
            narrow=[{"operator": "is", "operand": "alerted"}],
        )
    )["messages"]  # fmt: skip
    assert [(m["id"], m["flags"]) for m in found] == [(event["message"]["id"], ["has_alert_word"])]
    assert error(hamlet.request("POST", "users/me/alert_words", alert_words="ghost"))["msg"] == (
        'Argument "alert_words" is not valid JSON.'
    )
    response = hamlet.request("POST", "users/me/alert_words", alert_words=[1])
    assert error(response)["msg"] == "alert_words[0] is not a string"


def test_drafts_over_http(apis, domain):
    hamlet = apis["hamlet"]
    queue = hamlet.register(event_types=["drafts"])["queue_id"]
    draft = {"type": "stream", "to": [domain.streams["Denmark"]], "topic": "t", "content": "Hi"}
    [draft_id] = ok(hamlet.request("POST", "drafts", drafts=[draft]))["ids"]
    ok(hamlet.request("PATCH", f"drafts/{draft_id}", draft={**draft, "content": "Hello"}))
    listed = ok(hamlet.request("GET", "drafts"))
    assert listed["count"] == 1
    assert listed["drafts"][0]["content"] == "Hello"
    ok(hamlet.request("DELETE", f"drafts/{draft_id}"))
    assert [e["op"] for e in events_of(hamlet, queue, 3)] == ["add", "update", "remove"]
    response = hamlet.request("DELETE", f"drafts/{draft_id}")
    assert error(response, 404)["msg"] == "Draft does not exist"
    response = hamlet.request("POST", "drafts", drafts=[{**draft, "extra": 1}])
    assert error(response)["msg"] == "drafts[0] has an unknown key 'extra'"
    ok(hamlet.request("PATCH", "settings", enable_drafts_synchronization=False))
    response = hamlet.request("POST", "drafts", drafts=[draft])
    assert error(response)["msg"] == "User has disabled synchronizing drafts."
    assert hamlet.register(fetch_event_types=["drafts"])["drafts"] == []


def test_saved_snippets_over_http(apis):
    hamlet = apis["hamlet"]
    queue = hamlet.register(event_types=["saved_snippets"])["queue_id"]
    snippet_id = ok(hamlet.request("POST", "saved_snippets", title="Hi", content="Hello"))[
        "saved_snippet_id"
    ]
    ok(hamlet.request("PATCH", f"saved_snippets/{snippet_id}", title="Greeting"))
    [snippet] = ok(hamlet.request("GET", "saved_snippets"))["saved_snippets"]
    assert (snippet["id"], snippet["title"], snippet["content"]) == (
        snippet_id,
        "Greeting",
        "Hello",
    )
    ok(hamlet.request("DELETE", f"saved_snippets/{snippet_id}"))
    assert [e["op"] for e in events_of(hamlet, queue, 3)] == ["add", "update", "remove"]
    response = hamlet.request("DELETE", f"saved_snippets/{snippet_id}")
    assert error(response, 404)["msg"] == "Saved snippet does not exist."


@pytest.mark.parametrize(
    ("method", "path", "params", "message"),
    [
        ("POST", "users/me/status", {"away": "yes"}, 'Argument "away" is not valid JSON.'),
        ("POST", "users/me/status", {"status_text": "x" * 61}, "status_text is too long"),
        ("POST", "user_topics", {"stream_id": 1, "topic": "t"}, "Missing 'visibility_policy'"),
        (
            "POST",
            "user_topics",
            {"stream_id": 1, "topic": "t", "visibility_policy": 9},
            "too large",
        ),
        ("POST", "drafts", {"drafts": {}}, "drafts is not a list"),
        ("POST", "drafts", {"drafts": [{"type": "x"}]}, "drafts[0] is missing 'to'"),
        ("POST", "saved_snippets", {"title": "t"}, "Missing 'content'"),
        ("PATCH", "saved_snippets/1", {"title": " "}, "title cannot be blank."),
    ],
)
def test_bad_input_is_a_json_client_error(apis, method, path, params, message):
    response = apis["hamlet"].request(method, path, **params)
    assert message in error(response)["msg"]
