"""`PATCH realm`: the organization's settings, at Zulip's path (see
server/handlers/domain.py); administrators.

Each given parameter is one change, all in one transaction; the answer
names the properties that changed, as Zulip's does. The rules and events
are the actions' (generation/actions/realm.py); the same changes are the
operator's `eventq realm update`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from generation.actions import realm as actions
from generation.actions.base import ActionContext
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Param
from server.http.params import INT_MAX, decode_json, optional_boolean

# Zulip's group setting change: {"new": the group, "old": what the client
# believes it is now}; eventq's values are system groups, named by id.
_GROUP_CHANGE: JsonSchema = {
    "type": "object",
    "properties": {
        "new": {"type": "integer", "minimum": 1, "maximum": INT_MAX},
        "old": {"type": "integer", "minimum": 1, "maximum": INT_MAX},
    },
    "required": ["new"],
    "additionalProperties": False,
}


@dataclasses.dataclass(frozen=True, slots=True)
class GroupChange:
    new: int
    old: int | None


def _group_change(name: str, raw: str) -> GroupChange:
    value = decode_json(name, raw)
    if not isinstance(value, dict) or set(value) - {"new", "old"} or "new" not in value:
        raise ApiError(f'{name} is not a dict with keys "new" and optionally "old"')
    ids = {}
    for key in ("new", "old"):
        found = value.get(key)
        if found is None and key == "old":
            continue
        if isinstance(found, bool) or not isinstance(found, int) or not 1 <= found <= INT_MAX:
            # Zulip also takes an anonymous group here; eventq's setting has
            # only the two system groups Zulip allows for it.
            raise ApiError(f"{name}['{key}'] is not an integer")
        ids[key] = found
    return GroupChange(ids["new"], ids.get("old"))


_OPTIONAL_BOOLEAN = Param(parse=optional_boolean, schema={"type": ["boolean", "null"]})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RealmChanges:
    name: Annotated[str | None, Param("The organization's name", max_length=1000)] = None
    description: Annotated[
        str | None, Param("The organization's description", max_length=10000)
    ] = None
    allow_message_editing: Annotated[
        bool | None, dataclasses.replace(_OPTIONAL_BOOLEAN, description="Messages may be edited")
    ] = None
    mandatory_topics: Annotated[
        bool | None,
        dataclasses.replace(_OPTIONAL_BOOLEAN, description="Channel messages need a topic"),
    ] = None
    can_access_all_users_group: Annotated[
        GroupChange | None,
        Param(
            "Who sees every user: the id of the role:everyone or role:members system group",
            parse=_group_change,
            schema=_GROUP_CHANGE,
        ),
    ] = None


# parameter -> realm property of `do_set_realm_property`
_PROPERTIES = ("name", "description", "allow_message_editing", "mandatory_topics")


class RealmHandler(ActionHandler):
    """`PATCH realm`: change organization settings; administrators."""

    SUPPORTED_METHODS = ("PATCH",)

    @operation(RealmChanges)
    async def patch(self, user: AuthUser, args: RealmChanges) -> Body:
        changed: dict[str, Any] = {}

        async def change(ctx: ActionContext) -> None:
            async with ctx.transaction():
                for prop in _PROPERTIES:
                    value = getattr(args, prop)
                    if value is not None:
                        await actions.do_set_realm_property(
                            ctx, user.user_id, user.realm_id, prop, value
                        )
                        changed[prop] = value
                group = args.can_access_all_users_group
                if group is not None and await actions.do_set_can_access_all_users_group(
                    ctx, user.user_id, user.realm_id, group.new, old=group.old
                ):
                    changed["can_access_all_users_group"] = group.new

        await self.act(change)
        return changed


ROUTES: list[tuple[str, Any]] = [(r"realm", RealmHandler)]
