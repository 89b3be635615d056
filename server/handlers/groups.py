"""Endpoints of user groups, at Zulip's paths (see server/handlers/domain.py):

- `GET user_groups`: the realm's groups (`include_deactivated_groups`);
- `POST user_groups/create`: a new group (`name`, `description`, `members`,
  `subgroups`, and permission settings as named groups' ids); answers
  `group_id`;
- `PATCH user_groups/{id}`: its `name` and `description`;
- `POST user_groups/{id}/members`: `add`, `delete`, `add_subgroups`,
  `delete_subgroups`; `GET user_groups/{id}/members`: its members
  (`direct_member_only`);
- `POST user_groups/{id}/subgroups`: `add`, `delete`;
- `POST user_groups/{id}/deactivate`.

The reads are for members and above, as Zulip's (`require_member_or_admin`);
the rules and the events are the actions' (`generation/actions/groups`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from apply_events.fetch.groups import fetch_groups, group_deactivated, group_member_ids
from generation.actions import groups as actions
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, decode_json


def _group_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Invalid user group")


def _ids(name: str, raw: str) -> list[int]:
    """A JSON list of ids (users or groups), at most
    `actions.MAX_IDS_PER_REQUEST` of them."""
    value = decode_json(name, raw)
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > actions.MAX_IDS_PER_REQUEST:
        raise ApiError(f"{name} has more than {actions.MAX_IDS_PER_REQUEST} items")
    for index, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool):
            raise ApiError(f"{name}[{index}] is not an integer")
        if not 0 < item <= INT_MAX:
            raise ApiError(f"{name}[{index}] is not a valid id")
    return value


_IDS: JsonSchema = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": INT_MAX}}


def _ids_param(description: str) -> Param:
    """A JSON list of ids (its bound in words: see server/http/declared.py,
    QUERY_MAX_LENGTH)."""
    return Param(
        f"{description} (at most {actions.MAX_IDS_PER_REQUEST:,})", parse=_ids, schema=_IDS
    )


Members = Annotated[list[int], _ids_param("The ids of users")]
Subgroups = Annotated[list[int], _ids_param("The ids of groups")]
# A permission setting, as a named group's id (eventq keeps no anonymous
# groups but Zulip's default "the creator").
Setting = Annotated[int | None, Param("A named group's id", minimum=1, maximum=INT_MAX)]


class GroupsAreaHandler(ActionHandler):
    def require_member(self, user: AuthUser) -> None:
        """Zulip's `require_member_or_admin`."""
        if user.is_guest:
            raise ApiError("Not allowed for guest users")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListGroups:
    include_deactivated_groups: Annotated[bool, Param("Deactivated groups too")] = False


class UserGroupsHandler(GroupsAreaHandler):
    """`GET user_groups`: every group of the realm, in id order."""

    SUPPORTED_METHODS = ("GET",)

    @operation(ListGroups)
    async def get(self, user: AuthUser, args: ListGroups) -> Body:
        self.require_member(user)
        async with self.server.db.connection() as conn:
            found = await fetch_groups(
                conn, user.realm_id, include_deactivated=args.include_deactivated_groups
            )
        return {"user_groups": found}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CreateGroup:
    name: Annotated[str, Param("The group's name", max_length=1000)]
    description: Annotated[str, Param("What the group is", max_length=2000)]
    members: Members
    subgroups: Subgroups = dataclasses.field(default_factory=list)
    can_add_members_group: Setting = None
    can_join_group: Setting = None
    can_leave_group: Setting = None
    can_manage_group: Setting = None
    can_mention_group: Setting = None
    can_remove_members_group: Setting = None


class CreateGroupHandler(GroupsAreaHandler):
    """`POST user_groups/create`: anyone but a guest; answers `group_id`."""

    SUPPORTED_METHODS = ("POST",)

    @operation(CreateGroup)
    async def post(self, user: AuthUser, args: CreateGroup) -> Body:
        settings = {
            setting: value
            for setting in actions.SETTINGS
            if (value := getattr(args, setting)) is not None
        }
        group_id = await self.act(
            lambda ctx: actions.do_create_user_group(
                ctx,
                user.user_id,
                user.realm_id,
                args.name,
                args.description,
                args.members,
                args.subgroups,
                settings,
            )
        )
        return {"group_id": group_id}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateGroup:
    name: Annotated[str | None, Param("The group's new name", max_length=1000)] = None
    description: Annotated[str | None, Param("The group's new description", max_length=2000)] = None


class UserGroupHandler(GroupsAreaHandler):
    """`PATCH user_groups/{id}`: its managers."""

    SUPPORTED_METHODS = ("PATCH",)

    @operation(UpdateGroup)
    async def patch(self, user: AuthUser, args: UpdateGroup, raw_id: str) -> Body:
        group_id = _group_id(raw_id)
        await self.act(
            lambda ctx: actions.do_update_user_group(
                ctx,
                user.user_id,
                user.realm_id,
                group_id,
                name=args.name,
                description=args.description,
            )
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateMembers:
    add: Members = dataclasses.field(default_factory=list)
    delete: Members = dataclasses.field(default_factory=list)
    add_subgroups: Subgroups = dataclasses.field(default_factory=list)
    delete_subgroups: Subgroups = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListMembers:
    direct_member_only: Annotated[bool, Param("Only its direct members")] = False


class GroupMembersHandler(GroupsAreaHandler):
    """`POST user_groups/{id}/members`: direct members and subgroups, all or
    nothing; `GET user_groups/{id}/members`: its active members."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(ListMembers)
    async def get(self, user: AuthUser, args: ListMembers, raw_id: str) -> Body:
        self.require_member(user)
        group_id = _group_id(raw_id)
        async with self.server.db.connection() as conn:
            deactivated = await group_deactivated(conn, user.realm_id, group_id)
            if deactivated is None:
                raise ApiError("Invalid user group")
            if deactivated:
                raise ApiError("User group is deactivated.")
            members = await group_member_ids(conn, group_id, direct_only=args.direct_member_only)
        return {"members": members}

    @operation(UpdateMembers)
    async def post(self, user: AuthUser, args: UpdateMembers, raw_id: str) -> Body:
        self.require_member(user)
        group_id = _group_id(raw_id)
        await self.act(
            lambda ctx: actions.do_update_user_group_members(
                ctx,
                user.user_id,
                user.realm_id,
                group_id,
                add=args.add,
                delete=args.delete,
                add_subgroups=args.add_subgroups,
                delete_subgroups=args.delete_subgroups,
            )
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateSubgroups:
    add: Subgroups = dataclasses.field(default_factory=list)
    delete: Subgroups = dataclasses.field(default_factory=list)


class GroupSubgroupsHandler(GroupsAreaHandler):
    """`POST user_groups/{id}/subgroups`: direct subgroups, all or nothing."""

    SUPPORTED_METHODS = ("POST",)

    @operation(UpdateSubgroups)
    async def post(self, user: AuthUser, args: UpdateSubgroups, raw_id: str) -> Body:
        self.require_member(user)
        group_id = _group_id(raw_id)
        await self.act(
            lambda ctx: actions.do_update_user_group_subgroups(
                ctx, user.user_id, user.realm_id, group_id, add=args.add, delete=args.delete
            )
        )
        return None


class DeactivateGroupHandler(GroupsAreaHandler):
    """`POST user_groups/{id}/deactivate`: its managers, once no active group
    uses it."""

    SUPPORTED_METHODS = ("POST",)

    @operation(Nothing)
    async def post(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        group_id = _group_id(raw_id)
        await self.act(
            lambda ctx: actions.do_deactivate_user_group(ctx, user.user_id, user.realm_id, group_id)
        )
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"user_groups", UserGroupsHandler),
    (r"user_groups/create", CreateGroupHandler),
    (r"user_groups/([0-9]+)", UserGroupHandler),
    (r"user_groups/([0-9]+)/members", GroupMembersHandler),
    (r"user_groups/([0-9]+)/subgroups", GroupSubgroupsHandler),
    (r"user_groups/([0-9]+)/deactivate", DeactivateGroupHandler),
]
