"""What a guest of a realm that restricts guests (Zulip's
`can_access_all_users_group` role:members, generation/actions/access.py)
reads at register: the people they may not see as "Unknown user" (or left
out with `user_list_incomplete`), and no presence or status of theirs; and
that a fresh fetch agrees with a stale state plus the `realm_user` add and
remove a change of access brings."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from apply_events.appliers.users import _unknown_user
from generation import accounts
from generation.actions import bots
from generation.actions.access import (
    INACCESSIBLE_AVATAR_URL,
    access_before,
    inaccessible_person,
    send_access_changes,
)
from generation.actions.base import ActionContext
from generation.actions.personal.status import do_update_user_status
from generation.actions.presence import do_update_presence
from generation.actions.users import do_deactivate_user
from tests.domain.harness import MODERN, Domain, covers

INCOMPLETE = MODERN | {"user_list_incomplete"}
# The sections restricted access changes for a guest; a change made here by
# hand (a subscription row) would also change the channels' sections.
SECTIONS = ("realm_user", "presence", "user_status")


def by_id(users: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {user["user_id"]: user for user in users}


class GuestWorld:
    """The domain's people and, for polonius (the guest):

    - hamlet shares Verona with him;
    - othello and guildenstern (deactivated since) are in a group
      conversation with him;
    - rosencrantz wrote to him one to one (a conversation too);
    - iago and yorick share nothing with him;
    - iago owns a bot;
    - hamlet and iago have a presence and a status.
    """

    def __init__(self, domain: Domain, *, restricted: bool = True):
        self.domain = domain
        with psycopg.connect(domain.database_url, autocommit=True) as conn:
            self.rosencrantz, self.guildenstern, self.yorick = (
                accounts.create_user(
                    conn, domain.subdomain, f"{name}@{domain.subdomain}.example", name.title()
                ).user_id
                for name in ("rosencrantz", "guildenstern", "yorick")
            )
            conn.execute(
                "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
                (domain.id("polonius"), domain.streams["Verona"]),
            )
            for sender, participants in (
                (self.rosencrantz, [domain.id("polonius"), self.rosencrantz]),
                (
                    domain.id("othello"),
                    [domain.id("polonius"), domain.id("othello"), self.guildenstern],
                ),
            ):
                conn.execute(
                    "INSERT INTO messages (realm_id, sender_id, participant_ids, content,"
                    " rendered_content) VALUES (%s, %s, %s, 'hi', '<p>hi</p>')",
                    (domain.realm_id, sender, sorted(participants)),
                )
        iago, hamlet = domain.id("iago"), domain.id("hamlet")
        self.bot = domain.run(
            lambda ctx: bots.do_create_bot(ctx, iago, domain.realm_id, "Helper", "helper")
        ).user_id
        domain.run(lambda ctx: do_deactivate_user(ctx, iago, domain.realm_id, self.guildenstern))
        for user in (hamlet, iago):
            domain.run(lambda ctx, u=user: do_update_presence(ctx, u, "active"))
            domain.run(lambda ctx, u=user: do_update_user_status(ctx, u, status_text="Away"))
        if restricted:
            restrict(domain)

    def unseen(self) -> set[int]:
        return {self.domain.id("iago"), self.yorick}


def restrict(domain: Domain) -> None:
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE realms SET guests_see_all_users = false WHERE id = %s", (domain.realm_id,)
        )


@pytest.fixture
def guest_world(domain: Domain) -> GuestWorld:
    return GuestWorld(domain)


def test_a_restricted_guest_sees_unknown_users_for_those_they_share_nothing_with(guest_world):
    domain = guest_world.domain
    state = domain.fetch("polonius", client_gravatar=True)
    active, inactive = by_id(state["realm_users"]), by_id(state["realm_non_active_users"])
    assert set(active) == {
        *(domain.id(name) for name in ("iago", "hamlet", "othello", "polonius")),
        guest_world.rosencrantz,
        guest_world.yorick,
        guest_world.bot,
    }
    # iago and yorick share nothing with him.
    for user_id in guest_world.unseen():
        assert active[user_id] == {
            key: value
            for key, value in inaccessible_person(user_id, domain.subdomain).items()
            if key != "is_active"
        }
        assert active[user_id]["avatar_url"] == INACCESSIBLE_AVATAR_URL
        assert active[user_id]["email"].startswith(f"user{user_id}@{domain.subdomain}.")
    # Verona's subscriber, the conversations' (deactivated too), the bot.
    assert active[domain.id("hamlet")]["full_name"] == "King Hamlet"
    assert active[guest_world.rosencrantz]["full_name"] == "Rosencrantz"
    assert active[domain.id("othello")]["full_name"] == "Othello, the Moor of Venice"
    assert active[guest_world.bot]["full_name"] == "Helper"
    assert active[domain.id("polonius")]["full_name"] == "Polonius"
    assert set(inactive) == {guest_world.guildenstern}
    assert inactive[guest_world.guildenstern]["full_name"] == "Guildenstern"
    # Presence and statuses only of those he may see.
    assert set(state["presences"]) == {domain.users["hamlet"].email}
    assert set(state["user_status"]) == {str(domain.id("hamlet"))}


def test_a_client_with_user_list_incomplete_is_not_told_of_users_it_may_not_see(guest_world):
    domain = guest_world.domain
    state = domain.fetch("polonius", capabilities=INCOMPLETE, slim_presence=True)
    active = by_id(state["realm_users"])
    assert not guest_world.unseen() & set(active)
    assert {domain.id("hamlet"), domain.id("othello"), guest_world.bot} <= set(active)
    assert set(by_id(state["realm_non_active_users"])) == {guest_world.guildenstern}
    assert set(state["presences"]) == {str(domain.id("hamlet"))}
    assert set(state["user_status"]) == {str(domain.id("hamlet"))}


def test_a_long_term_idle_unknown_user_keeps_the_unknown_user_picture(guest_world):
    domain = guest_world.domain
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE presences SET last_connected_time = now() - interval '40 days'"
            " WHERE user_id = %s",
            (domain.id("iago"),),
        )
    state = domain.fetch("polonius", client_gravatar=False)
    iago = by_id(state["realm_users"])[domain.id("iago")]
    assert iago["avatar_url"] == INACCESSIBLE_AVATAR_URL


def test_non_guests_and_guests_of_an_unrestricted_realm_see_everyone(domain):
    world = GuestWorld(domain, restricted=False)
    everyone = {user.id for user in domain.users.values()} | {
        world.rosencrantz,
        world.yorick,
        world.bot,
    }
    for reader in ("polonius", "hamlet"):
        state = domain.fetch(reader)
        active = by_id(state["realm_users"])
        assert set(active) == everyone
        assert all(user["full_name"] != "Unknown user" for user in active.values())
        assert len(state["presences"]) == len(state["user_status"]) == 2
    restrict(domain)
    state = domain.fetch("hamlet", capabilities=INCOMPLETE)
    assert set(by_id(state["realm_users"])) == everyone
    assert len(state["presences"]) == len(state["user_status"]) == 2


def test_the_remove_appliers_placeholder_is_the_fetched_one():
    template = inaccessible_person(0, "zephyr")
    assert _unknown_user(7, template) == inaccessible_person(7, "zephyr")


def _subscription_change(world: GuestWorld, stream: str, *, active: bool) -> Any:
    """polonius joins or leaves `stream`, and is told whom he gained or lost."""
    domain = world.domain
    polonius = domain.id("polonius")

    async def change(ctx: ActionContext) -> None:
        async with ctx.transaction() as outbox:
            before = await access_before(ctx.conn, domain.realm_id, guests=[polonius])
            await ctx.conn.execute(
                "INSERT INTO subscriptions (user_id, stream_id, active) VALUES (%s, %s, %s)"
                " ON CONFLICT (user_id, stream_id) DO UPDATE SET active = excluded.active",
                (polonius, domain.streams[stream], active),
            )
            await send_access_changes(ctx.conn, outbox, before)

    return change


@covers(("realm_user", "remove"))
@pytest.mark.parametrize("capabilities", [MODERN, INCOMPLETE], ids=["placeholder", "incomplete"])
def test_losing_sight_of_a_user_matches_a_fresh_fetch(guest_world, capabilities):
    domain = guest_world.domain
    [event] = domain.verify(
        _subscription_change(guest_world, "Verona", active=False),
        user="polonius",
        event_types=SECTIONS,
        fetch_event_types=SECTIONS,
        capabilities=capabilities,
    )
    assert event["person"] == {"user_id": domain.id("hamlet"), "full_name": "Unknown user"}
    state = domain.fetch("polonius", capabilities=capabilities)
    assert "presences" in state
    assert state["presences"] == {}
    assert state["user_status"] == {}


@covers(("realm_user", "add"), ("presence", None), ("user_status", None))
@pytest.mark.parametrize("capabilities", [MODERN, INCOMPLETE], ids=["placeholder", "incomplete"])
def test_coming_to_see_a_user_matches_a_fresh_fetch(guest_world, capabilities):
    domain = guest_world.domain
    event, presence, status = domain.verify(
        _subscription_change(guest_world, "Scotland", active=True),
        user="polonius",
        event_types=SECTIONS,
        fetch_event_types=SECTIONS,
        capabilities=capabilities,
        num_events=3,
    )
    assert event["person"]["user_id"] == domain.id("iago")
    # What he was not told while he could not see iago: presence, status.
    assert presence["type"] == "presence"
    assert presence["user_id"] == domain.id("iago")
    assert (status["type"], status["user_id"], status["status_text"]) == (
        "user_status",
        domain.id("iago"),
        "Away",
    )
    state = domain.fetch("polonius", capabilities=capabilities)
    assert by_id(state["realm_users"])[domain.id("iago")]["full_name"] == "Iago"
    assert set(state["user_status"]) == {str(domain.id("hamlet")), str(domain.id("iago"))}
