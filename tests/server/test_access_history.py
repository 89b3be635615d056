"""Messages over HTTP in a realm that restricts its guests (Zulip's
`can_access_all_users_group` role:members, generation/actions/access.py):
history (`GET /messages`, `GET /messages/{id}`) and the live queue show a
guest the senders they may not see as "Unknown user", and a guest may not
write to such a user.

The Domain realm (tests/server/conftest.py), with polonius (the guest)
subscribed to Verona here: he sees hamlet (Verona), not iago or othello."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from generation.actions.access import (
    INACCESSIBLE_AVATAR_URL,
    INACCESSIBLE_USER_NAME,
    inaccessible_email,
)
from tests.domain.harness import Domain
from tests.server.test_messages_api import send_stream
from tests.support import Api, error, ok, wait_for

REFUSED = "You do not have permission to access some of the recipients."


@pytest.fixture
def restricted(domain: Domain) -> Domain:
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE realms SET guests_see_all_users = false WHERE id = %s", (domain.realm_id,)
        )
        conn.execute(
            "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
            (domain.id("polonius"), domain.streams["Verona"]),
        )
    return domain


def send_direct(api: Api, to: list[int], content: str = "psst") -> int:
    body = ok(api.request("POST", "messages", type="private", to=to, content=content))
    return int(body["id"])


def newest(api: Api, **params: Any) -> dict[int, dict[str, Any]]:
    body = ok(api.request("GET", "messages", anchor="newest", num_before=100, num_after=0,
                          narrow=[], **params))  # fmt: skip
    return {m["id"]: m for m in body["messages"]}


def assert_unknown(message: dict[str, Any], sender_id: int, subdomain: str) -> None:
    assert message["sender_id"] == sender_id
    assert message["sender_full_name"] == INACCESSIBLE_USER_NAME
    assert message["sender_email"] == inaccessible_email(sender_id, subdomain)
    assert message["avatar_url"] == INACCESSIBLE_AVATAR_URL


def unsubscribe(domain: Domain, user: str, stream: str) -> None:
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE subscriptions SET active = false WHERE user_id = %s AND stream_id = %s",
            (domain.id(user), domain.streams[stream]),
        )


def test_history_shows_the_guest_senders_they_do_not_see_as_unknown_user(apis, restricted):
    domain = restricted
    polonius = domain.id("polonius")
    from_othello = send_direct(apis["othello"], [polonius], "a word")
    from_iago = send_stream(apis["iago"], to="Verona", topic="fair", content="unsubscribed")
    from_hamlet = send_stream(apis["hamlet"], to="Verona", topic="fair", content="subscribed")

    for client_gravatar in (True, False):
        page = newest(apis["polonius"], client_gravatar=client_gravatar)
        assert list(page) == [from_othello, from_iago, from_hamlet]
        # A conversation makes its participants visible to each other.
        assert page[from_othello]["sender_full_name"] == "Othello, the Moor of Venice"
        assert_unknown(page[from_iago], domain.id("iago"), domain.subdomain)
        assert page[from_hamlet]["sender_full_name"] == "King Hamlet"
        assert page[from_hamlet]["sender_email"] == domain.users["hamlet"].email

    single = ok(apis["polonius"].request("GET", f"messages/{from_iago}"))
    assert_unknown(single["message"], domain.id("iago"), domain.subdomain)
    assert single["raw_content"] == "unsubscribed"

    # hamlet leaves the only channel they shared: his messages there are
    # now from "Unknown user" for the guest.
    unsubscribe(domain, "hamlet", "Verona")
    page = newest(apis["polonius"])
    assert_unknown(page[from_hamlet], domain.id("hamlet"), domain.subdomain)

    # Everyone else sees everyone.
    page = newest(apis["othello"])
    assert page[from_othello]["sender_full_name"] == "Othello, the Moor of Venice"
    single = ok(apis["hamlet"].request("GET", f"messages/{from_iago}"))
    assert single["message"]["sender_email"] == domain.users["iago"].email


def test_the_guests_queue_gets_the_unknown_sender_and_nothing_more(apis, restricted):
    domain = restricted
    polonius = apis["polonius"]
    queue_id = polonius.register(event_types=["message"], apply_markdown=False)["queue_id"]
    message_id = send_stream(apis["iago"], to="Verona", topic="fair", content="psst")
    [event] = wait_for(lambda: polonius.events(queue_id, -1), what="the guest's message")
    assert set(event) == {"id", "type", "message", "flags"}
    assert event["message"]["id"] == message_id
    assert event["message"]["content"] == "psst"
    assert_unknown(event["message"], domain.id("iago"), domain.subdomain)


def test_a_guest_may_not_write_to_users_they_do_not_see(apis, restricted):
    domain = restricted
    polonius = apis["polonius"]
    for to in ([domain.id("iago")], [domain.id("hamlet"), domain.id("othello")]):
        body = error(polonius.request("POST", "messages", type="private", to=to, content="hi"))
        assert (body["msg"], body["code"]) == (REFUSED, "BAD_REQUEST")
    send_direct(polonius, [domain.id("hamlet")], "hello, my lord")
