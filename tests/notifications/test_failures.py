"""The worker against failures, end to end: killed while the SMTP server
holds its batch, and an SMTP server refusing for a while; every email is
sent once (server/notifications/worker.py, docs/notifications.md
"Failures")."""

from __future__ import annotations

from tests.notifications.site import send_dm


def test_a_worker_killed_mid_batch_leaves_it_to_the_next_exactly_once(make_site):
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    site.mailbox.hang_next()
    first = site.worker(delay=1.0)
    message_id = send_dm(alice, bob, "sent while the worker dies")

    # The worker is inside its batch: it sent the email's content and waits
    # for the SMTP server's answer, its rows locked in an open transaction.
    assert site.mailbox.hanging.wait(30), f"the worker never reached DATA:\n{first.log()}"
    first.kill()
    # The SMTP server sees the connection go before it answered: not taken.
    assert site.mailbox.abandoned.wait(30), "the SMTP session outlived the worker"
    site.mailbox.release()
    assert site.mailbox.received == []
    assert [r["email"] for r in site.rows(bob)] == ["pending"]

    second = site.worker(delay=1.0)
    [mail] = site.mailbox.wait_for(bob.user.email)
    assert "sent while the worker dies" in mail.plain()
    site.wait_rows(bob, lambda rows: rows[0]["email"] == "sent", "bob's email settled as sent")
    assert [(r["message_id"], r["email"]) for r in site.rows(bob)] == [(message_id, "sent")]
    assert len(site.mailbox.received) == 1
    # The hung DATA and the email.
    assert site.mailbox.attempts == 2
    assert second.proc is not None
    assert second.proc.poll() is None


def test_an_smtp_server_refusing_then_accepting_gets_one_email_after_the_retry(make_site):
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    site.mailbox.refuse_next(2)
    site.worker(delay=1.0, EVENTQ_NOTIFICATION_RETRY_SECS="0.3")
    send_dm(alice, bob, "greylisted at first")

    [mail] = site.mailbox.wait_for(bob.user.email)
    assert "greylisted at first" in mail.plain()
    assert len(site.mailbox.refused_at) == 2
    assert mail.at > site.mailbox.refused_at[-1]
    site.wait_rows(bob, lambda rows: rows[0]["email"] == "sent", "bob's email settled as sent")
    [row] = site.rows(bob)
    assert row["email_attempts"] == 2
    assert site.mailbox.attempts == 3
    assert len(site.mailbox.received) == 1
