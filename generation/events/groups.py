"""Events of user groups (Zulip's `user_group`, feature level 419 shapes).

Every active user of the realm, guests included, receives every
`user_group` event (Zulip's `active_user_ids`): eventq's groups are all
visible to everyone in the realm, as Zulip's are.

A deactivation is sent once, as Zulip's `update` with `deactivated: true`;
the queues give clients without the `include_deactivated_groups` capability
Zulip's `remove` instead (the form `deactivation_as_remove`). No other event
concerns a deactivated group: eventq allows no change to one (docs/behaviour.md).
"""

from __future__ import annotations

from typing import Literal, TypedDict

from generation.events.declaration import ClientRule, EventType

# Zulip's system groups, in the order of their subgroup chain (each group
# contains the one before it), then role:nobody.
SYSTEM_GROUPS: tuple[str, ...] = (
    "role:owners",
    "role:administrators",
    "role:moderators",
    "role:fullmembers",
    "role:members",
    "role:everyone",
    "role:internet",
    "role:nobody",
)


class AnonymousGroup(TypedDict):
    """A permission setting that is no named group: its users and groups
    (eventq's only one is Zulip's default "the group's creator")."""

    direct_members: list[int]
    direct_subgroups: list[int]


# A permission setting: a named group's id, or an anonymous group.
GroupSetting = int | AnonymousGroup


def setting_value(group_id: int | None, creator_id: int | None) -> GroupSetting:
    """A stored permission setting as clients read it: the named group's id,
    or for None Zulip's default of a group users make, its creator alone."""
    if group_id is not None:
        return group_id
    return {"direct_members": [] if creator_id is None else [creator_id], "direct_subgroups": []}


class UserGroup(TypedDict):
    """A group as register's `realm_user_groups` and the `add` event show it."""

    id: int
    name: str
    description: str
    # Active direct members, in id order.
    members: list[int]
    direct_subgroup_ids: list[int]
    # None: a system group, or made by the operator.
    creator_id: int | None
    # UNIX seconds.
    date_created: int | None
    is_system_group: bool
    can_add_members_group: GroupSetting
    can_join_group: GroupSetting
    can_leave_group: GroupSetting
    can_manage_group: GroupSetting
    can_mention_group: GroupSetting
    can_remove_members_group: GroupSetting
    deactivated: bool


class UserGroupAddEvent(TypedDict):
    """A group was made (op `add`)."""

    id: int
    type: Literal["user_group"]
    op: Literal["add"]
    group: UserGroup


class UserGroupData(TypedDict, total=False):
    """What an `update` changes."""

    name: str
    description: str
    deactivated: bool


class UserGroupUpdateEvent(TypedDict):
    """A group's name or description changed, or it was deactivated."""

    id: int
    type: Literal["user_group"]
    op: Literal["update"]
    group_id: int
    data: UserGroupData


class UserGroupMembersEvent(TypedDict):
    """Users became direct members of a group."""

    id: int
    type: Literal["user_group"]
    op: Literal["add_members"]
    group_id: int
    user_ids: list[int]


class UserGroupRemoveMembersEvent(TypedDict):
    """Users stopped being direct members of a group."""

    id: int
    type: Literal["user_group"]
    op: Literal["remove_members"]
    group_id: int
    user_ids: list[int]


class UserGroupSubgroupsEvent(TypedDict):
    """Groups became direct subgroups of a group."""

    id: int
    type: Literal["user_group"]
    op: Literal["add_subgroups"]
    group_id: int
    direct_subgroup_ids: list[int]


class UserGroupRemoveSubgroupsEvent(TypedDict):
    """Groups stopped being direct subgroups of a group."""

    id: int
    type: Literal["user_group"]
    op: Literal["remove_subgroups"]
    group_id: int
    direct_subgroup_ids: list[int]


class UserGroupRemoveEvent(TypedDict):
    """A group is gone, for a client that cannot show deactivated groups
    (the form a deactivation takes for it)."""

    id: int
    type: Literal["user_group"]
    op: Literal["remove"]
    group_id: int


TYPES: tuple[EventType, ...] = (
    EventType(
        "user_group",
        {
            "add": UserGroupAddEvent,
            "update": UserGroupUpdateEvent,
            "add_members": UserGroupMembersEvent,
            "remove_members": UserGroupRemoveMembersEvent,
            "add_subgroups": UserGroupSubgroupsEvent,
            "remove_subgroups": UserGroupRemoveSubgroupsEvent,
            "remove": UserGroupRemoveEvent,
        },
        state=("realm_user_groups",),
        capability=ClientRule(
            "include_deactivated_groups", with_it="as_sent", without_it="deactivation_as_remove"
        ),
    ),
)
