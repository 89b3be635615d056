"""Appliers of the `realm_user_groups` section: Zulip's `apply_event` for
`user_group`, exact when applied once and harmless when applied again (sets
for members and subgroups, upserts by group id)."""

from __future__ import annotations

import copy
from typing import Any, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext
from generation.events.groups import UserGroup


class UserGroupsState(TypedDict, total=False):
    """The `realm_user_groups` section of register's response: every group
    of the realm in id order, deactivated ones only for clients with the
    `include_deactivated_groups` capability."""

    realm_user_groups: list[UserGroup]


def _ids(value: Any) -> set[int]:
    return {item for item in value if isinstance(item, int)} if isinstance(value, list) else set()


def apply_user_group(state: State, event: Event, ctx: StateContext) -> None:
    groups = state.get("realm_user_groups")
    if not isinstance(groups, list):
        return
    op = event.get("op")
    if op == "add":
        group = event.get("group")
        if isinstance(group, dict):
            kept = [g for g in groups if g.get("id") != group.get("id")]
            kept.append(copy.deepcopy(group))
            groups[:] = sorted(kept, key=lambda g: g["id"])
        return
    group_id = event.get("group_id")
    if op == "remove":
        groups[:] = [group for group in groups if group.get("id") != group_id]
        return
    # An event about a group this client does not hold (deactivated, for a
    # client without the capability) changes nothing.
    found = next((group for group in groups if group.get("id") == group_id), None)
    if found is None:
        return
    if op == "update":
        data = event.get("data")
        if isinstance(data, dict):
            found.update(data)
    elif op in ("add_members", "remove_members"):
        changed = _ids(event.get("user_ids"))
        members = _ids(found.get("members"))
        found["members"] = sorted(members | changed if op == "add_members" else members - changed)
    elif op in ("add_subgroups", "remove_subgroups"):
        changed = _ids(event.get("direct_subgroup_ids"))
        subgroups = _ids(found.get("direct_subgroup_ids"))
        found["direct_subgroup_ids"] = sorted(
            subgroups | changed if op == "add_subgroups" else subgroups - changed
        )


APPLIERS: dict[str, Applier] = {"user_group": apply_user_group}
