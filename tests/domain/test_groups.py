"""verify_action for user groups (`user_group`), the system groups that follow
roles, and the refusals."""

from __future__ import annotations

import itertools

import pytest

from generation import accounts
from generation.actions import groups
from generation.actions.base import ActionError
from generation.actions.users import do_change_user_role, do_deactivate_user, do_reactivate_user
from tests.domain.harness import MODERN, covers

WITHOUT_DEACTIVATED = MODERN - {"include_deactivated_groups"}


def by_name(state):
    return {group["name"]: group for group in state["realm_user_groups"]}


def create(domain, actor="hamlet", name="Poets", members=("hamlet",), **kwargs):
    actor_id = None if actor is None else domain.id(actor)
    member_ids = [domain.id(member) for member in members]
    return domain.run(
        lambda ctx: groups.do_create_user_group(
            ctx, actor_id, domain.realm_id, name, "Who writes", member_ids, **kwargs
        )
    )


def test_every_realm_has_zulips_system_groups_following_roles(domain):
    state = by_name(domain.fetch())
    ids = {name: group["id"] for name, group in state.items()}
    assert set(state) == {
        "role:owners",
        "role:administrators",
        "role:moderators",
        "role:fullmembers",
        "role:members",
        "role:everyone",
        "role:internet",
        "role:nobody",
    }
    assert state["role:administrators"]["members"] == [domain.id("iago")]
    members = sorted([domain.id("hamlet"), domain.id("othello")])
    assert state["role:members"]["members"] == state["role:fullmembers"]["members"] == members
    assert state["role:everyone"]["members"] == [domain.id("polonius")]
    assert state["role:owners"]["members"] == state["role:nobody"]["members"] == []
    # Zulip's chain: each system group holds the one before it.
    chain = ["role:owners", "role:administrators", "role:moderators", "role:fullmembers",
             "role:members", "role:everyone", "role:internet"]  # fmt: skip
    for below, above in itertools.pairwise(chain):
        assert state[above]["direct_subgroup_ids"] == [ids[below]]
    for group in state.values():
        assert group["is_system_group"]
        assert group["creator_id"] is None
        assert group["can_manage_group"] == ids["role:nobody"]


@covers(("user_group", "add"), ("user_group", "add_subgroups"))
def test_a_new_group_reaches_everyone_with_its_subgroups_after_it(domain):
    moderators = by_name(domain.fetch())["role:moderators"]["id"]
    for observer in ("othello", "polonius"):
        add, subgroups = domain.verify(
            lambda ctx, o=observer: groups.do_create_user_group(
                ctx,
                domain.id("hamlet"),
                domain.realm_id,
                f"Poets of {o}",
                "Who writes",
                [domain.id("othello"), domain.id("hamlet")],
                subgroups=[moderators],
            ),
            user=observer,
            num_events=2,
        )
        group = add["group"]
        assert group["members"] == sorted([domain.id("othello"), domain.id("hamlet")])
        assert group["direct_subgroup_ids"] == []
        assert group["creator_id"] == domain.id("hamlet")
        # Zulip's default: the creator alone manages the group and adds members.
        assert group["can_manage_group"] == {
            "direct_members": [domain.id("hamlet")],
            "direct_subgroups": [],
        }
        assert subgroups["direct_subgroup_ids"] == [moderators]


@covers(("user_group", "add"))
def test_a_group_made_with_settings_shows_them(domain):
    system = by_name(domain.fetch())
    moderators, nobody = system["role:moderators"]["id"], system["role:nobody"]["id"]
    [add] = domain.verify(
        lambda ctx: groups.do_create_user_group(
            ctx,
            None,
            domain.realm_id,
            "Quiet",
            "",
            [],
            settings={"can_mention_group": nobody, "can_manage_group": moderators},
        )
    )
    assert add["group"]["can_mention_group"] == nobody
    assert add["group"]["can_manage_group"] == moderators
    # Made by the operator: no creator.
    assert add["group"]["can_add_members_group"] == {"direct_members": [], "direct_subgroups": []}


@covers(("user_group", "update"))
def test_rename_and_describe(domain):
    group_id = create(domain)
    events = domain.verify(
        lambda ctx: groups.do_update_user_group(
            ctx, domain.id("hamlet"), domain.realm_id, group_id, name="Bards", description="New"
        ),
        num_events=2,
    )
    assert [event["data"] for event in events] == [{"name": "Bards"}, {"description": "New"}]
    # Unchanged values send nothing.
    domain.verify(
        lambda ctx: groups.do_update_user_group(ctx, None, domain.realm_id, group_id, name="Bards"),
        num_events=0,
        state_change_expected=False,
    )


@covers(("user_group", "add_members"), ("user_group", "remove_members"))
def test_members_join_and_leave(domain):
    hamlet, othello, polonius = domain.id("hamlet"), domain.id("othello"), domain.id("polonius")
    group_id = create(domain)
    for observer in ("iago", "polonius"):
        add, delete = domain.verify(
            lambda ctx: groups.do_update_user_group_members(
                ctx, hamlet, domain.realm_id, group_id, add=[polonius, othello], delete=[hamlet]
            ),
            user=observer,
            num_events=2,
        )
        assert add["user_ids"] == sorted([polonius, othello])
        assert delete["user_ids"] == [hamlet]
        domain.verify(
            lambda ctx: groups.do_update_user_group_members(
                ctx, hamlet, domain.realm_id, group_id, add=[hamlet], delete=[polonius, othello]
            ),
            user=observer,
            num_events=2,
        )
    # Anyone may leave (can_leave_group: role:everyone), a guest included.
    domain.run(
        lambda ctx: groups.do_update_user_group_members(
            ctx, None, domain.realm_id, group_id, add=[polonius]
        )
    )
    domain.verify(
        lambda ctx: groups.do_update_user_group_members(
            ctx, polonius, domain.realm_id, group_id, delete=[polonius]
        )
    )


@covers(("user_group", "add_subgroups"), ("user_group", "remove_subgroups"))
def test_subgroups_come_and_go(domain):
    outer, inner = create(domain, name="Outer"), create(domain, name="Inner")
    hamlet = domain.id("hamlet")
    [event] = domain.verify(
        lambda ctx: groups.do_update_user_group_subgroups(
            ctx, hamlet, domain.realm_id, outer, add=[inner]
        )
    )
    assert event["direct_subgroup_ids"] == [inner]
    domain.verify(
        lambda ctx: groups.do_update_user_group_subgroups(
            ctx, hamlet, domain.realm_id, outer, delete=[inner]
        )
    )


@covers(("user_group", "update"), ("user_group", "remove"))
def test_a_deactivated_group_is_an_update_or_a_remove_by_capability(domain):
    for index, (capabilities, op) in enumerate(
        ((MODERN, "update"), (WITHOUT_DEACTIVATED, "remove"))
    ):
        group_id = create(domain, name=f"Short-lived {index}")
        [event] = domain.verify(
            lambda ctx, g=group_id: groups.do_deactivate_user_group(
                ctx, domain.id("hamlet"), domain.realm_id, g
            ),
            capabilities=capabilities,
        )
        assert event["op"] == op
        assert event["group_id"] == group_id
        if op == "update":
            assert event["data"] == {"deactivated": True}
        else:
            assert set(event) == {"id", "type", "op", "group_id"}
        shown = by_name(domain.fetch(capabilities=capabilities))
        if op == "update":
            assert shown[f"Short-lived {index}"]["deactivated"] is True
        else:
            assert f"Short-lived {index}" not in shown


@covers(("user_group", "add_members"))
def test_an_event_for_a_group_the_client_does_not_hold_changes_nothing(domain):
    othello = domain.id("othello")
    ghost = create(domain, name="Ghost", members=("othello",))
    domain.run(lambda ctx: groups.do_deactivate_user_group(ctx, None, domain.realm_id, ghost))
    domain.run(lambda ctx: do_deactivate_user(ctx, None, domain.realm_id, othello))
    # Back: role:members, role:fullmembers and Ghost regain him; a client
    # without `include_deactivated_groups` holds no Ghost to change.
    events = domain.verify(
        lambda ctx: do_reactivate_user(ctx, None, domain.realm_id, othello),
        capabilities=WITHOUT_DEACTIVATED,
        event_types=["user_group"],
        fetch_event_types=["realm_user_groups", "user_group"],
        num_events=3,
    )
    assert events[-1]["group_id"] == ghost
    assert {event["op"] for event in events} == {"add_members"}


# -- refusals ---------------------------------------------------------------------


def refused(domain, action, message, code="BAD_REQUEST"):
    with pytest.raises(ActionError) as caught:
        domain.run(action)
    assert caught.value.msg == message
    assert caught.value.code == code


def test_who_may_make_and_change_a_group(domain):
    hamlet, othello, polonius = domain.id("hamlet"), domain.id("othello"), domain.id("polonius")
    realm = domain.realm_id
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(ctx, polonius, realm, "G", "", []),
        "Insufficient permission",
    )
    group_id = create(domain)
    # Not the creator, no owner: othello may neither rename nor add others.
    refused(
        domain,
        lambda ctx: groups.do_update_user_group(ctx, othello, realm, group_id, name="X"),
        "Insufficient permission",
    )
    refused(
        domain,
        lambda ctx: groups.do_update_user_group_members(
            ctx, othello, realm, group_id, add=[othello]
        ),
        "Insufficient permission",
    )
    # Nor remove someone else (can_remove_members_group: role:nobody).
    refused(
        domain,
        lambda ctx: groups.do_update_user_group_members(
            ctx, othello, realm, group_id, delete=[hamlet]
        ),
        "Insufficient permission",
    )
    # An owner manages every group.
    domain.run(lambda ctx: do_change_user_role(ctx, None, realm, othello, accounts.ROLES["owner"]))
    domain.run(lambda ctx: groups.do_update_user_group(ctx, othello, realm, group_id, name="X"))
    # Nobody changes a system group.
    system = by_name(domain.fetch())["role:members"]["id"]
    refused(
        domain,
        lambda ctx: groups.do_update_user_group(ctx, None, realm, system, name="Y"),
        "Insufficient permission",
    )


def test_names_descriptions_and_limits(domain):
    realm = domain.realm_id
    create(domain, name="Taken")
    for name, message in (
        ("  ", "User group name can't be empty!"),
        ("n" * 101, "User group name cannot exceed 100 characters."),
        ("role:x", "User group name cannot start with 'role:'."),
        ("@x", "User group name cannot start with '@'."),
        ("Taken", "User group 'Taken' already exists."),
        ("role:members", "User group name cannot start with 'role:'."),
    ):
        refused(
            domain,
            lambda ctx, n=name: groups.do_create_user_group(ctx, None, realm, n, "", []),
            message,
        )
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(ctx, None, realm, "D", "d" * 1025, []),
        "User group description cannot exceed 1024 characters.",
    )
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(
            ctx, None, realm, "Many", "", list(range(1, groups.MAX_IDS_PER_REQUEST + 2))
        ),
        f"members has more than {groups.MAX_IDS_PER_REQUEST} items",
    )
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(ctx, None, realm, "Bad", "", [10**12]),
        f"Invalid user ID: {10**12}",
    )
    system = by_name(domain.fetch())
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(
            ctx,
            None,
            realm,
            "E",
            "",
            [],
            settings={"can_manage_group": system["role:everyone"]["id"]},
        ),
        "'can_manage_group' setting cannot be set to 'role:everyone' group.",
    )
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(
            ctx,
            None,
            realm,
            "I",
            "",
            [],
            settings={"can_mention_group": system["role:internet"]["id"]},
        ),
        "'can_mention_group' setting cannot be set to 'role:internet' group.",
    )
    assert "Bad" not in by_name(domain.fetch())


def test_a_realm_has_at_most_so_many_groups(domain, monkeypatch):
    from generation.actions.groups import create as create_module

    monkeypatch.setattr(create_module, "MAX_GROUPS_PER_REALM", 2)
    create(domain, name="One")
    create(domain, name="Two")
    refused(
        domain,
        lambda ctx: groups.do_create_user_group(ctx, None, domain.realm_id, "Three", "", []),
        "An organization has at most 2 user groups",
    )


def test_membership_refusals(domain):
    realm = domain.realm_id
    hamlet, othello = domain.id("hamlet"), domain.id("othello")
    group_id = create(domain)

    def members(**lists):
        return lambda ctx: groups.do_update_user_group_members(
            ctx, hamlet, realm, group_id, **lists
        )

    refused(
        domain,
        members(),
        'Nothing to do. Specify at least one of "add", "delete", "add_subgroups" or'
        ' "delete_subgroups".',
    )
    refused(domain, members(add=[hamlet]), f"User {hamlet} is already a member of this group")
    refused(domain, members(delete=[othello]), f"There is no member '{othello}' in this user group")
    refused(domain, members(add=[10**12]), f"Invalid user ID: {10**12}")
    refused(
        domain,
        lambda ctx: groups.do_update_user_group_members(ctx, hamlet, realm, 10**12, add=[othello]),
        "Invalid user group",
    )
    # Joining oneself takes can_join_group (role:nobody by default).
    refused(
        domain,
        lambda ctx: groups.do_update_user_group_members(
            ctx, othello, realm, group_id, add=[othello]
        ),
        "Insufficient permission",
    )
    # All or nothing: the refused deletion undoes the addition before it.
    refused(domain, members(add=[othello], delete=[10**12]), f"Invalid user ID: {10**12}")
    assert by_name(domain.fetch())["Poets"]["members"] == [hamlet]


def test_subgroup_refusals_and_no_cycle(domain):
    realm, hamlet = domain.realm_id, domain.id("hamlet")
    a, b, c = (create(domain, name=name) for name in ("A", "B", "C"))

    def subgroups(group, **lists):
        return lambda ctx: groups.do_update_user_group_subgroups(ctx, hamlet, realm, group, **lists)

    refused(domain, subgroups(a), 'Nothing to do. Specify at least one of "add" or "delete".')
    domain.run(subgroups(a, add=[b]))
    domain.run(subgroups(b, add=[c]))
    refused(domain, subgroups(a, add=[b]), f"User group {b} is already a subgroup of this group.")
    refused(
        domain,
        subgroups(c, add=[a]),
        f"User group {c} is already a subgroup of one of the passed subgroups.",
    )
    refused(
        domain,
        subgroups(a, add=[a]),
        f"User group {a} is already a subgroup of one of the passed subgroups.",
    )
    refused(domain, subgroups(a, delete=[c]), f"User group {c} is not a subgroup of this group.")
    refused(domain, subgroups(a, add=[10**12]), f"Invalid user group ID: {10**12}")


def test_deactivation_refusals(domain):
    realm = domain.realm_id
    outer, inner = create(domain, name="Outer"), create(domain, name="Inner")
    domain.run(
        lambda ctx: groups.do_update_user_group_subgroups(ctx, None, realm, outer, add=[inner])
    )
    refused(
        domain,
        lambda ctx: groups.do_deactivate_user_group(ctx, None, realm, inner),
        "Cannot deactivate user group in use.",
        "CANNOT_DEACTIVATE_GROUP_IN_USE",
    )
    user_of_setting = create(domain, name="Setting")
    create(domain, name="Uses it", settings={"can_mention_group": user_of_setting})
    refused(
        domain,
        lambda ctx: groups.do_deactivate_user_group(ctx, None, realm, user_of_setting),
        "Cannot deactivate user group in use.",
        "CANNOT_DEACTIVATE_GROUP_IN_USE",
    )
    domain.run(lambda ctx: groups.do_deactivate_user_group(ctx, None, realm, outer))
    # A deactivated group takes no change, and no longer holds up its subgroups.
    for action in (
        lambda ctx: groups.do_update_user_group(ctx, None, realm, outer, name="Z"),
        lambda ctx: groups.do_update_user_group_members(ctx, None, realm, outer, add=[1]),
        lambda ctx: groups.do_deactivate_user_group(ctx, None, realm, outer),
        lambda ctx: groups.do_update_user_group_subgroups(ctx, None, realm, inner, add=[outer]),
    ):
        refused(domain, action, "User group is deactivated.")
    domain.run(lambda ctx: groups.do_deactivate_user_group(ctx, None, realm, inner))
    refused(
        domain,
        lambda ctx: groups.do_update_user_group(ctx, None, realm, inner),
        "No new data supplied",
    )
