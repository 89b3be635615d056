"""Endpoints of the users area, at Zulip's paths (see server/handlers/domain.py):

- `PATCH settings`: the user's own name and settings;
- `POST users/me/presence`: a client's presence ping, answered with the
  realm's presence; `GET realm/presence`: the realm's presence;
- `GET users`, `GET users/me`, `GET users/{id}`: people (a guest of a
  realm that restricts guests sees "Unknown user" for those they may not
  see, and is refused their `GET users/{id}`: generation/actions/access.py);
- `POST users` (create), `PATCH users/{id}` (name, role, custom profile
  field values), `DELETE users/{id}` (deactivate), `POST
  users/{id}/reactivate`: administrators.

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules and the events are the actions' (`generation/actions/users.py`).
Parameters an endpoint does not know are reported back in
`ignored_parameters_unsupported`, as Zulip does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import orjson
import psycopg

from apply_events.fetch.users import fetch_people, fetch_presences
from generation.actions import presence, profile_fields
from generation.actions import users as actions
from generation.actions.access import inaccessible_user_ids
from generation.actions.base import ActionContext
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.handlers.profile_fields import PROFILE_DATA_SCHEMA, profile_data_updates
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, check_length, decode_json

Change = Callable[[ActionContext], Awaitable[Any]]


class UsersAreaHandler(ActionHandler):
    async def apply(self, changes: list[Change]) -> None:
        """Run the changes in one transaction: all of them or none, their
        events after it commits."""
        if not changes:
            return

        async def run(ctx: ActionContext) -> None:
            async with ctx.transaction():
                for change in changes:
                    await change(ctx)

        await self.act(run)

    async def person(
        self,
        user: AuthUser,
        user_id: int,
        *,
        client_gravatar: bool,
        include_custom_profile_fields: bool = False,
    ) -> Any:
        """`user_id` as `user` may read them: "No such user" for no user of
        the realm, then `check_can_access_user`'s refusal."""
        async with self.server.db.connection() as conn:
            found = await fetch_people(
                conn,
                user.realm_id,
                client_gravatar=client_gravatar,
                user_id=user_id,
                include_custom_profile_fields=include_custom_profile_fields,
            )
            if not found:
                raise ApiError("No such user")
            await check_can_access_user(conn, user, user_id)
        return found[0]


async def check_can_access_user(
    conn: psycopg.AsyncConnection[Any], user: AuthUser, target_id: int
) -> None:
    """Refuse `user` a read of a user of their realm they may not see: a
    guest of a realm that restricts guests, and a human they share no
    channel or conversation with (Zulip's `access_user_common`, which
    answers "Insufficient permission"). No statement for a non-guest."""
    if user.is_guest and await inaccessible_user_ids(
        conn, user.realm_id, user.user_id, [target_id]
    ):
        raise ApiError("Insufficient permission")


def _user_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "No such user")


def _plain_string(name: str, raw: str) -> str:
    """A string parameter, also accepted JSON-encoded (`"de"`, as clients of
    older Zulip servers send some)."""
    value = check_length(name, raw, 1000)
    if value.startswith('"'):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        if isinstance(decoded, str):
            return decoded
    return value


# A setting the request does not change (JSON null is a value, refused by
# the action).
UNCHANGED = object()
_SCHEMA_OF: dict[type, JsonSchema] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    str: {"type": "string"},
}
# What the document states beyond a setting's type (the action checks it).
_BOUNDS: dict[str, JsonSchema] = {
    "email_notifications_batching_period_seconds": {
        "minimum": 1,
        "maximum": actions.MAX_EMAIL_BATCHING_PERIOD_SECS,
    },
}


def _setting(setting: str, kind: type) -> tuple[str, object, Any]:
    """The declared parameter of a setting of `actions.USER_SETTINGS`: its
    JSON value, checked by the action; a string one also as is."""
    description = f"Your {setting} setting"
    if kind is str:
        param = Param(
            description,
            parse=_plain_string,
            schema={"type": "string", "maxLength": 1000},
            json=False,
        )
    else:
        schema = _SCHEMA_OF[kind] | _BOUNDS.get(setting, {})
        param = Param(description, parse=decode_json, schema=schema)
    return setting, Annotated[object, param], dataclasses.field(default=UNCHANGED)


# `full_name`, then every setting the action knows, each `UNCHANGED` unless
# given.
SettingsChange: type[object] = dataclasses.make_dataclass(
    "SettingsChange",
    [
        ("full_name", Annotated[str | None, Param("Your name")], dataclasses.field(default=None)),
        *(_setting(setting, kind) for setting, kind in actions.USER_SETTINGS.items()),
    ],
    frozen=True,
    kw_only=True,
    slots=True,
)


def _setting_change(user_id: int, setting: str, value: object) -> Change:
    return lambda ctx: actions.do_change_user_setting(ctx, user_id, setting, value)


class SettingsHandler(UsersAreaHandler):
    """`PATCH settings`: `full_name` and the settings of
    `actions.USER_SETTINGS`; one `realm_user` / `user_settings` event per
    changed value."""

    SUPPORTED_METHODS = ("PATCH",)

    @operation(SettingsChange)
    async def patch(self, user: AuthUser, args: object) -> Body:
        changes: list[Change] = []
        full_name: str | None = getattr(args, "full_name")  # noqa: B009 (declared dynamically)
        if full_name is not None:
            changes.append(
                lambda ctx: actions.do_change_full_name(
                    ctx, user.user_id, user.realm_id, user.user_id, full_name
                )
            )
        for setting in actions.USER_SETTINGS:
            value = getattr(args, setting)
            if value is not UNCHANGED:
                changes.append(_setting_change(user.user_id, setting, value))
        await self.apply(changes)
        return None


def _status(name: str, raw: str) -> str:
    status = check_length(name, raw, 100)
    if status not in ("active", "idle"):
        raise ApiError(f"Invalid status: {status}")
    return status


SlimPresence = Annotated[bool, Param("Presence keyed by user id (else by e-mail)")]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdatePresence:
    status: Annotated[
        str,
        Param(
            "active or idle",
            parse=_status,
            schema={"type": "string", "enum": ["active", "idle"]},
            json=False,
        ),
    ]
    ping_only: Annotated[bool, Param("Answer without the realm's presence")] = False
    new_user_input: Annotated[bool, Param("Accepted; eventq keeps no activity log")] = False
    slim_presence: SlimPresence = False


class PresenceHandler(UsersAreaHandler):
    """`POST users/me/presence`: `status` (active or idle), `ping_only`,
    `new_user_input` (accepted; eventq keeps no activity log),
    `slim_presence`. Answers the realm's presence unless `ping_only`."""

    SUPPORTED_METHODS = ("POST",)

    @operation(UpdatePresence)
    async def post(self, user: AuthUser, args: UpdatePresence) -> Body:
        await self.act(lambda ctx: presence.do_update_presence(ctx, user.user_id, args.status))
        if args.ping_only:
            return None
        async with self.server.db.connection() as conn:
            presences = await fetch_presences(
                conn, user.realm_id, slim=args.slim_presence, viewer_id=user.user_id
            )
        return {"presences": presences, "server_timestamp": time.time()}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RealmPresence:
    slim_presence: SlimPresence = False


class RealmPresenceHandler(UsersAreaHandler):
    """`GET realm/presence`: every active user's presence (legacy form,
    keyed by email, unless `slim_presence`)."""

    SUPPORTED_METHODS = ("GET",)

    @operation(RealmPresence)
    async def get(self, user: AuthUser, args: RealmPresence) -> Body:
        async with self.server.db.connection() as conn:
            presences = await fetch_presences(
                conn, user.realm_id, slim=args.slim_presence, viewer_id=user.user_id
            )
        return {"presences": presences, "server_timestamp": time.time()}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class People:
    client_gravatar: Annotated[bool, Param("avatar_url null for Gravatars")] = True
    include_custom_profile_fields: Annotated[
        bool, Param("Each human's custom profile field values (`profile_data`)")
    ] = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CreateUser:
    email: Annotated[str, Param("The new user's e-mail", max_length=1000)]
    full_name: Annotated[str, Param("The new user's name", max_length=1000)]


class UsersHandler(UsersAreaHandler):
    """`GET users`: every user of the realm, active or not (`members`; for a
    restricted guest, those they may not see as "Unknown user", whatever the
    client: Zulip's `get_members_backend`);
    `POST users`: an administrator creates a user (`email`, `full_name`;
    answers `user_id`). eventq has no passwords: a `password` is ignored,
    and the new user's API key is issued with `eventq user rotate-key`."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(People)
    async def get(self, user: AuthUser, args: People) -> Body:
        async with self.server.db.connection() as conn:
            members = await fetch_people(
                conn,
                user.realm_id,
                client_gravatar=args.client_gravatar,
                viewer_id=user.user_id,
                include_custom_profile_fields=args.include_custom_profile_fields,
            )
        return {"members": members}

    @operation(CreateUser)
    async def post(self, user: AuthUser, args: CreateUser) -> Body:
        created = await self.act(
            lambda ctx: actions.do_create_user(
                ctx, user.user_id, user.realm_id, args.email, args.full_name
            )
        )
        return {"user_id": created.user_id}


class OwnUserHandler(UsersAreaHandler):
    """`GET users/me`: the user's own profile (avatar always a URL; a
    human's with their custom profile field values, as Zulip's)."""

    SUPPORTED_METHODS = ("GET",)

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        me = await self.person(
            user, user.user_id, client_gravatar=False, include_custom_profile_fields=True
        )
        return dict(me)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateUser:
    full_name: Annotated[str | None, Param("The user's new name")] = None
    role: Annotated[int | None, Param("The user's new role", minimum=0, maximum=INT_MAX)] = None
    profile_data: Annotated[
        list[tuple[int, object]] | None,
        Param(
            "The user's custom profile field values to set: {id, value} objects; a null"
            " or empty value removes the user's value",
            parse=profile_data_updates,
            schema=PROFILE_DATA_SCHEMA,
        ),
    ] = None


class UserHandler(UsersAreaHandler):
    """`GET users/{id}` (refused for a user one may not see:
    `check_can_access_user`); administrators: `PATCH users/{id}` (`full_name`,
    `role`, `profile_data`) and `DELETE users/{id}` (deactivate)."""

    SUPPORTED_METHODS = ("GET", "PATCH", "DELETE")

    @operation(People)
    async def get(self, user: AuthUser, args: People, raw_id: str) -> Body:
        found = await self.person(
            user,
            _user_id(raw_id),
            client_gravatar=args.client_gravatar,
            include_custom_profile_fields=args.include_custom_profile_fields,
        )
        return {"user": found}

    @operation(UpdateUser)
    async def patch(self, user: AuthUser, args: UpdateUser, raw_id: str) -> Body:
        target = _user_id(raw_id)
        changes: list[Change] = []
        full_name, role = args.full_name, args.role
        if full_name is not None:
            changes.append(
                lambda ctx: actions.do_change_full_name(
                    ctx, user.user_id, user.realm_id, target, full_name
                )
            )
        if role is not None:
            changes.append(
                lambda ctx: actions.do_change_user_role(
                    ctx, user.user_id, user.realm_id, target, role
                )
            )
        if args.profile_data is not None:
            changes.extend(_profile_data_changes(user, target, args.profile_data))
        await self.apply(changes)
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        target = _user_id(raw_id)
        await self.act(
            lambda ctx: actions.do_deactivate_user(ctx, user.user_id, user.realm_id, target)
        )
        return None


def _profile_data_changes(
    user: AuthUser, target: int, data: list[tuple[int, object]]
) -> list[Change]:
    """Zulip's `profile_data` of `PATCH users/{id}`: the values given as
    null or empty are removed first, then the others set."""
    removed = [field_id for field_id, value in data if not value]
    given = [(field_id, value) for field_id, value in data if value]
    changes: list[Change] = []
    if removed:
        changes.append(
            lambda ctx: profile_fields.do_remove_profile_data(
                ctx, user.user_id, user.realm_id, target, removed
            )
        )
    if given:
        changes.append(
            lambda ctx: profile_fields.do_update_profile_data(
                ctx, user.user_id, user.realm_id, target, given
            )
        )
    return changes


class ReactivateHandler(UsersAreaHandler):
    """`POST users/{id}/reactivate`: administrators."""

    SUPPORTED_METHODS = ("POST",)

    @operation(Nothing)
    async def post(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        target = _user_id(raw_id)
        await self.act(
            lambda ctx: actions.do_reactivate_user(ctx, user.user_id, user.realm_id, target)
        )
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"settings", SettingsHandler),
    (r"users/me/presence", PresenceHandler),
    (r"realm/presence", RealmPresenceHandler),
    (r"users/me", OwnUserHandler),
    (r"users", UsersHandler),
    (r"users/([0-9]+)", UserHandler),
    (r"users/([0-9]+)/reactivate", ReactivateHandler),
]
