"""The messages endpoints over HTTP against the real server: Zulip's paths and
parameters, the real `zulip` client's methods, end-to-end delivery through
`call_on_each_message` / `call_on_each_event`, who receives what, and bad
input (a 4xx JSON error, never a 500)."""

from __future__ import annotations

import json

import pytest

from tests.support import Api, Listener, error, ok, zulip_client


def client_for(server, domain, name):
    return zulip_client(server, domain.accounts[name])


def send_stream(api, to="Denmark", content="hello", topic="greetings", **params):
    body = ok(api.request("POST", "messages", type="stream", to=to, topic=topic,
                          content=content, **params))  # fmt: skip
    return body["id"]


# -- sending and receiving ---------------------------------------------------------------


def test_send_a_stream_message_and_the_subscribers_receive_it(apis, domain):
    hamlet, iago = apis["hamlet"], apis["iago"]
    queue_id = hamlet.register(event_types=["message"], apply_markdown=True)["queue_id"]
    body = ok(iago.request("POST", "messages", type="stream", to="Denmark", topic="greetings",
                           content="**hello** @**King Hamlet**"))  # fmt: skip
    assert set(body) == {"result", "msg", "id"}
    [event] = hamlet.events(queue_id, -1)
    message = event["message"]
    assert message["id"] == body["id"]
    mention = f'<span class="user-mention" data-user-id="{domain.id("hamlet")}">@King Hamlet</span>'
    assert message["content"] == f"<p><strong>hello</strong> {mention}</p>"
    assert message["content_type"] == "text/html"
    assert message["client"] == "python-requests"
    assert event["flags"] == ["mentioned"]
    state = hamlet.register(fetch_event_types=["message", "update_message_flags"])
    assert state["max_message_id"] == body["id"]
    assert state["unread_msgs"]["mentions"] == [body["id"]]
    assert state["unread_msgs"]["streams"][0]["unread_message_ids"] == [body["id"]]


def test_local_id_comes_back_only_on_the_senders_queue(apis):
    hamlet, iago = apis["hamlet"], apis["iago"]
    iago_queue = iago.register(event_types=["message"])["queue_id"]
    hamlet_queue = hamlet.register(event_types=["message"])["queue_id"]
    message_id = send_stream(iago, to="Denmark", local_id="1.01", queue_id=iago_queue)
    [mine] = iago.events(iago_queue, -1)
    assert mine["local_message_id"] == "1.01"
    assert mine["flags"] == ["read"]
    [theirs] = hamlet.events(hamlet_queue, -1)
    assert "local_message_id" not in theirs
    assert theirs["message"]["id"] == message_id


def test_stream_by_id_by_legacy_list_and_channel_type(apis, domain):
    hamlet = apis["hamlet"]
    verona = domain.streams["Verona"]
    queue_id = hamlet.register(event_types=["message"])["queue_id"]
    ok(hamlet.request("POST", "messages", type="channel", to=verona, topic="a", content="1"))
    ok(hamlet.request("POST", "messages", type="stream", to=["Verona"], subject="b", content="2"))
    ok(hamlet.request("POST", "messages", type="stream", to=json_list(verona), topic="c",
                      content="3"))  # fmt: skip
    events = hamlet.events(queue_id, -1)
    assert [(e["message"]["display_recipient"], e["message"]["subject"]) for e in events] == [
        ("Verona", "a"), ("Verona", "b"), ("Verona", "c"),
    ]  # fmt: skip


def json_list(value):
    return json.dumps([value])


def test_direct_messages_by_ids_emails_and_comma_separated_emails(apis, domain):
    othello = apis["othello"]
    queue_id = othello.register(event_types=["message"])["queue_id"]
    hamlet = apis["hamlet"]
    emails = [domain.users[n].email for n in ("othello", "iago")]
    ok(hamlet.request("POST", "messages", type="private", to=[domain.id("othello")], content="a"))
    ok(hamlet.request("POST", "messages", type="direct", to=emails, content="b"))
    ok(hamlet.request("POST", "messages", type="private", to=",".join(emails), content="c"))
    events = othello.events(queue_id, -1)
    assert [len(e["message"]["display_recipient"]) for e in events] == [2, 3, 3]
    unread = othello.register(fetch_event_types=["message", "update_message_flags"])["unread_msgs"]
    assert unread["count"] == 3
    assert [p["other_user_id"] for p in unread["pms"]] == [domain.id("hamlet")]
    assert len(unread["huddles"]) == 1


def test_a_private_stream_message_never_reaches_outsiders(apis, domain):
    hamlet, iago, othello = apis["hamlet"], apis["iago"], apis["othello"]
    outsider = hamlet.register(event_types=["message"])["queue_id"]
    watcher = hamlet.register(event_types=["message"], all_public_streams=True)["queue_id"]
    narrowed = hamlet.register(event_types=["message"], narrow=[["stream", "Scotland"]])["queue_id"]
    member = othello.register(event_types=["message"])["queue_id"]
    secret = send_stream(iago, to="Scotland", content="secret")
    public = send_stream(iago, to="Verona", content="public")
    assert [e["message"]["id"] for e in othello.events(member, -1)] == [secret]
    # A narrow to the private channel does not let an outsider hear it.
    assert hamlet.events(narrowed, -1) == []
    # Hamlet is subscribed to Verona: his ordinary queue has it with its flags;
    # his all_public_streams queue too, and neither has Scotland's.
    assert [e["message"]["id"] for e in hamlet.events(outsider, -1)] == [public]
    assert [e["message"]["id"] for e in hamlet.events(watcher, -1)] == [public]


def test_a_guest_cannot_post_to_a_stream_they_are_not_subscribed_to(apis):
    body = error(apis["polonius"].request("POST", "messages", type="stream", to="Denmark",
                                          topic="t", content="hi"))  # fmt: skip
    assert body["code"] == "STREAM_DOES_NOT_EXIST"
    body = error(apis["hamlet"].request("POST", "messages", type="stream", to="Scotland",
                                        topic="t", content="hi"))  # fmt: skip
    assert body["msg"] == "Channel 'Scotland' does not exist"


# -- the real zulip client -----------------------------------------------------------------


def test_the_zulip_clients_message_methods(server, domain, apis):
    iago = client_for(server, domain, "iago")
    hamlet = client_for(server, domain, "hamlet")
    watch = apis["hamlet"]
    queue_id = watch.register(
        event_types=["message", "update_message", "delete_message", "update_message_flags",
                     "reaction", "typing", "typing_edit_message"],
        client_capabilities={"notification_settings_null": True, "bulk_message_deletion": True,
                             "stream_typing_notifications": True},
    )["queue_id"]  # fmt: skip
    sent = iago.send_message({"type": "stream", "to": "Denmark", "topic": "t", "content": "one"})
    assert sent["result"] == "success", sent
    message_id = sent["id"]
    to_id = iago.send_message(
        {"type": "stream", "to": domain.streams["Denmark"], "topic": "t", "content": "two"}
    )
    assert to_id["result"] == "success", to_id
    dm = iago.send_message(
        {"type": "private", "to": [domain.users["hamlet"].email], "content": "three"}
    )
    assert dm["result"] == "success", dm
    edited = iago.update_message({"message_id": message_id, "content": "one, edited"})
    assert edited["result"] == "success", edited
    moved = iago.update_message(
        {"message_id": message_id, "topic": "u", "propagate_mode": "change_all"}
    )
    assert moved["result"] == "success", moved
    assert (
        hamlet.add_reaction({"message_id": message_id, "emoji_name": "octopus"})["result"]
        == "success"
    )
    assert (
        hamlet.remove_reaction({"message_id": message_id, "emoji_name": "octopus"})["result"]
        == "success"
    )
    flags = hamlet.update_message_flags({"messages": [message_id], "op": "add", "flag": "starred"})
    assert flags == {"result": "success", "msg": "", "messages": [message_id]}
    assert hamlet.mark_topic_as_read(domain.streams["Denmark"], "u")["result"] == "success"
    assert hamlet.mark_stream_as_read(domain.streams["Denmark"])["result"] == "success"
    assert hamlet.mark_all_as_read()["result"] == "success"
    typing = iago.set_typing_status({"op": "start", "to": [domain.id("hamlet")]})
    assert typing["result"] == "success", typing
    typing = iago.set_typing_status(
        {"op": "stop", "type": "stream", "stream_id": domain.streams["Denmark"], "topic": "u"}
    )
    assert typing["result"] == "success", typing
    # Zulip's documented call for the edit's typing notification.
    typing = iago.call_endpoint(
        f"messages/{message_id}/typing", method="POST", request={"op": "start"}
    )
    assert typing["result"] == "success", typing
    deleted = iago.delete_message(to_id["id"])
    assert deleted["result"] == "success", deleted

    kinds = [(e["type"], e.get("op")) for e in watch.events(queue_id, -1)]
    assert kinds == [
        ("message", None), ("message", None), ("message", None),
        ("update_message", None), ("update_message", None),
        ("reaction", "add"), ("reaction", "remove"),
        ("update_message_flags", "add"), ("update_message_flags", "add"),
        ("update_message_flags", "add"),
        ("typing", "start"), ("typing", "stop"),
        ("typing_edit_message", "start"),
        ("delete_message", None),
    ]  # fmt: skip
    state = watch.register(fetch_event_types=["message", "update_message_flags",
                                              "starred_messages"])  # fmt: skip
    assert state["starred_messages"] == [message_id]
    assert state["unread_msgs"]["count"] == 0
    assert state["max_message_id"] == dm["id"]


def test_one_client_sends_another_receives_through_call_on_each_message(server, domain):
    listener = Listener(server, domain.accounts["hamlet"], "messages")
    try:
        listener.wait_polling()
        sender = client_for(server, domain, "othello")
        sent = sender.send_message(
            {"type": "stream", "to": "Denmark", "topic": "e2e", "content": "**over the wire**"}
        )
        assert sent["result"] == "success", sent
        message = listener.next()
        assert message["id"] == sent["id"]
        assert message["sender_email"] == domain.users["othello"].email
        assert message["display_recipient"] == "Denmark"
        assert message["subject"] == "e2e"
        # The client registers without apply_markdown: the Markdown as written.
        assert message["content"] == "**over the wire**"
        assert message["content_type"] == "text/x-markdown"
        dm = sender.send_message(
            {"type": "private", "to": [domain.users["hamlet"].email], "content": "psst"}
        )
        assert listener.next()["id"] == dm["id"]
        assert listener.items.empty()
    finally:
        listener.stop()


def test_reactions_and_flags_reach_call_on_each_event(server, domain):
    listener = Listener(
        server, domain.accounts["hamlet"], json.dumps(["reaction", "update_message_flags"])
    )
    try:
        listener.wait_polling()
        othello = client_for(server, domain, "othello")
        hamlet = client_for(server, domain, "hamlet")
        message_id = othello.send_message(
            {"type": "stream", "to": "Denmark", "topic": "e2e", "content": "react to me"}
        )["id"]
        assert (
            othello.add_reaction({"message_id": message_id, "emoji_name": "tada"})["result"]
            == "success"
        )
        event = listener.next()
        assert (event["type"], event["op"], event["message_id"]) == ("reaction", "add", message_id)
        assert (event["emoji_name"], event["emoji_code"]) == ("tada", "1f389")
        assert event["user_id"] == domain.id("othello")
        assert (
            hamlet.update_message_flags({"messages": [message_id], "op": "add", "flag": "read"})[
                "result"
            ]
            == "success"
        )
        event = listener.next()
        assert (event["type"], event["op"], event["flag"]) == (
            "update_message_flags",
            "add",
            "read",
        )
        assert event["messages"] == [message_id]
        assert (
            hamlet.update_message_flags({"messages": [message_id], "op": "remove", "flag": "read"})[
                "result"
            ]
            == "success"
        )
        event = listener.next()
        assert event["op"] == "remove"
        assert event["message_details"][str(message_id)]["topic"] == "e2e"
        assert (
            othello.remove_reaction({"message_id": message_id, "emoji_name": "tada"})["result"]
            == "success"
        )
        assert listener.next()["op"] == "remove"
    finally:
        listener.stop()


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "params", "msg"),
    [
        ("POST", "messages", {"to": "Denmark", "content": "x"}, "Missing 'type' argument"),
        ("POST", "messages", {"type": "stream", "content": "x"}, "Missing 'to' argument"),
        ("POST", "messages", {"type": "stream", "to": "Denmark"}, "Missing 'content' argument"),
        ("POST", "messages", {"type": "email", "to": "x", "content": "x"}, "Invalid message type"),
        ("POST", "messages", {"type": "stream", "to": "Denmark", "content": " "}, "empty"),
        ("POST", "messages", {"type": "stream", "to": 10**30, "content": "x"}, "does not exist"),
        ("POST", "messages", {"type": "private", "to": "[true]", "content": "x"}, "neither"),
        ("POST", "messages", {"type": "private", "to": "[]", "content": "x"}, "Invalid 'to'"),
        ("POST", "messages", {"type": "private", "to": [-1], "content": "x"}, "neither"),
        ("POST", "messages", {"type": "private", "to": [10**12], "content": "x"}, "Invalid user"),
        ("PATCH", "messages/99999999999", {"content": "x"}, "Invalid message(s)"),
        ("PATCH", "messages/99999999999999999999", {"content": "x"}, "Invalid message(s)"),
        ("DELETE", "messages/0", {}, "Invalid message(s)"),
        ("POST", "messages/flags", {"op": "add", "flag": "read"}, "Missing 'messages'"),
        ("POST", "messages/flags", {"messages": "[1", "op": "add", "flag": "read"}, "JSON"),
        ("POST", "messages/flags", {"messages": {"a": 1}, "op": "add", "flag": "read"}, "list"),
        ("POST", "messages/flags", {"messages": ["1"], "op": "add", "flag": "read"}, "valid id"),
        ("POST", "messages/flags", {"messages": [1], "op": "add"}, "Missing 'flag'"),
        ("POST", "messages/flags", {"messages": [], "op": "x", "flag": "read"}, "operation"),
        ("POST", "messages/1/reactions", {}, "Missing 'emoji_name'"),
        ("DELETE", "messages/1/reactions", {}, "At least one of the following"),
        ("POST", "typing", {"op": "start"}, "Missing 'to'"),
        ("POST", "typing", {"op": "start", "type": "stream", "topic": "t"}, "stream_id"),
        ("POST", "typing", {"op": "start", "type": "stream", "stream_id": 1}, "Missing 'topic'"),
        ("POST", "typing", {"to": [1]}, "Missing 'op'"),
        ("POST", "messages/1/typing", {}, "Missing 'op'"),
        ("POST", "messages/99999999999/typing", {"op": "start"}, "Invalid message(s)"),
        ("POST", "mark_stream_as_read", {}, "Missing 'stream_id'"),
        ("POST", "mark_stream_as_read", {"stream_id": 10**12}, "Invalid channel ID"),
        ("POST", "mark_topic_as_read", {"stream_id": 1}, "Missing 'topic_name'"),
        ("POST", "mark_topic_as_read", {"stream_id": 1, "topic_name": "\x00"}, "No such topic"),
        ("POST", "typing", {"op": "start", "type": "fax", "to": [1]}, "Invalid type"),
        # NUL cannot be stored: refused before any query
        ("POST", "messages", {"type": "stream", "to": "Den\x00", "content": "x"}, "not exist"),
        (
            "POST",
            "messages",
            {"type": "stream", "to": "Denmark", "topic": "\x00", "content": "x"},
            "Invalid character in topic",
        ),
        ("POST", "messages", {"type": "private", "to": ["a\x00@b"], "content": "x"}, "email"),
        ("POST", "messages", {"type": "stream", "to": "Denmark", "content": "a\x00"}, "null bytes"),
        ("DELETE", "messages/1/reactions", {"emoji_name": "a\x00"}, "Invalid emoji name"),
        ("DELETE", "messages/1/reactions", {"emoji_code": "\x00"}, "Invalid emoji code"),
        ("POST", "messages/1/reactions", {"emoji_name": "tada\n"}, "Invalid emoji name"),
    ],
)
def test_bad_input_is_a_json_400(apis, method, path, params, msg):
    body = error(apis["hamlet"].request(method, path, **params))
    assert msg in body["msg"]


def test_refusals_over_http(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    message_id = send_stream(othello)
    assert "permission" in error(hamlet.request("PATCH", f"messages/{message_id}",
                                                content="mine now"))["msg"]  # fmt: skip
    assert "permission" in error(hamlet.request("DELETE", f"messages/{message_id}"))["msg"]
    assert error(othello.request("PATCH", f"messages/{message_id}"))["msg"] == "Nothing to change"
    ok(hamlet.request("POST", f"messages/{message_id}/reactions", emoji_name="octopus"))
    body = error(hamlet.request("POST", f"messages/{message_id}/reactions", emoji_name="octopus"))
    assert body["code"] == "REACTION_ALREADY_EXISTS"
    body = error(hamlet.request("DELETE", f"messages/{message_id}/reactions", emoji_name="tada"))
    assert body["code"] == "REACTION_DOES_NOT_EXIST"
    secret = send_stream(apis["iago"], to="Scotland")
    assert error(hamlet.request("POST", "messages/flags", messages=[secret], op="add",
                                flag="read"))["msg"] == "Invalid message(s)"  # fmt: skip
    body = error(othello.request("PATCH", f"messages/{message_id}", topic="x", stream_id=1))
    assert "not supported" in body["msg"]


def test_unknown_parameters_are_reported_and_json_paths_work(server, domain):
    client = Api(server, domain.accounts["hamlet"], prefix="/json")
    try:
        body = ok(client.request("POST", "messages", type="stream", to="Verona", topic="t",
                                 content="x", read_by_sender=True))  # fmt: skip
        assert body["ignored_parameters_unsupported"] == ["read_by_sender"]
        body = ok(client.request("POST", "mark_all_as_read"))
        assert body["complete"] is True
        assert "ignored_parameters_unsupported" not in body
    finally:
        client.close()


def test_other_methods_are_405(apis):
    response = apis["hamlet"].request("GET", "messages/flags")
    assert response.status_code == 405
    assert response.json()["result"] == "error"


def test_a_member_who_left_a_private_channel_cannot_move_or_edit_there(apis, domain):
    hamlet, iago, othello = apis["hamlet"], apis["iago"], apis["othello"]
    ok(iago.request("POST", "users/me/subscriptions", subscriptions=[{"name": "Scotland"}],
                    principals=[domain.id("hamlet")]))  # fmt: skip
    received = send_stream(iago, to="Scotland", topic="plans")
    his = send_stream(hamlet, to="Scotland", content="mine", topic="plans")
    ok(hamlet.request("DELETE", "users/me/subscriptions", subscriptions=["Scotland"]))
    later = send_stream(othello, to="Scotland", content="after he left", topic="plans")
    queue_id = hamlet.register(event_types=["update_message"])["queue_id"]
    # Zulip's answer (access_message in check_update_message): a 400.
    for message_id, params in (
        (received, {"topic": "stolen", "propagate_mode": "change_all"}),
        (his, {"topic": "stolen", "propagate_mode": "change_later"}),
        (his, {"topic": "stolen", "propagate_mode": "change_one"}),
        (his, {"content": "edited"}),
    ):
        body = error(hamlet.request("PATCH", f"messages/{message_id}", **params))
        assert body == {"result": "error", "msg": "Invalid message(s)", "code": "BAD_REQUEST"}
    assert hamlet.events(queue_id, -1) == []
    # A subscriber still moves the whole topic; the event lists every id.
    watcher = othello.register(event_types=["update_message"])["queue_id"]
    ok(othello.request("PATCH", f"messages/{his}", topic="moved", propagate_mode="change_all"))
    [event] = othello.events(watcher, -1)
    assert event["message_ids"] == [received, his, later]
