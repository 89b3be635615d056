"""The streams endpoints over HTTP against the real server: Zulip's paths and
parameters, the real `zulip` client's methods, who receives which events, and
bad input (a 4xx JSON error, never a 500)."""

from __future__ import annotations

import pytest
import requests

from tests.support import Api, error, ok, wait_for, zulip_client

STREAM_EVENTS = ["stream", "subscription", "default_streams"]


def client_for(server, domain, name):
    return zulip_client(server, domain.accounts[name])


class Watcher:
    """A queue registered for the streams area's events."""

    def __init__(self, api: Api):
        self.api = api
        self.queue_id = api.register(event_types=STREAM_EVENTS)["queue_id"]
        self.last = -1

    def events(self, expect: bool = True):
        """The events since the last call. `expect`: some are due, and are
        waited for: an action's events reach the queues after its answer
        (in position order, behind any earlier position still missing).
        Without it, what the queue holds now (once a user who shares the
        notice has had theirs, so would this one)."""

        def read():
            return self.api.events(self.queue_id, self.last)

        events = wait_for(read, what="the action's events") if expect else read()
        if events:
            self.last = events[-1]["id"]
        return [(e["type"], e.get("op")) for e in events], events


def names(streams):
    return sorted(stream["name"] for stream in streams)


# -- subscribing ----------------------------------------------------------------------


def test_subscribing_creates_a_stream_and_tells_exactly_who_can_see_it(apis, domain):
    hamlet = domain.id("hamlet")
    watchers = {name: Watcher(apis[name]) for name in ("hamlet", "othello", "polonius")}
    body = ok(
        apis["hamlet"].request(
            "POST",
            "users/me/subscriptions",
            subscriptions=[{"name": "Rome", "description": "Eternal"}, {"name": "Denmark"}],
        )
    )
    assert body == {
        "result": "success",
        "msg": "",
        "subscribed": {str(hamlet): ["Rome"]},
        "already_subscribed": {str(hamlet): ["Denmark"]},
    }
    kinds, events = watchers["hamlet"].events()
    assert kinds == [("stream", "create"), ("subscription", "add")]
    assert events[0]["streams"][0]["rendered_description"] == "<p>Eternal</p>"
    assert events[1]["subscriptions"][0]["subscribers"] == [hamlet]
    kinds, events = watchers["othello"].events()
    assert kinds == [("stream", "create"), ("subscription", "peer_add")]
    assert watchers["polonius"].events(expect=False) == ([], [])
    # A fresh register sees it the same way.
    state = apis["othello"].register(fetch_event_types=STREAM_EVENTS, include_subscribers=True)
    rome = [s for s in state["never_subscribed"] if s["name"] == "Rome"]
    assert rome[0]["subscribers"] == [hamlet]


def test_a_private_stream_reaches_only_its_subscribers(apis, domain):
    watchers = {name: Watcher(apis[name]) for name in ("othello", "hamlet", "polonius")}
    ok(
        apis["iago"].request(
            "POST",
            "users/me/subscriptions",
            subscriptions=[{"name": "Elsinore"}],
            invite_only=True,
            principals=[domain.users["iago"].email, domain.users["othello"].email],
        )
    )
    kinds, events = watchers["othello"].events()
    assert kinds == [("stream", "create"), ("subscription", "add")]
    assert events[0]["streams"][0]["invite_only"] is True
    for outsider in ("hamlet", "polonius"):
        assert watchers[outsider].events(expect=False) == ([], [])
        state = apis[outsider].register(fetch_event_types=STREAM_EVENTS)
        seen = [s["name"] for key in ("streams", "never_subscribed") for s in state[key]]
        assert "Elsinore" not in seen
        assert "Scotland" not in seen
        listed = ok(apis[outsider].request("GET", "streams"))["streams"]
        assert not {"Elsinore", "Scotland"} & set(names(listed))
    # Leaving it: a remove and, having lost sight of it, a delete.
    ok(apis["othello"].request("DELETE", "users/me/subscriptions", subscriptions=["Elsinore"]))
    kinds, _ = watchers["othello"].events()
    assert kinds == [("subscription", "remove"), ("stream", "delete")]
    assert "Elsinore" not in names(apis["othello"].register()["streams"])


def test_only_administrators_subscribe_others(apis, domain):
    body = error(
        apis["hamlet"].request(
            "POST",
            "users/me/subscriptions",
            subscriptions=[{"name": "Denmark"}],
            principals=[domain.id("polonius")],
        ),
        403,
    )
    assert body["code"] == "UNAUTHORIZED"
    body = ok(
        apis["iago"].request(
            "POST",
            "users/me/subscriptions",
            subscriptions=[{"name": "Verona"}],
            principals=[domain.id("polonius"), domain.id("othello")],
        )
    )
    assert body["subscribed"] == {
        str(domain.id("polonius")): ["Verona"],
        str(domain.id("othello")): ["Verona"],
    }


def test_authorization_errors_can_be_non_fatal(apis, domain):
    body = ok(
        apis["hamlet"].request(
            "POST",
            "users/me/subscriptions",
            subscriptions=[{"name": "Scotland"}, {"name": "Verona"}],
            authorization_errors_fatal=False,
        )
    )
    assert body["unauthorized"] == ["Scotland"]
    assert body["already_subscribed"] == {str(domain.id("hamlet")): ["Verona"]}
    body = error(
        apis["hamlet"].request(
            "POST", "users/me/subscriptions", subscriptions=[{"name": "scotland"}]
        )
    )
    assert body["msg"] == "Unable to access channel (Scotland)."


def test_unsubscribing_answers_removed_and_not_removed(apis, domain):
    watcher = Watcher(apis["othello"])
    body = ok(
        apis["hamlet"].request(
            "DELETE", "users/me/subscriptions", subscriptions=["Denmark", "Verona"]
        )
    )
    assert (body["removed"], body["not_removed"]) == (["Denmark", "Verona"], [])
    body = ok(apis["hamlet"].request("DELETE", "users/me/subscriptions", subscriptions=["Denmark"]))
    assert (body["removed"], body["not_removed"]) == ([], ["Denmark"])
    kinds, events = watcher.events()
    assert kinds == [("subscription", "peer_remove")]
    assert events[0]["stream_ids"] == sorted([domain.streams["Denmark"], domain.streams["Verona"]])
    body = ok(
        apis["iago"].request(
            "DELETE",
            "users/me/subscriptions",
            subscriptions=["Denmark"],
            principals=[domain.users["othello"].email],
        )
    )
    assert body["removed"] == ["Denmark"]


def test_get_subscriptions_with_and_without_subscribers(apis, domain):
    plain = ok(apis["othello"].request("GET", "users/me/subscriptions"))["subscriptions"]
    assert names(plain) == ["Denmark", "Scotland"]
    assert "subscribers" not in plain[0]
    full = ok(apis["othello"].request("GET", "users/me/subscriptions", include_subscribers=True))[
        "subscriptions"
    ]
    by_name = {s["name"]: s for s in full}
    assert by_name["Scotland"]["subscribers"] == sorted([domain.id("iago"), domain.id("othello")])


def test_get_streams_lists_what_the_user_can_see(apis, domain):
    assert names(ok(apis["hamlet"].request("GET", "streams"))["streams"]) == ["Denmark", "Verona"]
    assert names(ok(apis["othello"].request("GET", "streams"))["streams"]) == [
        "Denmark",
        "Scotland",
        "Verona",
    ]
    assert ok(apis["polonius"].request("GET", "streams"))["streams"] == []
    subscribed_only = ok(apis["othello"].request("GET", "streams", include_public=False))
    assert names(subscribed_only["streams"]) == ["Denmark", "Scotland"]
    defaults = ok(
        apis["othello"].request(
            "GET", "streams", include_public=False, include_subscribed=False, include_default=True
        )
    )
    assert names(defaults["streams"]) == ["Verona"]
    reported = ok(apis["hamlet"].request("GET", "streams", include_all_active=True))
    assert reported["ignored_parameters_unsupported"] == ["include_all_active"]


# -- the real zulip client ----------------------------------------------------------


def test_the_zulip_clients_stream_methods(server, domain, apis):
    hamlet = client_for(server, domain, "hamlet")
    iago = client_for(server, domain, "iago")
    othello_watch = Watcher(apis["othello"])

    result = hamlet.add_subscriptions([{"name": "Rome", "description": "Eternal city"}])
    assert result["result"] == "success", result
    assert result["subscribed"] == {str(domain.id("hamlet")): ["Rome"]}
    streams = hamlet.get_streams()
    assert streams["result"] == "success", streams
    rome = next(s for s in streams["streams"] if s["name"] == "Rome")
    assert rome["description"] == "Eternal city"
    stream_id = rome["stream_id"]
    assert hamlet.get_streams(include_public=False)["result"] == "success"

    result = hamlet.update_subscription_settings(
        [
            {"stream_id": stream_id, "property": "pin_to_top", "value": True},
            {"stream_id": stream_id, "property": "color", "value": "#f00"},
        ]
    )
    assert result["result"] == "success", result
    subs = {s["name"]: s for s in hamlet.get_subscriptions()["subscriptions"]}
    assert (subs["Rome"]["pin_to_top"], subs["Rome"]["color"]) == (True, "#ff0000")

    result = iago.update_stream(
        {"stream_id": stream_id, "new_name": "Roma", "description": "Caput mundi"}
    )
    assert result["result"] == "success", result
    assert "ignored_parameters_unsupported" not in result
    result = iago.add_default_stream(stream_id)
    assert result["result"] == "success", result
    state = iago.register(fetch_event_types=["default_streams", "stream"])
    assert stream_id in state["realm_default_streams"]
    assert {"Roma"} <= {s["name"] for s in state["streams"]}

    result = hamlet.remove_subscriptions(["Roma"])
    assert result["result"] == "success", result
    assert result["removed"] == ["Roma"]
    result = iago.delete_stream(stream_id)
    assert result["result"] == "success", result
    assert "Roma" not in names(hamlet.get_streams()["streams"])
    kinds, _ = othello_watch.events()
    assert kinds == [
        ("stream", "create"),
        ("subscription", "peer_add"),
        ("stream", "update"),
        ("stream", "update"),
        ("default_streams", None),
        ("subscription", "peer_remove"),
        ("default_streams", None),
        ("stream", "delete"),
    ]
    # A member may not manage streams.
    refused = hamlet.update_stream({"stream_id": domain.streams["Denmark"], "new_name": "Mine"})
    assert (refused["result"], refused["code"]) == ("error", "UNAUTHORIZED")


def test_patch_changes_privacy_and_default_streams_can_be_removed(apis, domain):
    scotland, verona = domain.streams["Scotland"], domain.streams["Verona"]
    watcher = Watcher(apis["hamlet"])
    ok(apis["iago"].request("PATCH", f"streams/{scotland}", is_private=False))
    kinds, events = watcher.events()
    assert kinds == [("stream", "create"), ("subscription", "peer_add")]
    assert events[1]["user_ids"] == sorted([domain.id("iago"), domain.id("othello")])
    ok(apis["iago"].request("PATCH", f"streams/{scotland}", is_private=True))
    assert watcher.events()[0] == [("stream", "delete")]
    ok(apis["iago"].request("DELETE", "default_streams", stream_id=verona))
    kinds, events = watcher.events()
    assert kinds == [("default_streams", None)]
    assert events[0]["default_streams"] == []


# -- bad input ---------------------------------------------------------------------------

BAD_INPUT = [
    ("POST", "users/me/subscriptions", {}, "Missing 'subscriptions' argument"),
    ("POST", "users/me/subscriptions", {"subscriptions": "nope"}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": {"name": "x"}}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": ["Denmark"]}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": [{"name": 5}]}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": [{}]}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": [{"name": ""}]}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": [{"name": "a\x00b"}]}, None),
    ("POST", "users/me/subscriptions", {"subscriptions": [{"name": "x" * 61}]}, None),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine", "description": "d" * 1025}]},
        None,
    ),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine"}], "principals": "x"},
        None,
    ),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine"}], "principals": [1.5]},
        None,
    ),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine"}], "principals": [10**30]},
        None,
    ),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine"}], "principals": ["nobody@nowhere.example"]},
        "No such user",
    ),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine"}], "principals": ["a\x00b"]},
        "No such user",
    ),
    (
        "POST",
        "users/me/subscriptions",
        {"subscriptions": [{"name": "Fine"}], "invite_only": "yes"},
        None,
    ),
    ("DELETE", "users/me/subscriptions", {}, "Missing 'subscriptions' argument"),
    ("DELETE", "users/me/subscriptions", {"subscriptions": [1]}, None),
    (
        "DELETE",
        "users/me/subscriptions",
        {"subscriptions": ["Nowhere"]},
        "Channel(s) (Nowhere) do not exist",
    ),
    ("DELETE", "users/me/subscriptions", {"subscriptions": ["a\x00b"]}, None),
    ("POST", "users/me/subscriptions/properties", {}, "Missing 'subscription_data' argument"),
    ("POST", "users/me/subscriptions/properties", {"subscription_data": {}}, None),
    ("POST", "users/me/subscriptions/properties", {"subscription_data": [5]}, None),
    ("POST", "users/me/subscriptions/properties", {"subscription_data": [{"stream_id": 1}]}, None),
    (
        "POST",
        "users/me/subscriptions/properties",
        {"subscription_data": [{"stream_id": "1", "property": "color", "value": "#fff"}]},
        None,
    ),
    (
        "POST",
        "users/me/subscriptions/properties",
        {"subscription_data": [{"stream_id": 10**20, "property": "color", "value": "#fff"}]},
        None,
    ),
    (
        "POST",
        "users/me/subscriptions/properties",
        {"subscription_data": [{"stream_id": 1, "property": "volume", "value": 11}]},
        "Unknown subscription property: volume",
    ),
    ("PATCH", "streams/999999999999", {"new_name": "x"}, "Invalid channel ID"),
    ("PATCH", "streams/99999999999999999999999999", {"new_name": "x"}, "Invalid channel ID"),
    ("DELETE", "streams/0", {}, "Invalid channel ID"),
    ("POST", "default_streams", {}, "Missing 'stream_id' argument"),
    ("POST", "default_streams", {"stream_id": "abc"}, None),
    ("POST", "default_streams", {"stream_id": 0}, None),
    ("DELETE", "default_streams", {"stream_id": 10**20}, None),
    ("GET", "streams", {"include_public": "perhaps"}, None),
    ("GET", "users/me/subscriptions", {"include_subscribers": 3}, None),
]


@pytest.mark.parametrize(("method", "path", "params", "msg"), BAD_INPUT)
def test_bad_input_is_a_4xx_json_error(apis, method, path, params, msg):
    api = apis["iago"]
    body = error(api.request(method, path, **params))
    if msg is not None:
        assert body["msg"] == msg


def test_bad_input_on_a_real_stream(apis, domain):
    denmark, scotland = domain.streams["Denmark"], domain.streams["Scotland"]
    iago = apis["iago"]
    for params, msg in (
        ({"is_private": "yes"}, None),
        ({"is_private": 1}, "is_private is not a boolean"),
        ({"new_name": ""}, "Channel name can't be empty."),
        ({"new_name": "verona"}, "Channel name 'verona' is already taken."),
        ({"description": "d" * 1025}, None),
    ):
        body = error(iago.request("PATCH", f"streams/{denmark}", **params))
        if msg is not None:
            assert body["msg"] == msg
    # All or nothing: a valid change before a refused one is not kept.
    error(iago.request("PATCH", f"streams/{denmark}", description="New", new_name="Verona"))
    denmark_now = next(
        s for s in ok(iago.request("GET", "streams"))["streams"] if s["stream_id"] == denmark
    )
    assert denmark_now["description"] == "The Denmark stream"
    body = error(iago.request("POST", "default_streams", stream_id=scotland))
    assert body["msg"] == "Private channels cannot be made default."
    body = error(
        apis["hamlet"].request(
            "POST",
            "users/me/subscriptions/properties",
            subscription_data=[{"stream_id": scotland, "property": "is_muted", "value": True}],
        )
    )
    assert body["msg"] == "Invalid channel ID"
    for method, path in (("PATCH", f"streams/{denmark}"), ("DELETE", f"streams/{denmark}")):
        body = error(apis["hamlet"].request(method, path, new_name="Mine"), 403)
        assert body["code"] == "UNAUTHORIZED"
    body = error(
        apis["polonius"].request(
            "POST", "users/me/subscriptions", subscriptions=[{"name": "Verona"}]
        ),
        403,
    )
    assert body["msg"] == "Not allowed for guest users"


def test_unauthenticated_and_wrong_methods(server):
    response = requests.get(f"{server.url}/api/v1/streams", timeout=10)
    assert response.status_code == 401
    assert response.json()["result"] == "error"
    response = requests.put(f"{server.url}/api/v1/streams/1", timeout=10)
    assert response.status_code == 405
    assert response.json()["result"] == "error"
    response = requests.get(f"{server.url}/api/v1/streams/abc", timeout=10)
    assert response.status_code == 404
    assert response.json()["result"] == "error"


# -- archiving and unarchiving -------------------------------------------------------


def test_archiving_keeps_subscriptions_and_history_and_unarchiving_brings_it_back(apis, domain):
    denmark = domain.streams["Denmark"]
    iago, hamlet = apis["iago"], apis["hamlet"]
    watcher = Watcher(hamlet)
    sent = ok(
        iago.request("POST", "messages", type="stream", to="Denmark", topic="t", content="hi")
    )

    ok(iago.request("DELETE", f"streams/{denmark}"))
    kinds, events = watcher.events()
    assert kinds == [("stream", "delete")]  # the watcher did not declare archived_channels
    body = error(iago.request("DELETE", f"streams/{denmark}"))
    assert body["msg"] == "Channel is already deactivated"

    # Its history stays readable; nobody sends to it or joins it.
    history = ok(
        hamlet.request(
            "GET",
            "messages",
            anchor="newest",
            num_before=5,
            num_after=0,
            narrow=[{"operator": "channel", "operand": denmark}],
        )
    )
    assert sent["id"] in [m["id"] for m in history["messages"]]
    topics = ok(hamlet.request("GET", f"users/me/{denmark}/topics"))["topics"]
    assert {"name": "t", "max_id": sent["id"]} in topics
    body = error(
        hamlet.request("POST", "messages", type="stream", to="Denmark", topic="t", content="x")
    )
    assert body["msg"] == "Not authorized to send to channel 'Denmark'"
    body = error(
        hamlet.request("POST", "users/me/subscriptions", subscriptions=[{"name": "Denmark"}])
    )
    assert body["msg"] == "Unable to access channel (Denmark)."
    assert "Denmark" not in names(ok(hamlet.request("GET", "streams"))["streams"])
    listed = ok(hamlet.request("GET", "streams", exclude_archived=False))["streams"]
    assert [s["is_archived"] for s in listed if s["stream_id"] == denmark] == [True]

    # Unarchiving: administrators only, `is_archived` false.
    body = error(hamlet.request("PATCH", f"streams/{denmark}", is_archived=False), 403)
    assert body["code"] == "UNAUTHORIZED"
    body = error(iago.request("PATCH", f"streams/{denmark}", is_archived="maybe"))
    assert body["msg"] == 'Argument "is_archived" is not valid JSON.'
    body = error(iago.request("PATCH", f"streams/{denmark}", is_archived=1))
    assert body["msg"] == "is_archived is not a boolean"
    ok(iago.request("PATCH", f"streams/{denmark}", is_archived=True))  # nothing, as Zulip
    ok(iago.request("PATCH", f"streams/{denmark}", is_archived=False))
    kinds, events = watcher.events()
    assert kinds == [("stream", "create"), ("subscription", "peer_add"), ("subscription", "add")]
    [subscription] = events[2]["subscriptions"]
    assert (subscription["name"], subscription["is_archived"]) == ("Denmark", False)
    body = error(iago.request("PATCH", f"streams/{denmark}", is_archived=False))
    assert body["msg"] == "Channel is not currently deactivated"
    ok(hamlet.request("POST", "messages", type="stream", to="Denmark", topic="t", content="back"))
