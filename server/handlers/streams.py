"""Endpoints of the streams area, at Zulip's paths (see server/handlers/domain.py):

- `GET/POST/DELETE users/me/subscriptions`: list, subscribe (creating missing
  streams), unsubscribe;
- `POST users/me/subscriptions/properties`: the user's own stream settings;
- `GET streams`, `PATCH/DELETE streams/{stream_id}`: list, change, archive;
- `POST/DELETE default_streams`: the streams new users join.

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules and the events are the actions' (`generation/actions/streams.py`).
Parameters an endpoint does not know are reported back in
`ignored_parameters_unsupported`, as Zulip does.
"""

from __future__ import annotations

from typing import Any

from apply_events.fetch.streams import fetch_subscriptions, list_streams
from apply_events.state import StateContext
from generation.actions import streams as actions
from generation.actions.base import ActionContext
from server.errors import ApiError, missing_argument
from server.handlers.actions import ActionHandler
from server.http.params import INT_MAX, Params

# Upper bounds on list parameters: far above any real request, low enough
# that one request cannot make the server work for minutes.
MAX_STREAMS_PER_REQUEST = 500
MAX_PRINCIPALS = 1000
MAX_SUBSCRIPTION_CHANGES = 500


def _stream_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Invalid channel ID")


def _principals(params: Params) -> list[str | int] | None:
    """`principals`: a JSON list of user emails or of user ids."""
    value = params.json("principals")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError("principals is not a list")
    if len(value) > MAX_PRINCIPALS:
        raise ApiError(f"principals has more than {MAX_PRINCIPALS} items")
    if all(isinstance(item, str) and len(item) <= 254 for item in value):
        return list(value)
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        if any(not 0 < item <= INT_MAX for item in value):
            raise ApiError("No such user")
        return list(value)
    raise ApiError("principals is not a list of emails or a list of user ids")


def _stream_requests(params: Params) -> list[actions.StreamRequest]:
    """`subscriptions` of POST: `[{"name": ..., "description"?: ...}, ...]`."""
    value = params.json("subscriptions")
    if value is None:
        raise missing_argument("subscriptions")
    if not isinstance(value, list):
        raise ApiError("subscriptions is not a list")
    if len(value) > MAX_STREAMS_PER_REQUEST:
        raise ApiError(f"subscriptions has more than {MAX_STREAMS_PER_REQUEST} items")
    requests = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise ApiError(f"subscriptions[{index}] is not a dict")
        name = item.get("name")
        if name is None:
            raise ApiError(f"subscriptions[{index}] is missing 'name'")
        if not isinstance(name, str):
            raise ApiError(f'subscriptions[{index}]["name"] is not a string')
        description = item.get("description", "")
        if not isinstance(description, str):
            raise ApiError(f'subscriptions[{index}]["description"] is not a string')
        if len(name) > 1000 or len(description) > 10_000:
            raise ApiError(f"subscriptions[{index}] is too long")
        requests.append(actions.StreamRequest(name, description))
    return requests


def _stream_names(params: Params) -> list[str]:
    """`subscriptions` of DELETE: a JSON list of stream names."""
    value = params.json("subscriptions")
    if value is None:
        raise missing_argument("subscriptions")
    if not isinstance(value, list):
        raise ApiError("subscriptions is not a list")
    if len(value) > MAX_STREAMS_PER_REQUEST:
        raise ApiError(f"subscriptions has more than {MAX_STREAMS_PER_REQUEST} items")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ApiError(f"subscriptions[{index}] is not a string")
        if len(item) > 1000:
            raise ApiError(f"subscriptions[{index}] is too long")
    return value


def _subscription_changes(params: Params) -> list[tuple[int, str, Any]]:
    """`subscription_data`: `[{"stream_id": N, "property": ..., "value": ...}]`."""
    value = params.json("subscription_data")
    if value is None:
        raise missing_argument("subscription_data")
    if not isinstance(value, list):
        raise ApiError("subscription_data is not a list")
    if len(value) > MAX_SUBSCRIPTION_CHANGES:
        raise ApiError(f"subscription_data has more than {MAX_SUBSCRIPTION_CHANGES} items")
    changes = []
    for index, item in enumerate(value):
        where = f"subscription_data[{index}]"
        if not isinstance(item, dict):
            raise ApiError(f"{where} is not a dict")
        for key in ("stream_id", "property", "value"):
            if key not in item:
                raise ApiError(f"{where} is missing '{key}'")
        stream_id, prop = item["stream_id"], item["property"]
        if not isinstance(stream_id, int) or isinstance(stream_id, bool):
            raise ApiError(f'{where}["stream_id"] is not an integer')
        if not isinstance(prop, str):
            raise ApiError(f'{where}["property"] is not a string')
        if not 0 < stream_id <= INT_MAX:
            raise ApiError("Invalid channel ID")
        changes.append((stream_id, prop, item["value"]))
    return changes


class SubscriptionsHandler(ActionHandler):
    """`users/me/subscriptions`."""

    SUPPORTED_METHODS = ("GET", "POST", "DELETE")

    async def get(self) -> None:
        user = await self.authenticate()
        params = self.params()
        ctx = StateContext(
            user_id=user.user_id,
            realm_id=user.realm_id,
            queue_id="",
            include_subscribers=params.boolean("include_subscribers", False),
        )
        async with self.server.db.connection() as conn:
            state = await fetch_subscriptions(conn, ctx)
        self.succeed(params, {"subscriptions": state["subscriptions"]})

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        requests = _stream_requests(params)
        principals = _principals(params)
        invite_only = params.boolean("invite_only", False)
        fatal = params.boolean("authorization_errors_fatal", True)
        result = await self.act(
            lambda ctx: actions.do_add_subscriptions(
                ctx,
                user.user_id,
                user.realm_id,
                requests,
                principals=principals,
                invite_only=invite_only,
                authorization_errors_fatal=fatal,
            )
        )
        # Keyed by user id (Zulip's form since feature level 289).
        body: dict[str, Any] = {
            "subscribed": {str(k): v for k, v in result.subscribed.items()},
            "already_subscribed": {str(k): v for k, v in result.already_subscribed.items()},
        }
        if not fatal:
            body["unauthorized"] = result.unauthorized
        self.succeed(params, body)

    async def delete(self) -> None:
        user = await self.authenticate()
        params = self.params()
        names = _stream_names(params)
        principals = _principals(params)
        result = await self.act(
            lambda ctx: actions.do_remove_subscriptions(
                ctx, user.user_id, user.realm_id, names, principals=principals
            )
        )
        self.succeed(params, {"removed": result.removed, "not_removed": result.not_removed})


class SubscriptionPropertiesHandler(ActionHandler):
    """`users/me/subscriptions/properties`."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        changes = _subscription_changes(params)
        stored = await self.act(
            lambda ctx: actions.do_update_subscription_properties(ctx, user.user_id, changes)
        )
        self.succeed(params, {"subscription_data": stored})


class StreamsHandler(ActionHandler):
    """`GET streams`: the streams the user can see (public ones, unless
    `include_public` is false; subscribed ones, unless `include_subscribed`
    is false; default ones with `include_default`)."""

    SUPPORTED_METHODS = ("GET",)

    async def get(self) -> None:
        user = await self.authenticate()
        params = self.params()
        include_public = params.boolean("include_public", True)
        include_subscribed = params.boolean("include_subscribed", True)
        include_default = params.boolean("include_default", False)
        async with self.server.db.connection() as conn:
            streams = await list_streams(
                conn,
                user.user_id,
                user.realm_id,
                include_public=include_public,
                include_subscribed=include_subscribed,
                include_default=include_default,
            )
        self.succeed(params, {"streams": streams})


class StreamHandler(ActionHandler):
    """`streams/{stream_id}`: PATCH changes the name (`new_name`),
    `description` and privacy (`is_private`), all or nothing; DELETE
    archives the stream."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    async def patch(self, raw_stream_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        stream_id = _stream_id(raw_stream_id)
        # The zulip client's update_stream repeats the id in the body.
        params.integer("stream_id")
        new_name = params.string("new_name", max_length=1000)
        description = params.string("description", max_length=10_000)
        is_private = params.json("is_private")
        if is_private is not None and not isinstance(is_private, bool):
            raise ApiError("is_private is not a boolean")

        async def change(ctx: ActionContext) -> None:
            async with ctx.transaction():
                if is_private is not None:
                    await actions.do_change_stream_invite_only(
                        ctx, user.user_id, user.realm_id, stream_id, is_private
                    )
                if description is not None:
                    await actions.do_change_stream_description(
                        ctx, user.user_id, user.realm_id, stream_id, description
                    )
                if new_name is not None:
                    await actions.do_rename_stream(
                        ctx, user.user_id, user.realm_id, stream_id, new_name
                    )

        await self.act(change)
        self.succeed(params)

    async def delete(self, raw_stream_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        stream_id = _stream_id(raw_stream_id)
        await self.act(
            lambda ctx: actions.do_delete_stream(ctx, user.user_id, user.realm_id, stream_id)
        )
        self.succeed(params)


class DefaultStreamsHandler(ActionHandler):
    """`default_streams`: POST adds `stream_id`, DELETE removes it."""

    SUPPORTED_METHODS = ("POST", "DELETE")

    def _stream_id(self, params: Params) -> int:
        stream_id = params.integer("stream_id", minimum=1)
        if stream_id is None:
            raise missing_argument("stream_id")
        return stream_id

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        stream_id = self._stream_id(params)
        await self.act(
            lambda ctx: actions.do_add_default_stream(ctx, user.user_id, user.realm_id, stream_id)
        )
        self.succeed(params)

    async def delete(self) -> None:
        user = await self.authenticate()
        params = self.params()
        stream_id = self._stream_id(params)
        await self.act(
            lambda ctx: actions.do_remove_default_stream(
                ctx, user.user_id, user.realm_id, stream_id
            )
        )
        self.succeed(params)


ROUTES: list[tuple[str, Any]] = [
    (r"users/me/subscriptions", SubscriptionsHandler),
    (r"users/me/subscriptions/properties", SubscriptionPropertiesHandler),
    (r"streams", StreamsHandler),
    (r"streams/([0-9]+)", StreamHandler),
    (r"default_streams", DefaultStreamsHandler),
]
