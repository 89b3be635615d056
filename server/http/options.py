"""Queue options from request parameters: register's and implicit GET's.

`POST /register` and `GET /events` without `queue_id` take overlapping but
differently named parameters with different defaults, as in Zulip (for
example `queue_lifespan_secs` and `lifespan_secs`; `client_gravatar` is on by
default for register only).
"""

from __future__ import annotations

from queues.client import CAPABILITIES, QueueOptions
from queues.errors import BadNarrow
from queues.narrow import parse_narrow
from queues.registry import QueueRegistry
from server.errors import ApiError
from server.http.auth import AuthUser
from server.http.params import Params

# 7 days is the longest lifespan honoured; larger requests are capped, as
# Zulip does, but a value beyond any plausible duration is a client bug.
MAX_REQUESTED_LIFESPAN = 10**9

# GET /events capability parameters and their defaults when absent.
_GET_CAPABILITY_DEFAULTS = {name: False for name in CAPABILITIES} | {
    "pronouns_field_type_supported": True,
}


def _common(params: Params, user: AuthUser) -> tuple[frozenset[str] | None, bool]:
    event_types = params.string_list("event_types")
    all_public_streams = params.boolean("all_public_streams", False)
    if all_public_streams and user.is_guest:
        raise ApiError("User not authorized for this query")
    return (frozenset(event_types) if event_types is not None else None), all_public_streams


def _narrow(params: Params) -> tuple[tuple[str, str], ...]:
    raw = params.json("narrow")
    if raw is None:
        return ()
    try:
        return parse_narrow(raw)
    except BadNarrow as exc:
        raise ApiError(str(exc)) from None


def _lifespan(params: Params, name: str, registry: QueueRegistry) -> float:
    requested = params.integer(name, 0, minimum=0, maximum=MAX_REQUESTED_LIFESPAN)
    assert requested is not None
    return registry.effective_lifespan(requested)


def register_options(
    params: Params, user: AuthUser, registry: QueueRegistry, client_name: str
) -> QueueOptions:
    """Options of `POST /register`."""
    event_types, all_public_streams = _common(params, user)
    capabilities: set[str] = set()
    raw_capabilities = params.json_object("client_capabilities")
    if raw_capabilities is not None:
        if "notification_settings_null" not in raw_capabilities:
            raise ApiError("client_capabilities is missing 'notification_settings_null'")
        for name, value in raw_capabilities.items():
            if not isinstance(value, bool):
                raise ApiError(f"client_capabilities[{name!r}] is not a boolean")
            if value and name in CAPABILITIES:
                capabilities.add(name)
    # Zulip assumes pronouns support unless the client says otherwise.
    if raw_capabilities is None or "pronouns_field_type_supported" not in raw_capabilities:
        capabilities.add("pronouns_field_type_supported")
    return QueueOptions(
        event_types=event_types,
        narrow=_narrow(params),
        all_public_streams=all_public_streams,
        apply_markdown=params.boolean("apply_markdown", False),
        client_gravatar=params.boolean("client_gravatar", True),
        slim_presence=params.boolean("slim_presence", False),
        capabilities=frozenset(capabilities),
        lifespan_secs=_lifespan(params, "queue_lifespan_secs", registry),
        client_name=client_name,
    )


def implicit_options(
    params: Params, user: AuthUser, registry: QueueRegistry, client_name: str
) -> QueueOptions:
    """Options of `GET /events` without `queue_id` (Zulip's implicit registration)."""
    event_types, all_public_streams = _common(params, user)
    capabilities = {
        name for name, default in _GET_CAPABILITY_DEFAULTS.items() if params.boolean(name, default)
    }
    return QueueOptions(
        event_types=event_types,
        narrow=_narrow(params),
        all_public_streams=all_public_streams,
        apply_markdown=params.boolean("apply_markdown", False),
        client_gravatar=params.boolean("client_gravatar", False),
        slim_presence=params.boolean("slim_presence", False),
        capabilities=frozenset(capabilities),
        lifespan_secs=_lifespan(params, "lifespan_secs", registry),
        client_name=client_name,
    )


def include_subscribers(params: Params) -> bool | str:
    """`include_subscribers`: true, false or "partial" (JSON or bare)."""
    raw = params.raw("include_subscribers")
    if raw is None:
        return False
    value = raw.strip('"')
    if value in ("true", "false"):
        return value == "true"
    if value == "partial":
        return "partial"
    raise ApiError('include_subscribers must be true, false or "partial"')
