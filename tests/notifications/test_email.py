"""Missed-message emails, end to end: a message sent through the API to a
user who is away reaches a real SMTP server as one email per window, with
what is still unread (server/notifications/, docs/notifications.md)."""

from __future__ import annotations

import html
import time

import requests

from tests.notifications.site import SENDER, mark_read, send_dm
from tests.support import ok

# The batching window of the tests whose messages must all arrive within one:
# they take 0.1 s here, under 1 s on one core shared with a busy loop.
WINDOW = 4.0


def offline_email_setting(user) -> bool:
    state = user.register(fetch_event_types=["user_settings"], event_types=["user_settings"])
    return bool(state["user_settings"]["enable_offline_email_notifications"])


def test_a_direct_message_to_a_user_with_no_queue_is_one_email_after_the_window(make_site):
    site = make_site()
    alice, bob, carol = site.user("Alice Sender"), site.user("Bob Away"), site.user("Carol")
    site.worker(delay=1.0)
    before = time.time()
    message_id = send_dm(alice, bob, "Are you **there**?")

    [mail] = site.mailbox.wait_for(bob.user.email)
    # (The server's enqueue time is kept to the millisecond.)
    assert mail.at - before >= 0.999, "sent before the window ended"
    assert mail.rcpt_tos == (bob.user.email,)
    assert mail.message["From"] == SENDER
    assert mail.message["To"] == f"Bob Away <{bob.user.email}>"
    assert mail.message["Subject"] == "Direct message from Alice Sender"
    assert mail.message.get_content_type() == "multipart/alternative"
    plain, rich = mail.plain(), mail.html()
    assert "Alice Sender" in plain
    assert "Are you **there**?" in plain
    assert "<b>Alice Sender</b>" in rich
    assert "<strong>there</strong>" in rich
    # A link to the message on the site, in both parts.
    link = f"{site.server.url}/#narrow/dm/{alice.user.user_id}/near/{message_id}"
    assert link in plain
    assert f"href='{html.escape(link)}'" in rich
    assert site.server.url in plain.split("Reply and read the conversation on the site:")[1]
    # The unsubscribe link: in both parts and in List-Unsubscribe, one-click.
    header = str(mail.message["List-Unsubscribe"])
    assert header.startswith("<")
    assert header.endswith(">")
    unsubscribe = header[1:-1]
    assert unsubscribe.startswith(f"{site.server.url}/accounts/unsubscribe/missed_messages/")
    assert unsubscribe in plain
    assert f"href='{html.escape(unsubscribe)}'" in rich
    assert mail.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"

    # Exactly one: its record is settled as sent.
    site.wait_rows(bob, lambda rows: rows[0]["email"] == "sent", "bob's email recorded as sent")
    assert [(r["message_id"], r["via"], r["email"]) for r in site.rows(bob)] == [
        (message_id, "delivery", "sent")
    ]
    assert len(site.mailbox.to(bob.user.email)) == 1

    # The mail client's one-click unsubscribe works, and stops the emails.
    assert offline_email_setting(bob) is True
    clicked = requests.post(unsubscribe, data={"List-Unsubscribe": "One-Click"}, timeout=30)
    assert clicked.status_code == 200, clicked.text
    assert offline_email_setting(bob) is False
    send_dm(alice, bob, "still there?")
    # Published after bob's and due after it: once carol has hers, bob would
    # have had his.
    send_dm(alice, carol, "and you?")
    site.mailbox.wait_for(carol.user.email)
    assert len(site.mailbox.to(bob.user.email)) == 1


def test_two_direct_messages_and_a_mention_in_one_window_are_one_email(make_site):
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    for user in (alice, bob):
        ok(user.request("POST", "users/me/subscriptions", subscriptions=[{"name": "verona"}]))
    site.worker(delay=WINDOW)
    first = send_dm(alice, bob, "first direct message")
    second = send_dm(alice, bob, "second direct message")
    mention = int(
        ok(
            alice.request(
                "POST",
                "messages",
                type="stream",
                to="verona",
                topic="plans",
                content=f"@**Bob Away|{bob.user.user_id}** see the plans",
            )
        )["id"]
    )
    site.wait_rows(bob, lambda rows: len(rows) == 3, "bob's three notifications recorded")
    assert site.mailbox.to(bob.user.email) == [], (
        f"the window ({WINDOW} s) ended before three messages were sent: too short here"
    )

    [mail] = site.mailbox.wait_for(bob.user.email)
    assert mail.message["Subject"] == "3 new messages in Notified Inc"
    plain, rich = mail.plain(), mail.html()
    # In message order, each with its place.
    assert plain.index("first direct") < plain.index("second direct") < plain.index("see the plans")
    assert "Alice Sender (#verona > plans):" in plain
    assert plain.count("Alice Sender (direct message):") == 2
    assert "/#narrow/channel/" in plain
    assert f"/topic/plans/near/{mention}" in plain
    for message_id in (first, second):
        assert f"/#narrow/dm/{alice.user.user_id}/near/{message_id}" in plain
    assert "#verona &gt; plans" in rich
    assert "user-mention" in rich  # the rendered mention
    site.wait_rows(
        bob, lambda rows: all(r["email"] == "sent" for r in rows), "bob's rows settled as sent"
    )
    assert len(site.mailbox.to(bob.user.email)) == 1


def test_a_message_read_or_deleted_before_the_window_ends_is_not_sent(make_site):
    site = make_site()
    alice = site.user("Alice Sender", "administrator")
    bob, carol = site.user("Bob Away"), site.user("Carol Away")
    site.worker(delay=WINDOW)
    read_on_phone = send_dm(alice, bob, "read on the phone")
    deleted = send_dm(alice, bob, "sent by mistake")
    unread = send_dm(alice, bob, "still unread")
    carols = send_dm(alice, carol, "carol reads this one")
    site.wait_rows(bob, lambda rows: len(rows) == 3, "bob's notifications recorded")
    site.wait_rows(carol, lambda rows: len(rows) == 1, "carol's notification recorded")
    mark_read(bob, read_on_phone)
    ok(alice.request("DELETE", f"messages/{deleted}"))
    mark_read(carol, carols)
    assert site.mailbox.received == [], f"the window ({WINDOW} s) ended before the reads"

    [mail] = site.mailbox.wait_for(bob.user.email)
    assert mail.message["Subject"] == "Direct message from Alice Sender"
    assert "still unread" in mail.plain()
    assert "read on the phone" not in mail.plain()
    assert "read on the phone" not in mail.html()
    assert "sent by mistake" not in mail.plain()
    assert "sent by mistake" not in mail.html()
    # The worker settles the rows after the SMTP server took the email.
    settled = site.wait_rows(
        bob, lambda rows: all(r["email"] != "pending" for r in rows), "bob's rows settled"
    )
    assert [(r["message_id"], r["email"]) for r in settled] == [
        (read_on_phone, "read"),
        (deleted, "deleted"),
        (unread, "sent"),
    ]
    # Nothing left for carol: nothing sent, and nothing will be (her record
    # is settled as read).
    site.wait_rows(carol, lambda rows: rows[0]["email"] == "read", "carol's skipped as read")
    assert site.mailbox.to(carol.user.email) == []
    assert len(site.mailbox.received) == 1


def test_a_user_with_a_polling_client_gets_no_email(make_site):
    # Present only while a request is parked (a 1 ms presence window): the
    # client is live because it polls.
    site = make_site(EVENTQ_PRESENCE_WINDOW_SECS="0.001")
    alice, bob, carol = site.user("Alice Sender"), site.user("Bob Here"), site.user("Carol Away")
    site.worker(delay=1.0)
    queue_id = bob.register(event_types=["message"])["queue_id"]
    parked = bob.park(queue_id, -1)
    message_id = send_dm(alice, bob, "bob's client shows this")
    [event] = parked.result(timeout=30).json()["events"]
    assert event["message"]["id"] == message_id
    bob.park(queue_id, event["id"])  # the client polls again, acknowledging it
    # Carol's, published after, reaches her after her window; bob's would
    # have been published before and been due before.
    send_dm(alice, carol, "carol has no client")
    site.mailbox.wait_for(carol.user.email)
    assert site.mailbox.to(bob.user.email) == []
    assert site.rows(bob) == []


def test_the_last_queue_expiring_with_an_unread_message_sends_it(make_site):
    """The missed-message hook: present when the message came (polled within
    the window), then gone without reading it; the queue expires."""
    site = make_site(EVENTQ_PRESENCE_WINDOW_SECS="600", EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="2")
    alice, bob = site.user("Alice Sender"), site.user("Bob Leaving")
    site.worker(delay=1.0)
    queue_id = bob.register(event_types=["message"])["queue_id"]
    assert bob.events(queue_id, -1) == []  # polled: present
    message_id = send_dm(alice, bob, "sent while bob's laptop closes")
    [mail] = site.mailbox.wait_for(bob.user.email)
    assert "sent while bob's laptop closes" in mail.plain()
    assert site.server.user_queues(bob.user.user_id) == []
    assert [(r["message_id"], r["via"]) for r in site.rows(bob)] == [(message_id, "gc")]


def test_names_on_several_lines_do_not_stop_the_emails(make_site):
    """Names an operator gave through the command line (`eventq realm create`
    checks only their length) go into headers, which are one line each."""
    site = make_site(realm_name="Notified\nInc")
    alice, carol = site.user("Alice Sender"), site.user("Carol Away")
    bob = site.user("Bob\r\nAway")
    for user in (alice, bob):
        ok(user.request("POST", "users/me/subscriptions", subscriptions=[{"name": "verona"}]))
    worker = site.worker(delay=1.0)
    send_dm(alice, bob, "a direct message")
    ok(
        alice.request(
            "POST",
            "messages",
            type="stream",
            to="verona",
            topic="plans",
            content=f"@**Bob|{bob.user.user_id}** and a mention",
        )
    )
    [mail] = site.mailbox.wait_for(bob.user.email)
    assert mail.message["Subject"] == "2 new messages in Notified Inc"
    assert mail.message["To"] == f"Bob Away <{bob.user.email}>"
    # The worker goes on with the others.
    send_dm(alice, carol, "for carol")
    site.mailbox.wait_for(carol.user.email)
    assert worker.proc is not None
    assert worker.proc.poll() is None


def test_without_a_site_wide_window_each_user_has_their_own(make_site):
    """No EVENTQ_NOTIFICATION_DELAY_SECS: the window is the user's
    `email_notifications_batching_period_seconds` (Zulip's 120 s unless set)."""
    site = make_site()
    alice, bob, carol = site.user("Alice Sender"), site.user("Bob Quick"), site.user("Carol")
    ok(bob.request("PATCH", "settings", email_notifications_batching_period_seconds=1))
    site.worker(delay=None)
    before = time.time()
    send_dm(alice, carol, "for carol, in two minutes")
    send_dm(alice, bob, "for bob, in a second")
    [mail] = site.mailbox.wait_for(bob.user.email)
    assert mail.at - before >= 0.999
    assert site.mailbox.to(carol.user.email) == []
    assert [r["email"] for r in site.rows(carol)] == ["pending"]
