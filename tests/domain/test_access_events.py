"""Who is told what about people when the realm restricts its guests (Zulip's
`can_access_all_users_group` set to role:members, generation/actions/access.py):
the audiences of `realm_user` update, `presence` and `user_status`, a new
user shown to guests as "Unknown user", and the `realm_user` add and remove
a guest gets when a subscription, a deactivation or a role changes whom
they see.

The Domain realm (tests/domain/harness.py): iago (administrator), hamlet,
othello (members), polonius (guest, in no stream); Denmark (public: iago,
hamlet, othello), Verona (public, default: hamlet), Scotland (private: iago,
othello). Every test here restricts the realm first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from generation import accounts
from generation.actions import personal
from generation.actions import profile_fields as pf
from generation.actions.access import INACCESSIBLE_USER_NAME, inaccessible_person
from generation.actions.base import ActionContext
from generation.actions.groups.common import system_group_ids
from generation.actions.messages import do_send_direct_message
from generation.actions.messages.delete import do_delete_messages
from generation.actions.presence import do_update_presence
from generation.actions.realm import do_set_can_access_all_users_group
from generation.actions.streams import StreamRequest, do_add_subscriptions, do_remove_subscriptions
from generation.actions.users import (
    do_change_full_name,
    do_change_user_role,
    do_create_user,
    do_deactivate_user,
    do_reactivate_user,
)
from generation.events import CLIENT_RULES
from generation.events.profile_fields import SHORT_TEXT
from generation.events.users import INACCESSIBLE_USER
from generation.notice import Notice
from queues.client import QueueOptions
from queues.registry import QueueRegistry
from tests.domain.harness import MODERN, Domain, covers, encode

MEMBER = accounts.ROLES["member"]
MODERATOR = accounts.ROLES["moderator"]
GUEST = accounts.ROLES["guest"]


# -- helpers --------------------------------------------------------------------


def restrict(domain: Domain) -> None:
    """The setting at role:members, as migration 0022 stores it."""
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE realms SET guests_see_all_users = false WHERE id = %s", (domain.realm_id,)
        )


def subscribe(domain: Domain, user: str, *streams: str) -> None:
    requests = [StreamRequest(stream) for stream in streams]
    principals = [domain.id(user)]
    domain.run(
        lambda ctx: do_add_subscriptions(
            ctx, None, domain.realm_id, requests, principals=principals
        )
    )


def notices(domain: Domain, action: Any) -> list[tuple[dict[str, Any], set[int]]]:
    """Each notice an action sends, as (event, its users' ids), in order."""
    sent: list[Notice] = []

    async def sink(notice: Notice) -> None:
        sent.append(notice)

    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(
            domain.database_url, autocommit=True
        ) as conn:
            await action(ActionContext(conn, sink))

    asyncio.run(go())
    return [(n.event, {u if isinstance(u, int) else u["id"] for u in n.users}) for n in sent]


def told(sent: list[tuple[dict[str, Any], set[int]]], kind: str, op: str | None = None) -> set[int]:
    """Everyone who received an event of this type (and op)."""
    return set().union(
        *(users for event, users in sent if event["type"] == kind and event.get("op") == op)
    )


def ids(domain: Domain, *names: str) -> set[int]:
    return {domain.id(name) for name in names}


def people(state: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {user["user_id"]: user for user in state["realm_users"]}


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(event["type"], event.get("op")) for event in events]


# -- audiences -------------------------------------------------------------------


@covers(("realm_user", "update"))
def test_a_rename_reaches_only_the_guests_who_share_a_channel_with_the_user(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Verona")  # with hamlet
    realm = domain.realm_id
    othello, hamlet = domain.id("othello"), domain.id("hamlet")
    sent = notices(domain, lambda ctx: do_change_full_name(ctx, othello, realm, othello, "Moor"))
    assert told(sent, "realm_user", "update") == ids(domain, "iago", "hamlet", "othello")
    domain.verify(
        lambda ctx: do_change_full_name(ctx, othello, realm, othello, "Othello"),
        user="polonius",
        num_events=0,
        state_change_expected=False,
    )
    [event] = domain.verify(
        lambda ctx: do_change_full_name(ctx, hamlet, realm, hamlet, "Hamlet, Prince"),
        user="polonius",
    )
    assert event["person"] == {"user_id": hamlet, "full_name": "Hamlet, Prince"}


@covers(("presence", None), ("user_status", None), ("realm_user", "update"))
def test_presence_status_and_profile_values_skip_guests_who_may_not_see_the_user(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Verona")
    realm = domain.realm_id
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    field = domain.run(
        lambda ctx: pf.do_create_profile_field(
            ctx, None, realm, name="Biography", field_type=SHORT_TEXT
        )
    )
    everyone_but_polonius = ids(domain, "iago", "hamlet", "othello")
    for action in (
        lambda ctx: do_update_presence(ctx, othello, "active"),
        lambda ctx: personal.do_update_user_status(ctx, othello, status_text="at sea"),
        lambda ctx: pf.do_update_profile_data(ctx, othello, realm, othello, [(field, "Moor")]),
        lambda ctx: pf.do_remove_profile_data(ctx, othello, realm, othello, [field]),
    ):
        sent = notices(domain, action)
        assert sent, "the action told nobody"
        assert set().union(*(users for _, users in sent)) == everyone_but_polonius
    # hamlet shares Verona with polonius: polonius hears of him.
    [presence] = domain.verify(
        lambda ctx: do_update_presence(ctx, hamlet, "active"), user="polonius"
    )
    assert presence["user_id"] == hamlet
    domain.verify(
        lambda ctx: personal.do_update_user_status(ctx, hamlet, status_text="to be"),
        user="polonius",
    )
    [value] = domain.verify(
        lambda ctx: pf.do_update_profile_data(ctx, hamlet, realm, hamlet, [(field, "Dane")]),
        user="polonius",
    )
    assert value["person"]["user_id"] == hamlet


def test_an_unrestricted_realm_tells_every_guest_as_before(domain):
    othello = domain.id("othello")
    sent = notices(
        domain, lambda ctx: do_change_full_name(ctx, othello, domain.realm_id, othello, "Moor")
    )
    assert told(sent, "realm_user", "update") == ids(
        domain, "iago", "hamlet", "othello", "polonius"
    )
    sent = notices(domain, lambda ctx: do_update_presence(ctx, othello, "active"))
    assert told(sent, "presence") == ids(domain, "iago", "hamlet", "othello", "polonius")


def test_a_role_change_reaches_only_those_who_may_see_the_user(domain):
    restrict(domain)
    othello = domain.id("othello")
    sent = notices(
        domain, lambda ctx: do_change_user_role(ctx, None, domain.realm_id, othello, MODERATOR)
    )
    assert told(sent, "realm_user", "update") == ids(domain, "iago", "hamlet", "othello")


# -- joining ---------------------------------------------------------------------


def create(domain: Domain, email: str, role: int = MEMBER) -> Any:
    return lambda ctx: do_create_user(ctx, None, domain.realm_id, email, "Newcomer", role)


@covers(("realm_user", "add"), ("user_group", "add_members"))
def test_a_guest_sees_a_new_user_as_unknown(domain):
    restrict(domain)
    email = f"new@{domain.subdomain}.example"
    sent = notices(domain, create(domain, email))
    adds = [(event, users) for event, users in sent if kinds([event]) == [("realm_user", "add")]]
    [(whole, seeing), (placeholder, unseen)] = adds
    new = whole["person"]["user_id"]
    assert whole["person"]["email"] == email
    assert seeing == ids(domain, "iago", "hamlet", "othello") | {new}
    assert unseen == ids(domain, "polonius")
    assert placeholder["person"] == inaccessible_person(new, domain.subdomain)
    assert placeholder[INACCESSIBLE_USER] is True

    # What polonius's client receives: the placeholder, without the mark,
    # before the user's system groups.
    events = domain.verify(
        create(domain, f"newer@{domain.subdomain}.example"), user="polonius", num_events=3
    )
    assert kinds(events)[0] == ("realm_user", "add")
    assert events[0]["person"]["full_name"] == INACCESSIBLE_USER_NAME
    assert INACCESSIBLE_USER not in events[0]
    assert people(domain.fetch("polonius"))[new]["full_name"] == INACCESSIBLE_USER_NAME
    assert people(domain.fetch("hamlet"))[new]["full_name"] == "Newcomer"


@covers(("realm_user", "add"), ("user_group", "add_members"), ("subscription", "peer_add"))
def test_a_guest_in_a_default_stream_sees_a_new_user_join_it(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Verona")
    email = f"new@{domain.subdomain}.example"
    events = domain.verify(create(domain, email), user="polonius", num_events=4)
    # Zulip's order: the user's groups, then the whole person as the
    # subscription makes polonius gain them, then the subscription.
    assert kinds(events) == [
        ("user_group", "add_members"),
        ("user_group", "add_members"),
        ("realm_user", "add"),
        ("subscription", "peer_add"),
    ]
    assert events[2]["person"]["email"] == email
    assert events[3]["user_ids"] == [events[2]["person"]["user_id"]]


def test_two_clients_of_a_guest_get_a_new_user_as_each_asked(domain):
    """Zulip's `user_list_incomplete`: a client that declared it gets nothing
    for a user it may not see; another gets "Unknown user", unmarked."""
    restrict(domain)
    polonius = domain.id("polonius")
    registry = QueueRegistry(encode, rules=CLIENT_RULES)
    incomplete, complete = (
        registry.allocate(
            polonius,
            domain.realm_id,
            QueueOptions(event_types=frozenset({"realm_user"}), capabilities=capabilities),
            0.0,
        )
        for capabilities in (MODERN | {"user_list_incomplete"}, MODERN)
    )

    async def deliver(notice: Notice) -> None:
        registry.deliver(notice.event, notice.users, notice.realm_id, 0.0)

    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(
            domain.database_url, autocommit=True
        ) as conn:
            created = await create(domain, f"new@{domain.subdomain}.example")(
                ActionContext(conn, deliver)
            )
        return int(created.user_id)

    new = asyncio.run(go())

    def received(client: Any) -> list[dict[str, Any]]:
        return [payload.client_event(i) for i, payload in client.event_queue.contents()]

    assert received(incomplete) == []
    [event] = received(complete)
    assert event == {
        "id": event["id"],
        "type": "realm_user",
        "op": "add",
        "person": inaccessible_person(new, domain.subdomain),
    }


# -- subscriptions -----------------------------------------------------------------


@covers(
    ("realm_user", "add"),
    ("stream", "create"),
    ("subscription", "add"),
)
def test_a_guest_joining_a_channel_gains_its_subscribers_first(domain):
    restrict(domain)
    polonius = domain.id("polonius")
    events = domain.verify(
        lambda ctx: do_add_subscriptions(
            ctx, None, domain.realm_id, [StreamRequest("Denmark")], principals=[polonius]
        ),
        user="polonius",
        num_events=5,
    )
    assert kinds(events) == [
        ("realm_user", "add"),
        ("realm_user", "add"),
        ("realm_user", "add"),
        ("stream", "create"),
        ("subscription", "add"),
    ]
    assert [e["person"]["user_id"] for e in events[:3]] == sorted(
        ids(domain, "iago", "hamlet", "othello")
    )


@covers(("realm_user", "add"), ("subscription", "peer_add"))
def test_a_guest_gains_a_user_who_joins_their_channel(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Verona")
    othello = domain.id("othello")
    events = domain.verify(
        lambda ctx: do_add_subscriptions(
            ctx, None, domain.realm_id, [StreamRequest("Verona")], principals=[othello]
        ),
        user="polonius",
        num_events=2,
    )
    assert kinds(events) == [("realm_user", "add"), ("subscription", "peer_add")]
    assert events[0]["person"]["user_id"] == othello
    assert events[0]["person"]["full_name"] == "Othello, the Moor of Venice"


@covers(("subscription", "remove"), ("stream", "delete"), ("realm_user", "remove"))
def test_a_guest_leaving_a_channel_loses_those_they_share_nothing_else_with(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Denmark", "Verona")  # hamlet is in both
    polonius = domain.id("polonius")
    events = domain.verify(
        lambda ctx: do_remove_subscriptions(ctx, polonius, domain.realm_id, ["Denmark"]),
        user="polonius",
        num_events=4,
    )
    # Zulip's order: the subscription first, the people it took after.
    assert kinds(events) == [
        ("subscription", "remove"),
        ("stream", "delete"),
        ("realm_user", "remove"),
        ("realm_user", "remove"),
    ]
    assert [e["person"] for e in events[2:]] == [
        {"user_id": user_id, "full_name": INACCESSIBLE_USER_NAME}
        for user_id in sorted(ids(domain, "iago", "othello"))
    ]
    shown = people(domain.fetch("polonius"))
    assert shown[domain.id("iago")]["full_name"] == INACCESSIBLE_USER_NAME
    assert shown[domain.id("hamlet")]["full_name"] == "King Hamlet"


@covers(("subscription", "peer_remove"), ("realm_user", "remove"))
def test_a_guest_loses_a_user_who_leaves_their_only_shared_channel(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Denmark")
    othello = domain.id("othello")
    events = domain.verify(
        lambda ctx: do_remove_subscriptions(ctx, othello, domain.realm_id, ["Denmark"]),
        user="polonius",
        num_events=2,
    )
    assert kinds(events) == [("subscription", "peer_remove"), ("realm_user", "remove")]
    assert events[1]["person"] == {"user_id": othello, "full_name": INACCESSIBLE_USER_NAME}


def test_subscriptions_in_an_unrestricted_realm_send_no_people(domain):
    polonius = domain.id("polonius")
    for action in (
        lambda ctx: do_add_subscriptions(
            ctx, None, domain.realm_id, [StreamRequest("Denmark")], principals=[polonius]
        ),
        lambda ctx: do_remove_subscriptions(ctx, polonius, domain.realm_id, ["Denmark"]),
    ):
        sent = notices(domain, action)
        assert not [event for event, _ in sent if event["type"] == "realm_user"]


# -- deactivation, reactivation, roles ------------------------------------------------


@covers(("subscription", "peer_remove"), ("realm_user", "remove"), ("user_group", "remove_members"))
def test_a_deactivated_user_is_removed_for_guests_who_shared_only_a_channel(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Denmark")
    othello = domain.id("othello")
    sent = notices(domain, lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, othello))
    assert told(sent, "realm_user", "update") == ids(domain, "iago", "hamlet")
    assert told(sent, "realm_user", "remove") == ids(domain, "polonius")

    hamlet = domain.id("hamlet")
    events = domain.verify(
        lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, hamlet),
        user="polonius",
        num_events=4,
    )
    # Then his system groups lose him (every group is visible to everyone).
    assert kinds(events)[:2] == [("subscription", "peer_remove"), ("realm_user", "remove")]
    assert events[1]["person"] == {"user_id": hamlet, "full_name": INACCESSIBLE_USER_NAME}


@covers(("subscription", "peer_remove"), ("realm_user", "update"), ("user_group", "remove_members"))
def test_a_guest_in_a_group_conversation_still_sees_the_deactivated_user(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Denmark")
    hamlet, othello, polonius = (domain.id(n) for n in ("hamlet", "othello", "polonius"))
    domain.run(lambda ctx: do_send_direct_message(ctx, hamlet, [othello, polonius], "all three"))
    events = domain.verify(
        lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, othello),
        user="polonius",
        num_events=4,
    )
    assert kinds(events)[:2] == [("subscription", "peer_remove"), ("realm_user", "update")]
    assert events[1]["person"] == {"user_id": othello, "is_active": False}


@covers(("realm_user", "add"), ("subscription", "peer_add"), ("user_group", "add_members"))
def test_a_reactivated_user_is_added_back_for_guests_who_share_a_channel(domain):
    restrict(domain)
    subscribe(domain, "polonius", "Denmark")
    othello = domain.id("othello")
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, othello))
    sent = notices(domain, lambda ctx: do_reactivate_user(ctx, None, domain.realm_id, othello))
    assert told(sent, "realm_user", "update") == ids(domain, "iago", "hamlet", "othello")
    assert told(sent, "realm_user", "add") == ids(domain, "polonius")

    hamlet = domain.id("hamlet")
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, hamlet))
    events = domain.verify(
        lambda ctx: do_reactivate_user(ctx, None, domain.realm_id, hamlet),
        user="polonius",
        num_events=4,
    )
    assert kinds(events) == [
        ("realm_user", "add"),
        ("user_group", "add_members"),
        ("user_group", "add_members"),
        ("subscription", "peer_add"),
    ]
    assert events[0]["person"]["user_id"] == hamlet
    assert events[0]["person"]["full_name"] == "King Hamlet"


@covers(
    ("realm_user", "update"),
    ("realm_user", "remove"),
    ("user_group", "add_members"),
    ("user_group", "remove_members"),
    ("default_streams", None),
)
def test_a_member_made_guest_loses_the_users_they_share_nothing_with(domain):
    restrict(domain)
    hamlet = domain.id("hamlet")
    events = domain.verify(
        lambda ctx: do_change_user_role(ctx, None, domain.realm_id, hamlet, GUEST),
        num_events=6,
    )
    # His role, his system groups, no default streams for a guest; then,
    # as Denmark still gives him iago and othello, he loses polonius only.
    assert kinds(events) == [
        ("realm_user", "update"),
        ("user_group", "remove_members"),
        ("user_group", "remove_members"),
        ("user_group", "add_members"),
        ("default_streams", None),
        ("realm_user", "remove"),
    ]
    assert events[-1]["person"] == {
        "user_id": domain.id("polonius"),
        "full_name": INACCESSIBLE_USER_NAME,
    }


@covers(
    ("realm_user", "update"),
    ("realm_user", "add"),
    ("user_group", "add_members"),
    ("user_group", "remove_members"),
    ("stream", "create"),
    ("subscription", "peer_add"),
    ("default_streams", None),
)
def test_a_guest_made_member_gains_everyone(domain):
    restrict(domain)
    polonius = domain.id("polonius")
    events = domain.verify(
        lambda ctx: do_change_user_role(ctx, None, domain.realm_id, polonius, MEMBER),
        user="polonius",
        num_events=11,
    )
    # His role and groups, then everyone he could not see, before the
    # streams and subscribers he now sees.
    assert kinds(events) == [
        ("realm_user", "update"),
        ("user_group", "remove_members"),
        ("user_group", "add_members"),
        ("user_group", "add_members"),
        ("realm_user", "add"),
        ("realm_user", "add"),
        ("realm_user", "add"),
        ("stream", "create"),
        ("subscription", "peer_add"),
        ("subscription", "peer_add"),
        ("default_streams", None),
    ]
    adds = [e["person"]["user_id"] for e in events[4:7]]
    assert adds == sorted(ids(domain, "iago", "hamlet", "othello"))
    assert people(domain.fetch("polonius"))[domain.id("othello")]["full_name"] == (
        "Othello, the Moor of Venice"
    )


# -- what a conversation leaves, and what a regained user shows ---------------------


@covers(("delete_message", None))
def test_a_conversation_lets_the_guest_see_its_partner_after_its_messages_are_deleted(domain):
    """As Zulip's group conversation subscriptions: deleting the messages
    takes nothing away (no `realm_user` remove, and a fresh fetch agrees)."""
    restrict(domain)
    hamlet, polonius = domain.id("hamlet"), domain.id("polonius")
    message_id = domain.run(lambda ctx: do_send_direct_message(ctx, hamlet, [polonius], "hi"))
    [event] = domain.verify(
        lambda ctx: do_delete_messages(ctx, hamlet, [message_id]), user="polonius"
    )
    assert event["type"] == "delete_message"
    assert people(domain.fetch("polonius"))[hamlet]["full_name"] == "King Hamlet"


def test_a_deactivated_user_seen_again_shows_no_status(domain):
    """othello sets a status while polonius may not see him, then is
    deactivated; when polonius may see everyone again he gets othello back
    inactive, and no status of his (register shows none of an inactive
    user)."""
    restrict(domain)
    othello = domain.id("othello")
    domain.run(lambda ctx: personal.do_update_user_status(ctx, othello, status_text="at sea"))
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, othello))
    everyone = system_groups(domain)["role:everyone"]
    events = domain.verify(
        lambda ctx: do_set_can_access_all_users_group(ctx, None, domain.realm_id, everyone),
        user="polonius",
        num_events=4,
    )
    added = [e["person"] for e in events if kinds([e]) == [("realm_user", "add")]]
    assert {p["user_id"]: p["is_active"] for p in added} == {
        domain.id("iago"): True,
        domain.id("hamlet"): True,
        othello: False,
    }
    assert not [e for e in events if e["type"] == "user_status" and e["user_id"] == othello]


def system_groups(domain: Domain) -> dict[str, int]:
    async def read(ctx: ActionContext) -> dict[str, int]:
        return await system_group_ids(ctx.conn, domain.realm_id)

    groups: dict[str, int] = domain.run(read)
    return groups
