"""Smaller parts of Zulip's API over HTTP against the real server: a user's
status by id, custom emoji in reactions and statuses, user group mentions
and alert words on an edit; the refusals as Zulip's JSON errors."""

from __future__ import annotations

from generation.actions import groups
from generation.actions import realm_config as emoji_actions
from generation.actions.bots import do_create_bot
from generation.actions.users import do_deactivate_user
from tests.support import error, ok, wait_for

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40


def events_of(client, queue_id, count):
    """The first `count` events of a queue (waiting for them to arrive)."""
    return wait_for(
        lambda: (events := client.events(queue_id, -1)) and len(events) >= count and events,
        what=f"{count} events on {queue_id}",
    )


def test_a_users_status_by_id(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    ok(hamlet.request("POST", "users/me/status", status_text="Busy", emoji_name="coffee"))
    body = ok(othello.request("GET", f"users/{domain.id('hamlet')}/status"))
    assert body["status"] == {
        "status_text": "Busy",
        "emoji_name": "coffee",
        "emoji_code": "2615",
        "reaction_type": "unicode_emoji",
    }
    assert ok(othello.request("GET", f"users/{domain.id('iago')}/status"))["status"] == {}
    bot = domain.run(
        lambda ctx: do_create_bot(ctx, domain.id("hamlet"), domain.realm_id, "Helper", "helper")
    )
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, domain.id("polonius")))
    for user_id, message in (
        ("0", "No such user"),
        ("9" * 30, "No such user"),
        (str(bot.user_id), "No such user"),
        (str(domain.id("polonius")), "User is deactivated"),
    ):
        body = error(othello.request("GET", f"users/{user_id}/status"))
        assert (body["code"], body["msg"]) == ("BAD_REQUEST", message)


def test_custom_emoji_in_a_reaction_and_a_status(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    info = domain.run(
        lambda ctx: emoji_actions.do_add_realm_emoji(
            ctx, domain.id("iago"), domain.realm_id, "green_tick", PNG
        )
    )
    body = ok(hamlet.request("POST", "messages", type="stream", to="Denmark", topic="t",
                             content="hello"))  # fmt: skip
    message_id = body["id"]
    queue = othello.register(event_types=["reaction"])["queue_id"]
    ok(hamlet.request("POST", f"messages/{message_id}/reactions", emoji_name="green_tick"))
    [event] = events_of(othello, queue, 1)
    assert (event["emoji_code"], event["reaction_type"]) == (info["id"], "realm_emoji")
    ok(hamlet.request("POST", "users/me/status", emoji_name="green_tick"))
    status = ok(othello.request("GET", f"users/{domain.id('hamlet')}/status"))["status"]
    assert status["emoji_code"] == info["id"]
    domain.run(
        lambda ctx: emoji_actions.do_remove_realm_emoji(
            ctx, domain.id("iago"), domain.realm_id, "green_tick"
        )
    )
    # Refused for a new reaction or status; on `message_id` it would be a
    # vote for hamlet's reaction, which Zulip accepts.
    other = ok(hamlet.request("POST", "messages", type="stream", to="Denmark", topic="t",
                              content="again"))["id"]  # fmt: skip
    for path in (f"messages/{other}/reactions", "users/me/status"):
        response = othello.request(
            "POST", path, emoji_name="green_tick", emoji_code=info["id"],
            reaction_type="realm_emoji",
        )  # fmt: skip
        assert error(response)["msg"] == "This custom emoji has been deactivated."
    ok(
        othello.request(
            "POST", f"messages/{message_id}/reactions", emoji_name="green_tick",
            emoji_code=info["id"], reaction_type="realm_emoji",
        )
    )  # fmt: skip
    ok(
        hamlet.request(
            "DELETE", f"messages/{message_id}/reactions", emoji_code=info["id"],
            reaction_type="realm_emoji",
        )
    )  # fmt: skip


def test_group_mentions_and_alert_words_on_send_and_edit(apis, domain):
    hamlet, othello = apis["hamlet"], apis["othello"]
    domain.run(
        lambda ctx: groups.do_create_user_group(
            ctx, domain.id("iago"), domain.realm_id, "support", "", [domain.id("othello")]
        )
    )
    ok(othello.request("POST", "users/me/alert_words", alert_words=["castle"]))
    queue = othello.register(event_types=["message", "update_message"])["queue_id"]
    body = ok(hamlet.request("POST", "messages", type="stream", to="Denmark", topic="t",
                             content="@*support* look"))  # fmt: skip
    ok(hamlet.request("PATCH", f"messages/{body['id']}", content="the castle"))
    sent, edited = events_of(othello, queue, 2)
    assert sent["flags"] == ["mentioned"]
    assert edited["flags"] == ["has_alert_word"]
    response = hamlet.request(
        "POST", "messages", type="stream", to="Denmark", topic="t", content="@*role:members*"
    )
    assert error(response)["msg"] == "You are not allowed to mention user group 'role:members'."
