"""verify_action for the users area: people joining, renamed, given another
role, deactivated and reactivated (`realm_user`), presence, and a user's own
settings; plus the refusals and permissions of those actions."""

from __future__ import annotations

import time

import psycopg
import pytest

from generation import accounts
from generation.actions.base import ActionError
from generation.actions.presence import do_update_presence
from generation.actions.users import (
    do_change_full_name,
    do_change_user_role,
    do_change_user_setting,
    do_create_user,
    do_deactivate_user,
    do_reactivate_user,
)
from generation.events.users import gravatar_url
from tests.domain.harness import MODERN, covers

OWNER = accounts.ROLES["owner"]
ADMIN = accounts.ROLES["administrator"]
MODERATOR = accounts.ROLES["moderator"]
MEMBER = accounts.ROLES["member"]
GUEST = accounts.ROLES["guest"]


def people(state, key="realm_users"):
    return {user["user_id"]: user for user in state[key]}


# -- joining -------------------------------------------------------------------


@covers(("realm_user", "add"), ("subscription", "peer_add"), ("user_group", "add_members"))
def test_a_new_user_reaches_every_active_user_with_the_avatar_each_client_wants(domain):
    iago = domain.id("iago")
    for index, client_gravatar in enumerate((True, False)):
        email = f"new{index}@{domain.subdomain}.example"
        # hamlet also learns that the newcomer joined Verona, a default stream,
        # and role:members and role:fullmembers (system groups follow roles).
        [event, members, full_members, peer_add] = domain.verify(
            lambda ctx, e=email: do_create_user(ctx, iago, domain.realm_id, e, "New Person"),
            client_gravatar=client_gravatar,
            num_events=4,
        )
        assert members["user_ids"] == full_members["user_ids"] == [event["person"]["user_id"]]
        person = event["person"]
        assert person["email"] == email
        # null for a client that computes Gravatars itself, as register gives
        # it (Zulip's own event has the URL: its sender cannot know the client)
        assert person["avatar_url"] == (None if client_gravatar else gravatar_url(email))
        assert peer_add["user_ids"] == [person["user_id"]]
        assert peer_add["stream_ids"] == [domain.streams["Verona"]]
        shown = people(domain.fetch(client_gravatar=client_gravatar))[person["user_id"]]
        assert shown["full_name"] == "New Person"
        assert shown["role"] == MEMBER
        assert "is_active" not in shown
        assert shown["avatar_url"] == (None if client_gravatar else gravatar_url(email))


@covers(("realm_user", "add"), ("subscription", "peer_add"), ("user_group", "add_members"))
def test_a_guest_and_an_administrator_see_a_new_user_join(domain):
    iago = domain.id("iago")
    # A guest does not see Verona's subscribers; an administrator does. Both
    # see the guest join role:everyone.
    for observer, count in (("polonius", 2), ("iago", 3)):
        domain.verify(
            lambda ctx, o=observer: do_create_user(
                ctx, iago, domain.realm_id, f"for-{o}@x.example", "Seen", GUEST
            ),
            user=observer,
            num_events=count,
        )


def test_the_created_user_gets_a_working_key_and_default_settings(domain):
    created = domain.run(
        lambda ctx: do_create_user(ctx, None, domain.realm_id, "ada@x.example", "Ada", OWNER)
    )
    assert created.role == "owner"
    assert accounts.is_well_formed_api_key(created.api_key)
    with psycopg.connect(domain.database_url) as conn:
        row = conn.execute(
            "SELECT api_key_hash, role FROM users WHERE id = %s", (created.user_id,)
        ).fetchone()
        settings = conn.execute(
            "SELECT default_language FROM user_settings WHERE user_id = %s", (created.user_id,)
        ).fetchone()
    assert row == (accounts.hash_api_key(created.api_key), OWNER)
    assert settings == ("en",)


def test_creating_users_is_for_administrators_and_owners_for_owners(domain):
    def create(actor, email, role=MEMBER):
        return domain.run(
            lambda ctx: do_create_user(ctx, domain.id(actor), domain.realm_id, email, "X", role)
        )

    with pytest.raises(ActionError, match="Must be an organization administrator") as refused:
        create("hamlet", "a@x.example")
    assert refused.value.status == 403
    with pytest.raises(ActionError, match="Must be an organization owner"):
        create("iago", "b@x.example", OWNER)
    with pytest.raises(ActionError, match="already in use"):
        create("iago", domain.users["hamlet"].email.upper())
    for email in ("no-at-sign", "two@@x", "sp ace@x.example", "@x", "x" * 250 + "@x.example"):
        with pytest.raises(ActionError, match="Invalid email address"):
            create("iago", email)
    with pytest.raises(ActionError, match="Invalid role"):
        create("iago", "c@x.example", 500)
    with pytest.raises(ActionError, match="Name too long"):
        domain.run(lambda ctx: do_create_user(ctx, None, domain.realm_id, "d@x.example", "n" * 101))
    assert "a@x.example" not in {u["email"] for u in domain.fetch()["realm_users"]}


# -- names -----------------------------------------------------------------------


@covers(("realm_user", "update"))
def test_renaming_oneself_changes_the_list_and_ones_own_name(domain):
    hamlet = domain.id("hamlet")
    [event] = domain.verify(
        lambda ctx: do_change_full_name(ctx, hamlet, domain.realm_id, hamlet, "  Prince Hamlet ")
    )
    assert event["person"] == {"user_id": hamlet, "full_name": "Prince Hamlet"}
    state = domain.fetch()
    assert state["full_name"] == "Prince Hamlet"
    assert people(state)[hamlet]["full_name"] == "Prince Hamlet"


@covers(("realm_user", "update"))
def test_an_administrator_renames_someone_everyone_sees_it(domain):
    iago, othello = domain.id("iago"), domain.id("othello")
    for observer in ("hamlet", "othello", "polonius"):
        domain.verify(
            lambda ctx, o=observer: do_change_full_name(
                ctx, iago, domain.realm_id, othello, f"Othello ({o})"
            ),
            user=observer,
        )


@covers()
def test_the_same_name_again_sends_nothing(domain):
    hamlet = domain.id("hamlet")
    domain.verify(
        lambda ctx: do_change_full_name(ctx, hamlet, domain.realm_id, hamlet, "King Hamlet"),
        num_events=0,
        state_change_expected=False,
    )


def test_members_rename_only_themselves_and_names_are_checked(domain):
    hamlet, othello = domain.id("hamlet"), domain.id("othello")

    def rename(actor, target, name):
        return domain.run(
            lambda ctx: do_change_full_name(ctx, actor, domain.realm_id, target, name)
        )

    with pytest.raises(ActionError, match="Must be an organization administrator"):
        rename(hamlet, othello, "Iago's puppet")
    for name, why in (
        ("", "Name too short"),
        ("   ", "Name too short"),
        ("x" * 101, "Name too long"),
        ("bell\x07", "Invalid characters"),
    ):
        with pytest.raises(ActionError, match=why):
            rename(hamlet, hamlet, name)
    with pytest.raises(ActionError, match="No such user"):
        rename(domain.id("iago"), 10**12, "Nobody")
    assert people(domain.fetch())[othello]["full_name"] == "Othello, the Moor of Venice"


# -- roles -----------------------------------------------------------------------


@covers(("realm_user", "update"), ("user_group", "add_members"), ("user_group", "remove_members"))
def test_a_role_change_updates_the_flags_in_the_list(domain):
    iago, othello = domain.id("iago"), domain.id("othello")
    # Then the role's system groups: out of the old ones, into the new ones.
    for role, count in ((MODERATOR, 4), (ADMIN, 3), (MEMBER, 4)):
        [event, *_] = domain.verify(
            lambda ctx, r=role: do_change_user_role(ctx, iago, domain.realm_id, othello, r),
            num_events=count,
        )
        assert event["person"] == {"user_id": othello, "role": role}
    shown = people(domain.fetch())[othello]
    assert (shown["role"], shown["is_admin"], shown["is_owner"]) == (MEMBER, False, False)


@covers(("realm_user", "update"))
def test_ones_own_role_flags_follow_a_role_change(domain):
    iago, othello = domain.id("iago"), domain.id("othello")
    for role in (ADMIN, MODERATOR):
        domain.verify(
            lambda ctx, r=role: do_change_user_role(ctx, iago, domain.realm_id, othello, r),
            user="othello",
            fetch_event_types=["realm_user"],
            event_types=["realm_user"],
        )
    state = domain.fetch("othello", fetch_event_types=["realm_user"])
    assert (state["is_admin"], state["is_moderator"], state["is_guest"]) == (False, True, False)
    domain.verify(
        lambda ctx: do_change_user_role(ctx, None, domain.realm_id, othello, OWNER),
        user="othello",
        fetch_event_types=["realm_user"],
        event_types=["realm_user"],
    )
    state = domain.fetch("othello", fetch_event_types=["realm_user"])
    assert (state["is_admin"], state["is_owner"], state["is_moderator"]) == (True, True, False)


@covers(
    ("realm_user", "update"),
    ("stream", "create"),
    ("stream", "delete"),
    ("subscription", "peer_add"),
    ("default_streams", None),
    ("user_group", "add_members"),
    ("user_group", "remove_members"),
)
def test_a_guest_made_member_sees_the_public_streams_and_back(domain):
    iago, polonius = domain.id("iago"), domain.id("polonius")
    # Member: out of role:everyone, into role:members and role:fullmembers;
    # Denmark and Verona appear with their subscribers (one peer_add per
    # subscriber list), and the default streams.
    events = domain.verify(
        lambda ctx: do_change_user_role(ctx, iago, domain.realm_id, polonius, MEMBER),
        user="polonius",
        num_events=8,
    )
    assert events[0]["person"] == {"user_id": polonius, "role": MEMBER}
    state = domain.fetch("polonius")
    assert state["is_guest"] is False
    assert {stream["name"] for stream in state["never_subscribed"]} >= {"Denmark", "Verona"}
    events = domain.verify(
        lambda ctx: do_change_user_role(ctx, iago, domain.realm_id, polonius, GUEST),
        user="polonius",
        num_events=6,
    )
    assert domain.fetch("polonius")["never_subscribed"] == []


def test_owners_are_made_and_unmade_only_by_owners_and_one_always_remains(domain):
    iago, hamlet, othello = domain.id("iago"), domain.id("hamlet"), domain.id("othello")

    def change(actor, target, role):
        return domain.run(
            lambda ctx: do_change_user_role(ctx, actor, domain.realm_id, target, role)
        )

    with pytest.raises(ActionError, match="Must be an organization administrator"):
        change(hamlet, othello, ADMIN)
    with pytest.raises(ActionError, match="Must be an organization owner"):
        change(iago, othello, OWNER)
    assert change(None, othello, OWNER)  # the operator may
    with pytest.raises(ActionError, match="Must be an organization owner"):
        change(iago, othello, MEMBER)
    with pytest.raises(ActionError, match="only organization owner"):
        change(othello, othello, ADMIN)
    assert change(othello, iago, OWNER)
    assert change(iago, othello, MEMBER)  # another owner remains: iago
    assert not change(iago, othello, MEMBER)  # unchanged: nothing to do
    for bad in (0, 500, True, "owner"):
        with pytest.raises(ActionError, match="Invalid role"):
            change(iago, othello, bad)


# -- deactivation ------------------------------------------------------------------


@covers(
    ("realm_user", "update"),
    ("presence", None),
    ("subscription", "peer_remove"),
    ("subscription", "peer_add"),
    ("user_group", "add_members"),
    ("user_group", "remove_members"),
)
def test_a_deactivated_user_moves_to_the_non_active_list_and_back(domain):
    iago, othello = domain.id("iago"), domain.id("othello")
    now = time.time()
    domain.verify(lambda ctx: do_update_presence(ctx, othello, "active", now=now))
    # othello is in Denmark (public) and Scotland (private, with iago): who
    # sees those subscriber lists also gets peer_remove / peer_add for him;
    # everyone sees him leave and rejoin role:members and role:fullmembers.
    for observer, peer_events, options in (
        ("hamlet", 1, {}),
        ("iago", 2, {"slim_presence": True}),
        ("polonius", 0, {"client_gravatar": False}),
    ):
        events = domain.verify(
            lambda ctx: do_deactivate_user(ctx, iago, domain.realm_id, othello),
            user=observer,
            num_events=peer_events + 3,
            **options,
        )
        assert events[-3]["person"] == {"user_id": othello, "is_active": False}
        assert {event.get("op") for event in events[:-3]} <= {"peer_remove"}
        assert {event["op"] for event in events[-2:]} == {"remove_members"}
        state = domain.fetch(observer, **options)
        assert othello in people(state, "realm_non_active_users")
        assert othello not in people(state)
        assert "is_active" not in people(state, "realm_non_active_users")[othello]
        assert str(othello) not in state["presences"]
        assert domain.users["othello"].email not in state["presences"]
        assert all(othello not in sub["subscribers"] for sub in state["subscriptions"])
        events = domain.verify(
            lambda ctx: do_reactivate_user(ctx, iago, domain.realm_id, othello),
            user=observer,
            num_events=peer_events + 3,
            **options,
        )
        assert events[0]["person"] == {"user_id": othello, "is_active": True}
        state = domain.fetch(observer, **options)
        assert othello in people(state)
        assert state["presences"]


@covers(("realm_user", "update"), ("user_group", "add_members"))
def test_the_reactivated_user_is_told_too(domain):
    iago, othello = domain.id("iago"), domain.id("othello")
    domain.run(lambda ctx: do_deactivate_user(ctx, iago, domain.realm_id, othello))
    # A deactivated user cannot register; once back, their queues get the news.
    domain.verify(
        lambda ctx: do_reactivate_user(ctx, iago, domain.realm_id, othello),
        user="othello",
        num_events=3,
        fetch_event_types=["user_settings"],
        state_change_expected=False,
    )


def test_deactivation_rules(domain):
    iago, hamlet, othello = domain.id("iago"), domain.id("hamlet"), domain.id("othello")

    def deactivate(actor, target):
        return domain.run(lambda ctx: do_deactivate_user(ctx, actor, domain.realm_id, target))

    def reactivate(actor, target):
        return domain.run(lambda ctx: do_reactivate_user(ctx, actor, domain.realm_id, target))

    with pytest.raises(ActionError, match="Must be an organization administrator"):
        deactivate(hamlet, othello)
    deactivate(iago, othello)
    with pytest.raises(ActionError, match="already deactivated"):
        deactivate(iago, othello)
    with pytest.raises(ActionError, match="Must be an organization administrator"):
        reactivate(hamlet, othello)
    reactivate(iago, othello)
    with pytest.raises(ActionError, match="already active"):
        reactivate(iago, othello)
    with pytest.raises(ActionError, match="No such user"):
        deactivate(iago, 10**12)
    # Owners: only an owner deactivates one, and never the last one.
    domain.run(lambda ctx: do_change_user_role(ctx, None, domain.realm_id, othello, OWNER))
    with pytest.raises(ActionError, match="Must be an organization owner"):
        deactivate(iago, othello)
    with pytest.raises(ActionError, match="only organization owner"):
        deactivate(othello, othello)
    deactivate(None, iago)
    with pytest.raises(ActionError, match="Invalid user ID"):
        reactivate(iago, iago)  # a deactivated administrator acts no more
    reactivate(othello, iago)


# -- presence ------------------------------------------------------------------------


@covers(("presence", None))
def test_simplified_presence_events_carry_only_the_modern_form(domain):
    hamlet = domain.id("hamlet")
    start = int(time.time())
    simplified = MODERN | {"simplified_presence_events"}
    for slim in (False, True):  # slim presence changes nothing in this form
        base = start + (1000 if slim else 0)
        for status, now in (("active", base), ("idle", base + 200), ("active", base + 300)):
            [event] = domain.verify(
                lambda ctx, s=status, n=now: do_update_presence(ctx, hamlet, s, now=n),
                capabilities=simplified,
                slim_presence=slim,
            )
            last_active = base if status == "idle" else now
            assert event == {
                "id": event["id"],
                "type": "presence",
                "presences": {
                    str(hamlet): {"active_timestamp": last_active, "idle_timestamp": now}
                },
            }


@covers(("presence", None))
def test_presence_in_both_forms_follows_the_rows_rules(domain):
    hamlet = domain.id("hamlet")
    start = int(time.time())
    for slim in (False, True):
        base = start + (1000 if slim else 0)
        steps = (
            ("active", base, 1, "active", base),  # the first update
            ("active", base + 10, 0, None, None),  # within 55 s: nothing stored
            # Active 60 s ago: still "active" then, so only the slim form
            # (which has the last connection) changes.
            ("idle", base + 60, 1, "active", base),
            ("idle", base + 200, 1, "idle", base + 200),
            ("idle", base + 230, 0, None, None),
            ("active", base + 300, 1, "active", base + 300),
        )
        for status, now, count, shown_status, shown_time in steps:
            events = domain.verify(
                lambda ctx, s=status, n=now: do_update_presence(ctx, hamlet, s, now=n),
                num_events=count,
                state_change_expected=bool(count) and (slim or now != base + 60),
                slim_presence=slim,
            )
            if count:
                [event] = events
                assert event["presence"]["website"]["status"] == shown_status
                assert event["presence"]["website"]["timestamp"] == shown_time
                assert event["server_timestamp"] == now
                assert ("email" in event) is not slim
        state = domain.fetch(slim_presence=slim)
        if slim:
            assert state["presences"][str(hamlet)] == {
                "active_timestamp": base + 300,
                "idle_timestamp": base + 300,
            }
        else:
            website = state["presences"][domain.users["hamlet"].email]["website"]
            assert website == {
                "client": "website",
                "status": "active",
                "timestamp": base + 300,
                "pushable": False,
            }


@covers(("presence", None))
def test_everyone_sees_a_user_come_online_idle(domain):
    othello = domain.id("othello")
    now = int(time.time())
    for observer, slim in (("hamlet", False), ("polonius", True)):
        domain.verify(
            lambda ctx, n=now: do_update_presence(ctx, othello, "idle", now=n),
            user=observer,
            slim_presence=slim,
        )
        now += 100
    state = domain.fetch(slim_presence=True)
    joined = state["presences"][str(othello)]["active_timestamp"]
    # Never active: Zulip reports the time they joined.
    assert joined <= now - 200
    assert state["presences"][str(othello)]["idle_timestamp"] == now - 100


@covers(
    ("realm_user", "add"),
    ("subscription", "peer_add"),
    ("presence", None),
    ("user_group", "add_members"),
)
def test_a_user_created_after_register_comes_online(domain):
    iago = domain.id("iago")
    for index, slim in enumerate((False, True)):

        async def join_and_ping(ctx, i=index):
            created = await do_create_user(ctx, iago, domain.realm_id, f"late{i}@x.example", "L")
            await do_update_presence(ctx, created.user_id, "idle")

        *_, presence = domain.verify(join_and_ping, num_events=5, slim_presence=slim)
        # Never active, just joined: shown active since joining, as Zulip does.
        assert presence["presence"]["website"]["status"] == "active"


@covers()
def test_an_update_older_than_the_row_changes_nothing(domain):
    hamlet = domain.id("hamlet")
    now = int(time.time())
    domain.run(lambda ctx: do_update_presence(ctx, hamlet, "active", now=now))
    domain.verify(
        lambda ctx: do_update_presence(ctx, hamlet, "active", now=now - 300),
        num_events=0,
        state_change_expected=False,
    )


def test_presence_status_must_be_active_or_idle(domain):
    with pytest.raises(ActionError, match="Invalid status: away"):
        domain.run(lambda ctx: do_update_presence(ctx, domain.id("hamlet"), "away"))


# -- settings --------------------------------------------------------------------------


SETTING_CHANGES = (
    ("twenty_four_hour_time", True),
    ("enter_sends", True),
    ("color_scheme", 2),
    ("default_language", "de"),
    ("send_read_receipts", False),
)


@covers(("user_settings", "update"))
def test_each_setting_change_reaches_the_users_own_state(domain):
    hamlet = domain.id("hamlet")
    for setting, value in SETTING_CHANGES:
        [event] = domain.verify(
            lambda ctx, s=setting, v=value: do_change_user_setting(ctx, hamlet, s, v)
        )
        assert (event["property"], event["value"]) == (setting, value)
        assert ("language_name" in event) is (setting == "default_language")
    settings = domain.fetch()["user_settings"]
    assert {setting: settings[setting] for setting, _ in SETTING_CHANGES} == dict(SETTING_CHANGES)
    assert settings["timezone"] == ""


@covers(("user_settings", "update"))
def test_legacy_clients_get_the_top_level_copies_updated(domain):
    hamlet = domain.id("hamlet")
    legacy = frozenset({"notification_settings_null"})
    assert "twenty_four_hour_time" not in domain.fetch()  # modern clients: no copies
    for setting, value in SETTING_CHANGES:
        domain.verify(
            lambda ctx, s=setting, v=value: do_change_user_setting(ctx, hamlet, s, v),
            capabilities=legacy,
            num_events=1,
        )
    state = domain.fetch(capabilities=legacy)
    assert (state["color_scheme"], state["default_language"], state["enter_sends"]) == (
        2,
        "de",
        True,
    )
    assert "send_read_receipts" not in state  # not one of Zulip's legacy settings


@covers()
def test_settings_go_to_the_user_only_and_unchanged_values_to_nobody(domain):
    hamlet = domain.id("hamlet")
    domain.verify(
        lambda ctx: do_change_user_setting(ctx, hamlet, "enter_sends", True),
        user="othello",
        num_events=0,
        state_change_expected=False,
    )
    domain.verify(
        lambda ctx: do_change_user_setting(ctx, hamlet, "enter_sends", True),
        num_events=0,
        state_change_expected=False,
    )


def test_setting_values_are_checked(domain):
    hamlet = domain.id("hamlet")
    for setting, value, why in (
        ("enter_sends", 1, "enter_sends is not a boolean"),
        ("color_scheme", 4, "Invalid color_scheme"),
        ("color_scheme", True, "color_scheme is not an integer"),
        ("default_language", "klingon", "Invalid default_language"),
        ("default_language", 7, "default_language is not a string"),
        ("high_contrast_mode", True, "Unknown user setting"),
    ):
        with pytest.raises(ActionError, match=why):
            domain.run(lambda ctx, s=setting, v=value: do_change_user_setting(ctx, hamlet, s, v))
