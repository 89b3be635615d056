"""The OpenAPI document of eventq's API, built from the types that define it.

Event schemas come from the event catalogue (`generation.events`), register's
state keys from each state section's `state` TypedDict, the domain
endpoints' parameters from the declaration that parses them (next to each
handler, server/http/declared.py), so the document cannot drift from the
code: adding an event type, a section or a parameter adds it here.
Served at `GET /api/v1/openapi.json`; the tests validate real responses
against it.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal, NotRequired, TypedDict

import tornado.web

from apply_events.sections import SECTIONS
from generation.events import CATALOGUE
from generation.schema import JsonSchema, schema_of
from server.handlers.actions import declaration_of
from server.handlers.domain import ROUTES as DOMAIN_ROUTES
from server.http.declared import Field, fields_of
from server.version import EVENTQ_VERSION, ZULIP_FEATURE_LEVEL

OPENAPI_VERSION = "3.1.0"


# Every error: `code` is what a program matches; some carry data fields
# (`queue_id` and `reason` with BAD_EVENT_QUEUE_ID, `var_name` with
# REQUEST_VARIABLE_MISSING, `retry-after` in seconds with RATE_LIMIT_HIT,
# `pruned_through` with RESUME_EXPIRED, `parameters` with an unsupported
# combination of GET messages' parameters).
# The functional form: "retry-after" is not an identifier.
ErrorResponse = TypedDict(
    "ErrorResponse",
    {
        "result": Literal["error"],
        "msg": str,
        "code": str,
        "queue_id": NotRequired[str],
        "reason": NotRequired[str],
        "var_name": NotRequired[str],
        "retry-after": NotRequired[float],
        # RESUME_EXPIRED (eventq): how far the event log is pruned.
        "pruned_through": NotRequired[int],
        # GET messages: the parameters that may not be combined (Zulip's
        # IncompatibleParametersError).
        "parameters": NotRequired[list[str]],
    },
)


class SuccessResponse(TypedDict):
    result: Literal["success"]
    msg: str


class ServerSettingsResponse(TypedDict):
    result: Literal["success"]
    msg: str
    authentication_methods: dict[str, bool]
    external_authentication_methods: list[Any]
    zulip_version: str
    zulip_merge_base: str
    zulip_feature_level: int
    push_notifications_enabled: bool
    is_incompatible: bool
    email_auth_enabled: bool
    require_email_format_usernames: bool


class _RegisterBase(TypedDict):
    result: Literal["success"]
    msg: str
    queue_id: str
    last_event_id: int
    # eventq's addition (Zulip clients ignore it): every logged event at or
    # below this event log position is in the returned state.
    stream_position: int
    # eventq's addition: the register was a resume (`resume_from`); the queue
    # holds the events logged after it and no state is returned.
    resumed_from: NotRequired[int]
    zulip_version: str
    zulip_feature_level: int
    zulip_merge_base: str
    ignored_parameters_unsupported: NotRequired[list[str]]
    server_timestamp: NotRequired[float]


def _form(name: str, schema: JsonSchema, description: str, required: bool = False) -> JsonSchema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def _json_param(name: str, schema: JsonSchema, description: str) -> JsonSchema:
    """A Zulip parameter: JSON-encoded in the query string or form body."""
    return {
        "name": name,
        "in": "query",
        "description": description + " (JSON-encoded)",
        "content": {"application/json": {"schema": schema}},
    }


def _responses(ok: str, errors: str = "ErrorResponse") -> JsonSchema:
    error = {
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{errors}"}}}
    }
    return {
        "200": {
            "description": "Success",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ok}"}}},
        },
        "400": {"description": "Bad request (see `code`)", **error},
        "401": {"description": "Not authenticated", **error},
        "413": {"description": "Request body too large (REQUEST_TOO_LARGE)", **error},
        "414": {"description": "Request line past the head limit (URI_TOO_LONG)", **error},
        "415": {"description": "Body not form-encoded (UNSUPPORTED_MEDIA_TYPE)", **error},
        "429": {"description": "Rate limit hit (RATE_LIMIT_HIT); see Retry-After", **error},
        "431": {"description": "Request head past the limit (HEADERS_TOO_LARGE)", **error},
        "502": {
            "description": "The shard holding the queue is unavailable (SHARD_UNAVAILABLE)",
            **error,
        },
        "503": {
            "description": "Restarting, database unavailable, shards disagree, or (register)"
            " the user's access changed meanwhile (ACCESS_CHANGED); retry",
            **error,
        },
    }


# A domain endpoint's success: the envelope, plus what the endpoint returns.
_DOMAIN_SUCCESS: JsonSchema = {
    "type": "object",
    "properties": {"result": {"enum": ["success"]}, "msg": {"type": "string"}},
    "required": ["result", "msg"],
}
_PATH_ID = re.compile(r"\(\[0-9\]\+\)")
# A name in the path (an emoji's, a domain): any text but a slash.
_PATH_NAME = re.compile(r"\(\[\^/\]\+\)")
_PATH_SCHEMAS: dict[str, JsonSchema] = {
    "id": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
    "name": {"type": "string", "minLength": 1},
}


def _declared_param(field: Field) -> JsonSchema:
    """A domain operation's parameter, as its declaration says it is parsed
    (server/http/declared.py); tests/server/test_schemathesis.py fuzzes them."""
    schema = field.schema
    # A JSON integer's text is its plain form too: documented plainly, as
    # Zulip's document does, so that a checker can read it back.
    if field.json_encoded and schema.get("type") != "integer":
        param = _json_param(field.name, schema, field.description)
    else:
        param = _form(field.name, schema, field.description)
    param["required"] = field.required
    return param


_METHODS = ("get", "post", "patch", "delete")


def domain_paths(routes: list[tuple[str, Any]]) -> dict[str, JsonSchema]:
    """The domain endpoints (messages, streams, users) from their routes:
    each method a handler defines, its id in the path, the errors every
    endpoint may answer, and the parameters each operation declares
    (`operation`); requests are form-encoded as Zulip's."""
    paths: dict[str, JsonSchema] = {}
    for pattern, handler in routes:
        # Every route has at most one id or name in its path.
        path = "/api/v1/" + _PATH_NAME.sub("{name}", _PATH_ID.sub("{id}", pattern))
        ids = [
            {"name": name, "in": "path", "required": True, "schema": _PATH_SCHEMAS[name]}
            for name in re.findall(r"\{(\w+)\}", path)
        ]
        summary = (handler.__doc__ or handler.__name__).strip().splitlines()[0]
        operations: dict[str, JsonSchema] = {}
        for method in _METHODS:
            defined = getattr(handler, method) is not getattr(tornado.web.RequestHandler, method)
            if defined and method.upper() in handler.SUPPORTED_METHODS:
                responses = _responses("DomainSuccess")
                responses["403"] = {
                    "description": "Not allowed to the user",
                    **responses["400"],
                }
                responses["404"] = {"description": "No such object", **responses["400"]}
                declared = declaration_of(handler, method)
                if declared is None:
                    raise TypeError(f"{handler.__name__}.{method} declares no parameters")
                operations[method] = {
                    "summary": summary,
                    "parameters": [*ids, *(_declared_param(f) for f in fields_of(declared))],
                    "responses": responses,
                }
        if operations:
            paths[path] = operations
    return paths


def register_response_schema(components: dict[str, JsonSchema]) -> JsonSchema:
    schema = schema_of(_RegisterBase, None)
    for section in SECTIONS:
        if section.state is not None:
            state = schema_of(section.state, components)
            ref = state["$ref"]
            resolved = components[ref.rsplit("/", 1)[1]]
            schema["properties"].update(resolved["properties"])
    return schema


@functools.cache
def document() -> dict[str, Any]:
    """The whole OpenAPI document (built once per process)."""
    components: dict[str, JsonSchema] = {}
    for response in (ErrorResponse, SuccessResponse, ServerSettingsResponse):
        schema_of(response, components)
    event_refs = [schema_of(schema, components) for schema in CATALOGUE.values()]
    components["Event"] = {"oneOf": event_refs}
    components["EventsResponse"] = {
        "type": "object",
        "properties": {
            "result": {"enum": ["success"]},
            "msg": {"type": "string"},
            "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
            "queue_id": {"type": "string"},
            "displaced": {"type": "boolean"},
            # eventq's addition: every logged event for the queue at or below
            # this position is in `events` or was acknowledged before (absent
            # from a displaced poll's answer, which carries none of them).
            "stream_position": {"type": "integer", "minimum": 0},
        },
        "required": ["result", "msg", "events"],
        "additionalProperties": False,
    }
    components["RegisterResponse"] = register_response_schema(components)
    components["DomainSuccess"] = _DOMAIN_SUCCESS
    # JSON null means "not given" for lists and objects, as in Zulip (whose
    # parameters are `Json[list[str]] | None`); not for booleans and integers.
    string_list = {"type": ["array", "null"], "items": {"type": "string"}}
    queue_params = [
        _json_param("event_types", string_list, "Only these event types (default: all)"),
        _json_param(
            "narrow",
            {"type": ["array", "null"], "items": {"type": "array", "items": {"type": "string"}}},
            "[operator, operand] pairs filtering message events",
        ),
        _json_param("all_public_streams", {"type": "boolean"}, "Also every public channel"),
        _json_param("apply_markdown", {"type": "boolean"}, "Rendered HTML message content"),
        _json_param("client_gravatar", {"type": "boolean"}, "avatar_url null for Gravatars"),
        _json_param("slim_presence", {"type": "boolean"}, "Presence keyed by user id"),
    ]
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "eventq",
            "version": EVENTQ_VERSION,
            "description": (
                "Real-time event delivery with Zulip's events API (feature level"
                f" {ZULIP_FEATURE_LEVEL}). HTTP Basic auth `email:api_key`."
            ),
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"basicAuth": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"basicAuth": []}],
        "paths": {
            "/api/v1/register": {
                "post": {
                    "summary": "Create an event queue and fetch the initial state",
                    "parameters": [
                        *queue_params,
                        _json_param("fetch_event_types", string_list, "State sections to fetch"),
                        _json_param(
                            "resume_from",
                            {"type": "integer", "minimum": 0},
                            "eventq: a stream_position the client last saw; the new queue holds"
                            " the events logged after it that the user may see now, and no"
                            " state is fetched (RESUME_EXPIRED when the log no longer has"
                            " them or they are too many; RESUME_POSITION_UNKNOWN for a"
                            " position this server did not give the user)",
                        ),
                        _json_param(
                            "queue_lifespan_secs",
                            {"type": "integer", "minimum": 0},
                            "Idle lifespan; 0 is the default, capped at 7 days",
                        ),
                        _json_param(
                            "client_capabilities",
                            {
                                "type": ["object", "null"],
                                "required": ["notification_settings_null"],
                                "additionalProperties": {"type": "boolean"},
                            },
                            "Capabilities, each true or false; notification_settings_null"
                            " is required (as Zulip requires it)",
                        ),
                        _form(
                            "include_subscribers",
                            {"enum": ["true", "false", "partial"]},
                            "Subscriber lists in the subscription state",
                        ),
                    ],
                    "responses": _responses("RegisterResponse"),
                }
            },
            "/api/v1/events": {
                "get": {
                    "summary": "Long-poll a queue for events",
                    "parameters": [
                        _form("queue_id", {"type": "string"}, "The queue (none: create one)"),
                        _json_param("last_event_id", {"type": "integer"}, "Acknowledged id"),
                        _json_param("dont_block", {"type": "boolean"}, "Answer at once"),
                        *queue_params,
                    ],
                    "responses": _responses("EventsResponse"),
                },
                "delete": {
                    "summary": "Delete a queue",
                    "parameters": [_form("queue_id", {"type": "string"}, "The queue", True)],
                    "responses": _responses("SuccessResponse"),
                },
            },
            "/api/v1/server_settings": {
                "get": {
                    "summary": "Server facts (no authentication)",
                    "security": [],
                    "responses": _responses("ServerSettingsResponse"),
                }
            },
            **domain_paths(DOMAIN_ROUTES),
        },
    }


def schema_ref(name: str) -> JsonSchema:
    """A standalone JSON Schema for one component, resolvable on its own
    (the document is its root), for validators."""
    return {**document(), "$ref": f"#/components/schemas/{name}"}
