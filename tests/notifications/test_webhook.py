"""The notification webhook, end to end: a receiver of the tests' own
(receiver.py) checks each call's signature, timestamp and delivery id as
docs/notifications.md asks of one (server/notifications/webhook.py)."""

from __future__ import annotations

import time

from tests.notifications.site import mark_read, send_dm


def test_the_call_is_signed_and_a_replayed_call_is_refused(make_site):
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    site.worker(email=False, webhook=True)
    message_id = send_dm(alice, bob, "ping")

    [call] = site.webhook.wait_accepted(lambda calls: calls, "bob's notification")
    # Accepted: the receiver found the signature, timestamp and id good.
    assert [c.status for c in site.webhook.calls] == [200]
    assert call.headers["Content-Type"] == "application/json"
    body = call.json()
    assert body["type"] == "notification"
    assert body["id"] == call.delivery
    assert body["user_id"] == bob.user.user_id
    assert body["user_email"] == bob.user.email
    assert body["realm_id"] == bob.user.realm_id
    [message] = body["messages"]
    assert message["id"] == message_id
    assert message["type"] == "private"
    assert message["trigger"] == "direct_message"
    assert message["sender_id"] == alice.user.user_id
    assert message["sender_full_name"] == "Alice Sender"
    assert message["content"] == "ping"
    assert abs(int(call.headers["X-Eventq-Timestamp"]) - time.time()) < 60

    # Someone who copied the call sends it again: the id was taken.
    replayed = site.webhook.replay(call)
    assert (replayed.status_code, replayed.text) == (409, "delivery already taken")
    # Later, once the receiver has forgotten the id: the timestamp is old.
    site.webhook.forget()
    site.webhook.clock_offset = 600
    stale = site.webhook.replay(call)
    assert (stale.status_code, stale.text) == (401, "timestamp too far from now")
    # A fresh timestamp on the copied call: the signature covers it.
    fresh = str(int(time.time()) + 600)
    forged = site.webhook.replay(call, {"X-Eventq-Timestamp": fresh})
    assert (forged.status_code, forged.text) == (401, "bad signature")
    assert len(site.webhook.accepted()) == 1


def test_a_webhook_answering_500_gets_the_batch_again_with_the_same_delivery_id(make_site):
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    site.webhook.fail_next(1)
    site.worker(email=False, webhook=True, EVENTQ_NOTIFICATION_RETRY_SECS="0.3")
    message_id = send_dm(alice, bob, "ping")

    [call] = site.webhook.wait_accepted(lambda calls: calls, "the retried notification")
    failed, retried = site.webhook.calls
    assert (failed.status, retried.status) == (500, 200)
    assert failed.delivery == retried.delivery == call.delivery
    assert failed.json() == retried.json()
    assert [m["id"] for m in call.json()["messages"]] == [message_id]
    site.wait_rows(bob, lambda rows: rows[0]["push"] == "sent", "bob's push settled as sent")
    [row] = site.rows(bob)
    assert row["push_attempts"] == 1
    assert len(site.webhook.calls) == 2


def test_reading_a_pushed_message_sends_a_remove_notice(make_site):
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    site.worker(email=False, webhook=True)
    message_id = send_dm(alice, bob, "ping")
    site.webhook.wait_accepted(lambda calls: calls, "bob's notification")

    mark_read(bob, message_id)  # read on another device
    calls = site.webhook.wait_accepted(lambda calls: len(calls) == 2, "the remove notice")
    remove = calls[1]
    assert remove.json() == {
        "type": "remove",
        "id": remove.delivery,
        "user_id": bob.user.user_id,
        "message_ids": [message_id],
    }
    assert remove.delivery != calls[0].delivery
    site.wait_rows(bob, lambda rows: rows[0]["push_removed"], "the removal recorded")
    assert all(c.status == 200 for c in site.webhook.calls)
    assert len(site.webhook.calls) == 2


def test_a_call_taken_whose_answer_was_lost_is_not_retried_forever(make_site):
    """The receiver took the batch but its answer never came back: the retry,
    with the same delivery id, is answered 409 (the id was taken), and the
    worker takes that as delivered."""
    site = make_site()
    alice, bob = site.user("Alice Sender"), site.user("Bob Away")
    site.webhook.drop_next(2)
    site.worker(email=False, webhook=True, EVENTQ_NOTIFICATION_RETRY_SECS="0.3")
    message_id = send_dm(alice, bob, "ping")
    site.wait_rows(bob, lambda rows: rows[0]["push"] == "sent", "bob's push settled as sent")
    taken, retried = site.webhook.calls
    assert (taken.status, retried.status) == (200, 409)
    assert taken.delivery == retried.delivery
    [row] = site.rows(bob)
    assert row["push_attempts"] == 1

    # The remove notice, likewise.
    mark_read(bob, message_id)
    site.wait_rows(bob, lambda rows: rows[0]["push_removed"], "the removal recorded")
    assert [(c.json()["type"], c.status) for c in site.webhook.calls[2:]] == [
        ("remove", 200),
        ("remove", 409),
    ]
    assert [c.json()["type"] for c in site.webhook.accepted()] == ["notification", "remove"]
