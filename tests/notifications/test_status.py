"""`eventq notifications status`: what an operator reads of the worker, its
totals and what waits for a batch (server/admin/notification_commands.py)."""

from __future__ import annotations

from tests.notifications.site import mark_read, send_dm


def test_status_prints_the_counters_and_what_is_pending(make_site):
    site = make_site()
    alice, bob, carol = site.user("Alice Sender"), site.user("Bob Away"), site.user("Carol Away")
    # The SMTP server refuses until told otherwise: bob's email stays pending.
    site.mailbox.refuse_next(1_000)
    worker = site.worker(delay=1.0, EVENTQ_NOTIFICATION_RETRY_SECS="0.5")
    before = worker.status()
    assert set(before) == {"counters", "pending"}
    assert set(before["counters"]) == {
        "recorded",
        "duplicates",
        "email_sent",
        "push_sent",
        "skipped_read",
        "skipped_deleted",
        "failed",
        "retried",
        "dead_lettered",
        "removed",
    }
    assert before["pending"] == {"email": 0, "push": 0}

    send_dm(alice, bob, "for bob")
    carols = send_dm(alice, carol, "for carol")
    site.wait_rows(carol, lambda rows: len(rows) == 1, "carol's notification recorded")
    mark_read(carol, carols)
    site.wait_rows(carol, lambda rows: rows[0]["email"] == "read", "carol's skipped as read")
    site.wait_rows(bob, lambda rows: rows[0]["email_attempts"] >= 1, "bob's email refused")

    waiting = worker.status()
    assert waiting["pending"] == {"email": 1, "push": 0}
    change = {k: v - before["counters"][k] for k, v in waiting["counters"].items()}
    assert change["recorded"] == 2
    assert change["skipped_read"] == 1
    assert change["email_sent"] == 0
    assert change["retried"] >= 1

    site.mailbox.refuse_next(0)
    site.mailbox.wait_for(bob.user.email)
    site.wait_rows(bob, lambda rows: rows[0]["email"] == "sent", "bob's email settled as sent")
    after = worker.status()
    assert after["pending"] == {"email": 0, "push": 0}
    change = {k: v - before["counters"][k] for k, v in after["counters"].items()}
    assert change == {
        "recorded": 2,
        "duplicates": 0,
        "email_sent": 1,
        "push_sent": 0,
        "skipped_read": 1,
        "skipped_deleted": 0,
        "failed": 0,
        "retried": len(site.mailbox.refused_at),
        "dead_lettered": 0,
        "removed": 0,
    }
    # SIGTERM (systemd's stop) ends it cleanly.
    assert worker.terminate() == 0
