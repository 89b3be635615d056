"""Messages in a realm that restricts its guests (Zulip's
`can_access_all_users_group` role:members, generation/actions/access.py):
a guest receives a channel message from a sender they may not see (one not
subscribed) with the sender as "Unknown user", may not write to such a
user, and is told of the people a conversation lets them see before its
message."""

from __future__ import annotations

from functools import partial
from typing import Any

import psycopg
import pytest

from generation import accounts
from generation.accounts import FAKE_EMAIL_DOMAIN
from generation.actions import bots
from generation.actions.access import (
    INACCESSIBLE_AVATAR_URL,
    INACCESSIBLE_USER_NAME,
    inaccessible_email,
)
from generation.actions.base import ActionError
from generation.actions.messages import do_send_direct_message, do_send_stream_message
from generation.events.messages import USER_IDS_WITHOUT_ACCESS_TO_SENDER
from queues.client import ClientDescriptor
from queues.event_queue import EventQueue
from queues.payload import Payload
from queues.specialize import NoticePayloads
from tests.domain.harness import Domain, covers
from tests.queues.helpers import encode, message_event, options

MESSAGE = ("message", None)
REALM_USER_ADD = ("realm_user", "add")
REFUSED = "You do not have permission to access some of the recipients."


def restrict(domain: Domain) -> None:
    """The realm's setting to role:members (guests see only whom they share
    something with)."""

    async def run(ctx: Any) -> None:
        await ctx.conn.execute(
            "UPDATE realms SET guests_see_all_users = false WHERE id = %s", (domain.realm_id,)
        )

    domain.run(run)


def subscribe(domain: Domain, user: str, stream: str) -> None:
    async def run(ctx: Any) -> None:
        await ctx.conn.execute(
            "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
            (domain.id(user), domain.streams[stream]),
        )

    domain.run(run)


def assert_unknown_sender(domain: Domain, message: dict[str, Any], sender: str) -> None:
    assert message["sender_id"] == domain.id(sender)
    assert message["sender_full_name"] == INACCESSIBLE_USER_NAME
    assert message["sender_email"] == inaccessible_email(domain.id(sender), domain.subdomain)
    assert message["avatar_url"] == INACCESSIBLE_AVATAR_URL


def assert_known_sender(domain: Domain, message: dict[str, Any], sender: str) -> None:
    assert message["sender_id"] == domain.id(sender)
    assert message["sender_full_name"] == domain.users[sender].full_name
    assert message["sender_email"] == domain.users[sender].email


# -- live messages ---------------------------------------------------------------


@covers(REALM_USER_ADD, MESSAGE)
def test_a_one_to_one_message_tells_the_guest_of_its_sender_first(domain: Domain) -> None:
    """A conversation makes its participants visible to each other: the
    guest gets the sender's `realm_user` add, then the message under the
    sender's own name (for every apply_markdown and client_gravatar)."""
    restrict(domain)
    polonius = domain.id("polonius")
    for n, (apply_markdown, client_gravatar) in enumerate(
        [(True, True), (True, False), (False, True), (False, False)]
    ):
        with psycopg.connect(domain.database_url, autocommit=True) as conn:
            sender = accounts.create_user(
                conn, domain.subdomain, f"courtier{n}@{domain.subdomain}.example", f"Courtier {n}"
            ).user_id
        added, event = domain.verify(
            lambda ctx, s=sender: do_send_direct_message(ctx, s, [polonius], "*psst*"),
            user="polonius",
            apply_markdown=apply_markdown,
            client_gravatar=client_gravatar,
            num_events=2,
        )
        assert (added["type"], added["op"], added["person"]["full_name"]) == (
            "realm_user",
            "add",
            f"Courtier {n}",
        )
        message = event["message"]
        assert message["sender_full_name"] == f"Courtier {n}"
        assert message["content"] == ("<p><em>psst</em></p>" if apply_markdown else "*psst*")
        assert USER_IDS_WITHOUT_ACCESS_TO_SENDER not in event
    hamlet = domain.id("hamlet")
    domain.verify(
        lambda ctx: do_send_direct_message(ctx, hamlet, [polonius], "hi"),
        user="polonius",
        num_events=2,
    )
    # The next one brings only itself; the guest may now answer.
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, hamlet, [polonius], "again"), user="polonius"
    )
    assert_known_sender(domain, event["message"], "hamlet")
    domain.run(lambda ctx: do_send_direct_message(ctx, polonius, [hamlet], "yes?"))


@covers(MESSAGE)
def test_guest_sees_the_sender_of_a_one_to_one_message_they_share_a_channel_with(
    domain: Domain,
) -> None:
    restrict(domain)
    subscribe(domain, "polonius", "Verona")
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, domain.id("hamlet"), [domain.id("polonius")], "hi"),
        user="polonius",
    )
    assert_known_sender(domain, event["message"], "hamlet")


@covers(MESSAGE)
def test_guest_sees_a_bot_sender(domain: Domain) -> None:
    restrict(domain)
    iago = domain.id("iago")
    bot = domain.run(
        lambda ctx: bots.do_create_bot(ctx, iago, domain.realm_id, "Helper", "helper")
    ).user_id
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, bot, [domain.id("polonius")], "beep"),
        user="polonius",
    )
    assert event["message"]["sender_id"] == bot
    assert event["message"]["sender_full_name"] == "Helper"


@covers(MESSAGE)
def test_guest_of_an_unrestricted_realm_sees_every_sender(domain: Domain) -> None:
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, domain.id("iago"), [domain.id("polonius")], "hi"),
        user="polonius",
    )
    assert_known_sender(domain, event["message"], "iago")


@covers(MESSAGE)
def test_channel_message_from_an_unsubscribed_admin_is_from_unknown_user_for_the_guest(
    domain: Domain,
) -> None:
    restrict(domain)
    subscribe(domain, "polonius", "Verona")
    # Iago is not subscribed to Verona (hamlet, polonius).
    for apply_markdown in (True, False):
        [event] = domain.verify(
            lambda ctx: do_send_stream_message(ctx, domain.id("iago"), "Verona", "t", "**hi**"),
            user="polonius",
            apply_markdown=apply_markdown,
        )
        assert_unknown_sender(domain, event["message"], "iago")
        assert event["message"]["display_recipient"] == "Verona"
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("iago"), "Verona", "t", "hi"),
        user="hamlet",
    )
    assert_known_sender(domain, event["message"], "iago")
    # A subscribed sender shares the channel with every recipient.
    [event] = domain.verify(
        lambda ctx: do_send_stream_message(ctx, domain.id("hamlet"), "Verona", "t", "hi"),
        user="polonius",
    )
    assert_known_sender(domain, event["message"], "hamlet")


@covers(REALM_USER_ADD, MESSAGE)
def test_group_message_tells_the_guest_of_the_people_it_lets_them_see_first(
    domain: Domain,
) -> None:
    restrict(domain)
    hamlet, othello, polonius = domain.id("hamlet"), domain.id("othello"), domain.id("polonius")
    first, second, message = domain.verify(
        lambda ctx: do_send_direct_message(ctx, hamlet, [polonius, othello], "all three"),
        user="polonius",
        num_events=3,
    )
    assert [(e["type"], e["op"]) for e in (first, second)] == [("realm_user", "add")] * 2
    names = {e["person"]["user_id"]: e["person"]["full_name"] for e in (first, second)}
    assert names == {hamlet: "King Hamlet", othello: "Othello, the Moor of Venice"}
    assert message["type"] == "message"
    assert_known_sender(domain, message["message"], "hamlet")


@covers(MESSAGE)
def test_later_group_message_brings_no_realm_user_event(domain: Domain) -> None:
    restrict(domain)
    hamlet, othello, polonius = domain.id("hamlet"), domain.id("othello"), domain.id("polonius")
    domain.run(lambda ctx: do_send_direct_message(ctx, hamlet, [polonius, othello], "first"))
    [event] = domain.verify(
        lambda ctx: do_send_direct_message(ctx, othello, [polonius, hamlet], "second"),
        user="polonius",
    )
    assert_known_sender(domain, event["message"], "othello")


# -- sending ---------------------------------------------------------------------


def test_guest_may_not_write_to_users_they_do_not_see(domain: Domain) -> None:
    restrict(domain)
    polonius = domain.id("polonius")
    recipients: list[list[int | str]] = [
        [domain.id("hamlet")],
        [domain.users["iago"].email, domain.id("othello")],
    ]
    for to in recipients:
        with pytest.raises(ActionError, match=REFUSED):
            domain.run(
                partial(do_send_direct_message, sender_id=polonius, recipients=to, content="hello")
            )
    # Nothing was stored.
    assert domain.fetch("polonius")["max_message_id"] == -1
    # One they share a channel with, and themselves, they may write to.
    subscribe(domain, "polonius", "Verona")
    domain.run(lambda ctx: do_send_direct_message(ctx, polonius, [domain.id("hamlet")], "hi"))
    domain.run(lambda ctx: do_send_direct_message(ctx, polonius, [polonius], "note"))
    # Still not to a group with someone they do not see.
    with pytest.raises(ActionError, match=REFUSED):
        domain.run(
            lambda ctx: do_send_direct_message(
                ctx, polonius, [domain.id("hamlet"), domain.id("iago")], "all"
            )
        )


def test_guest_of_an_unrestricted_realm_writes_to_anyone(domain: Domain) -> None:
    domain.run(
        lambda ctx: do_send_direct_message(ctx, domain.id("polonius"), [domain.id("iago")], "hi")
    )


# -- the queue's forms -----------------------------------------------------------


def _unseen_by(*user_ids: int) -> dict[str, Any]:
    """A message notice from user 1 of realm "zephyr" that `user_ids` may
    not see."""
    event = message_event()
    event["message"].update(
        sender_id=1,
        sender_full_name="King Hamlet",
        sender_realm_str="zephyr",
        avatar_url="https://secure.gravatar.com/avatar/abc?d=identicon&version=1",
    )
    event[USER_IDS_WITHOUT_ACCESS_TO_SENDER] = list(user_ids)
    return event


def test_queue_texts_agree_with_the_producers() -> None:
    assert NoticePayloads.WITHOUT_ACCESS_TO_SENDER == USER_IDS_WITHOUT_ACCESS_TO_SENDER
    assert NoticePayloads.UNKNOWN_SENDER_NAME == INACCESSIBLE_USER_NAME
    assert NoticePayloads.UNKNOWN_SENDER_AVATAR == INACCESSIBLE_AVATAR_URL
    assert NoticePayloads.UNKNOWN_SENDER_DOMAIN == FAKE_EMAIL_DOMAIN
    payload = _form(NoticePayloads(_unseen_by(2), encode), "q0", 2)
    assert payload.client_event(0)["message"]["sender_email"] == inaccessible_email(1, "zephyr")


def _client(queue_id: str, user_id: int, **kwargs: Any) -> ClientDescriptor:
    return ClientDescriptor(queue_id, user_id, 1, options(**kwargs), 0.0, EventQueue(encode))


def _form(payloads: NoticePayloads, queue_id: str, user_id: int, **kwargs: Any) -> Payload:
    """What the queue `queue_id` of `user_id` (no flags) receives: one payload."""
    payload = payloads.for_client(
        _client(queue_id, user_id, **kwargs), {"id": user_id, "flags": []}
    )
    assert isinstance(payload, Payload)
    return payload


def test_unknown_sender_form_is_built_once_per_variant_and_never_shows_the_key() -> None:
    payloads = NoticePayloads(_unseen_by(2, 3), encode)
    seen = _form(payloads, "q1", 1, client_gravatar=True)
    guest = _form(payloads, "q2", 2, client_gravatar=True)
    other_guest = _form(payloads, "q3", 3, client_gravatar=True)
    raw = _form(payloads, "q4", 3, apply_markdown=False)
    assert guest is other_guest
    assert seen is not guest
    for payload in (seen, guest, raw):
        assert USER_IDS_WITHOUT_ACCESS_TO_SENDER not in payload.client_event(0)
    assert seen.client_event(0)["message"]["sender_full_name"] == "King Hamlet"
    assert seen.client_event(0)["message"]["avatar_url"] is None
    for payload in (guest, raw):
        message = payload.client_event(0)["message"]
        assert message["sender_full_name"] == INACCESSIBLE_USER_NAME
        assert message["avatar_url"] == INACCESSIBLE_AVATAR_URL
    assert raw.client_event(0)["message"]["content_type"] == "text/x-markdown"
