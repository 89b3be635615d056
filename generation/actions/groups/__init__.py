"""User groups: making one, its name and description, its direct members
and subgroups, deactivating it; and what changes to users mean for the
groups' members (`send_role_group_changes`, `send_activity_group_changes`,
called by generation/actions/users.py).

Every `user_group` event goes to every active user of the realm, guests
included (Zulip's `active_user_ids`): every group is visible to the whole
realm.

Who may do what (Zulip's defaults, docs/behaviour.md "User groups"):

- make a group: anyone but a guest (Zulip's `can_create_groups`: role:members);
- manage it (name, description, deactivation, removing subgroups): owners,
  for every group (Zulip's `can_manage_all_groups`: role:owners), and the
  members of its `can_manage_group` (default: its creator alone);
- add members or subgroups: its managers and the members of its
  `can_add_members_group` (default: its creator); join oneself: also the
  members of its `can_join_group` (default: role:nobody);
- remove members: its managers and the members of `can_remove_members_group`
  (default: role:nobody); leave oneself: also `can_leave_group` (default:
  role:everyone).

A setting that does not allow role:everyone never lets a guest act (Zulip's
rule). System groups are changed by nobody: their members follow the users'
roles. A deactivated group is changed by nobody either (Zulip allows
renaming one; eventq does not, so that clients without
`include_deactivated_groups` never hear of it again).

`actor_id` None is the operator (the command line), allowed everything.
Every action takes one transaction (a savepoint inside a caller's); the
group's row is locked first, and subgroup changes take the realm's subgroup
lock, so that two concurrent additions cannot close a cycle.
"""

from generation.actions.groups.changes import do_deactivate_user_group, do_update_user_group
from generation.actions.groups.common import (
    MAX_DESCRIPTION_LENGTH,
    MAX_GROUPS_PER_REALM,
    MAX_IDS_PER_REQUEST,
    MAX_NAME_LENGTH,
    SETTINGS,
    system_group_ids,
)
from generation.actions.groups.create import do_create_user_group
from generation.actions.groups.membership import (
    do_update_user_group_members,
    do_update_user_group_subgroups,
)
from generation.actions.groups.user_changes import (
    send_activity_group_changes,
    send_role_group_changes,
)

__all__ = [
    "MAX_DESCRIPTION_LENGTH",
    "MAX_GROUPS_PER_REALM",
    "MAX_IDS_PER_REQUEST",
    "MAX_NAME_LENGTH",
    "SETTINGS",
    "do_create_user_group",
    "do_deactivate_user_group",
    "do_update_user_group",
    "do_update_user_group_members",
    "do_update_user_group_subgroups",
    "send_activity_group_changes",
    "send_role_group_changes",
    "system_group_ids",
]
