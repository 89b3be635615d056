"""Endpoints of the streams area, at Zulip's paths (see server/handlers/domain.py):

- `GET/POST/DELETE users/me/subscriptions`: list, subscribe (creating missing
  streams), unsubscribe;
- `POST users/me/subscriptions/properties`: the user's own stream settings;
- `GET streams`, `PATCH/DELETE streams/{stream_id}`: list, change, archive;
- `POST/DELETE default_streams`: the streams new users join.

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules and the events are the actions' (the package `generation/actions/streams/`,
whose docstring says which module holds which action).
Parameters an endpoint does not know are reported back in
`ignored_parameters_unsupported`, as Zulip does.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from apply_events.fetch.streams import fetch_subscriptions, list_streams
from apply_events.state import StateContext
from generation.actions import streams as actions
from generation.actions.base import ActionContext
from server.errors import ApiError, missing_argument
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, decode_json

# Upper bounds on list parameters: far above any real request, low enough
# that one request cannot make the server work for minutes.
MAX_STREAMS_PER_REQUEST = 500
MAX_PRINCIPALS = 1000
MAX_SUBSCRIPTION_CHANGES = 500
MAX_NAME_CHARS = 1000
MAX_DESCRIPTION_CHARS = 10_000
MAX_EMAIL_CHARS = 254

_ID: JsonSchema = {"type": "integer", "minimum": 1, "maximum": INT_MAX}


def _stream_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Invalid channel ID")


def _principals(name: str, raw: str) -> list[str | int] | None:
    """`principals`: a JSON list of user emails or of user ids."""
    value = decode_json(name, raw)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError("principals is not a list")
    if len(value) > MAX_PRINCIPALS:
        raise ApiError(f"principals has more than {MAX_PRINCIPALS} items")
    if all(isinstance(item, str) and len(item) <= MAX_EMAIL_CHARS for item in value):
        return list(value)
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        if any(not 0 < item <= INT_MAX for item in value):
            raise ApiError("No such user")
        return list(value)
    raise ApiError("principals is not a list of emails or a list of user ids")


# The sizes inside the JSON parameters below are stated in their
# descriptions (server/http/declared.py, QUERY_MAX_LENGTH).
_PRINCIPALS: JsonSchema = {
    "type": ["array", "null"],
    "anyOf": [{"items": {"type": "string"}}, {"items": _ID}],
}
Principals = Annotated[
    list[str | int] | None,
    Param(
        f"The users, by e-mail or by id (default: you; at most {MAX_PRINCIPALS:,},"
        f" e-mails of at most {MAX_EMAIL_CHARS} characters)",
        parse=_principals,
        schema=_PRINCIPALS,
    ),
]


def _stream_requests(name: str, raw: str) -> list[actions.StreamRequest]:
    """`subscriptions` of POST: `[{"name": ..., "description"?: ...}, ...]`."""
    value = decode_json(name, raw)
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
        channel = item.get("name")
        if channel is None:
            raise ApiError(f"subscriptions[{index}] is missing 'name'")
        if not isinstance(channel, str):
            raise ApiError(f'subscriptions[{index}]["name"] is not a string')
        description = item.get("description", "")
        if not isinstance(description, str):
            raise ApiError(f'subscriptions[{index}]["description"] is not a string')
        if len(channel) > MAX_NAME_CHARS or len(description) > MAX_DESCRIPTION_CHARS:
            raise ApiError(f"subscriptions[{index}] is too long")
        requests.append(actions.StreamRequest(channel, description))
    return requests


_STREAM_REQUESTS: JsonSchema = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "description": {"type": "string"}},
        "required": ["name"],
    },
}


def _stream_names(name: str, raw: str) -> list[str]:
    """`subscriptions` of DELETE: a JSON list of stream names."""
    value = decode_json(name, raw)
    if value is None:
        raise missing_argument("subscriptions")
    if not isinstance(value, list):
        raise ApiError("subscriptions is not a list")
    if len(value) > MAX_STREAMS_PER_REQUEST:
        raise ApiError(f"subscriptions has more than {MAX_STREAMS_PER_REQUEST} items")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ApiError(f"subscriptions[{index}] is not a string")
        if len(item) > MAX_NAME_CHARS:
            raise ApiError(f"subscriptions[{index}] is too long")
    return value


_STREAM_NAMES: JsonSchema = {"type": "array", "items": {"type": "string"}}


def _subscription_changes(name: str, raw: str) -> list[tuple[int, str, Any]]:
    """`subscription_data`: `[{"stream_id": N, "property": ..., "value": ...}]`."""
    value = decode_json(name, raw)
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


_SUBSCRIPTION_CHANGES: JsonSchema = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"stream_id": _ID, "property": {"type": "string"}, "value": {}},
        "required": ["stream_id", "property", "value"],
    },
}


def _optional_boolean(name: str, raw: str) -> bool | None:
    """A JSON boolean, or null for "not given"."""
    value = decode_json(name, raw)
    if value is not None and not isinstance(value, bool):
        raise ApiError(f"{name} is not a boolean")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListSubscriptions:
    include_subscribers: Annotated[bool, Param("Each subscription's subscribers")] = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Subscribe:
    subscriptions: Annotated[
        list[actions.StreamRequest],
        Param(
            "The channels, each a name and the description it gets if it is created"
            f" (at most {MAX_STREAMS_PER_REQUEST:,}; names of at most {MAX_NAME_CHARS:,}"
            f" characters, descriptions of at most {MAX_DESCRIPTION_CHARS:,})",
            parse=_stream_requests,
            schema=_STREAM_REQUESTS,
        ),
    ]
    principals: Principals = None
    invite_only: Annotated[bool, Param("The channels created are private")] = False
    authorization_errors_fatal: Annotated[
        bool, Param("Refuse it all when one channel is not allowed (else: `unauthorized`)")
    ] = True


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Unsubscribe:
    subscriptions: Annotated[
        list[str],
        Param(
            f"The channels' names (at most {MAX_STREAMS_PER_REQUEST:,}, each of at most"
            f" {MAX_NAME_CHARS:,} characters)",
            parse=_stream_names,
            schema=_STREAM_NAMES,
        ),
    ]
    principals: Principals = None


class SubscriptionsHandler(ActionHandler):
    """`users/me/subscriptions`."""

    SUPPORTED_METHODS = ("GET", "POST", "DELETE")

    @operation(ListSubscriptions)
    async def get(self, user: AuthUser, args: ListSubscriptions) -> Body:
        ctx = StateContext(
            user_id=user.user_id,
            realm_id=user.realm_id,
            queue_id="",
            include_subscribers=args.include_subscribers,
        )
        async with self.server.db.connection() as conn:
            state = await fetch_subscriptions(conn, ctx)
        return {"subscriptions": state["subscriptions"]}

    @operation(Subscribe)
    async def post(self, user: AuthUser, args: Subscribe) -> Body:
        fatal = args.authorization_errors_fatal
        result = await self.act(
            lambda ctx: actions.do_add_subscriptions(
                ctx,
                user.user_id,
                user.realm_id,
                args.subscriptions,
                principals=args.principals,
                invite_only=args.invite_only,
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
        return body

    @operation(Unsubscribe)
    async def delete(self, user: AuthUser, args: Unsubscribe) -> Body:
        result = await self.act(
            lambda ctx: actions.do_remove_subscriptions(
                ctx, user.user_id, user.realm_id, args.subscriptions, principals=args.principals
            )
        )
        return {"removed": result.removed, "not_removed": result.not_removed}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateSubscriptionProperties:
    subscription_data: Annotated[
        list[tuple[int, str, Any]],
        Param(
            "The changes: the channel's id, the property and its new value (at most"
            f" {MAX_SUBSCRIPTION_CHANGES:,})",
            parse=_subscription_changes,
            schema=_SUBSCRIPTION_CHANGES,
        ),
    ]


class SubscriptionPropertiesHandler(ActionHandler):
    """`users/me/subscriptions/properties`."""

    SUPPORTED_METHODS = ("POST",)

    @operation(UpdateSubscriptionProperties)
    async def post(self, user: AuthUser, args: UpdateSubscriptionProperties) -> Body:
        stored = await self.act(
            lambda ctx: actions.do_update_subscription_properties(
                ctx, user.user_id, args.subscription_data
            )
        )
        return {"subscription_data": stored}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListStreams:
    include_public: Annotated[bool, Param("The public channels")] = True
    include_subscribed: Annotated[bool, Param("The channels you are subscribed to")] = True
    include_default: Annotated[bool, Param("The realm's default channels")] = False
    exclude_archived: Annotated[bool, Param("Leave out archived channels")] = True


class StreamsHandler(ActionHandler):
    """`GET streams`: the streams the user can see (public ones, unless
    `include_public` is false; subscribed ones, unless `include_subscribed`
    is false; default ones with `include_default`; archived ones too with
    `exclude_archived` false, Zulip's feature level 315)."""

    SUPPORTED_METHODS = ("GET",)

    @operation(ListStreams)
    async def get(self, user: AuthUser, args: ListStreams) -> Body:
        async with self.server.db.connection() as conn:
            streams = await list_streams(
                conn,
                user.user_id,
                user.realm_id,
                include_public=args.include_public,
                include_subscribed=args.include_subscribed,
                include_default=args.include_default,
                include_archived=not args.exclude_archived,
            )
        return {"streams": streams}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateStream:
    # The zulip client's update_stream repeats the id in the body.
    stream_id: Annotated[int | None, Param("Ignored: the path's id, repeated")] = None
    new_name: Annotated[str | None, Param("The new name", max_length=MAX_NAME_CHARS)] = None
    description: Annotated[
        str | None, Param("The new description", max_length=MAX_DESCRIPTION_CHARS)
    ] = None
    is_private: Annotated[
        bool | None,
        Param(
            "Private (true) or public (false); null: unchanged",
            parse=_optional_boolean,
            schema={"type": ["boolean", "null"]},
        ),
    ] = None
    is_archived: Annotated[
        bool | None,
        Param(
            "false: unarchive the channel (true does nothing, as Zulip); null: unchanged",
            parse=_optional_boolean,
            schema={"type": ["boolean", "null"]},
        ),
    ] = None


class StreamHandler(ActionHandler):
    """`streams/{stream_id}`: PATCH unarchives the stream (`is_archived`
    false, first, as Zulip's feature level 315) and changes the name
    (`new_name`), `description` and privacy (`is_private`), all or nothing;
    DELETE archives the stream."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(UpdateStream)
    async def patch(self, user: AuthUser, args: UpdateStream, raw_stream_id: str) -> Body:
        stream_id = _stream_id(raw_stream_id)
        new_name, description, is_private = args.new_name, args.description, args.is_private

        unarchive = args.is_archived is False

        async def change(ctx: ActionContext) -> None:
            async with ctx.transaction():
                if unarchive:
                    await actions.do_unarchive_stream(ctx, user.user_id, user.realm_id, stream_id)
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
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_stream_id: str) -> Body:
        stream_id = _stream_id(raw_stream_id)
        await self.act(
            lambda ctx: actions.do_delete_stream(ctx, user.user_id, user.realm_id, stream_id)
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DefaultStream:
    stream_id: Annotated[int, Param("The channel's id", minimum=1)]


class DefaultStreamsHandler(ActionHandler):
    """`default_streams`: POST adds `stream_id`, DELETE removes it."""

    SUPPORTED_METHODS = ("POST", "DELETE")

    @operation(DefaultStream)
    async def post(self, user: AuthUser, args: DefaultStream) -> Body:
        await self.act(
            lambda ctx: actions.do_add_default_stream(
                ctx, user.user_id, user.realm_id, args.stream_id
            )
        )
        return None

    @operation(DefaultStream)
    async def delete(self, user: AuthUser, args: DefaultStream) -> Body:
        await self.act(
            lambda ctx: actions.do_remove_default_stream(
                ctx, user.user_id, user.realm_id, args.stream_id
            )
        )
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"users/me/subscriptions", SubscriptionsHandler),
    (r"users/me/subscriptions/properties", SubscriptionPropertiesHandler),
    (r"streams", StreamsHandler),
    (r"streams/([0-9]+)", StreamHandler),
    (r"default_streams", DefaultStreamsHandler),
]
