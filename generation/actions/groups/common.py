"""What the group actions share: the rules of permission settings, the
group's row, who acts and what they may do, Zulip's checks and refusals,
and the events (every `user_group` event goes to every active user of the
realm, guests included).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from generation.actions.base import ActionContext, ActionError, active_user_ids, get_user
from generation.events.users import ROLE_GUEST, ROLE_OWNER

# Zulip's NamedUserGroup.MAX_NAME_LENGTH and INVALID_NAME_PREFIXES.
MAX_NAME_LENGTH = 100
INVALID_NAME_PREFIXES = ("@", "role:", "user:", "stream:", "channel:")
# As a channel's: register's state carries every description.
MAX_DESCRIPTION_LENGTH = 1024
# Groups users may make per realm (deactivated ones count): register's
# state and every GET /user_groups carry every group with its members, so
# their number is bounded; Zulip has no limit, and organizations use tens.
MAX_GROUPS_PER_REALM = 1000
# Ids in one list of one request (members or subgroups to add or remove):
# each becomes a row and an entry of an event every active user receives.
MAX_IDS_PER_REQUEST = 1000

# The system groups a user of each role is a direct member of, in the order
# Zulip tells of them (a member joins role:members, then role:fullmembers).
ROLE_GROUPS: dict[int, tuple[str, ...]] = {
    100: ("role:owners",),
    200: ("role:administrators",),
    300: ("role:moderators",),
    400: ("role:members", "role:fullmembers"),
    600: ("role:everyone",),
}


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSettingRule:
    """Which named groups a permission setting may be (Zulip's
    `GroupPermissionSetting`), and its default for a group users make (None:
    the group's creator alone)."""

    allow_everyone: bool
    default: str | None


# Zulip's GROUP_PERMISSION_SETTINGS; role:internet is never allowed.
SETTINGS: dict[str, GroupSettingRule] = {
    "can_add_members_group": GroupSettingRule(allow_everyone=False, default=None),
    "can_join_group": GroupSettingRule(allow_everyone=False, default="role:nobody"),
    "can_leave_group": GroupSettingRule(allow_everyone=True, default="role:everyone"),
    "can_manage_group": GroupSettingRule(allow_everyone=False, default=None),
    "can_mention_group": GroupSettingRule(allow_everyone=True, default="role:everyone"),
    "can_remove_members_group": GroupSettingRule(allow_everyone=False, default="role:nobody"),
}

SETTING_COLUMNS = ", ".join(f"{setting}_id" for setting in SETTINGS)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupRow:
    id: int
    realm_id: int
    name: str
    description: str
    is_system_group: bool
    deactivated: bool
    creator_id: int | None
    date_created: int
    can_add_members_group_id: int | None
    can_join_group_id: int
    can_leave_group_id: int
    can_manage_group_id: int | None
    can_mention_group_id: int
    can_remove_members_group_id: int

    def setting(self, name: str) -> int | None:
        value: int | None = getattr(self, f"{name}_id")
        return value


GROUP_COLUMNS = (
    "id, realm_id, name, description, is_system_group, deactivated, creator_id,"
    " floor(extract(epoch FROM date_created))::bigint AS date_created, " + SETTING_COLUMNS
)


@dataclasses.dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a user of the realm, or the operator (`user_id` None)."""

    user_id: int | None
    role: int

    @property
    def is_guest(self) -> bool:
        return self.role == ROLE_GUEST

    @property
    def manages_every_group(self) -> bool:
        return self.user_id is None or self.role == ROLE_OWNER


async def actor_of(ctx: ActionContext, actor_id: int | None, realm_id: int) -> Actor:
    if actor_id is None:
        return Actor(None, ROLE_OWNER)
    user = await get_user(ctx.conn, actor_id, realm_id)
    return Actor(user.id, user.role)


def insufficient() -> ActionError:
    return ActionError("Insufficient permission")


# -- lookups ------------------------------------------------------------------


async def group_row(
    ctx: ActionContext, realm_id: int, group_id: int, *, lock: bool = True
) -> GroupRow:
    """An active group of the realm (locked for this transaction), or Zulip's
    refusals."""
    cur = ctx.conn.cursor(row_factory=class_row(GroupRow))
    await cur.execute(
        f"SELECT {GROUP_COLUMNS} FROM user_groups WHERE id = %s AND realm_id = %s"  # noqa: S608 (fixed columns)
        + (" FOR UPDATE" if lock else ""),
        (group_id, realm_id),
    )
    group = await cur.fetchone()
    if group is None:
        raise ActionError("Invalid user group")
    if group.deactivated:
        raise ActionError("User group is deactivated.")
    return group


async def check_groups(ctx: ActionContext, realm_id: int, group_ids: Sequence[int]) -> None:
    """Refuse unless each id is an active group of the realm (Zulip's
    messages for a subgroup)."""
    cur = await ctx.conn.execute(
        "SELECT id, deactivated FROM user_groups WHERE realm_id = %s AND id = ANY(%s)",
        (realm_id, list(group_ids)),
    )
    found = {row[0]: row[1] for row in await cur.fetchall()}
    for group_id in group_ids:
        if group_id not in found:
            raise ActionError(f"Invalid user group ID: {group_id}")
        if found[group_id]:
            raise ActionError("User group is deactivated.")


async def check_active_users(ctx: ActionContext, realm_id: int, user_ids: Sequence[int]) -> None:
    """Refuse unless each id is an active user of the realm."""
    cur = await ctx.conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND is_active AND id = ANY(%s)",
        (realm_id, list(user_ids)),
    )
    found = {row[0] for row in await cur.fetchall()}
    for user_id in user_ids:
        if user_id not in found:
            raise ActionError(f"Invalid user ID: {user_id}")


async def system_group_ids(conn: psycopg.AsyncConnection[Any], realm_id: int) -> dict[str, int]:
    """The realm's system groups: name -> id."""
    cur = await conn.execute(
        "SELECT name, id FROM user_groups WHERE realm_id = %s AND is_system_group", (realm_id,)
    )
    return {row[0]: row[1] for row in await cur.fetchall()}


async def is_member(ctx: ActionContext, user_id: int, group_id: int) -> bool:
    """Whether an active user is a member of a group, directly or through
    its subgroups."""
    cur = await ctx.conn.execute(
        """
        WITH RECURSIVE tree (id) AS (
            SELECT %s::bigint
            UNION
            SELECT s.subgroup_id
            FROM user_group_subgroups s JOIN tree ON s.supergroup_id = tree.id
        )
        SELECT EXISTS (
            SELECT 1 FROM tree JOIN user_group_direct_members m ON m.group_id = tree.id
            WHERE m.user_id = %s
        )
        """,
        (group_id, user_id),
    )
    row = await cur.fetchone()
    return bool(row and row[0])


def unique(ids: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(ids))


def check_count(what: str, ids: Sequence[int]) -> None:
    if len(ids) > MAX_IDS_PER_REQUEST:
        raise ActionError(f"{what} has more than {MAX_IDS_PER_REQUEST} items")


# -- permissions --------------------------------------------------------------


async def may(ctx: ActionContext, actor: Actor, group: GroupRow, setting: str) -> bool:
    """Whether the actor is in the group's `setting` (Zulip's
    `user_has_permission_for_group_setting`)."""
    if actor.user_id is None:
        return True
    if actor.is_guest and not SETTINGS[setting].allow_everyone:
        return False
    value = group.setting(setting)
    if value is None:  # Zulip's default: the creator alone
        return actor.user_id == group.creator_id
    return await is_member(ctx, actor.user_id, value)


async def access_for_update(
    ctx: ActionContext, actor: Actor, realm_id: int, group_id: int, *settings: str
) -> GroupRow:
    """The group, locked, if the actor may manage it or is in one of
    `settings` (Zulip's `access_user_group_for_update`)."""
    group = await group_row(ctx, realm_id, group_id)
    if group.is_system_group:
        raise insufficient()
    if actor.manages_every_group or await may(ctx, actor, group, "can_manage_group"):
        return group
    for setting in settings:
        if await may(ctx, actor, group, setting):
            return group
    raise insufficient()


# -- checks -------------------------------------------------------------------


def check_group_name(name: str) -> str:
    """Zulip's `check_user_group_name`."""
    if not name.strip():
        raise ActionError("User group name can't be empty!")
    if len(name) > MAX_NAME_LENGTH:
        raise ActionError(f"User group name cannot exceed {MAX_NAME_LENGTH} characters.")
    for prefix in INVALID_NAME_PREFIXES:
        if name.startswith(prefix):
            raise ActionError(f"User group name cannot start with '{prefix}'.")
    return name


def check_group_description(description: str) -> str:
    if len(description) > MAX_DESCRIPTION_LENGTH:
        raise ActionError(
            f"User group description cannot exceed {MAX_DESCRIPTION_LENGTH} characters."
        )
    return description


async def check_setting(
    ctx: ActionContext, realm_id: int, setting: str, group_id: int, system: Mapping[str, int]
) -> int:
    """A named group a permission setting may be (Zulip's
    `check_setting_configuration_for_system_groups`)."""
    if setting not in SETTINGS:
        raise ActionError(f"Invalid setting: {setting}")
    cur = await ctx.conn.execute(
        "SELECT deactivated FROM user_groups WHERE id = %s AND realm_id = %s",
        (group_id, realm_id),
    )
    row = await cur.fetchone()
    if row is None:
        raise ActionError("Invalid user group")
    if row[0]:
        raise ActionError("User group is deactivated.")
    if group_id == system["role:internet"]:
        raise ActionError(f"'{setting}' setting cannot be set to 'role:internet' group.")
    if group_id == system["role:everyone"] and not SETTINGS[setting].allow_everyone:
        raise ActionError(f"'{setting}' setting cannot be set to 'role:everyone' group.")
    return group_id


# -- events -------------------------------------------------------------------


async def send_group_events(
    ctx: ActionContext, realm_id: int, events: Iterable[dict[str, Any]]
) -> None:
    """Send `user_group` events to every active user of the realm, in the
    current transaction."""
    events = list(events)
    if not events:
        return
    async with ctx.transaction() as outbox:
        users = await active_user_ids(ctx.conn, realm_id)
        for event in events:
            outbox.send(realm_id, event, users)


def members_event(op: str, group_id: int, user_ids: Iterable[int]) -> dict[str, Any]:
    return {"type": "user_group", "op": op, "group_id": group_id, "user_ids": sorted(user_ids)}


def subgroups_event(op: str, group_id: int, subgroup_ids: Iterable[int]) -> dict[str, Any]:
    return {
        "type": "user_group",
        "op": op,
        "group_id": group_id,
        "direct_subgroup_ids": sorted(subgroup_ids),
    }


def update_event(group_id: int, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "user_group", "op": "update", "group_id": group_id, "data": data}


async def lock_subgroups(ctx: ActionContext, realm_id: int) -> None:
    """Serialize the realm's subgroup additions: the cycle check reads the
    graph another transaction may be about to change."""
    await ctx.conn.execute(
        "SELECT pg_advisory_xact_lock(17, (%s %% 2147483647)::integer)", (realm_id,)
    )
