"""What a guest of a realm that restricts its guests (Zulip's
`can_access_all_users_group` role:members, generation/actions/access.py) is
not told of the users they may not see, beyond messages: typing
notifications, reactions, mentions, and scheduled direct messages.

The Domain realm (tests/domain/harness.py): iago (administrator), hamlet,
othello (members), polonius (guest, in no stream); Denmark (public: iago,
hamlet, othello), Verona (public: hamlet), Scotland (private: iago,
othello). Most tests put polonius in Verona, so that he sees hamlet (and
himself, and bots) and nobody else.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from generation import accounts
from generation.actions import bots
from generation.actions.access import INACCESSIBLE_USER_NAME, inaccessible_email
from generation.actions.base import ActionError
from generation.actions.messages import (
    do_add_reaction,
    do_edit_scheduled_message,
    do_remove_reaction,
    do_schedule_message,
    do_send_direct_typing,
    do_send_stream_message,
    do_send_stream_typing,
)
from tests.domain.harness import Domain, covers
from tests.domain.test_access_events import ids, notices, restrict, subscribe

TYPING_START = ("typing", "start")
TYPING_STOP = ("typing", "stop")
REACTION_ADD = ("reaction", "add")
REACTION_REMOVE = ("reaction", "remove")
SCHEDULED_ADD = ("scheduled_messages", "add")
REFUSED = "You do not have permission to access some of the recipients."


def guest_in_verona(domain: Domain) -> None:
    """The realm restricted, and polonius in Verona with hamlet."""
    restrict(domain)
    subscribe(domain, "polonius", "Verona")


def known(domain: Domain, name: str) -> dict[str, Any]:
    return {"user_id": domain.id(name), "email": domain.users[name].email}


def placeholder(domain: Domain, name: str) -> dict[str, Any]:
    return {
        "user_id": domain.id(name),
        "email": inaccessible_email(domain.id(name), domain.subdomain),
    }


def create_bot(domain: Domain) -> int:
    iago = domain.id("iago")
    created = domain.run(
        lambda ctx: bots.do_create_bot(ctx, iago, domain.realm_id, "Helper", "helper")
    )
    return int(created.user_id)


# -- typing ---------------------------------------------------------------------


@covers(TYPING_START, TYPING_STOP)
def test_typing_in_a_channel_by_an_unsubscribed_user_reaches_the_guest_as_unknown(domain):
    guest_in_verona(domain)
    othello, verona = domain.id("othello"), domain.streams["Verona"]
    for op in ("start", "stop"):
        [event] = domain.verify(
            lambda ctx, o=op: do_send_stream_typing(ctx, othello, o, verona, "plans"),
            user="polonius",
            state_change_expected=False,
        )
        assert (event["op"], event["stream_id"], event["topic"]) == (op, verona, "plans")
        assert event["sender"] == placeholder(domain, "othello")
    # hamlet, who may see everyone, is told of othello as ever.
    [event] = domain.verify(
        lambda ctx: do_send_stream_typing(ctx, othello, "start", verona, "plans"),
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "othello")
    # One notice each: the guest's names nobody.
    sent = notices(domain, lambda ctx: do_send_stream_typing(ctx, othello, "stop", verona, "x"))
    assert [(event["sender"]["email"], users) for event, users in sent] == [
        (domain.users["othello"].email, ids(domain, "hamlet")),
        (inaccessible_email(othello, domain.subdomain), ids(domain, "polonius")),
    ]


@covers(TYPING_START)
def test_typing_in_a_channel_by_someone_the_guest_sees_is_unchanged(domain):
    guest_in_verona(domain)
    verona = domain.streams["Verona"]
    # A subscribed typist shares the channel with the guest.
    [event] = domain.verify(
        lambda ctx: do_send_stream_typing(ctx, domain.id("hamlet"), "start", verona, "t"),
        user="polonius",
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "hamlet")
    # An unsubscribed one the guest shares another channel with.
    subscribe(domain, "polonius", "Denmark")
    [event] = domain.verify(
        lambda ctx: do_send_stream_typing(ctx, domain.id("iago"), "start", verona, "t"),
        user="polonius",
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "iago")


@covers(TYPING_START)
def test_typing_in_a_channel_of_an_unrestricted_realm_shows_everyone(domain):
    subscribe(domain, "polonius", "Verona")
    sent = notices(
        domain,
        lambda ctx: do_send_stream_typing(
            ctx, domain.id("othello"), "start", domain.streams["Verona"], "t"
        ),
    )
    assert [(event["sender"], users) for event, users in sent] == [
        (known(domain, "othello"), ids(domain, "hamlet", "polonius"))
    ]
    [event] = domain.verify(
        lambda ctx: do_send_stream_typing(
            ctx, domain.id("othello"), "start", domain.streams["Verona"], "t"
        ),
        user="polonius",
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "othello")


def test_a_guest_may_not_type_to_someone_they_do_not_see(domain):
    guest_in_verona(domain)
    polonius = domain.id("polonius")
    recipients: list[list[int | str]] = [
        [domain.id("othello")],
        [domain.users["iago"].email],
        [domain.id("hamlet"), domain.id("iago")],
    ]
    for to in recipients:
        # Refused, and nobody is told.
        assert notices(domain, lambda ctx, t=to: _refused_quietly(ctx, polonius, t)) == []


async def _refused_quietly(ctx: Any, sender: int, to: list[int | str]) -> None:
    with pytest.raises(ActionError, match=REFUSED):
        await do_send_direct_typing(ctx, sender, "start", to)


@covers(TYPING_START)
def test_a_guest_types_to_those_they_see_and_a_member_to_the_guest(domain):
    guest_in_verona(domain)
    polonius, hamlet = domain.id("polonius"), domain.id("hamlet")
    bot = create_bot(domain)
    [event] = domain.verify(
        lambda ctx: do_send_direct_typing(ctx, polonius, "start", [hamlet, bot]),
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "polonius")
    assert [r["user_id"] for r in event["recipients"]] == sorted([polonius, hamlet, bot])
    # A member may type to the guest (the rule restricts guests only).
    [event] = domain.verify(
        lambda ctx: do_send_direct_typing(ctx, domain.id("othello"), "start", [polonius]),
        user="polonius",
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "othello")


@covers(TYPING_START)
def test_a_guest_of_an_unrestricted_realm_types_to_anyone(domain):
    [event] = domain.verify(
        lambda ctx: do_send_direct_typing(
            ctx, domain.id("polonius"), "start", [domain.id("othello")]
        ),
        user="othello",
        state_change_expected=False,
    )
    assert event["sender"] == known(domain, "polonius")


# -- reactions ------------------------------------------------------------------


def verona_message(domain: Domain) -> int:
    return int(
        domain.run(
            lambda ctx: do_send_stream_message(ctx, domain.id("hamlet"), "Verona", "t", "hello")
        )
    )


@covers(REACTION_ADD, REACTION_REMOVE)
def test_a_reaction_by_someone_the_guest_does_not_see_is_by_unknown_user(domain):
    guest_in_verona(domain)
    message_id, othello = verona_message(domain), domain.id("othello")
    unknown = {
        "user_id": othello,
        "email": inaccessible_email(othello, domain.subdomain),
        "full_name": INACCESSIBLE_USER_NAME,
    }
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, othello, message_id, "tada"),
        user="polonius",
        state_change_expected=False,
    )
    assert (event["op"], event["user_id"], event["user"]) == ("add", othello, unknown)
    [event] = domain.verify(
        lambda ctx: do_remove_reaction(ctx, othello, message_id, emoji_name="tada"),
        user="polonius",
        state_change_expected=False,
    )
    assert (event["op"], event["user_id"], event["user"]) == ("remove", othello, unknown)
    # hamlet sees othello's name; one notice each.
    sent = notices(domain, lambda ctx: do_add_reaction(ctx, othello, message_id, "octopus"))
    assert [(event["user"]["full_name"], users) for event, users in sent] == [
        ("Othello, the Moor of Venice", ids(domain, "hamlet")),
        (INACCESSIBLE_USER_NAME, ids(domain, "polonius")),
    ]


@covers(REACTION_ADD)
def test_a_reaction_by_someone_the_guest_sees_is_unchanged(domain):
    guest_in_verona(domain)
    message_id = verona_message(domain)
    bot = create_bot(domain)
    for reactor in (domain.id("hamlet"), bot):
        sent = notices(domain, lambda ctx, r=reactor: do_add_reaction(ctx, r, message_id, "tada"))
        [(event, users)] = sent
        assert event["user"]["full_name"] in ("King Hamlet", "Helper")
        assert users == ids(domain, "hamlet", "polonius")
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, domain.id("hamlet"), message_id, "octopus"),
        user="polonius",
        state_change_expected=False,
    )
    assert event["user"]["email"] == domain.users["hamlet"].email


@covers(REACTION_ADD)
def test_a_reaction_in_an_unrestricted_realm_shows_the_reactor_to_the_guest(domain):
    subscribe(domain, "polonius", "Verona")
    message_id = verona_message(domain)
    [event] = domain.verify(
        lambda ctx: do_add_reaction(ctx, domain.id("othello"), message_id, "tada"),
        user="polonius",
        state_change_expected=False,
    )
    assert event["user"] == {**known(domain, "othello"), "full_name": "Othello, the Moor of Venice"}


# -- mentions -------------------------------------------------------------------
# As the sender's client sees them rendered in a scheduled message (its
# `scheduled_messages` add): the content is rendered as it would be sent.


def later() -> int:
    return int(time.time()) + 3600


def schedule(domain: Domain, sender: str, content: str) -> dict[str, Any]:
    """What the sender's client is told of a channel message scheduled to Verona."""
    [event] = domain.verify(
        lambda ctx: do_schedule_message(
            ctx, domain.id(sender), "stream", domain.streams["Verona"], "t", content, later()
        ),
        user=sender,
    )
    return dict(event["scheduled_messages"][0])


def mention(user_id: int, name: str, *, silent: bool = False) -> str:
    kind = "user-mention silent" if silent else "user-mention"
    return f'<span class="{kind}" data-user-id="{user_id}">{"" if silent else "@"}{name}</span>'


@covers(SCHEDULED_ADD)
def test_a_guest_mentions_only_those_they_see(domain):
    guest_in_verona(domain)
    othello, hamlet = domain.id("othello"), domain.id("hamlet")
    bot = create_bot(domain)
    content = (
        "@**King Hamlet** @**Othello, the Moor of Venice**"
        f" @**Othello, the Moor of Venice|{othello}** @_**Iago** @**Helper** @**Polonius**"
        " @_**King Hamlet**"
    )
    rendered = schedule(domain, "polonius", content)["rendered_content"]
    assert rendered == (
        f"<p>{mention(hamlet, 'King Hamlet')} @<strong>Othello, the Moor of Venice</strong>"
        f" @<strong>Othello, the Moor of Venice|{othello}</strong> @_<strong>Iago</strong>"
        f" {mention(bot, 'Helper')} {mention(domain.id('polonius'), 'Polonius')}"
        f" {mention(hamlet, 'King Hamlet', silent=True)}</p>"
    )


@covers(("message", None))
def test_a_guests_live_message_mentions_only_those_they_see(domain):
    """Sent as the same content is scheduled: iago stays plain text for
    everyone who receives it, hamlet is mentioned (and flagged)."""
    guest_in_verona(domain)
    polonius = domain.id("polonius")
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(
            ctx, polonius, "Verona", "court", "@**King Hamlet** @**Iago**"
        ),
        user="hamlet",
    )
    assert event["message"]["content"] == (
        f"<p>{mention(domain.id('hamlet'), 'King Hamlet')} @<strong>Iago</strong></p>"
    )
    assert "mentioned" in event["flags"]


@covers(SCHEDULED_ADD)
def test_a_hidden_namesake_leaves_the_guests_mention_to_the_user_they_see(domain):
    guest_in_verona(domain)
    # A second "King Hamlet" polonius may not see: for him the name is hamlet's.
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        accounts.create_user(
            conn, domain.subdomain, f"ghost@{domain.subdomain}.example", "King Hamlet"
        )
    rendered = schedule(domain, "polonius", "@**King Hamlet**")["rendered_content"]
    assert rendered == f"<p>{mention(domain.id('hamlet'), 'King Hamlet')}</p>"


@covers(SCHEDULED_ADD)
def test_a_member_and_a_guest_of_an_unrestricted_realm_mention_anyone(domain):
    subscribe(domain, "polonius", "Verona")
    othello = domain.id("othello")
    expected = f"<p>{mention(othello, 'Othello, the Moor of Venice')}</p>"
    assert (
        schedule(domain, "polonius", "@**Othello, the Moor of Venice**")["rendered_content"]
        == expected
    )
    restrict(domain)
    assert (
        schedule(domain, "hamlet", "@**Othello, the Moor of Venice**")["rendered_content"]
        == expected
    )


# -- scheduled direct messages ----------------------------------------------------


def test_a_guest_may_not_schedule_a_direct_message_to_someone_they_do_not_see(domain):
    guest_in_verona(domain)
    polonius, hamlet, othello = domain.id("polonius"), domain.id("hamlet"), domain.id("othello")
    for to in ([othello], [hamlet, othello]):
        with pytest.raises(ActionError, match=REFUSED):
            domain.run(
                lambda ctx, t=to: do_schedule_message(
                    ctx, polonius, "private", t, None, "hi", later()
                )
            )
    assert domain.fetch("polonius")["scheduled_messages"] == []
    # To hamlet, yes; but not then moved to othello.
    scheduled = domain.run(
        lambda ctx: do_schedule_message(ctx, polonius, "private", [hamlet], None, "hi", later())
    )
    with pytest.raises(ActionError, match=REFUSED):
        domain.run(lambda ctx: do_edit_scheduled_message(ctx, polonius, scheduled, to=[othello]))
    with pytest.raises(ActionError, match=REFUSED):
        domain.run(
            lambda ctx: do_edit_scheduled_message(
                ctx, polonius, scheduled, kind="private", to=[hamlet, othello]
            )
        )
    [message] = domain.fetch("polonius")["scheduled_messages"]
    assert (message["scheduled_message_id"], message["to"]) == (scheduled, [hamlet])


def test_members_and_guests_of_unrestricted_realms_schedule_to_anyone(domain):
    polonius, othello = domain.id("polonius"), domain.id("othello")
    domain.run(
        lambda ctx: do_schedule_message(ctx, polonius, "private", [othello], None, "hi", later())
    )
    restrict(domain)
    domain.run(
        lambda ctx: do_schedule_message(
            ctx, domain.id("hamlet"), "private", [polonius], None, "hi", later()
        )
    )
    assert [m["to"] for m in domain.fetch("hamlet")["scheduled_messages"]] == [[polonius]]
