"""The OpenAPI document is served, is valid JSON Schema throughout, and real
responses match it."""

from __future__ import annotations

import jsonschema
import requests

from generation.events import CATALOGUE
from server.openapi import document, schema_ref


def matches(body: object, component: str) -> None:
    validator = jsonschema.Draft202012Validator(schema_ref(component))
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(body)]
    assert not errors, f"{component} mismatch:\n" + "\n".join(errors[:20])


def test_the_document_is_served_and_its_schemas_are_valid(server):
    response = requests.get(f"{server.url}/api/v1/openapi.json", timeout=10)
    assert response.status_code == 200
    served = response.json()
    assert served == document()
    assert served["openapi"].startswith("3.1")
    for schema in served["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    assert {"/api/v1/register", "/api/v1/events", "/api/v1/server_settings"} <= set(served["paths"])
    # Every event kind of the catalogue is one of the documented events.
    assert len(served["components"]["schemas"]["Event"]["oneOf"]) == len(CATALOGUE)


def test_register_events_and_errors_match_the_document(api, server):
    client = api()
    matches(client.register(), "RegisterResponse")
    matches(client.register(fetch_event_types=["message"]), "RegisterResponse")
    queue_id = client.register()["queue_id"]
    server.notify({"type": "realm", "op": "update", "property": "name", "value": "X"},
                  [client.user.user_id])  # fmt: skip
    events = client.get_events(queue_id=queue_id, last_event_id=-1).json()
    matches(events, "EventsResponse")
    bad = client.get_events(queue_id="nope", last_event_id=-1).json()
    matches(bad, "ErrorResponse")
    matches(client.request("DELETE", "events", queue_id=queue_id).json(), "SuccessResponse")
    settings = requests.get(f"{server.url}/api/v1/server_settings", timeout=10).json()
    matches(settings, "ServerSettingsResponse")


def test_a_response_outside_the_document_is_caught():
    """The check itself: unknown keys and wrong types fail."""
    import pytest

    with pytest.raises(AssertionError, match="RegisterResponse mismatch"):
        matches(
            {"result": "success", "msg": "", "queue_id": "q", "last_event_id": -1,
             "zulip_version": "x", "zulip_feature_level": 1, "zulip_merge_base": "x",
             "bogus": 1},
            "RegisterResponse",
        )  # fmt: skip
    with pytest.raises(AssertionError, match="EventsResponse mismatch"):
        matches({"result": "success", "msg": "", "events": [{"type": "heartbeat"}]},
                "EventsResponse")  # fmt: skip


def _operations():
    """Every domain operation: (route pattern, method, handler)."""
    from server.handlers.domain import ROUTES

    for pattern, handler in ROUTES:
        for method in handler.SUPPORTED_METHODS:
            yield pattern, method.lower(), handler


def _path(pattern: str) -> str:
    """A route's path in the document: its id or name as a parameter."""
    return "/api/v1/" + pattern.replace("([0-9]+)", "{id}").replace("([^/]+)", "{name}")


def _documented(pattern: str, method: str) -> list[dict]:
    """The operation's parameters in the document, less the path's id."""
    path = _path(pattern)
    parameters = document()["paths"][path][method]["parameters"]
    return [p for p in parameters if p["in"] != "path"]


def test_every_domain_operation_is_documented_with_the_parameters_it_declares():
    """The declaration next to each handler is the document: the same names in
    the same order, required alike, the schema parsing applies (bounds
    included), JSON-encoded or as is alike."""
    from server.handlers.actions import declaration_of
    from server.http.declared import QUERY_MAX_LENGTH, fields_of

    operations = list(_operations())
    events_api = {"/api/v1/register", "/api/v1/events", "/api/v1/server_settings"}
    assert {
        (path, method)
        for path, methods in document()["paths"].items()
        if path not in events_api
        for method in methods
    } == {(_path(p), m) for p, m, _ in operations}
    for pattern, method, handler in operations:
        declared = declaration_of(handler, method)
        assert declared is not None, f"{handler.__name__}.{method} is not an @operation"
        fields = fields_of(declared)
        documented = _documented(pattern, method)
        assert [p["name"] for p in documented] == [f.name for f in fields], (pattern, method)
        for param, field in zip(documented, fields, strict=True):
            assert param["required"] is field.required, (pattern, method, field.name)
            if "content" in param:
                assert field.json_encoded, (pattern, method, field.name)
                schema = param["content"]["application/json"]["schema"]
            else:
                # JSON integers are documented plainly: the same text.
                schema = param["schema"]
                assert not field.json_encoded or schema["type"] == "integer", field.name
            assert schema == field.schema, (pattern, method, field.name)
            assert param["description"].startswith(field.param.description or field.name)
            max_length = field.param.max_length
            if field.kind == "string" and max_length is not None:
                # A bound no query could carry a value past is stated in words.
                if max_length <= QUERY_MAX_LENGTH:
                    assert schema["maxLength"] == max_length
                else:
                    assert "maxLength" not in schema
                    assert f"(at most {max_length:,} characters)" in param["description"]
            if field.kind == "integer":
                assert (schema["minimum"], schema["maximum"]) == (
                    field.param.minimum,
                    field.param.maximum,
                )


def _example(schema: dict) -> object:
    """A value `schema` accepts (enough of JSON Schema for the domain's)."""
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return _example(rest | schema["anyOf"][-1])
    kind = schema.get("type", "integer")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "string":
        return "x"
    if kind == "integer":
        return max(schema.get("minimum", 1), 1)
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example(schema.get("items", {}))]
    assert kind == "object", schema
    return {name: _example(schema["properties"][name]) for name in schema.get("required", ())}


def test_a_request_with_every_documented_parameter_leaves_none_unread():
    """Each operation's declaration reads every parameter the document lists
    for it, and reports back only what it does not declare."""
    import orjson

    from server.handlers.actions import declaration_of
    from server.http.declared import parse
    from server.http.params import Params

    for pattern, method, handler in _operations():
        raw: dict[str, list[bytes]] = {"not_declared": [b"1"]}
        for param in _documented(pattern, method):
            if "content" in param:
                value = _example(param["content"]["application/json"]["schema"])
                raw[param["name"]] = [orjson.dumps(value)]
            else:
                raw[param["name"]] = [str(_example(param["schema"])).encode()]
        params = Params(raw)
        declared = declaration_of(handler, method)
        assert declared is not None
        parse(declared, params)
        assert params.unread() == ["not_declared"], (pattern, method)


def test_a_domain_handler_can_read_only_the_parameters_it_declares():
    """The handlers get their parameters from their declaration alone: the
    request's `Params` are refused to them, their modules never touch them,
    and a custom parser is handed its own parameter's text only."""
    import ast
    from pathlib import Path

    import pytest

    from server.handlers import actions, domain, messages, streams, users

    with pytest.raises(TypeError, match="@operation"):
        actions.ActionHandler.params(object.__new__(messages.MessagesHandler))
    for module in (domain, messages, streams, users):
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.Attribute) and node.attr == "params"), (
                f"{module.__name__}:{node.lineno} reads the request's Params"
            )
            assert not (isinstance(node, ast.Name) and node.id == "Params"), (
                f"{module.__name__}:{node.lineno} uses Params"
            )
