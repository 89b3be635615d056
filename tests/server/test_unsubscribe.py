"""The missed-message emails' unsubscribe link
(`/accounts/unsubscribe/missed_messages/<token>`, server/handlers/unsubscribe.py):
a GET shows a button and changes nothing; the POST turns
`enable_offline_email_notifications` off, and the user's clients hear of it."""

from __future__ import annotations

import requests

from server.notifications.unsubscribe import unsubscribe_url
from tests.support import API_KEY_SECRET, Api, ok


def _offline_email(api: Api) -> bool:
    state = api.register(fetch_event_types=["user_settings"], event_types=["user_settings"])
    return bool(state["user_settings"]["enable_offline_email_notifications"])


def test_the_link_shows_a_button_then_the_post_unsubscribes(server, api):
    alice = api()
    url = unsubscribe_url(server.url, API_KEY_SECRET.encode(), alice.user.user_id)
    assert _offline_email(alice) is True

    page = requests.get(url, timeout=30)
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert "<form method='post'>" in page.text
    assert _offline_email(alice) is True  # a mail scanner's GET changes nothing

    queue = alice.register(event_types=["user_settings"], fetch_event_types=[])["queue_id"]
    done = requests.post(url, data={"List-Unsubscribe": "One-Click"}, timeout=30)
    assert done.status_code == 200, done.text
    assert "Unsubscribed" in done.text
    [event] = alice.events(queue, -1)
    assert event["type"] == "user_settings"
    assert event["property"] == "enable_offline_email_notifications"
    assert event["value"] is False
    assert _offline_email(alice) is False

    # Again: nothing left to change, the same answer.
    again = requests.post(url, timeout=30)
    assert again.status_code == 200
    assert _offline_email(alice) is False


def test_a_link_not_signed_by_this_installation_is_refused(server, api):
    alice = api()
    for token in (
        f"{alice.user.user_id}-{'0' * 32}",
        unsubscribe_url("", b"another installation's key", alice.user.user_id).rsplit("/", 1)[1],
    ):
        url = f"{server.url}/accounts/unsubscribe/missed_messages/{token}"
        for method in ("GET", "POST"):
            answer = requests.request(method, url, timeout=30)
            assert answer.status_code == 400, answer.text
            assert answer.json()["msg"] == "This unsubscribe link is not valid."
    assert _offline_email(alice) is True
    # Not a token at all: no such page.
    bad = requests.get(f"{server.url}/accounts/unsubscribe/missed_messages/x", timeout=30)
    assert bad.status_code == 404
    ok(alice.request("GET", "users/me"))
