"""verify_action for the messages area: sending, editing, deleting, flags,
reactions and typing; who receives what; the refusals; and the Markdown."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from apply_events.appliers.messages import RawUnread, apply_subscription_unread
from apply_events.state import StateContext
from generation.actions.base import ActionContext, ActionError
from generation.actions.messages import (
    do_add_reaction,
    do_delete_messages,
    do_mark_all_as_read,
    do_mark_stream_as_read,
    do_remove_reaction,
    do_send_direct_message,
    do_send_direct_typing,
    do_send_edit_typing,
    do_send_stream_message,
    do_send_stream_typing,
    do_update_message,
    do_update_message_flags,
)
from generation.actions.realm import do_set_message_edit_limit, do_set_realm_property
from generation.actions.streams import (
    StreamRequest,
    do_add_subscriptions,
    do_delete_stream,
    do_remove_subscriptions,
)
from generation.markdown import Person, possible_mentions, render
from tests.domain.harness import MODERN, covers

MESSAGE = ("message", None)
UPDATE = ("update_message", None)
DELETE = ("delete_message", None)
FLAGS_ADD = ("update_message_flags", "add")
FLAGS_REMOVE = ("update_message_flags", "remove")
MESSAGE_SECTIONS = ["message", "update_message_flags", "starred_messages"]


def send(domain, sender, stream, content="hello", topic="greetings"):
    return domain.run(
        lambda ctx: do_send_stream_message(ctx, domain.id(sender), stream, topic, content)
    )


def direct(domain, sender, recipients, content="psst"):
    return domain.run(
        lambda ctx: do_send_direct_message(ctx, domain.id(sender), recipients, content)
    )


def refused(domain, action, match):
    with pytest.raises(ActionError, match=match):
        domain.run(action)


def sql(domain, statement, params=()):
    async def run(ctx):
        await ctx.conn.execute(statement, params)

    domain.run(run)


# -- Markdown --------------------------------------------------------------------


def test_markdown_renders_commonmark_without_raw_html():
    assert render("**hello**").html == "<p><strong>hello</strong></p>"
    assert render("<b>x</b> <script>alert(1)</script>").html == (
        "<p>&lt;b&gt;x&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;</p>"
    )
    assert render("one\n\ntwo").html == "<p>one</p>\n<p>two</p>"
    assert render("[x](javascript:alert(1))").html == "<p>[x](javascript:alert(1))</p>"


def test_markdown_mentions():
    people = [Person(7, "King Hamlet"), Person(8, "Iago"), Person(9, "Twin"), Person(10, "twin")]
    rendered = render("hi @**king hamlet**, @**Anyone|8** and @_**Iago**", people)
    assert rendered.html == (
        '<p>hi <span class="user-mention" data-user-id="7">@King Hamlet</span>,'
        ' <span class="user-mention" data-user-id="8">@Iago</span> and'
        ' <span class="user-mention silent" data-user-id="8">Iago</span></p>'
    )
    assert rendered.mentioned_user_ids == {7, 8}
    assert not rendered.wildcard
    for word in ("all", "everyone", "channel", "stream"):
        wild = render(f"@**{word}** look", people)
        assert wild.wildcard
        assert wild.html == (
            '<p><span class="user-mention channel-wildcard-mention" data-user-id="*">'
            f"@{word}</span> look</p>"
        )
    # Unknown, ambiguous, inside code or glued to a word: CommonMark as usual.
    assert render("@**Nobody**", people).html == "<p>@<strong>Nobody</strong></p>"
    assert render("@**Twin**", people).mentioned_user_ids == set()
    assert render("@**Twin|10**", people).mentioned_user_ids == {10}
    assert render("`@**Iago**`", people).html == "<p><code>@**Iago**</code></p>"
    assert render("mail@**Iago**", people).mentioned_user_ids == set()
    assert render("@**<img>|8**", people).html.count("<img>") == 0
    found = possible_mentions("@**King Hamlet** @**x|12** @**all** @_**Iago**")
    assert found.names == {"king hamlet", "iago"}
    assert found.user_ids == {12}
    assert not possible_mentions("no mentions here")


# -- sending ---------------------------------------------------------------------


@covers(MESSAGE)
def test_stream_message_with_and_without_apply_markdown(domain):
    ids = []
    for apply_markdown, content, content_type in (
        (True, "<p><strong>hello</strong></p>", "text/html"),
        (False, "**hello**", "text/x-markdown"),
    ):
        [event] = domain.verify(
            lambda ctx: do_send_stream_message(
                ctx, domain.id("iago"), "Denmark", "greetings", "**hello**"
            ),
            apply_markdown=apply_markdown,
        )
        message = event["message"]
        assert (message["content"], message["content_type"]) == (content, content_type)
        assert message["display_recipient"] == "Denmark"
        assert message["stream_id"] == domain.streams["Denmark"]
        assert message["subject"] == "greetings"
        assert message["sender_id"] == domain.id("iago")
        assert event["flags"] == []
        ids.append(message["id"])
    state = domain.fetch()
    assert state["max_message_id"] == ids[-1]
    assert state["unread_msgs"]["count"] == 2
    assert state["unread_msgs"]["streams"] == [
        {"stream_id": domain.streams["Denmark"], "topic": "greetings", "unread_message_ids": ids}
    ]


@covers(MESSAGE)
def test_the_senders_own_copy_is_read(domain):
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("hamlet"), "Verona", "mine", "note"),
    )
    assert event["flags"] == ["read"]
    assert domain.fetch()["unread_msgs"]["count"] == 0


@covers(MESSAGE)
def test_stream_message_by_id_and_channel_message_to_a_stream_the_sender_left(domain):
    # Othello is not subscribed to Verona (public): he may post, and keeps a copy.
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(
            ctx, domain.id("othello"), domain.streams["Verona"], "visit", "hello"
        ),
        user="othello",
    )
    assert event["flags"] == ["read"]
    assert event["message"]["display_recipient"] == "Verona"


@covers(MESSAGE)
def test_mentions_set_flags(domain):
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(
            ctx, domain.id("iago"), "Denmark", "t", "@**King Hamlet** and @**Nobody**"
        )
    )
    assert event["flags"] == ["mentioned"]
    assert event["message"]["content"] == (
        f'<p><span class="user-mention" data-user-id="{domain.id("hamlet")}">@King Hamlet</span>'
        " and @<strong>Nobody</strong></p>"
    )
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("iago"), "Denmark", "t", "@**all** hi"),
        user="othello",
    )
    assert event["flags"] == ["wildcard_mentioned"]
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(
            ctx, domain.id("iago"), "Denmark", "t", "@_**King Hamlet** silently"
        )
    )
    assert event["flags"] == []
    # Hamlet: mentioned by name, then by @**all**; the silent mention does not count.
    assert len(domain.fetch()["unread_msgs"]["mentions"]) == 2
    assert len(domain.fetch("othello")["unread_msgs"]["mentions"]) == 1


@covers(MESSAGE)
def test_direct_messages_one_on_one_group_and_to_oneself(domain):
    othello = domain.users["othello"]
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, domain.id("hamlet"), [othello.email], "*hi*"),
        user="othello",
        apply_markdown=False,
    )
    message = event["message"]
    assert message["type"] == "private"
    assert message["content"] == "*hi*"
    assert "stream_id" not in message
    assert [r["id"] for r in message["display_recipient"]] == sorted(
        [domain.id("hamlet"), domain.id("othello")]
    )
    assert event["flags"] == []
    domain.verify(
        lambda ctx: do_send_direct_message(
            ctx, domain.id("hamlet"), [domain.id("othello"), domain.id("iago")], "all three"
        ),
        user="othello",
    )
    domain.verify(
        lambda ctx: do_send_direct_message(ctx, domain.id("othello"), [othello.email], "note"),
        user="othello",
    )
    unread = domain.fetch("othello")["unread_msgs"]
    assert unread["pms"] == [
        {
            "other_user_id": domain.id("hamlet"),
            "sender_id": domain.id("hamlet"),
            "unread_message_ids": [message["id"]],
        }
    ]
    three = ",".join(
        str(domain.id(n)) for n in sorted(("iago", "hamlet", "othello"), key=domain.id)
    )
    assert [h["user_ids_string"] for h in unread["huddles"]] == [three]
    assert unread["count"] == 2  # the note to himself is read


@covers(MESSAGE)
def test_a_direct_message_mention_is_flagged_but_wildcards_are_not(domain):
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(
            ctx,
            domain.id("hamlet"),
            [domain.id("othello")],
            "@**all** and @**Othello, the Moor of Venice**",
        ),
        user="othello",
    )
    assert event["flags"] == ["mentioned"]


@covers(MESSAGE)
def test_a_private_stream_message_reaches_only_its_subscribers(domain):
    """Scotland is private (iago, othello): hamlet's queue gets nothing, not
    even with all_public_streams; othello's gets it."""
    scotland = domain.streams["Scotland"]
    for all_public in (False, True):
        domain.verify(
            lambda ctx: do_send_stream_message(ctx, domain.id("iago"), scotland, "t", "secret"),
            num_events=0,
            state_change_expected=False,
            all_public_streams=all_public,
        )
    domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("iago"), scotland, "t", "secret"),
        user="othello",
    )


@covers(MESSAGE)
def test_a_public_stream_message_reaches_all_public_streams_queues(domain):
    # Othello is not subscribed to Verona; his all_public_streams queue gets
    # its messages with no flags (state: only sections such messages do not touch).
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("hamlet"), "Verona", "t", "public"),
        user="othello",
        all_public_streams=True,
        fetch_event_types=["realm"],
        state_change_expected=False,
    )
    assert event["flags"] == []
    domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("hamlet"), "Verona", "t", "public"),
        user="othello",
        num_events=0,
        state_change_expected=False,
    )


def test_who_may_post_where(domain):
    polonius, hamlet, iago = domain.id("polonius"), domain.id("hamlet"), domain.id("iago")
    refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, polonius, "Denmark", "t", "guest"),
        "Channel 'Denmark' does not exist",
    )
    refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, hamlet, domain.streams["Scotland"], "t", "x"),
        "does not exist",
    )
    # An administrator knows the private stream exists, but may not post to it.
    sql(domain, "DELETE FROM subscriptions WHERE user_id = %s", (iago,))
    refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, iago, "scotland", "t", "x"),
        "Not authorized to send to channel 'Scotland'",
    )
    refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, hamlet, "Atlantis", "t", "x"),
        "Channel 'Atlantis' does not exist",
    )
    refused(domain, lambda ctx: do_send_stream_message(ctx, hamlet, "Verona", "t", "  \n"), "empty")
    refused(
        domain, lambda ctx: do_send_stream_message(ctx, hamlet, "Verona", "t", "a\x00b"), "null"
    )
    refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, hamlet, "Verona", "a\x01b", "x"),
        "Invalid character in topic",
    )
    refused(
        domain, lambda ctx: do_send_direct_message(ctx, hamlet, [10**12], "x"), "Invalid user ID"
    )
    refused(
        domain,
        lambda ctx: do_send_direct_message(ctx, hamlet, ["nobody@example.com"], "x"),
        "Invalid email 'nobody@example.com'",
    )
    refused(domain, lambda ctx: do_send_direct_message(ctx, hamlet, [], "x"), "recipients")
    # A guest may post to a stream once subscribed.
    sql(
        domain,
        "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
        (polonius, domain.streams["Denmark"]),
    )
    assert send(domain, "polonius", "Denmark") > 0


def test_mandatory_topics_long_topics_and_long_content(domain):
    iago, hamlet = domain.id("iago"), domain.id("hamlet")
    assert send(domain, "hamlet", "Verona", topic="   ") > 0
    domain.run(
        lambda ctx: do_set_realm_property(ctx, iago, domain.realm_id, "mandatory_topics", True)
    )
    refused(
        domain,
        lambda ctx: do_send_stream_message(ctx, hamlet, "Verona", "  ", "x"),
        "Topics are required",
    )
    message_id = send(domain, "hamlet", "Verona", "x" * 20_000, topic="t" * 100)

    async def stored(ctx):
        cur = await ctx.conn.execute(
            "SELECT topic, content FROM messages WHERE id = %s", (message_id,)
        )
        return await cur.fetchone()

    topic, content = domain.run(stored)
    assert topic == "t" * 57 + "..."
    assert len(content) == 10_000
    assert content.endswith("\n[message truncated]")


# -- editing -----------------------------------------------------------------------


@covers(UPDATE)
def test_edit_content_with_and_without_apply_markdown(domain):
    message_id = send(domain, "othello", "Denmark", "first")
    # Only a change of mentions changes register's state.
    for apply_markdown, text, mentions in (
        (True, "**second**", False),
        (False, "third @**King Hamlet**", True),
    ):
        [event] = domain.verify(
            lambda ctx, t=text: do_update_message(ctx, domain.id("othello"), message_id, content=t),
            apply_markdown=apply_markdown,
            state_change_expected=mentions,
        )
        assert event["content"] == text
        assert event["message_ids"] == [message_id]
        assert event["stream_id"] == domain.streams["Denmark"]
        assert "subject" not in event
        assert "propagate_mode" not in event
    assert event["orig_content"] == "**second**"
    assert event["orig_rendered_content"] == "<p><strong>second</strong></p>"
    assert event["flags"] == ["mentioned"]
    assert domain.fetch()["unread_msgs"]["mentions"] == [message_id]
    # An edit that drops the mention drops it from the unread mentions.
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, domain.id("othello"), message_id, content="plain")
    )
    assert event["flags"] == []
    assert domain.fetch()["unread_msgs"]["mentions"] == []


@covers(UPDATE)
def test_edit_a_direct_message(domain):
    message_id = direct(domain, "hamlet", [domain.id("othello")], "before")
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, domain.id("hamlet"), message_id, content="after"),
        user="othello",
        state_change_expected=False,
    )
    assert "stream_id" not in event
    assert event["rendered_content"] == "<p>after</p>"


@covers(UPDATE)
@pytest.mark.parametrize(
    ("mode", "moved"), [("change_one", [1]), ("change_later", [1, 2]), ("change_all", [0, 1, 2])]
)
def test_edit_topic_with_each_propagate_mode(domain, mode, moved):
    ids = [send(domain, sender, "Denmark", topic="Lunch") for sender in ("iago", "othello", "iago")]
    send(domain, "iago", "Denmark", topic="Dinner")
    [event] = domain.verify(
        lambda ctx: do_update_message(
            ctx, domain.id("othello"), ids[1], topic="Supper", propagate_mode=mode
        )
    )
    assert event["message_ids"] == [ids[i] for i in moved]
    assert (event["orig_subject"], event["subject"]) == ("Lunch", "Supper")
    assert event["propagate_mode"] == mode
    assert "content" not in event
    topics = {s["topic"]: s["unread_message_ids"] for s in domain.fetch()["unread_msgs"]["streams"]}
    assert topics["Supper"] == [ids[i] for i in moved]


@covers(UPDATE)
def test_edit_content_and_topic_together_reaches_everyone_with_a_moved_message(domain):
    first = send(domain, "iago", "Denmark", topic="Old")
    second = send(domain, "othello", "Denmark", "mine", topic="old")
    # Hamlet unsubscribes after the first message; he still has it.
    sql(
        domain,
        "UPDATE subscriptions SET active = false WHERE user_id = %s AND stream_id = %s",
        (domain.id("hamlet"), domain.streams["Denmark"]),
    )
    third = send(domain, "othello", "Denmark", topic="Old")
    [event] = domain.verify(
        lambda ctx: do_update_message(
            ctx, domain.id("othello"), second, content="edited", topic="New",
            propagate_mode="change_all",
        )
    )  # fmt: skip
    assert event["message_ids"] == [first, second, third]
    assert event["content"] == "edited"
    assert event["flags"] == []


def test_edit_refusals(domain):
    hamlet, othello, iago, polonius = (
        domain.id(n) for n in ("hamlet", "othello", "iago", "polonius")
    )
    message_id = send(domain, "othello", "Denmark")
    note = direct(domain, "othello", [hamlet])
    refused(
        domain, lambda ctx: do_update_message(ctx, hamlet, message_id, content="x"), "permission"
    )
    refused(domain, lambda ctx: do_update_message(ctx, othello, message_id), "Nothing to change")
    refused(
        domain, lambda ctx: do_update_message(ctx, othello, message_id, content="hello"), "Nothing"
    )
    refused(
        domain,
        lambda ctx: do_update_message(ctx, othello, message_id, topic="x", propagate_mode="all"),
        "Invalid propagate_mode",
    )
    refused(
        domain,
        lambda ctx: do_update_message(ctx, othello, note, topic="x"),
        "Direct messages cannot have topics",
    )
    # Not his message, not his stream: hidden.
    secret = send(domain, "iago", "Scotland")
    refused(
        domain, lambda ctx: do_update_message(ctx, hamlet, secret, topic="x"), "Invalid message"
    )
    # Guests may not move others' messages (members may).
    sql(
        domain,
        "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
        (polonius, domain.streams["Denmark"]),
    )
    refused(
        domain, lambda ctx: do_update_message(ctx, polonius, message_id, topic="x"), "permission"
    )
    domain.run(lambda ctx: do_update_message(ctx, hamlet, message_id, topic="moved"))
    # The content edit limit (with Zulip's grace) and the realm switch.
    sql(
        domain,
        "UPDATE messages SET date_sent = now() - interval '700 seconds' WHERE id = %s",
        (message_id,),
    )
    refused(
        domain, lambda ctx: do_update_message(ctx, othello, message_id, content="x"), "time limit"
    )
    domain.run(lambda ctx: do_set_message_edit_limit(ctx, iago, domain.realm_id, None))
    domain.run(lambda ctx: do_update_message(ctx, othello, message_id, content="late"))
    domain.run(
        lambda ctx: do_set_realm_property(
            ctx, iago, domain.realm_id, "allow_message_editing", False
        )
    )
    refused(
        domain, lambda ctx: do_update_message(ctx, othello, message_id, content="y"), "turned off"
    )


# Changing a message needs access to its channel now, as Zulip's
# access_message(is_modifying_message=True): a copy kept from a channel one
# left is not enough.

INVALID = r"^Invalid message\(s\)$"


def refused_without_a_notice(domain, action, match=INVALID):
    """Run an action that must be refused with a 400 BAD_REQUEST whose
    message matches, and that sends no event to anyone."""
    notices = []

    async def sink(notice):
        notices.append(notice)

    async def go():
        async with await psycopg.AsyncConnection.connect(
            domain.database_url, autocommit=True
        ) as conn:
            await action(ActionContext(conn, sink))

    with pytest.raises(ActionError, match=match) as caught:
        asyncio.run(go())
    assert (caught.value.code, caught.value.status) == ("BAD_REQUEST", 400)
    assert notices == []


def swallowing(action, errors):
    """The action, its `ActionError` kept in `errors` instead of raised (for
    `verify`, which then checks that nothing reached the queue)."""

    async def run(ctx):
        try:
            await action(ctx)
        except ActionError as exc:
            errors.append(exc.msg)

    return run


def topics(domain, message_ids):
    """Each message's stored topic, by id."""

    async def read(ctx):
        cur = await ctx.conn.execute(
            "SELECT id, topic FROM messages WHERE id = ANY(%s)", (list(message_ids),)
        )
        return dict(await cur.fetchall())

    return domain.run(read)


def subscribe(domain, name, stream):
    domain.run(
        lambda ctx: do_add_subscriptions(
            ctx, domain.id("iago"), domain.realm_id, [StreamRequest(stream)],
            principals=[domain.id(name)],
        )
    )  # fmt: skip


def lose_access(domain, name, stream, how="left"):
    """`name` leaves `stream`, or an administrator unsubscribes them."""
    actor, principals = (name, None) if how == "left" else ("iago", [domain.id(name)])
    domain.run(
        lambda ctx: do_remove_subscriptions(
            ctx, domain.id(actor), domain.realm_id, [stream], principals=principals
        )
    )


def a_private_topic_hamlet_lost(domain, how="left"):
    """Scotland's topic "plans": two messages hamlet received while
    subscribed (the second his own), then one posted after he lost the
    channel. Returns their ids."""
    subscribe(domain, "hamlet", "Scotland")
    before = send(domain, "iago", "Scotland", topic="plans")
    his = send(domain, "hamlet", "Scotland", "mine", topic="plans")
    lose_access(domain, "hamlet", "Scotland", how)
    after = send(domain, "othello", "Scotland", "after he left", topic="plans")
    return [before, his, after]


@pytest.mark.parametrize("how", ["left", "unsubscribed"])
@pytest.mark.parametrize("mode", ["change_one", "change_later", "change_all"])
def test_a_member_who_lost_a_private_channel_cannot_move_its_topic(domain, mode, how):
    ids = a_private_topic_hamlet_lost(domain, how)
    hamlet = domain.id("hamlet")
    for target in ids[:2]:  # both received, the second his own
        refused_without_a_notice(
            domain,
            lambda ctx, t=target: do_update_message(
                ctx, hamlet, t, topic="stolen", propagate_mode=mode
            ),
        )
    # Nothing reaches his queue either; his state is unchanged.
    errors = []
    domain.verify(
        swallowing(
            lambda ctx: do_update_message(ctx, hamlet, ids[0], topic="stolen", propagate_mode=mode),
            errors,
        ),
        num_events=0,
        state_change_expected=False,
    )
    assert errors == ["Invalid message(s)"]
    assert topics(domain, ids) == dict.fromkeys(ids, "plans")


def test_a_member_who_lost_a_private_channel_cannot_edit_his_message_there(domain):
    # Zulip refuses the content edit too (its
    # test_edit_message_in_unsubscribed_private_stream).
    ids = a_private_topic_hamlet_lost(domain)
    hamlet = domain.id("hamlet")
    refused_without_a_notice(
        domain, lambda ctx: do_update_message(ctx, hamlet, ids[1], content="edited")
    )
    refused_without_a_notice(
        domain,
        lambda ctx: do_update_message(
            ctx, hamlet, ids[1], content="edited", topic="x", propagate_mode="change_all"
        ),
    )
    assert topics(domain, ids) == dict.fromkeys(ids, "plans")


@covers(UPDATE)
@pytest.mark.parametrize(
    ("mode", "moved"), [("change_one", [1]), ("change_later", [1, 2]), ("change_all", [0, 1, 2])]
)
def test_a_subscriber_still_moves_a_private_topic(domain, mode, moved):
    ids = a_private_topic_hamlet_lost(domain)
    [event] = domain.verify(
        lambda ctx: do_update_message(
            ctx, domain.id("othello"), ids[1], topic="moved", propagate_mode=mode
        ),
        user="othello",
    )
    assert event["message_ids"] == [ids[i] for i in moved]
    assert (event["orig_subject"], event["subject"]) == ("plans", "moved")
    assert topics(domain, ids) == {
        message_id: "moved" if i in moved else "plans" for i, message_id in enumerate(ids)
    }


@covers(UPDATE)
def test_a_member_who_left_hears_only_of_the_messages_he_holds_when_another_moves_them(domain):
    ids = a_private_topic_hamlet_lost(domain)
    othello = domain.id("othello")
    # A move from the message posted after he left: he holds two of the
    # three; he learns of those, not of the third, nor that it was the one.
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, othello, ids[2], topic="moved",
                                      propagate_mode="change_all"),
    )  # fmt: skip
    assert event["message_ids"] == ids[:2]
    assert event["message_id"] in ids[:2]
    assert "content" not in event
    # A move with a new content of a message he holds: he gets both, for
    # the messages he holds only.
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, domain.id("iago"), ids[0], topic="again",
                                      propagate_mode="change_all"),
    )  # fmt: skip
    assert event["message_ids"] == ids[:2]
    assert event["message_id"] == ids[0]
    # The new content of a message he does not hold never reaches him.
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, othello, ids[2], content="the new plan", topic="x",
                                      propagate_mode="change_all"),
    )  # fmt: skip
    assert event["message_ids"] == ids[:2]
    assert "the new plan" not in str(event)
    # A subscriber hears of them all.
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, othello, ids[2], topic="last",
                                      propagate_mode="change_all"),
        user="iago",
    )  # fmt: skip
    assert event["message_ids"] == ids


@covers(DELETE)
def test_a_member_who_left_hears_only_of_his_messages_deleted(domain):
    ids = a_private_topic_hamlet_lost(domain)
    [event] = domain.verify(
        lambda ctx: do_delete_messages(ctx, domain.id("iago"), ids),
        client_capabilities={"bulk_message_deletion": True},
    )
    assert event["message_ids"] == ids[:2]


@covers(UPDATE)
def test_a_member_moves_a_public_topic_without_being_subscribed(domain):
    # A public channel stays open to the members who left it (not to guests).
    before = send(domain, "othello", "Denmark", topic="walls")
    lose_access(domain, "hamlet", "Denmark")
    after = send(domain, "othello", "Denmark", topic="walls")
    [event] = domain.verify(
        lambda ctx: do_update_message(
            ctx, domain.id("hamlet"), before, topic="ramparts", propagate_mode="change_all"
        )
    )
    assert event["message_ids"] == [before, after]
    assert topics(domain, [before, after]) == dict.fromkeys([before, after], "ramparts")


@covers(UPDATE)
def test_a_guest_moves_their_topic_only_while_subscribed(domain):
    polonius = domain.id("polonius")
    subscribe(domain, "polonius", "Scotland")
    first = send(domain, "iago", "Scotland", topic="arras")
    own = send(domain, "polonius", "Scotland", "mine", topic="arras")
    # A subscribed guest moves the topic from their own message, all of it
    # (they see the channel's history).
    [event] = domain.verify(
        lambda ctx: do_update_message(ctx, polonius, own, topic="curtain",
                                      propagate_mode="change_all"),
        user="polonius",
    )  # fmt: skip
    assert event["message_ids"] == [first, own]
    # Not from another's message: the guests' rule of `_new_topic`.
    refused(domain, lambda ctx: do_update_message(ctx, polonius, first, topic="x"), "permission")
    # Once gone, not even from their own: in a private channel, nor in a
    # public one, which guests see only while subscribed (Zulip's
    # test_edit_message_guest_in_unsubscribed_public_stream).
    lose_access(domain, "polonius", "Scotland")
    subscribe(domain, "polonius", "Denmark")
    public = send(domain, "polonius", "Denmark", "mine", topic="arras")
    lose_access(domain, "polonius", "Denmark")
    for message_id in (own, public):
        refused_without_a_notice(
            domain,
            lambda ctx, m=message_id: do_update_message(
                ctx, polonius, m, topic="again", propagate_mode="change_all"
            ),
        )
        refused_without_a_notice(
            domain, lambda ctx, m=message_id: do_update_message(ctx, polonius, m, content="x")
        )
    assert topics(domain, [first, own, public]) == {
        first: "curtain", own: "curtain", public: "arras"
    }  # fmt: skip


def test_no_one_changes_a_message_of_an_archived_channel(domain):
    # Zulip's has_message_access refuses archived channels when modifying.
    message_id = send(domain, "othello", "Denmark", topic="walls")
    domain.run(
        lambda ctx: do_delete_stream(
            ctx, domain.id("iago"), domain.realm_id, domain.streams["Denmark"]
        )
    )
    refused_without_a_notice(
        domain, lambda ctx: do_update_message(ctx, domain.id("othello"), message_id, content="x")
    )
    refused_without_a_notice(
        domain,
        lambda ctx: do_update_message(
            ctx, domain.id("iago"), message_id, topic="x", propagate_mode="change_all"
        ),
    )
    assert topics(domain, [message_id]) == {message_id: "walls"}


# -- deleting ----------------------------------------------------------------------


@covers(DELETE)
def test_delete_with_and_without_bulk_message_deletion(domain):
    legacy = MODERN - {"bulk_message_deletion"}
    for capabilities in (MODERN, legacy):
        message_id = send(domain, "othello", "Denmark")
        [event] = domain.verify(
            lambda ctx, m=message_id: do_delete_messages(ctx, domain.id("othello"), [m]),
            capabilities=capabilities,
        )
        key = "message_ids" if capabilities is MODERN else "message_id"
        assert event[key] == ([message_id] if key == "message_ids" else message_id)
        assert event["message_type"] == "stream"
        assert (event["stream_id"], event["topic"]) == (domain.streams["Denmark"], "greetings")
    ids = [send(domain, "othello", "Denmark") for _ in range(3)]
    domain.run(lambda ctx: do_update_message_flags(ctx, domain.id("hamlet"), "add", "starred", ids))
    [event] = domain.verify(lambda ctx: do_delete_messages(ctx, domain.id("iago"), ids))
    assert event["message_ids"] == ids
    ids = [send(domain, "othello", "Denmark") for _ in range(3)]
    events = domain.verify(
        lambda ctx: do_delete_messages(ctx, domain.id("iago"), ids),
        capabilities=legacy,
        num_events=3,
    )
    assert [e["message_id"] for e in events] == ids
    assert all("message_ids" not in e for e in events)


@covers(DELETE)
def test_delete_direct_messages_and_the_newest_message(domain):
    older = direct(domain, "othello", [domain.id("hamlet")], "one")
    newest = direct(domain, "othello", [domain.id("hamlet")], "two")
    assert domain.fetch()["max_message_id"] == newest
    [event] = domain.verify(
        lambda ctx: do_delete_messages(ctx, domain.id("othello"), [newest]),
        fetch_event_types=[*MESSAGE_SECTIONS, "delete_message"],
    )
    assert event == {
        "type": "delete_message",
        "message_ids": [newest],
        "message_type": "private",
        "id": 0,
    }
    assert domain.fetch()["max_message_id"] == older
    domain.verify(lambda ctx: do_delete_messages(ctx, domain.id("othello"), [older]))
    assert domain.fetch()["max_message_id"] == -1


@covers(DELETE)
def test_a_private_stream_deletion_reaches_only_its_subscribers(domain):
    secrets = [send(domain, "iago", "Scotland") for _ in range(2)]
    domain.verify(
        lambda ctx: do_delete_messages(ctx, domain.id("iago"), [secrets[0]]),
        num_events=0,
        state_change_expected=False,
    )
    domain.verify(
        lambda ctx: do_delete_messages(ctx, domain.id("iago"), [secrets[1]]), user="othello"
    )


def test_delete_refusals(domain):
    message_id = send(domain, "othello", "Denmark")
    refused(
        domain,
        lambda ctx: do_delete_messages(ctx, domain.id("hamlet"), [message_id]),
        "permission to delete",
    )
    refused(
        domain,
        lambda ctx: do_delete_messages(ctx, domain.id("hamlet"), [10**12]),
        "Invalid message",
    )
    refused(domain, lambda ctx: do_delete_messages(ctx, domain.id("hamlet"), []), "Invalid message")


# -- flags -------------------------------------------------------------------------


@covers(FLAGS_ADD, FLAGS_REMOVE)
def test_read_flag_add_and_remove(domain):
    stream_message = send(domain, "iago", "Denmark", "@**King Hamlet** hi")
    one_on_one = direct(domain, "othello", [domain.id("hamlet")])
    group = direct(domain, "othello", [domain.id("hamlet"), domain.id("iago")])
    ids = [stream_message, one_on_one, group]
    hamlet = domain.id("hamlet")
    [event] = domain.verify(lambda ctx: do_update_message_flags(ctx, hamlet, "add", "read", ids))
    assert (event["op"], event["operation"], event["flag"], event["messages"], event["all"]) == (
        "add", "add", "read", ids, False,
    )  # fmt: skip
    assert domain.fetch()["unread_msgs"]["count"] == 0
    [event] = domain.verify(lambda ctx: do_update_message_flags(ctx, hamlet, "remove", "read", ids))
    assert event["message_details"] == {
        str(stream_message): {
            "type": "stream",
            "stream_id": domain.streams["Denmark"],
            "topic": "greetings",
            "unmuted_stream_msg": True,
            "mentioned": True,
        },
        str(one_on_one): {"type": "private", "user_ids": [domain.id("othello")]},
        str(group): {
            "type": "private",
            "user_ids": sorted([domain.id("othello"), domain.id("iago")]),
        },
    }
    unread = domain.fetch()["unread_msgs"]
    assert unread["count"] == 3
    assert unread["mentions"] == [stream_message]
    # Nothing changes, nothing is sent.
    domain.verify(
        lambda ctx: do_update_message_flags(ctx, hamlet, "remove", "read", ids),
        num_events=0,
        state_change_expected=False,
    )


@covers(FLAGS_ADD, FLAGS_REMOVE)
def test_starred_flag_add_and_remove(domain):
    ids = [send(domain, "iago", "Denmark"), direct(domain, "othello", [domain.id("hamlet")])]
    hamlet = domain.id("hamlet")
    for op in ("add", "remove"):
        [event] = domain.verify(
            lambda ctx, o=op: do_update_message_flags(ctx, hamlet, o, "starred", ids),
            fetch_event_types=MESSAGE_SECTIONS,
        )
        assert event["messages"] == ids
        assert "message_details" not in event
        assert domain.fetch()["starred_messages"] == (ids if op == "add" else [])


def test_flag_refusals(domain):
    hamlet = domain.id("hamlet")
    message_id = send(domain, "iago", "Denmark")
    secret = send(domain, "iago", "Scotland")
    refused(
        domain,
        lambda ctx: do_update_message_flags(ctx, hamlet, "add", "read", [secret]),
        "Invalid message",
    )
    refused(
        domain,
        lambda ctx: do_update_message_flags(ctx, hamlet, "flip", "read", [message_id]),
        "operation",
    )
    refused(
        domain,
        lambda ctx: do_update_message_flags(ctx, hamlet, "add", "mentioned", [message_id]),
        "Flag not editable: 'mentioned'",
    )
    refused(
        domain,
        lambda ctx: do_update_message_flags(ctx, hamlet, "add", "shiny", [message_id]),
        "Invalid flag: 'shiny'",
    )


@covers(FLAGS_ADD)
def test_mark_all_as_read(domain):
    send(domain, "iago", "Denmark")
    direct(domain, "othello", [domain.id("hamlet")])
    [event] = domain.verify(lambda ctx: do_mark_all_as_read(ctx, domain.id("hamlet")))
    assert (event["flag"], event["messages"], event["all"]) == ("read", [], True)
    assert domain.fetch()["unread_msgs"]["count"] == 0
    domain.verify(
        lambda ctx: do_mark_all_as_read(ctx, domain.id("hamlet")),
        num_events=0,
        state_change_expected=False,
    )


@covers(FLAGS_ADD)
def test_mark_a_stream_or_a_topic_as_read(domain):
    hamlet = domain.id("hamlet")
    lunch = [send(domain, "iago", "Denmark", topic=t) for t in ("Lunch", "lunch")]
    other = send(domain, "iago", "Denmark", topic="Dinner")
    elsewhere = send(domain, "othello", "Verona")
    denmark = domain.streams["Denmark"]
    [event] = domain.verify(lambda ctx: do_mark_stream_as_read(ctx, hamlet, denmark, "LUNCH"))
    assert (event["flag"], event["messages"], event["all"]) == ("read", lunch, False)
    [event] = domain.verify(lambda ctx: do_mark_stream_as_read(ctx, hamlet, denmark))
    assert event["messages"] == [other]
    domain.verify(
        lambda ctx: do_mark_stream_as_read(ctx, hamlet, denmark),
        num_events=0,
        state_change_expected=False,
    )
    assert domain.fetch()["unread_msgs"]["streams"][0]["unread_message_ids"] == [elsewhere]
    refused(
        domain,
        lambda ctx: do_mark_stream_as_read(ctx, hamlet, domain.streams["Scotland"]),
        "Invalid channel ID",
    )
    refused(
        domain,
        lambda ctx: do_mark_stream_as_read(ctx, domain.id("polonius"), denmark),
        "Invalid channel ID",
    )


def test_muted_streams_leave_the_unread_count():
    """`count` leaves out muted channels; subscription events keep it right."""
    ctx = StateContext(user_id=1, realm_id=1, queue_id="q")
    raw = RawUnread({}, {10: (5, "t"), 11: (6, "t")}, {}, set(), set(), False)
    state = {"raw_unread_msgs": raw}
    assert raw.aggregate()["count"] == 2
    for event, count in (
        ({"op": "update", "stream_id": 5, "property": "is_muted", "value": True}, 1),
        ({"op": "update", "stream_id": 5, "property": "is_muted", "value": True}, 1),
        ({"op": "update", "stream_id": 6, "property": "in_home_view", "value": False}, 0),
        ({"op": "remove", "subscriptions": [{"name": "x", "stream_id": 6}]}, 1),
        ({"op": "add", "subscriptions": [{"stream_id": 5, "is_muted": False}]}, 2),
    ):
        apply_subscription_unread(state, {"type": "subscription", **event}, ctx)
        assert raw.aggregate()["count"] == count
    assert len(raw.aggregate()["streams"]) == 2


def test_a_muted_stream_is_left_out_of_the_fetched_count(domain):
    send(domain, "iago", "Denmark")
    send(domain, "iago", "Denmark", topic="other")
    assert domain.fetch()["unread_msgs"]["count"] == 2
    sql(
        domain,
        "UPDATE subscriptions SET is_muted = true WHERE user_id = %s AND stream_id = %s",
        (domain.id("hamlet"), domain.streams["Denmark"]),
    )
    unread = domain.fetch()["unread_msgs"]
    assert unread["count"] == 0
    assert len(unread["streams"]) == 2


# -- reactions ---------------------------------------------------------------------


@covers(("reaction", "add"), ("reaction", "remove"))
def test_reactions(domain):
    message_id = send(domain, "iago", "Denmark")
    othello = domain.users["othello"]
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, othello.id, message_id, "tada"),
        state_change_expected=False,
    )
    assert event["user"] == {
        "user_id": othello.id,
        "email": othello.email,
        "full_name": othello.full_name,
    }
    assert (event["emoji_name"], event["emoji_code"], event["reaction_type"]) == (
        "tada", "1f389", "unicode_emoji",
    )  # fmt: skip
    domain.verify(
        lambda ctx: do_add_reaction(ctx, othello.id, message_id, "lobster", "1f99e"),
        state_change_expected=False,
    )
    [event] = domain.verify(
        lambda ctx: do_remove_reaction(ctx, othello.id, message_id, emoji_name="lobster"),
        state_change_expected=False,
    )
    assert event["emoji_code"] == "1f99e"
    domain.verify(
        lambda ctx: do_remove_reaction(ctx, othello.id, message_id, emoji_code="1f389"),
        state_change_expected=False,
        apply_markdown=False,
    )


@covers(("reaction", "add"))
def test_a_reaction_in_a_private_stream_reaches_only_its_subscribers(domain):
    secret = send(domain, "iago", "Scotland")
    domain.verify(
        lambda ctx: do_add_reaction(ctx, domain.id("othello"), secret, "+1"),
        num_events=0,
        state_change_expected=False,
    )
    domain.verify(
        lambda ctx: do_add_reaction(ctx, domain.id("iago"), secret, "+1"),
        user="othello",
        state_change_expected=False,
    )


def test_reaction_refusals(domain):
    hamlet = domain.id("hamlet")
    message_id = send(domain, "iago", "Denmark")
    secret = send(domain, "iago", "Scotland")
    domain.run(lambda ctx: do_add_reaction(ctx, hamlet, message_id, "octopus"))
    refused(
        domain, lambda ctx: do_add_reaction(ctx, hamlet, message_id, "octopus"), "already exists"
    )
    refused(domain, lambda ctx: do_add_reaction(ctx, hamlet, secret, "octopus"), "Invalid message")
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "no_such_emoji"),
        "does not exist",
    )
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "tada", "1f600"),
        "Invalid emoji name",
    )
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "x", "zz!"),
        "Invalid emoji code",
    )
    refused(
        domain,
        lambda ctx: do_add_reaction(ctx, hamlet, message_id, "party", "1f389", "realm_emoji"),
        "custom emoji",
    )
    refused(
        domain, lambda ctx: do_remove_reaction(ctx, hamlet, message_id, "tada"), "doesn't exist"
    )
    refused(domain, lambda ctx: do_remove_reaction(ctx, hamlet, message_id), "At least one")


# -- typing ------------------------------------------------------------------------


@covers(("typing", "start"), ("typing", "stop"))
def test_typing_in_a_direct_message(domain):
    hamlet, othello = domain.users["hamlet"], domain.users["othello"]
    for op in ("start", "stop"):
        [event] = domain.verify(
            lambda ctx, o=op: do_send_direct_typing(ctx, hamlet.id, o, [othello.id]),
            user="othello",
            state_change_expected=False,
        )
        assert event["op"] == op
        assert event["message_type"] == "direct"
        assert event["sender"] == {"user_id": hamlet.id, "email": hamlet.email}
        assert event["recipients"] == sorted(
            [{"user_id": u.id, "email": u.email} for u in (hamlet, othello)],
            key=lambda r: r["user_id"],
        )
    # The sender's own clients are told too; others are not.
    domain.verify(
        lambda ctx: do_send_direct_typing(ctx, hamlet.id, "start", [othello.email]),
        state_change_expected=False,
    )
    domain.verify(
        lambda ctx: do_send_direct_typing(ctx, hamlet.id, "start", [othello.id]),
        user="iago",
        num_events=0,
        state_change_expected=False,
    )


@covers(("typing", "start"), ("typing", "stop"))
def test_typing_in_a_stream_topic(domain):
    iago = domain.id("iago")
    denmark = domain.streams["Denmark"]
    for op in ("start", "stop"):
        [event] = domain.verify(
            lambda ctx, o=op: do_send_stream_typing(ctx, iago, o, denmark, "lunch"),
            state_change_expected=False,
        )
        assert (event["message_type"], event["stream_id"], event["topic"]) == (
            "stream", denmark, "lunch",
        )  # fmt: skip
        assert "recipients" not in event
    # Without the capability, or outside the stream, nothing.
    domain.verify(
        lambda ctx: do_send_stream_typing(ctx, iago, "start", denmark, "lunch"),
        capabilities=MODERN - {"stream_typing_notifications"},
        num_events=0,
        state_change_expected=False,
    )
    domain.verify(
        lambda ctx: do_send_stream_typing(ctx, iago, "start", domain.streams["Scotland"], "x"),
        num_events=0,
        state_change_expected=False,
    )


def test_typing_refusals(domain):
    hamlet = domain.id("hamlet")
    refused(
        domain,
        lambda ctx: do_send_direct_typing(ctx, hamlet, "maybe", [domain.id("othello")]),
        "Invalid op",
    )
    refused(
        domain,
        lambda ctx: do_send_stream_typing(ctx, hamlet, "start", domain.streams["Scotland"], "x"),
        "does not exist",
    )
    refused(
        domain,
        lambda ctx: do_send_stream_typing(
            ctx, domain.id("polonius"), "start", domain.streams["Denmark"], "x"
        ),
        "does not exist",
    )


# -- typing while editing ------------------------------------------------------


def without_id(event):
    return {key: value for key, value in event.items() if key != "id"}


@covers(("typing_edit_message", "start"), ("typing_edit_message", "stop"))
def test_typing_while_editing_a_channel_message(domain):
    hamlet, denmark = domain.id("hamlet"), domain.streams["Denmark"]
    message_id = send(domain, "hamlet", "Denmark", topic="lunch")
    for op in ("start", "stop"):
        [event] = domain.verify(
            lambda ctx, o=op: do_send_edit_typing(ctx, hamlet, o, message_id),
            user="othello",
            state_change_expected=False,
        )
        assert without_id(event) == {
            "type": "typing_edit_message",
            "op": op,
            "sender_id": hamlet,
            "message_id": message_id,
            "recipient": {"type": "channel", "channel_id": denmark, "topic": "lunch"},
        }
    # Those who would not see the edit are not told: a guest outside the channel.
    domain.verify(
        lambda ctx: do_send_edit_typing(ctx, hamlet, "start", message_id),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )


@covers(("typing_edit_message", "start"))
def test_typing_while_editing_a_direct_message(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    note = direct(domain, "othello", [hamlet])
    [event] = domain.verify(
        lambda ctx: do_send_edit_typing(ctx, othello, "start", note),
        state_change_expected=False,
    )
    assert event["recipient"] == {"type": "direct", "user_ids": sorted([hamlet, othello])}
    domain.verify(
        lambda ctx: do_send_edit_typing(ctx, othello, "start", note),
        user="iago",
        num_events=0,
        state_change_expected=False,
    )


def test_typing_while_editing_refusals(domain):
    hamlet, othello, iago = (domain.id(n) for n in ("hamlet", "othello", "iago"))
    message_id = send(domain, "othello", "Denmark")
    refused(
        domain, lambda ctx: do_send_edit_typing(ctx, othello, "maybe", message_id), "Invalid op"
    )
    refused(domain, lambda ctx: do_send_edit_typing(ctx, hamlet, "start", message_id), "permission")
    secret = send(domain, "iago", "Scotland")
    refused(domain, lambda ctx: do_send_edit_typing(ctx, hamlet, "start", secret), INVALID)
    refused(domain, lambda ctx: do_send_edit_typing(ctx, othello, "start", 10**9), INVALID)
    # No grace past the edit limit (600 s), unlike saving the edit.
    sql(
        domain,
        "UPDATE messages SET date_sent = now() - interval '610 seconds' WHERE id = %s",
        (message_id,),
    )
    refused(
        domain, lambda ctx: do_send_edit_typing(ctx, othello, "start", message_id), "time limit"
    )
    domain.run(lambda ctx: do_update_message(ctx, othello, message_id, content="still in time"))
    domain.run(
        lambda ctx: do_set_realm_property(
            ctx, iago, domain.realm_id, "allow_message_editing", False
        )
    )
    refused(domain, lambda ctx: do_send_edit_typing(ctx, othello, "stop", message_id), "turned off")


@covers(FLAGS_ADD, FLAGS_REMOVE)
def test_read_unread_read_of_another_message_keeps_the_order(domain):
    hamlet = domain.id("hamlet")
    first, second = send(domain, "iago", "Denmark"), send(domain, "iago", "Denmark")

    async def read_unread_read(ctx):
        await do_update_message_flags(ctx, hamlet, "add", "read", [first])
        await do_update_message_flags(ctx, hamlet, "remove", "read", [first])
        await do_update_message_flags(ctx, hamlet, "add", "read", [second])

    # Three events: the second read does not fold into the first across the
    # unread between them (Zulip's collapsing would, and show the message read).
    domain.verify(read_unread_read, num_events=3)
