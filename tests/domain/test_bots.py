"""verify_action for bots (`realm_bot`, and bots as people in `realm_user`),
realm deactivation (`realm` deactivated), and the refusals of both."""

from __future__ import annotations

import psycopg
import pytest

from generation import accounts
from generation.actions import bots
from generation.actions.base import ActionError
from generation.actions.realm_lifecycle import do_deactivate_realm, do_reactivate_realm
from generation.actions.streams import StreamRequest, do_add_subscriptions
from generation.actions.users import do_change_user_role, do_deactivate_user, do_reactivate_user
from generation.events.bots import BOT_INCOMING_WEBHOOK
from tests.domain.harness import covers

ADMIN = accounts.ROLES["administrator"]
MEMBER = accounts.ROLES["member"]
# The people and the bots, without the events other areas send alongside.
BOT_TYPES = ["realm_user", "realm_bot"]


def verify(domain, action, **options):
    """`domain.verify` of the people and the bots only: the events of other
    areas that these actions also send (system groups, subscribers) are
    other tests' business."""
    options.setdefault("event_types", BOT_TYPES)
    options.setdefault("fetch_event_types", BOT_TYPES)
    return domain.verify(action, **options)


def make_bot(domain, owner="hamlet", short_name="helper", full_name="Helper", **kwargs):
    return domain.run(
        lambda ctx: bots.do_create_bot(
            ctx, domain.id(owner), domain.realm_id, full_name, short_name, **kwargs
        )
    )


def realm_bots(domain, user):
    return {bot["user_id"]: bot for bot in domain.fetch(user)["realm_bots"]}


def stored_key_matches(domain, user_id, api_key):
    with psycopg.connect(domain.database_url) as conn:
        row = conn.execute("SELECT api_key_hash FROM users WHERE id = %s", (user_id,)).fetchone()
    assert row is not None
    return bytes(row[0]) == accounts.hash_api_key(api_key)


# -- creating ----------------------------------------------------------------------


@covers(("realm_user", "add"), ("realm_bot", "add"))
def test_a_new_bot_reaches_its_owner_and_the_administrators_as_a_bot(domain):
    hamlet = domain.id("hamlet")
    for viewer in ("hamlet", "iago"):
        short = f"for-{viewer}"
        [person_event, bot_event] = verify(
            domain,
            lambda ctx, s=short: bots.do_create_bot(
                ctx, hamlet, domain.realm_id, f"Bot {s}", s, BOT_INCOMING_WEBHOOK
            ),
            user=viewer,
            num_events=2,
        )
        person = person_event["person"]
        assert (person["is_bot"], person["bot_type"], person["bot_owner_id"]) == (
            True,
            BOT_INCOMING_WEBHOOK,
            hamlet,
        )
        assert person["email"] == f"{short}-bot@{domain.subdomain}.eventq.invalid"
        bot = bot_event["bot"]
        assert (bot["user_id"], bot["owner_id"], bot["is_active"]) == (
            person["user_id"],
            hamlet,
            True,
        )
        assert "api_key" not in bot  # eventq keeps only a hash of it
        assert person["user_id"] in realm_bots(domain, viewer)


@covers(("realm_user", "add"))
def test_others_learn_of_a_new_bot_as_a_person_only(domain):
    [event] = verify(
        domain,
        lambda ctx: bots.do_create_bot(ctx, domain.id("hamlet"), domain.realm_id, "B", "b"),
        user="othello",
    )
    assert event["type"] == "realm_user"
    assert realm_bots(domain, "othello") == {}
    people = {user["user_id"]: user for user in domain.fetch("othello")["realm_users"]}
    assert people[event["person"]["user_id"]]["is_bot"] is True


def test_the_created_bot_has_a_working_key_and_no_streams(domain):
    created = make_bot(domain)
    assert created.email == f"helper-bot@{domain.subdomain}.eventq.invalid"
    assert stored_key_matches(domain, created.user_id, created.api_key)
    with psycopg.connect(domain.database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM subscriptions WHERE user_id = %s", (created.user_id,)
        ).fetchone()
    assert row == (0,)  # Verona is a default stream: for humans only


def test_who_may_create_which_bot(domain):
    for owner, kwargs, message in (
        ("polonius", {}, "Not allowed for guest users"),
        ("hamlet", {"short_name": "  "}, "Bad name or username"),
        ("hamlet", {"short_name": "a b"}, "Bad name or username"),
        ("hamlet", {"short_name": "a..b"}, "Bad name or username"),
        ("hamlet", {"full_name": " "}, "Name too short!"),
        ("hamlet", {"full_name": "King Hamlet"}, "Name is already in use!"),
        ("hamlet", {"bot_type": 3}, "Invalid bot type"),
        ("hamlet", {"bot_type": 4}, "Embedded bots are not enabled."),
        ("hamlet", {"bot_type": 0}, "Invalid bot type"),
    ):
        with pytest.raises(ActionError, match=message):
            make_bot(domain, owner, **kwargs)
    first = make_bot(domain)
    with pytest.raises(ActionError, match="Username already in use"):
        make_bot(domain, short_name="HELPER", full_name="Another")
    # A bot cannot create bots.
    with pytest.raises(ActionError, match=r"This endpoint does not accept bot requests\."):
        domain.run(
            lambda ctx: bots.do_create_bot(ctx, first.user_id, domain.realm_id, "Sub", "sub")
        )


def test_an_owner_has_at_most_so_many_bots(domain, monkeypatch):
    monkeypatch.setattr(bots, "MAX_BOTS_PER_OWNER", 2)
    first = make_bot(domain, short_name="one", full_name="One")
    make_bot(domain, short_name="two", full_name="Two")
    with pytest.raises(ActionError, match="A user may own at most 2 bots"):
        make_bot(domain, short_name="three", full_name="Three")
    # A deactivated bot still counts: it can be reactivated.
    domain.run(
        lambda ctx: bots.do_deactivate_bot(ctx, domain.id("hamlet"), domain.realm_id, first.user_id)
    )
    with pytest.raises(ActionError, match="at most 2 bots"):
        make_bot(domain, short_name="three", full_name="Three")
    # Nor can another user's bot be given to them.
    othello_bot = make_bot(domain, owner="othello", short_name="o", full_name="O")
    with pytest.raises(ActionError, match="at most 2 bots"):
        domain.run(
            lambda ctx: bots.do_change_bot_owner(
                ctx, domain.id("iago"), domain.realm_id, othello_bot.user_id, domain.id("hamlet")
            )
        )


# -- changing ----------------------------------------------------------------------


@covers(("realm_user", "update"), ("realm_bot", "update"))
def test_renaming_a_bot(domain):
    bot = make_bot(domain)
    for viewer, count in (("hamlet", 2), ("iago", 2), ("othello", 1)):
        name = f"Renamed for {viewer}"
        verify(
            domain,
            lambda ctx, n=name: bots.do_change_bot_full_name(
                ctx, domain.id("hamlet"), domain.realm_id, bot.user_id, n
            ),
            user=viewer,
            num_events=count,
        )
    assert realm_bots(domain, "hamlet")[bot.user_id]["full_name"] == "Renamed for othello"
    # The same name again changes nothing and tells nobody.
    verify(
        domain,
        lambda ctx: bots.do_change_bot_full_name(
            ctx, domain.id("iago"), domain.realm_id, bot.user_id, "Renamed for othello"
        ),
        num_events=0,
        state_change_expected=False,
    )


@covers(("realm_bot", "delete"), ("realm_user", "update"))
def test_the_former_owner_loses_the_bot_from_their_list(domain):
    for options in ({}, {"fetch_event_types": ["realm_bot"], "event_types": ["realm_bot"]}):
        bot = make_bot(domain, short_name=f"b{len(options)}", full_name=f"B{len(options)}")
        events = verify(
            domain,
            lambda ctx, b=bot: bots.do_change_bot_owner(
                ctx, domain.id("iago"), domain.realm_id, b.user_id, domain.id("othello")
            ),
            num_events=1 if options else 2,
            **options,
        )
        assert events[0] == {
            "id": 0,
            "type": "realm_bot",
            "op": "delete",
            "bot": {"user_id": bot.user_id},
        }
        assert bot.user_id not in realm_bots(domain, "hamlet")


@covers(("realm_bot", "add"), ("realm_bot", "update"), ("realm_user", "update"))
def test_the_new_owner_gets_the_bot_and_administrators_its_new_owner(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    bot = make_bot(domain)
    [added, person] = verify(
        domain,
        lambda ctx: bots.do_change_bot_owner(ctx, hamlet, domain.realm_id, bot.user_id, othello),
        user="othello",
        num_events=2,
    )
    assert (added["op"], added["bot"]["owner_id"]) == ("add", othello)
    assert person["person"] == {"user_id": bot.user_id, "bot_owner_id": othello}
    [updated, _] = verify(
        domain,
        lambda ctx: bots.do_change_bot_owner(ctx, othello, domain.realm_id, bot.user_id, hamlet),
        user="iago",
        num_events=2,
    )
    assert updated["bot"] == {"user_id": bot.user_id, "owner_id": hamlet}
    assert realm_bots(domain, "iago")[bot.user_id]["owner_id"] == hamlet


def test_who_may_change_a_bot(domain):
    bot = make_bot(domain)
    realm = domain.realm_id
    for actor, target, message in (
        ("othello", bot.user_id, "Insufficient permission"),
        ("polonius", bot.user_id, "Not allowed for guest users"),
        ("hamlet", domain.id("othello"), "No such bot"),
        ("hamlet", 10**12, "No such bot"),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(
                lambda ctx, a=actor, t=target: bots.do_change_bot_full_name(
                    ctx, domain.id(a), realm, t, "New name"
                )
            )
    other = make_bot(domain, short_name="other", full_name="Other")
    domain.run(lambda ctx: do_deactivate_user(ctx, None, realm, domain.id("othello")))
    for owner, message in (
        (domain.id("othello"), "Failed to change owner, user is deactivated"),
        (other.user_id, "Failed to change owner, bots can't own other bots"),
        (10**12, "Failed to change owner, no such user"),
    ):
        with pytest.raises(ActionError, match=message):
            domain.run(
                lambda ctx, o=owner: bots.do_change_bot_owner(
                    ctx, domain.id("hamlet"), realm, bot.user_id, o
                )
            )


def test_a_bot_given_away_leaves_the_private_streams_its_new_owner_cannot_read(domain):
    realm = domain.realm_id
    bot = make_bot(domain, owner="iago")
    domain.run(
        lambda ctx: do_add_subscriptions(
            ctx, None, realm, [StreamRequest("Scotland"), StreamRequest("Denmark")],
            principals=[bot.user_id],
        )
    )  # fmt: skip
    domain.run(
        lambda ctx: bots.do_change_bot_owner(
            ctx, domain.id("iago"), realm, bot.user_id, domain.id("hamlet")
        )
    )
    with psycopg.connect(domain.database_url) as conn:
        rows = conn.execute(
            "SELECT s.name FROM subscriptions x JOIN streams s ON s.id = x.stream_id"
            " WHERE x.user_id = %s AND x.active",
            (bot.user_id,),
        ).fetchall()
    assert rows == [("Denmark",)]


# -- deactivating, reactivating, new keys ------------------------------------------


@covers(("realm_user", "update"), ("realm_bot", "update"))
def test_deactivating_and_reactivating_a_bot(domain):
    bot = make_bot(domain)
    [person, update] = verify(
        domain,
        lambda ctx: bots.do_deactivate_bot(ctx, domain.id("hamlet"), domain.realm_id, bot.user_id),
        num_events=2,
    )
    assert person["person"] == update["bot"] == {"user_id": bot.user_id, "is_active": False}
    assert realm_bots(domain, "hamlet")[bot.user_id]["is_active"] is False
    # Already inactive: left alone, as Zulip does.
    assert domain.run(
        lambda ctx: bots.do_deactivate_bot(ctx, domain.id("iago"), domain.realm_id, bot.user_id)
    ) is False  # fmt: skip
    verify(
        domain,
        lambda ctx: do_reactivate_user(ctx, domain.id("iago"), domain.realm_id, bot.user_id),
        user="iago",
        num_events=2,
    )
    assert realm_bots(domain, "iago")[bot.user_id]["is_active"] is True


@covers(("realm_user", "update"), ("realm_bot", "update"))
def test_a_deactivated_owners_bots_stop_with_them(domain):
    bot = make_bot(domain)
    events = verify(
        domain,
        lambda ctx: do_deactivate_user(
            ctx, domain.id("iago"), domain.realm_id, domain.id("hamlet")
        ),
        user="iago",
        num_events=3,
    )
    assert [(e["type"], (e.get("person") or e.get("bot"))["user_id"]) for e in events] == [
        ("realm_user", bot.user_id),
        ("realm_bot", bot.user_id),
        ("realm_user", domain.id("hamlet")),
    ]


def test_a_new_key_replaces_the_old_and_tells_no_client(domain):
    bot = make_bot(domain)
    [key] = [None]

    async def regenerate(ctx):
        nonlocal key
        key = await bots.do_regenerate_bot_api_key(
            ctx, domain.id("iago"), domain.realm_id, bot.user_id
        )

    domain.verify(regenerate, user="hamlet", num_events=0, state_change_expected=False)
    assert key is not None
    assert key != bot.api_key
    assert stored_key_matches(domain, bot.user_id, key)
    assert not stored_key_matches(domain, bot.user_id, bot.api_key)
    with pytest.raises(ActionError, match="Insufficient permission"):
        domain.run(
            lambda ctx: bots.do_regenerate_bot_api_key(
                ctx, domain.id("othello"), domain.realm_id, bot.user_id
            )
        )


# -- who administers which bots ------------------------------------------------------


@covers(("realm_user", "update"))
def test_a_member_made_administrator_sees_every_bot_and_back(domain):
    bot = make_bot(domain)
    own = make_bot(domain, owner="othello", short_name="mine", full_name="Mine")
    othello = domain.id("othello")
    assert set(realm_bots(domain, "othello")) == {own.user_id}
    for role, expected in ((ADMIN, {bot.user_id, own.user_id}), (MEMBER, {own.user_id})):
        verify(
            domain,
            lambda ctx, r=role: do_change_user_role(ctx, None, domain.realm_id, othello, r),
            user="othello",
        )
        assert set(realm_bots(domain, "othello")) == expected


def test_a_bot_is_shown_to_nobody_as_an_administrator_of_bots(domain):
    bot = make_bot(domain)
    domain.run(lambda ctx: do_change_user_role(ctx, None, domain.realm_id, bot.user_id, ADMIN))
    # Zulip tells only human administrators of bots: a bot never lists any.
    domain.users["bot"] = domain.users["hamlet"].__class__(
        bot.user_id, bot.email, bot.full_name, "administrator", bot.api_key
    )
    assert domain.fetch("bot")["realm_bots"] == []


# -- realm deactivation ------------------------------------------------------------


@covers(("realm", "deactivated"))
def test_deactivating_a_realm_tells_every_active_user(domain):
    for viewer in ("hamlet", "polonius"):
        domain.run(lambda ctx: do_reactivate_realm(ctx, domain.realm_id))
        [event] = domain.verify(
            lambda ctx: do_deactivate_realm(ctx, domain.realm_id),
            user=viewer,
            state_change_expected=False,
        )
        assert event == {"id": 0, "type": "realm", "op": "deactivated", "realm_id": domain.realm_id}
    # Already deactivated: nobody is told again.
    domain.verify(
        lambda ctx: do_deactivate_realm(ctx, domain.realm_id),
        num_events=0,
        state_change_expected=False,
    )
    assert domain.run(lambda ctx: do_reactivate_realm(ctx, domain.realm_id)) is True
    assert domain.run(lambda ctx: do_reactivate_realm(ctx, domain.realm_id)) is False
    with pytest.raises(ActionError, match="Invalid realm"):
        domain.run(lambda ctx: do_deactivate_realm(ctx, 10**12))
