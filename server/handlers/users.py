"""Endpoints of the users area, at Zulip's paths (see server/handlers/domain.py):

- `PATCH settings`: the user's own name and settings;
- `POST users/me/presence`: a client's presence ping, answered with the
  realm's presence; `GET realm/presence`: the realm's presence;
- `GET users`, `GET users/me`, `GET users/{id}`: people;
- `POST users` (create), `PATCH users/{id}` (name, role), `DELETE
  users/{id}` (deactivate), `POST users/{id}/reactivate`: administrators.

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules and the events are the actions' (`generation/actions/users.py`).
Parameters an endpoint does not know are reported back in
`ignored_parameters_unsupported`, as Zulip does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from apply_events.fetch.users import fetch_people, fetch_presences
from generation.actions import users as actions
from generation.actions.base import ActionContext
from server.errors import ApiError
from server.handlers.actions import ActionHandler
from server.http.auth import AuthUser
from server.http.params import INT_MAX, Params

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

    async def person(self, user: AuthUser, user_id: int, *, client_gravatar: bool) -> Any:
        async with self.server.db.connection() as conn:
            found = await fetch_people(
                conn, user.realm_id, client_gravatar=client_gravatar, user_id=user_id
            )
        if not found:
            raise ApiError("No such user")
        return found[0]


def _user_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "No such user")


def _json_value(params: Params, name: str) -> tuple[bool, Any]:
    """(given, decoded value) of a JSON-encoded parameter."""
    if name not in params:
        return False, None
    return True, params.json(name)


def _plain_string(params: Params, name: str) -> str | None:
    """A string parameter, also accepted JSON-encoded (`"de"`, as clients of
    older Zulip servers send some)."""
    value = params.string(name, max_length=1000)
    if value is not None and value.startswith('"'):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        if isinstance(decoded, str):
            return decoded
    return value


def _setting_change(user_id: int, setting: str, value: object) -> Change:
    return lambda ctx: actions.do_change_user_setting(ctx, user_id, setting, value)


class SettingsHandler(UsersAreaHandler):
    """`PATCH settings`: `full_name` and the settings of
    `actions.USER_SETTINGS`; one `realm_user` / `user_settings` event per
    changed value."""

    SUPPORTED_METHODS = ("PATCH",)

    async def patch(self) -> None:
        user = await self.authenticate()
        params = self.params()
        changes: list[Change] = []
        full_name = params.string("full_name")
        if full_name is not None:
            changes.append(
                lambda ctx: actions.do_change_full_name(
                    ctx, user.user_id, user.realm_id, user.user_id, full_name
                )
            )
        for setting in actions.USER_SETTINGS:
            if setting == "default_language":
                language = _plain_string(params, setting)
                given, value = language is not None, language
            else:
                given, value = _json_value(params, setting)
            if given:
                changes.append(_setting_change(user.user_id, setting, value))
        await self.apply(changes)
        self.succeed(params)


class PresenceHandler(UsersAreaHandler):
    """`POST users/me/presence`: `status` (active or idle), `ping_only`,
    `new_user_input` (accepted; eventq keeps no activity log),
    `slim_presence`. Answers the realm's presence unless `ping_only`."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        status = params.required_string("status", max_length=100)
        if status not in ("active", "idle"):
            raise ApiError(f"Invalid status: {status}")
        ping_only = params.boolean("ping_only", False)
        params.boolean("new_user_input", False)
        slim = params.boolean("slim_presence", False)
        await self.act(lambda ctx: actions.do_update_presence(ctx, user.user_id, status))
        if ping_only:
            self.succeed(params)
            return
        async with self.server.db.connection() as conn:
            presences = await fetch_presences(conn, user.realm_id, slim=slim)
        self.succeed(params, {"presences": presences, "server_timestamp": time.time()})


class RealmPresenceHandler(UsersAreaHandler):
    """`GET realm/presence`: every active user's presence (legacy form,
    keyed by email, unless `slim_presence`)."""

    SUPPORTED_METHODS = ("GET",)

    async def get(self) -> None:
        user = await self.authenticate()
        params = self.params()
        slim = params.boolean("slim_presence", False)
        async with self.server.db.connection() as conn:
            presences = await fetch_presences(conn, user.realm_id, slim=slim)
        self.succeed(params, {"presences": presences, "server_timestamp": time.time()})


class UsersHandler(UsersAreaHandler):
    """`GET users`: every user of the realm, active or not (`members`);
    `POST users`: an administrator creates a user (`email`, `full_name`;
    answers `user_id`). eventq has no passwords: a `password` is ignored,
    and the new user's API key is issued with `eventq user rotate-key`."""

    SUPPORTED_METHODS = ("GET", "POST")

    async def get(self) -> None:
        user = await self.authenticate()
        params = self.params()
        client_gravatar = params.boolean("client_gravatar", True)
        params.boolean("include_custom_profile_fields", False)  # there are none
        async with self.server.db.connection() as conn:
            members = await fetch_people(conn, user.realm_id, client_gravatar=client_gravatar)
        self.succeed(params, {"members": members})

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        email = params.required_string("email", max_length=1000)
        full_name = params.required_string("full_name", max_length=1000)
        created = await self.act(
            lambda ctx: actions.do_create_user(ctx, user.user_id, user.realm_id, email, full_name)
        )
        self.succeed(params, {"user_id": created.user_id})


class OwnUserHandler(UsersAreaHandler):
    """`GET users/me`: the user's own profile (avatar always a URL)."""

    SUPPORTED_METHODS = ("GET",)

    async def get(self) -> None:
        user = await self.authenticate()
        params = self.params()
        me = await self.person(user, user.user_id, client_gravatar=False)
        self.succeed(params, dict(me))


class UserHandler(UsersAreaHandler):
    """`GET users/{id}`; administrators: `PATCH users/{id}` (`full_name`,
    `role`) and `DELETE users/{id}` (deactivate)."""

    SUPPORTED_METHODS = ("GET", "PATCH", "DELETE")

    async def get(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        client_gravatar = params.boolean("client_gravatar", True)
        params.boolean("include_custom_profile_fields", False)
        found = await self.person(user, _user_id(raw_id), client_gravatar=client_gravatar)
        self.succeed(params, {"user": found})

    async def patch(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        target = _user_id(raw_id)
        changes: list[Change] = []
        full_name = params.string("full_name")
        if full_name is not None:
            changes.append(
                lambda ctx: actions.do_change_full_name(
                    ctx, user.user_id, user.realm_id, target, full_name
                )
            )
        role = params.integer("role", minimum=0, maximum=INT_MAX)
        if role is not None:
            changes.append(
                lambda ctx: actions.do_change_user_role(
                    ctx, user.user_id, user.realm_id, target, role
                )
            )
        await self.apply(changes)
        self.succeed(params)

    async def delete(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        target = _user_id(raw_id)
        await self.act(
            lambda ctx: actions.do_deactivate_user(ctx, user.user_id, user.realm_id, target)
        )
        self.succeed(params)


class ReactivateHandler(UsersAreaHandler):
    """`POST users/{id}/reactivate`: administrators."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        target = _user_id(raw_id)
        await self.act(
            lambda ctx: actions.do_reactivate_user(ctx, user.user_id, user.realm_id, target)
        )
        self.succeed(params)


ROUTES: list[tuple[str, Any]] = [
    (r"settings", SettingsHandler),
    (r"users/me/presence", PresenceHandler),
    (r"realm/presence", RealmPresenceHandler),
    (r"users/me", OwnUserHandler),
    (r"users", UsersHandler),
    (r"users/([0-9]+)", UserHandler),
    (r"users/([0-9]+)/reactivate", ReactivateHandler),
]
