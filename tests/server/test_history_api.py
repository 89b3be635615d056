"""Message history over HTTP against the real server (server/handlers/history.py):
`GET /messages` with Zulip's anchors, windows and narrows, who may read
what, `GET /messages/{id}`, its edit history, a channel's topics, and
`matches_narrow`; and the `zulip` client's `get_messages`.

The Domain realm (tests/server/conftest.py): iago admin, hamlet, othello,
polonius guest; Denmark (public: iago, hamlet, othello), Verona (public:
hamlet), Scotland (private: iago, othello)."""

from __future__ import annotations

import pytest

from tests.server.test_messages_api import client_for, send_stream
from tests.support import error, ok


def send_direct(api, to, content="psst"):
    return ok(api.request("POST", "messages", type="private", to=to, content=content))["id"]


def fetch(api, narrow=(), anchor="newest", before=100, after=0, **params):
    return ok(api.request("GET", "messages", anchor=anchor, num_before=before, num_after=after,
                          narrow=list(narrow), **params))  # fmt: skip


def ids(body):
    return [m["id"] for m in body["messages"]]


@pytest.fixture
def world(apis, domain):
    """Messages of every kind, sent in this order."""
    hamlet, iago, othello = apis["hamlet"], apis["iago"], apis["othello"]
    return {
        "denmark": send_stream(iago, to="Denmark", topic="castle", content="the ghost walks"),
        "verona": send_stream(hamlet, to="Verona", topic="fair", content="two households"),
        "scotland": send_stream(iago, to="Scotland", topic="heath", content="secret witches"),
        "dm": send_direct(iago, [domain.id("hamlet")], "a word, my lord"),
        "group": send_direct(othello, [domain.id("hamlet"), domain.id("iago")], "all three"),
        "secret_dm": send_direct(iago, [domain.id("othello")], "handkerchief"),
        "denmark2": send_stream(othello, to="Denmark", topic="Castle", content="ghost again"),
    }


def test_the_newest_page_is_what_the_user_received_with_their_flags(apis, world):
    body = fetch(apis["hamlet"])
    assert ids(body) == [world[k] for k in ("denmark", "verona", "dm", "group", "denmark2")]
    assert body["anchor"] == 10_000_000_000_000_000
    assert (body["found_anchor"], body["found_oldest"], body["found_newest"]) == (
        False, True, True,
    )  # fmt: skip
    assert body["history_limited"] is False
    by_id = {m["id"]: m for m in body["messages"]}
    assert by_id[world["verona"]]["flags"] == ["read"]  # his own
    assert by_id[world["denmark"]]["flags"] == []
    message = by_id[world["denmark"]]
    assert message["content"] == "<p>the ghost walks</p>"
    assert message["content_type"] == "text/html"
    assert message["display_recipient"] == "Denmark"
    assert message["subject"] == "castle"
    assert message["client"] == "python-requests"
    assert message["avatar_url"] is None  # client_gravatar defaults to true
    assert [p["id"] for p in by_id[world["group"]]["display_recipient"]] == sorted(
        p["id"] for p in by_id[world["group"]]["display_recipient"]
    )


def test_markdown_and_gravatar_as_asked(apis, world):
    body = fetch(apis["hamlet"], apply_markdown=False, client_gravatar=False)
    message = next(m for m in body["messages"] if m["id"] == world["denmark"])
    assert message["content"] == "the ghost walks"
    assert message["content_type"] == "text/x-markdown"
    assert message["avatar_url"].startswith("https://secure.gravatar.com/avatar/")


def test_a_window_around_an_anchor(apis, world):
    hamlet = apis["hamlet"]
    order = [world[k] for k in ("denmark", "verona", "dm", "group", "denmark2")]
    body = fetch(hamlet, anchor=order[2], before=1, after=1)
    assert ids(body) == order[1:4]
    assert (body["anchor"], body["found_anchor"]) == (order[2], True)
    assert (body["found_oldest"], body["found_newest"]) == (False, False)
    body = fetch(hamlet, anchor=order[2], before=1, after=0, include_anchor=False)
    # The anchor is not in the answer: not found, as Zulip says.
    assert (ids(body), body["found_anchor"]) == ([order[1]], False)
    # Nothing but the anchor asked for: the anchor, include_anchor or not (Zulip's rule).
    body = fetch(hamlet, anchor=order[2], before=0, after=0, include_anchor=False)
    assert ids(body) == [order[2]]
    body = fetch(hamlet, anchor=order[2], before=5, after=5)
    assert ids(body) == order
    assert (body["found_oldest"], body["found_newest"]) == (True, True)
    body = fetch(hamlet, anchor="oldest", before=0, after=2)
    assert ids(body) == order[:2]
    assert (body["anchor"], body["found_oldest"], body["found_newest"]) == (0, True, False)
    # An anchor that is not in the narrow: found_anchor false, the window
    # around where it would be.
    body = fetch(hamlet, anchor=world["scotland"], before=1, after=1)
    assert ids(body) == [order[1], order[2]]
    assert body["found_anchor"] is False


def test_first_unread_is_the_anchor_when_asked(apis, world):
    hamlet = apis["hamlet"]
    ok(hamlet.request("POST", "messages/flags", messages=[world["denmark"]], op="add",
                      flag="read"))  # fmt: skip
    body = fetch(hamlet, anchor="first_unread", before=0, after=1)
    assert (body["anchor"], ids(body)) == (world["dm"], [world["dm"], world["group"]])
    body = ok(hamlet.request("GET", "messages", use_first_unread_anchor=True, num_before=0,
                             num_after=0, narrow=[]))  # fmt: skip
    assert body["anchor"] == world["dm"]
    ok(hamlet.request("POST", "mark_all_as_read"))
    body = fetch(hamlet, anchor="first_unread", before=1, after=1)
    # Nothing unread: the newest.
    assert body["anchor"] == 10_000_000_000_000_000
    assert ids(body) == [world["denmark2"]]


def test_a_public_channel_s_history_is_read_by_members_not_by_guests(apis, world):
    # Othello is not subscribed to Verona: a narrow to it reads its history.
    body = fetch(apis["othello"], [{"operator": "channel", "operand": "Verona"}])
    assert ids(body) == [world["verona"]]
    assert body["messages"][0]["flags"] == ["read", "historical"]
    # The legacy form, by id, with the alias.
    verona_id = body["messages"][0]["stream_id"]
    assert ids(fetch(apis["othello"], [["stream", "verona"]])) == [world["verona"]]
    assert ids(fetch(apis["othello"], [{"operator": "stream", "operand": verona_id}])) == [
        world["verona"]
    ]
    # Without a channel term, his own messages only.
    assert world["verona"] not in ids(fetch(apis["othello"]))
    # A guest reads only the channels they are in.
    assert ids(fetch(apis["polonius"], [["channel", "Verona"]])) == []
    assert ids(fetch(apis["polonius"], [["channels", "public"]])) == []
    assert set(ids(fetch(apis["othello"], [["channels", "public"]]))) == {
        world["denmark"], world["verona"], world["denmark2"],
    }  # fmt: skip


OUTSIDER_NARROWS = [
    [["channel", "Scotland"]],
    [["channel", "Scotland"], ["topic", "heath"]],
    [["topic", "heath"]],
    [["channels", "public"]],
    [["search", "witches"]],
    [["search", "handkerchief"]],
    [["sender", "iago@"]],  # completed with the realm below
    [["is", "dm"]],
    [["dm-including", "othello@"]],
    [["dm", "othello@"]],
    [{"operator": "channel", "operand": "Verona", "negated": True}],
    [{"operator": "is", "operand": "dm", "negated": True}],
]


@pytest.mark.parametrize("narrow", OUTSIDER_NARROWS, ids=lambda n: repr(n)[:60])
def test_no_narrow_shows_an_outsider_a_message_they_may_not_read(apis, domain, world, narrow):
    emails = {name: domain.users[name].email for name in ("iago", "othello")}
    narrow = [
        [t[0], emails[t[1][:-1]]] if isinstance(t, list) and t[1].endswith("@") else t
        for t in narrow
    ]
    hidden = {world["scotland"], world["secret_dm"]}
    for name in ("hamlet", "polonius"):
        found = set(ids(fetch(apis[name], narrow, anchor="oldest", before=0, after=1000)))
        assert not found & hidden, (name, narrow)
        for anchor in (world["scotland"], world["secret_dm"]):
            body = fetch(apis[name], narrow, anchor=anchor, before=0, after=0)
            assert body["messages"] == []
            assert body["found_anchor"] is False


def test_each_operator(apis, domain, world):
    hamlet = apis["hamlet"]
    iago_email = domain.users["iago"].email
    assert ids(fetch(hamlet, [["channel", "Denmark"], ["topic", "CASTLE"]])) == [
        world["denmark"], world["denmark2"],
    ]  # fmt: skip
    assert ids(fetch(hamlet, [["dm", iago_email]])) == [world["dm"]]
    assert ids(fetch(hamlet, [{"operator": "dm", "operand": [domain.id("iago")]}])) == [world["dm"]]
    assert ids(fetch(hamlet, [["pm-with", iago_email]])) == [world["dm"]]
    assert ids(fetch(hamlet, [["dm-including", iago_email]])) == [world["dm"], world["group"]]
    assert ids(fetch(hamlet, [["group-pm-with", iago_email]])) == [world["group"]]
    assert ids(fetch(hamlet, [["sender", iago_email]])) == [world["denmark"], world["dm"]]
    assert ids(fetch(hamlet, [{"operator": "sender", "operand": "me"}])) == [world["verona"]]
    assert ids(fetch(hamlet, [["id", str(world["dm"])]])) == [world["dm"]]
    assert ids(fetch(hamlet, [["is", "dm"]])) == [world["dm"], world["group"]]
    assert ids(fetch(hamlet, [["is", "private"]])) == [world["dm"], world["group"]]
    assert ids(fetch(hamlet, [{"operator": "is", "operand": "dm", "negated": True}])) == [
        world["denmark"], world["verona"], world["denmark2"],
    ]  # fmt: skip
    assert ids(fetch(hamlet, [["is", "unread"]])) == [
        world["denmark"], world["dm"], world["group"], world["denmark2"],
    ]  # fmt: skip
    ok(hamlet.request("POST", "messages/flags", messages=[world["group"]], op="add",
                      flag="starred"))  # fmt: skip
    assert ids(fetch(hamlet, [["is", "starred"]])) == [world["group"]]
    assert ids(fetch(hamlet, [["is", "mentioned"]])) == []
    mention = send_stream(apis["iago"], to="Denmark", topic="castle", content="@**King Hamlet**")
    assert ids(fetch(hamlet, [["is", "mentioned"]])) == [mention]
    ok(apis["iago"].request("PATCH", f"messages/{world['denmark']}", topic="\u2714 castle"))
    assert ids(fetch(hamlet, [["is", "resolved"]])) == [world["denmark"]]
    # near: no condition; with: the message's conversation.
    assert ids(fetch(hamlet, [["near", str(world["dm"])]])) == ids(fetch(hamlet))
    assert ids(fetch(hamlet, [{"operator": "with", "operand": world["denmark2"]}])) == [
        world["denmark2"], mention,
    ]  # fmt: skip


def test_search_is_full_text_with_highlights(apis, world):
    hamlet = apis["hamlet"]
    body = fetch(hamlet, [["search", "ghosts"]])  # stemmed: ghost
    assert ids(body) == [world["denmark"], world["denmark2"]]
    body = fetch(hamlet, [["channel", "Denmark"], ["search", '"ghost walks"']])
    assert ids(body) == [world["denmark"]]
    [found] = body["messages"]
    assert found["match_content"] == (
        '<p>the <span class="highlight">ghost</span> <span class="highlight">walks</span></p>'
    )
    assert found["match_subject"] == "castle"
    assert ids(fetch(hamlet, [{"operator": "search", "operand": "ghost", "negated": True}])) == [
        world["verona"], world["dm"], world["group"],
    ]  # fmt: skip
    matches = ok(hamlet.request("GET", "messages/matches_narrow",
                                msg_ids=[world["denmark"], world["verona"], world["scotland"]],
                                narrow=[["search", "ghost"]]))["messages"]  # fmt: skip
    assert set(matches) == {str(world["denmark"])}
    assert matches[str(world["denmark"])]["match_content"] == (
        '<p>the <span class="highlight">ghost</span> walks</p>'
    )
    assert matches[str(world["denmark"])]["match_subject"] == "castle"


NEWEST = {"anchor": "newest", "num_before": 1, "num_after": 0}


@pytest.mark.parametrize(
    ("params", "message", "code"),
    [
        ({"anchor": "newest", "num_before": 5001, "num_after": 0},
         "Too many messages requested (maximum 5000).", "BAD_REQUEST"),
        ({"anchor": "soon", "num_before": 1}, "Invalid anchor", "BAD_REQUEST"),
        ({"num_before": 1, "num_after": 0}, "Missing 'anchor' argument.", "BAD_REQUEST"),
        ({"anchor": "5", "num_before": 1, "num_after": 1, "include_anchor": False},
         "The anchor can only be excluded at an end of the range", "BAD_REQUEST"),
        ({"anchor": "newest", "num_before": -1}, None, "BAD_REQUEST"),
        ({"anchor": "newest", "message_ids": [1, 2]},
         "Unsupported parameter combination: num_before, num_after, anchor, message_ids,"
         " include_anchor, use_first_unread_anchor", "BAD_REQUEST"),
        ({**NEWEST, "narrow": [["sing", "x"]]},
         "Invalid narrow operator: unknown operator sing", "BAD_NARROW"),
        ({**NEWEST, "narrow": [["channel", "Atlantis"]]},
         "Invalid narrow operator: unknown channel Atlantis", "BAD_NARROW"),
        ({**NEWEST, "narrow": [["sender", "nobody@example.com"]]},
         "Invalid narrow operator: unknown user nobody@example.com", "BAD_NARROW"),
        ({**NEWEST, "narrow": [{"operator": "dm", "operand": [1, 10**12]}]},
         "Invalid narrow operator: unknown user in [1, 1000000000000]", "BAD_NARROW"),
        ({**NEWEST, "narrow": [["is", "sleepy"]]},
         "Invalid narrow operator: unknown 'is' operand sleepy", "BAD_NARROW"),
        ({**NEWEST, "narrow": [["id", "seven"]]},
         "Invalid narrow operator: Invalid message ID", "BAD_NARROW"),
        ({**NEWEST, "narrow": [["channel", "Denmark"], ["is", "dm"]]},
         "Invalid narrow operator: No message can be both a channel message and direct message",
         "BAD_NARROW"),
        ({**NEWEST, "narrow": [{"operator": "with", "operand": 10**12}]},
         "Invalid narrow operator: Invalid 'with' operator", "BAD_NARROW"),
        ({**NEWEST, "narrow": "[[1, 2]"}, 'Argument "narrow" is not valid JSON.', "BAD_REQUEST"),
        ({**NEWEST, "narrow": {"a": 1}}, "narrow is not a list", "BAD_REQUEST"),
        ({**NEWEST, "narrow": [[1, 2]]},
         "Invalid narrow[0]: Value error, element is not a string pair", "BAD_REQUEST"),
        ({**NEWEST, "narrow": [{"operand": "x"}]},
         "Invalid narrow[0]: Value error, operator is missing", "BAD_REQUEST"),
        ({**NEWEST, "narrow": [{"operator": "search", "operand": " "}]},
         "Invalid narrow[0]: Value error, operand cannot be blank.", "BAD_REQUEST"),
        ({**NEWEST, "narrow": [["topic", "a\x00b"]]}, None, "BAD_REQUEST"),
        # A digit that is not 0-9 is no message id.
        ({**NEWEST, "narrow": [["id", "\u00b2"]]},
         "Invalid narrow operator: Invalid message ID", "BAD_NARROW"),
    ],
)  # fmt: skip
def test_bad_input_gets_zulip_s_errors(apis, params, message, code):
    body = error(apis["hamlet"].request("GET", "messages", **params))
    assert body["code"] == code
    if message is not None:
        assert body["msg"] == message


def test_an_id_of_more_digits_than_any_is_refused_not_a_server_error(apis):
    hamlet = apis["hamlet"]
    for path in ("messages/{}", "messages/{}/history", "users/me/{}/topics"):
        body = error(hamlet.request("GET", path.format("9" * 5000)))
        assert body["msg"] in ("Invalid message(s)", "Invalid channel ID")


def test_a_dm_narrow_of_nobody_matches_nothing(apis, world):
    assert ids(fetch(apis["hamlet"], [{"operator": "dm", "operand": []}])) == []


def test_a_client_name_is_stored_without_control_characters(apis, world):
    hamlet = apis["hamlet"]
    message_id = send_stream(hamlet, to="Denmark", client="term\x00inal\x07")
    body = ok(hamlet.request("GET", f"messages/{message_id}"))
    assert body["message"]["client"] == "terminal"


def test_one_message_with_its_markdown_and_its_edit_history(apis, domain, world):
    hamlet, iago = apis["hamlet"], apis["iago"]
    body = ok(hamlet.request("GET", f"messages/{world['denmark']}"))
    assert body["raw_content"] == "the ghost walks"
    assert body["message"]["content"] == "<p>the ghost walks</p>"
    assert body["message"]["flags"] == []
    # Othello reads Verona's history; hamlet never reads Scotland's.
    assert ok(apis["othello"].request("GET", f"messages/{world['verona']}"))["message"][
        "flags"
    ] == ["read", "historical"]
    for name, message_id in (("hamlet", world["scotland"]), ("polonius", world["verona"]),
                             ("hamlet", world["secret_dm"]), ("hamlet", 10**15)):  # fmt: skip
        assert error(apis[name].request("GET", f"messages/{message_id}"))["msg"] == (
            "Invalid message(s)"
        )
    ok(iago.request("PATCH", f"messages/{world['denmark']}", content="the ghost *walks*"))
    ok(iago.request("PATCH", f"messages/{world['denmark']}", topic="ramparts",
                    content="the ghost runs"))  # fmt: skip
    history = ok(hamlet.request("GET", f"messages/{world['denmark']}/history"))
    snapshots = history["message_history"]
    assert [(s["topic"], s["content"]) for s in snapshots] == [
        ("castle", "the ghost walks"),
        ("castle", "the ghost *walks*"),
        ("ramparts", "the ghost runs"),
    ]
    assert snapshots[0]["user_id"] == domain.id("iago")
    assert "prev_content" not in snapshots[0]
    assert snapshots[1]["prev_content"] == "the ghost walks"
    assert snapshots[1]["prev_rendered_content"] == "<p>the ghost walks</p>"
    assert "prev_topic" not in snapshots[1]
    assert (snapshots[2]["prev_topic"], snapshots[2]["prev_content"]) == (
        "castle", "the ghost *walks*",
    )  # fmt: skip
    assert snapshots[2]["timestamp"] >= snapshots[0]["timestamp"]
    edited = ok(hamlet.request("GET", f"messages/{world['denmark']}"))["message"]
    assert edited["last_edit_timestamp"] >= snapshots[0]["timestamp"]
    assert error(hamlet.request("GET", f"messages/{world['scotland']}/history"))["msg"] == (
        "Invalid message(s)"
    )


def test_a_channel_s_topics_newest_first(apis, domain, world):
    denmark = domain.streams["Denmark"]
    body = ok(apis["hamlet"].request("GET", f"users/me/{denmark}/topics"))
    # "castle" and "Castle" are one topic, named as its newest message names it.
    assert body["topics"] == [{"name": "Castle", "max_id": world["denmark2"]}]
    scotland = domain.streams["Scotland"]
    assert error(apis["hamlet"].request("GET", f"users/me/{scotland}/topics"))["msg"] == (
        "Invalid channel ID"
    )
    assert error(apis["polonius"].request("GET", f"users/me/{denmark}/topics"))["msg"] == (
        "Invalid channel ID"
    )
    assert ok(apis["othello"].request("GET", f"users/me/{scotland}/topics"))["topics"] == [
        {"name": "heath", "max_id": world["scotland"]}
    ]


def test_the_zulip_client_reads_history(server, domain, world):
    client = client_for(server, domain, "hamlet")
    body = client.get_messages(
        {"anchor": "newest", "num_before": 2, "num_after": 0,
         "narrow": [{"operator": "channel", "operand": "Denmark"}]}
    )  # fmt: skip
    assert body["result"] == "success", body
    assert [m["id"] for m in body["messages"]] == [world["denmark"], world["denmark2"]]
    raw = client.get_raw_message(world["dm"])
    assert raw["raw_content"] == "a word, my lord"
