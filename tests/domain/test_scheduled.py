"""verify_action for scheduled messages (scheduling, editing, deleting, and
the scheduler's sending and failing) and for widgets (the widget a message
declares as it is sent, and readers' submessages); who is told; the
refusals; and the claim that keeps two servers from sending one message
twice."""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
import pytest

from generation.actions.base import ActionContext, ActionError
from generation.actions.messages import (
    MAX_SCHEDULED_PER_USER,
    MAX_SUBMESSAGES_PER_MESSAGE,
    deliver_due_scheduled_message,
    do_add_submessage,
    do_delete_scheduled_message,
    do_edit_scheduled_message,
    do_schedule_message,
    do_send_direct_message,
    do_send_stream_message,
    seconds_until_due,
)
from generation.actions.messages.widgets import widget_content
from generation.notice import Notice
from tests.domain.harness import covers

ADD = ("scheduled_messages", "add")
UPDATE = ("scheduled_messages", "update")
REMOVE = ("scheduled_messages", "remove")
MESSAGE = ("message", None)
SUBMESSAGE = ("submessage", None)


def later(secs: int = 3600) -> int:
    return int(time.time()) + secs


def schedule(domain, sender, kind, to, content="later", topic="plans", at=None, **kwargs):
    return domain.run(
        lambda ctx: do_schedule_message(
            ctx, domain.id(sender), kind, to, topic, content, at or later(), **kwargs
        )
    )


def sql(domain, statement, params=()):
    async def run(ctx):
        cur = await ctx.conn.execute(statement, params)
        return await cur.fetchall() if cur.description else None

    return domain.run(run)


def make_due(domain, scheduled_id, secs_ago=1, *, drain=True):
    """Make a scheduled message due; first (`drain`) send whatever else is
    due, so that the next attempt is this one's (the oldest due goes first)."""
    while drain and domain.run(deliver_due_scheduled_message) is not None:
        pass
    sql(
        domain,
        "UPDATE scheduled_messages SET scheduled_at = now() - make_interval(secs => %s)"
        " WHERE id = %s",
        (secs_ago, scheduled_id),
    )


def refused(domain, action, match):
    with pytest.raises(ActionError, match=match) as raised:
        domain.run(action)
    return raised.value


# -- scheduling, editing, deleting -------------------------------------------------


@covers(ADD)
def test_schedule_a_channel_message_and_direct_ones(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    denmark = domain.streams["Denmark"]
    at = later()
    [event] = domain.verify(
        lambda ctx: do_schedule_message(ctx, hamlet, "stream", denmark, "plans", "**Soon**", at)
    )
    [scheduled] = event["scheduled_messages"]
    assert scheduled == {
        "scheduled_message_id": scheduled["scheduled_message_id"],
        "type": "stream",
        "to": denmark,
        "topic": "plans",
        "content": "**Soon**",
        "rendered_content": "<p><strong>Soon</strong></p>",
        "scheduled_delivery_timestamp": at,
        "failed": False,
    }
    # A direct message is `to` its other participants, or the sender alone.
    iago = domain.id("iago")
    for to, expected in (
        ([othello], [othello]),
        ([hamlet], [hamlet]),
        ([othello, iago], sorted([othello, iago])),
    ):
        [event] = domain.verify(
            lambda ctx, to=to: do_schedule_message(ctx, hamlet, "private", to, None, "hi", at - 1)
        )
        [scheduled] = event["scheduled_messages"]
        assert (scheduled["type"], sorted(scheduled["to"]), "topic" in scheduled) == (
            "private",
            expected,
            False,
        )
    # Soonest first: the direct ones, due a second earlier, lead.
    assert [m["type"] for m in domain.fetch()["scheduled_messages"]] == ["private"] * 3 + ["stream"]


@covers(ADD)
def test_nobody_but_the_sender_hears_of_a_scheduled_message(domain):
    othello = domain.id("othello")
    domain.verify(
        lambda ctx: do_schedule_message(
            ctx, othello, "private", [domain.id("hamlet")], None, "secret", later()
        ),
        user="hamlet",
        num_events=0,
        state_change_expected=False,
    )
    domain.verify(
        lambda ctx: do_schedule_message(
            ctx, othello, "private", [domain.id("hamlet")], None, "secret", later()
        ),
        user="othello",
    )
    assert domain.fetch("hamlet")["scheduled_messages"] == []


@covers(UPDATE)
def test_edit_content_topic_time_and_recipients(domain):
    hamlet = domain.id("hamlet")
    denmark, verona = domain.streams["Denmark"], domain.streams["Verona"]
    first = schedule(domain, "hamlet", "stream", denmark)
    second = schedule(domain, "hamlet", "stream", verona, at=later(7200))
    edits = (
        dict(content="*changed*"),
        dict(topic="new topic"),
        # Earlier than the other one now: the order changes.
        dict(scheduled_delivery_timestamp=later(60)),
        dict(to=denmark),
        dict(kind="private", to=[domain.id("othello")]),
        dict(kind="stream", to=denmark, topic="back"),
    )
    for edit in edits:
        [event] = domain.verify(
            lambda ctx, edit=edit: do_edit_scheduled_message(ctx, hamlet, second, **edit)
        )
        assert event["scheduled_message"]["scheduled_message_id"] == second
    fetched = domain.fetch()["scheduled_messages"]
    assert [m["scheduled_message_id"] for m in fetched] == [second, first]
    assert (fetched[0]["to"], fetched[0]["topic"], fetched[0]["rendered_content"]) == (
        denmark,
        "back",
        "<p><em>changed</em></p>",
    )
    # A topic for a direct message is ignored, as Zulip does.
    direct = schedule(domain, "hamlet", "private", [domain.id("othello")])
    [event] = domain.verify(
        lambda ctx: do_edit_scheduled_message(ctx, hamlet, direct, topic="ignored"),
        state_change_expected=False,
    )
    assert "topic" not in event["scheduled_message"]


@covers(REMOVE)
def test_delete(domain):
    scheduled_id = schedule(domain, "hamlet", "stream", domain.streams["Denmark"])
    [event] = domain.verify(
        lambda ctx: do_delete_scheduled_message(ctx, domain.id("hamlet"), scheduled_id)
    )
    assert event["scheduled_message_id"] == scheduled_id
    assert domain.fetch()["scheduled_messages"] == []


def test_scheduling_refusals(domain):
    hamlet = domain.id("hamlet")
    denmark = domain.streams["Denmark"]

    def attempt(kind, to, at=None, content="x", topic="t"):
        when = later() if at is None else at
        return lambda ctx: do_schedule_message(ctx, hamlet, kind, to, topic, content, when)

    for past in (int(time.time()) - 1, 0, -5):
        refused(
            domain,
            attempt("stream", denmark, at=past),
            "Scheduled delivery time must be in the future.",
        )
    refused(domain, attempt("stream", denmark, at=10**13), "too far in the future")
    refused(domain, attempt("stream", domain.streams["Scotland"]), "does not exist")
    refused(domain, attempt("stream", 10**12), "does not exist")
    refused(domain, attempt("stream", [denmark]), "Invalid data type for channel ID")
    refused(domain, attempt("private", denmark), "Invalid data type for recipients")
    refused(domain, attempt("private", []), "Message must have recipients")
    refused(domain, attempt("private", [10**12]), "Invalid user ID")
    refused(domain, attempt("stream", denmark, content="  "), "Message must not be empty")
    assert domain.fetch()["scheduled_messages"] == []


def test_a_user_has_at_most_so_many_scheduled_messages(domain):
    hamlet = domain.id("hamlet")

    async def fill(ctx):
        for _ in range(MAX_SCHEDULED_PER_USER):
            await do_schedule_message(ctx, hamlet, "private", [hamlet], None, "x", later())

    domain.run(fill)
    refused(
        domain,
        lambda ctx: do_schedule_message(ctx, hamlet, "private", [hamlet], None, "x", later()),
        f"more than {MAX_SCHEDULED_PER_USER} scheduled messages",
    )
    # Someone else's are theirs.
    schedule(domain, "othello", "private", [hamlet])


def test_edit_and_delete_refusals(domain):
    hamlet = domain.id("hamlet")
    mine = schedule(domain, "hamlet", "stream", domain.streams["Denmark"])
    theirs = schedule(domain, "othello", "stream", domain.streams["Denmark"])
    for action in (
        lambda ctx: do_edit_scheduled_message(ctx, hamlet, theirs, content="x"),
        lambda ctx: do_delete_scheduled_message(ctx, hamlet, theirs),
        lambda ctx: do_delete_scheduled_message(ctx, hamlet, 10**12),
    ):
        error = refused(domain, action, "Scheduled message does not exist")
        assert error.status == 404
    refused(domain, lambda ctx: do_edit_scheduled_message(ctx, hamlet, mine), "Nothing to change")
    refused(
        domain,
        lambda ctx: do_edit_scheduled_message(ctx, hamlet, mine, kind="private"),
        "Recipient required when updating type of scheduled message.",
    )
    refused(
        domain,
        lambda ctx: do_edit_scheduled_message(
            ctx, hamlet, mine, kind="stream", to=domain.streams["Verona"]
        ),
        "Topic required when updating scheduled message type to stream.",
    )
    refused(
        domain,
        lambda ctx: do_edit_scheduled_message(
            ctx, hamlet, mine, scheduled_delivery_timestamp=int(time.time()) - 60
        ),
        "Scheduled delivery time must be in the future.",
    )
    refused(
        domain,
        lambda ctx: do_edit_scheduled_message(ctx, hamlet, mine, to=domain.streams["Scotland"]),
        "does not exist",
    )
    [kept] = domain.fetch()["scheduled_messages"]
    assert (kept["scheduled_message_id"], kept["content"]) == (mine, "later")
    assert [m["scheduled_message_id"] for m in domain.fetch("othello")["scheduled_messages"]] == [
        theirs
    ]


# -- the scheduler's part ---------------------------------------------------------


@covers(MESSAGE, REMOVE)
def test_a_due_message_is_sent_and_leaves_the_list(domain):
    mention = "@**Othello, the Moor of Venice** now"
    scheduled_id = schedule(domain, "hamlet", "stream", domain.streams["Denmark"], mention)
    make_due(domain, scheduled_id)
    events = domain.verify(deliver_due_scheduled_message, num_events=2)
    message, removed = events
    assert message["type"] == "message"
    assert message["message"]["content"].startswith('<p><span class="user-mention"')
    assert message["flags"] == ["read"]
    assert removed == {
        "id": removed["id"],
        "type": "scheduled_messages",
        "op": "remove",
        "scheduled_message_id": scheduled_id,
    }
    assert domain.fetch()["scheduled_messages"] == []
    # The recipients' copies are those of a message sent now.
    [othello_flags] = sql(
        domain,
        "SELECT mentioned FROM user_messages WHERE user_id = %s AND message_id = %s",
        (domain.id("othello"), message["message"]["id"]),
    )
    assert othello_flags == (True,)
    assert domain.run(deliver_due_scheduled_message) is None


@covers(MESSAGE, REMOVE)
def test_read_by_sender_false_leaves_the_senders_copy_unread(domain):
    scheduled_id = schedule(
        domain, "hamlet", "private", [domain.id("othello")], read_by_sender=False
    )
    make_due(domain, scheduled_id)
    message, _ = domain.verify(deliver_due_scheduled_message, num_events=2)
    assert message["flags"] == []
    # By default a message to oneself alone is not read, others are.
    to_self = schedule(domain, "hamlet", "private", [domain.id("hamlet")])
    make_due(domain, to_self)
    message, _ = domain.verify(deliver_due_scheduled_message, num_events=2)
    assert message["flags"] == []


@covers(UPDATE)
def test_a_message_the_sender_may_no_longer_send_fails(domain):
    othello = domain.id("othello")
    scotland = domain.streams["Scotland"]
    scheduled_id = schedule(domain, "othello", "stream", scotland, "for the castle")
    make_due(domain, scheduled_id)
    sql(
        domain,
        "UPDATE subscriptions SET active = false WHERE user_id = %s AND stream_id = %s",
        (othello, scotland),
    )
    [event] = domain.verify(deliver_due_scheduled_message, user="othello")
    failed = event["scheduled_message"]
    assert (failed["scheduled_message_id"], failed["failed"]) == (scheduled_id, True)
    attempt_rows = sql(
        domain, "SELECT failure_message FROM scheduled_messages WHERE id = %s", (scheduled_id,)
    )
    assert attempt_rows == [(f"Channel with ID '{scotland}' does not exist",)]
    # Nothing was sent, and a failed one is not tried again.
    assert sql(domain, "SELECT count(*) FROM messages WHERE content = 'for the castle'") == [(0,)]
    assert domain.run(deliver_due_scheduled_message) is None
    # Its sender reschedules it (a new time is required) somewhere they may post.
    refused(
        domain,
        lambda ctx: do_edit_scheduled_message(ctx, othello, scheduled_id, content="again"),
        "Scheduled delivery time must be in the future.",
    )
    [event] = domain.verify(
        lambda ctx: do_edit_scheduled_message(
            ctx,
            othello,
            scheduled_id,
            to=domain.streams["Denmark"],
            topic="t",
            scheduled_delivery_timestamp=later(),
        ),
        user="othello",
    )
    assert event["scheduled_message"]["failed"] is False


@covers(UPDATE)
def test_a_message_reached_too_late_fails(domain):
    scheduled_id = schedule(domain, "hamlet", "stream", domain.streams["Verona"])
    make_due(domain, scheduled_id, secs_ago=11 * 60)
    [event] = domain.verify(deliver_due_scheduled_message)
    assert event["scheduled_message"]["failed"] is True
    failure = sql(
        domain, "SELECT failure_message FROM scheduled_messages WHERE id = %s", (scheduled_id,)
    )
    assert failure == [("Message could not be sent at the scheduled time.",)]


def test_a_deactivated_senders_message_fails_without_telling_anyone(domain):
    scheduled_id = schedule(domain, "othello", "stream", domain.streams["Denmark"])
    make_due(domain, scheduled_id)
    sql(domain, "UPDATE users SET is_active = false WHERE id = %s", (domain.id("othello"),))
    sent: list[Notice] = []

    async def go():
        async def sink(notice):
            sent.append(notice)

        async with await psycopg.AsyncConnection.connect(
            domain.database_url, autocommit=True
        ) as conn:
            return await deliver_due_scheduled_message(ActionContext(conn, sink))

    attempt = asyncio.run(go())
    assert attempt is not None
    assert attempt.message_id is None
    assert attempt.failure == f"Invalid user ID {domain.id('othello')}"
    assert sent == []


def test_due_messages_go_oldest_first_and_the_next_due_time_is_known(domain):
    first = schedule(domain, "hamlet", "private", [domain.id("othello")], "first")
    second = schedule(domain, "hamlet", "private", [domain.id("othello")], "second")
    make_due(domain, second, secs_ago=5)
    make_due(domain, first, secs_ago=2, drain=False)
    assert domain.run(lambda ctx: seconds_until_due(ctx.conn)) <= -5
    assert domain.run(deliver_due_scheduled_message).scheduled_id == second
    assert domain.run(deliver_due_scheduled_message).scheduled_id == first


def test_a_row_claimed_by_one_server_is_skipped_by_another(domain):
    """Two servers' passes at once: while one holds the due row (its send in
    progress), the other finds nothing to do; once the first has sent it,
    the row is gone."""
    scheduled_id = schedule(domain, "hamlet", "stream", domain.streams["Denmark"], "once")
    make_due(domain, scheduled_id)

    async def sink(notice):
        pass

    async def go():
        url = domain.database_url
        async with (
            await psycopg.AsyncConnection.connect(url, autocommit=True) as first,
            await psycopg.AsyncConnection.connect(url, autocommit=True) as second,
        ):
            holder = ActionContext(first, sink)
            async with holder.transaction():
                # The first server's claim, held open.
                await first.execute(
                    "SELECT id FROM scheduled_messages WHERE id = %s FOR UPDATE", (scheduled_id,)
                )
                assert await deliver_due_scheduled_message(ActionContext(second, sink)) is None
            sent = await deliver_due_scheduled_message(ActionContext(first, sink))
            again = await deliver_due_scheduled_message(ActionContext(second, sink))
            return sent, again

    sent, again = asyncio.run(go())
    assert sent is not None
    assert sent.message_id is not None
    assert again is None
    assert sql(domain, "SELECT count(*) FROM messages WHERE content = 'once'") == [(1,)]


# -- widgets -------------------------------------------------------------------------


def test_widget_commands_are_parsed_as_zulip_stores_them():
    assert widget_content("/poll What now?\nTea\n- Coffee\n* Water\n\n") == (
        '{"widget_type": "poll", "extra_data": {"question": "What now?", '
        '"options": ["Tea", "Coffee", "Water"]}}'
    )
    assert widget_content("/poll\nA\nB") == (
        '{"widget_type": "poll", "extra_data": {"question": "", "options": ["A", "B"]}}'
    )
    assert json.loads(widget_content("/todo Week\nShop: milk, eggs\nCook") or "") == {
        "widget_type": "todo",
        "extra_data": {
            "task_list_title": "Week",
            "tasks": [{"task": "Shop", "desc": "milk, eggs"}, {"task": "Cook", "desc": ""}],
        },
    }
    assert widget_content("/pollster x") is None
    assert widget_content("a /poll") is None
    assert widget_content(" /poll x") is None
    assert widget_content("/me waves") is None
    assert widget_content("/poll Café") == (
        '{"widget_type": "poll", "extra_data": {"question": "Caf\\u00e9", "options": []}}'
    )


@covers(MESSAGE)
def test_a_poll_message_carries_its_widget(domain):
    hamlet = domain.id("hamlet")
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(
            ctx, hamlet, "Denmark", "lunch", "/poll Where?\nHere\nThere"
        )
    )
    message = event["message"]
    [widget] = message["submessages"]
    assert widget == {
        "id": widget["id"],
        "message_id": message["id"],
        "sender_id": hamlet,
        "msg_type": "widget",
        "content": '{"widget_type": "poll", "extra_data": {"question": "Where?", '
        '"options": ["Here", "There"]}}',
    }
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, hamlet, [domain.id("othello")], "no widget")
    )
    assert event["message"]["submessages"] == []


def poll(domain, sender="hamlet", stream="Denmark", content="/poll Where?\nHere\nThere"):
    return domain.run(
        lambda ctx: do_send_stream_message(ctx, domain.id(sender), stream, "lunch", content)
    )


@covers(SUBMESSAGE)
def test_readers_vote_and_everyone_who_may_see_the_message_is_told(domain):
    message_id = poll(domain)
    othello = domain.id("othello")
    vote = '{"type": "vote", "key": "canned,0", "vote": 1}'
    for user in ("othello", "hamlet", "iago"):
        [event] = domain.verify(
            lambda ctx: do_add_submessage(ctx, othello, message_id, "widget", vote),
            user=user,
            state_change_expected=False,
        )
        assert event == {
            "id": event["id"],
            "type": "submessage",
            "msg_type": "widget",
            "content": vote,
            "message_id": message_id,
            "sender_id": othello,
            "submessage_id": event["submessage_id"],
        }
    # Polonius (a guest, not in Denmark) may not see it, and is not told.
    domain.verify(
        lambda ctx: do_add_submessage(ctx, othello, message_id, "widget", vote),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )
    option = '{"type": "new_option", "idx": 1, "option": "Elsewhere"}'
    domain.verify(
        lambda ctx: do_add_submessage(ctx, othello, message_id, "widget", option),
        state_change_expected=False,
    )
    question = '{"type": "question", "question": "Where, really?"}'
    domain.verify(
        lambda ctx: do_add_submessage(ctx, domain.id("hamlet"), message_id, "widget", question),
        state_change_expected=False,
    )
    rows = sql(
        domain, "SELECT sender_id FROM submessages WHERE message_id = %s ORDER BY id", (message_id,)
    )
    assert [row[0] for row in rows] == [domain.id("hamlet")] + [othello] * 5 + [domain.id("hamlet")]


def test_submessage_refusals(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    message_id = poll(domain)
    plain = domain.run(
        lambda ctx: do_send_stream_message(ctx, hamlet, "Denmark", "t", "no widget here")
    )
    secret = domain.run(
        lambda ctx: do_send_stream_message(ctx, domain.id("iago"), "Scotland", "t", "/poll x")
    )

    def add(user, target, content, msg_type="widget"):
        return lambda ctx: do_add_submessage(ctx, user, target, msg_type, content)

    vote = '{"type": "vote", "key": "canned,0", "vote": 1}'
    refused(domain, add(othello, plain, "{}"), "You cannot attach a submessage to this message.")
    refused(domain, add(hamlet, secret, vote), r"Invalid message\(s\)")
    refused(domain, add(hamlet, 10**12, vote), r"Invalid message\(s\)")
    refused(domain, add(othello, message_id, "{nope"), "Invalid json for submessage")
    refused(domain, add(othello, message_id, vote, msg_type="other"), "Invalid msg_type")
    refused(domain, add(othello, message_id, "x" * 10_001), "content is too long")
    for content, match in (
        ("[]", "poll data is not a dict"),
        ("{}", r'poll data\["type"\] is missing'),
        ('{"type": "shout"}', "Unknown type for poll data: shout"),
        ('{"type": "vote", "key": "canned,0", "vote": 2}', r'Invalid poll data\["vote"\]'),
        ('{"type": "vote", "key": 0, "vote": 1}', r'poll data\["key"\] is not a string'),
        ('{"type": "vote", "key": "k", "vote": 1, "x": 1}', "Unexpected arguments: x"),
        ('{"type": "new_option", "idx": 1001, "option": "o"}', r'poll data\["idx"\] is too large'),
        (
            '{"type": "question", "question": "Mine now"}',
            "You can't edit a question unless you are the author.",
        ),
    ):
        refused(domain, add(othello, message_id, content), match)
    todo = domain.run(
        lambda ctx: do_send_stream_message(ctx, hamlet, "Denmark", "t", "/todo Chores")
    )
    for content, match in (
        (
            '{"type": "new_task", "key": 1, "task": "t", "desc": "", "completed": 0}',
            r'todo data\["completed"\] is not a boolean',
        ),
        ('{"type": "strike", "key": 1}', r'todo data\["key"\] is not a string'),
        (
            '{"type": "new_task_list_title", "title": "Mine"}',
            "You can't edit the task list title unless you are the author.",
        ),
    ):
        refused(domain, add(othello, todo, content), match)
    domain.run(add(othello, todo, '{"type": "strike", "key": "0,canned"}'))
    # A message with no widget takes any JSON from its sender.
    domain.run(add(hamlet, plain, '{"anything": [1, 2]}'))
    assert sql(domain, "SELECT count(*) FROM submessages WHERE message_id = %s", (message_id,)) == [
        (1,)
    ]


def test_a_message_holds_at_most_so_many_submessages(domain):
    message_id = poll(domain)
    sql(
        domain,
        "INSERT INTO submessages (message_id, sender_id, msg_type, content)"
        " SELECT %s, %s, 'widget', '{}' FROM generate_series(2, %s)",
        (message_id, domain.id("othello"), MAX_SUBMESSAGES_PER_MESSAGE),
    )
    refused(
        domain,
        lambda ctx: do_add_submessage(
            ctx,
            domain.id("othello"),
            message_id,
            "widget",
            '{"type": "vote", "key": "canned,0", "vote": 1}',
        ),
        "too many submessages",
    )
