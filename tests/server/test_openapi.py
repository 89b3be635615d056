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


def test_every_declared_domain_parameter_belongs_to_an_operation():
    """The parameter table cannot name a route or method that does not exist."""
    from server.handlers.domain import ROUTES
    from server.openapi import DOMAIN_PARAMS, document

    routes = dict(ROUTES)
    paths = document()["paths"]
    for pattern, method in DOMAIN_PARAMS:
        assert pattern in routes, pattern
        path = "/api/v1/" + pattern.replace("([0-9]+)", "{id}")
        assert method in paths[path], (pattern, method)
