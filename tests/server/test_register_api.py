"""POST /register over HTTP: Zulip's parameters, order and answers."""

from __future__ import annotations

import pytest
import requests

from server.version import ZULIP_FEATURE_LEVEL, ZULIP_VERSION


def test_register_returns_a_queue_and_the_realm_state(api, world):
    realm = world.realm("Register Org")
    client = api(realm)
    body = client.register()
    assert body["result"] == "success"
    assert body["msg"] == ""
    assert body["last_event_id"] == -1
    assert body["zulip_version"] == ZULIP_VERSION
    assert body["zulip_feature_level"] == ZULIP_FEATURE_LEVEL
    # The shared test server's heartbeat is 600 s: the advertised client
    # timeout outlasts it (see the next test for the default, 90).
    assert body["event_queue_longpoll_timeout_seconds"] > 600
    assert body["realm_name"] == "Register Org"
    assert isinstance(body["server_generation"], int)
    assert "ignored_parameters_unsupported" not in body
    queues = client.server.user_queues(client.user.user_id)
    assert [q["queue_id"] for q in queues] == [body["queue_id"]]


def test_the_default_long_poll_timeout_advertised_is_90(start_server, world):
    server = start_server(EVENTQ_HEARTBEAT_SECS="45")
    user = world.user()
    response = requests.post(
        f"{server.url}/api/v1/register", auth=(user.email, user.api_key), timeout=10
    )
    assert response.json()["event_queue_longpoll_timeout_seconds"] == 90


def test_register_works_without_a_user_agent(api):
    client = api()
    client.session.headers.pop("User-Agent", None)
    request = requests.Request(
        "POST", f"{client.server.url}/api/v1/register", auth=client.session.auth
    ).prepare()
    request.headers.pop("User-Agent", None)
    response = client.session.send(request, timeout=10)
    assert response.status_code == 200
    assert response.json()["queue_id"]


def test_fetch_event_types_choose_the_state_sections(api):
    client = api()
    with_realm = client.register(event_types=["realm"])
    assert "realm_name" in with_realm
    without = client.register(event_types=["realm"], fetch_event_types=["message"])
    assert "realm_name" not in without
    assert "event_queue_longpoll_timeout_seconds" not in without
    assert without["queue_id"]


def test_unknown_parameters_are_reported_as_ignored(api):
    body = api().register(bogus_option="1", another=True)
    assert body["ignored_parameters_unsupported"] == ["another", "bogus_option"]


def test_the_zulip_register_parameters_are_accepted(api):
    body = api().register(
        apply_markdown=True,
        client_gravatar=False,
        slim_presence=True,
        include_subscribers="partial",
        queue_lifespan_secs=120,
        presence_history_limit_days=7,
        client_capabilities={
            "notification_settings_null": True,
            "bulk_message_deletion": True,
            "user_settings_object": True,
            "empty_topic_name": True,
        },
        narrow=[["is", "starred"]],
    )
    assert "ignored_parameters_unsupported" not in body


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"event_types": "not json"}, 'Argument "event_types" is not valid JSON.'),
        ({"event_types": {"a": 1}}, "event_types is not a list"),
        ({"event_types": [1]}, "event_types[0] is not a string"),
        ({"narrow": [["foo", "bar"]]}, "Operator foo not supported."),
        ({"narrow": [["is", "followed"]]}, "Operand followed not supported."),
        ({"narrow": [["stream"]]}, "narrow[0] is not a list of two strings"),
        ({"narrow": '"denmark"'}, "narrow is not a list"),
        ({"queue_lifespan_secs": -1}, "queue_lifespan_secs is too small (minimum: 0)"),
        (
            {"queue_lifespan_secs": 10**20},
            "queue_lifespan_secs is too large (maximum: 1000000000)",
        ),
        ({"queue_lifespan_secs": 1.5}, "queue_lifespan_secs is not an integer"),
        ({"apply_markdown": "yes"}, 'Argument "apply_markdown" is not valid JSON.'),
        ({"apply_markdown": 1}, "apply_markdown is not a boolean"),
        # JSON null is not "absent" (found by schemathesis).
        ({"apply_markdown": "null"}, "apply_markdown is not a boolean"),
        ({"queue_lifespan_secs": "null"}, "queue_lifespan_secs is not an integer"),
        (
            {"client_capabilities": {"bulk_message_deletion": True}},
            "client_capabilities is missing 'notification_settings_null'",
        ),
        (
            {"client_capabilities": {"notification_settings_null": "yes"}},
            "client_capabilities['notification_settings_null'] is not a boolean",
        ),
        (
            {"include_subscribers": "sometimes"},
            'include_subscribers must be true, false or "partial"',
        ),
        ({"fetch_event_types": "realm"}, 'Argument "fetch_event_types" is not valid JSON.'),
    ],
)
def test_bad_register_parameters_are_400_and_create_no_queue(api, params, msg):
    client = api()
    response = client.request("POST", "register", **params)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["result"] == "error"
    assert body["code"] == "BAD_REQUEST"
    assert body["msg"] == msg
    assert client.server.user_queues(client.user.user_id) == []
