"""apply_events: bringing fetched state up to date, purely; an applier must be
right when its change is already in the state."""

from __future__ import annotations

import copy

import pytest

from apply_events.engine import apply_events
from apply_events.state import StateContext, make_want

CTX = StateContext(user_id=1, realm_id=1, queue_id="q0")
EVERYTHING = make_want(None)


def _state():
    return {
        "realm_name": "Old name",
        "realm_description": "Old description",
        "event_queue_longpoll_timeout_seconds": 90,
        "server_generation": 3,
    }


def _applied(events, want=EVERYTHING, state=None):
    state = _state() if state is None else state
    apply_events(state, events, want, CTX)
    return state


def test_realm_update_replaces_the_property():
    state = _applied([{"type": "realm", "op": "update", "property": "name", "value": "New"}])

    assert state == {**_state(), "realm_name": "New"}


def test_realm_update_dict_replaces_every_listed_property():
    event = {
        "type": "realm",
        "op": "update_dict",
        "property": "default",
        "data": {"name": "N", "description": "D", "unknown_setting": True},
    }

    assert _applied([event]) == {**_state(), "realm_name": "N", "realm_description": "D"}


def test_events_apply_in_order():
    events = [
        {"type": "realm", "op": "update", "property": "name", "value": "First"},
        {"type": "realm", "op": "update_dict", "property": "default", "data": {"name": "Second"}},
        {"type": "realm", "op": "update", "property": "description", "value": "Third"},
    ]

    assert _applied(events) == {
        **_state(),
        "realm_name": "Second",
        "realm_description": "Third",
    }


@pytest.mark.parametrize(
    "event",
    [
        {"type": "realm", "op": "update", "property": "emails_restricted", "value": True},
        {"type": "realm", "op": "update", "value": "x"},
        {"type": "realm", "op": "deactivated"},
        {"type": "realm", "op": "update_dict", "property": "icon", "data": {"name": "x"}},
        {"type": "realm", "op": "update_dict", "property": "default", "data": ["name", "x"]},
    ],
    ids=["unknown-property", "no-property", "unknown-op", "other-dict", "data-not-dict"],
)
def test_realm_events_that_change_nothing_we_hold_leave_state_unchanged(event):
    assert _applied([event]) == _state()


def test_realm_property_not_fetched_is_not_added():
    state = {"server_generation": 3}

    _applied([{"type": "realm", "op": "update", "property": "name", "value": "New"}], state=state)

    assert state == {"server_generation": 3}


def test_events_not_in_fetch_event_types_are_skipped():
    event = {"type": "realm", "op": "update", "property": "name", "value": "New"}

    assert _applied([event], want=make_want(frozenset({"message"}))) == _state()
    assert _applied([event], want=make_want(frozenset({"realm"})))["realm_name"] == "New"


@pytest.mark.parametrize(
    "event",
    [
        {"type": "heartbeat"},
        {"type": "restart", "server_generation": 99, "zulip_version": "x"},
        {"type": "web_reload_client", "immediate": True},
        {"type": "arbitrary", "realm_name": "x"},
        {"type": "message", "message": {"id": 1}, "flags": []},
        {"op": "update", "property": "name", "value": "no type"},
        {"type": None, "property": "name"},
    ],
    ids=["heartbeat", "restart", "web-reload", "unknown", "message", "no-type", "null-type"],
)
def test_event_types_nobody_cares_about_leave_state_unchanged(event):
    assert _applied([event, copy.deepcopy(event)]) == _state()


def test_reapplying_the_same_events_gives_the_same_state():
    # An event already reflected in the fetched state must not change it again.
    events = [
        {"type": "realm", "op": "update", "property": "name", "value": "New"},
        {"type": "realm", "op": "update_dict", "property": "default", "data": {"description": "D"}},
    ]
    once = _applied(copy.deepcopy(events))

    twice = _applied(copy.deepcopy(events), state=copy.deepcopy(once))

    assert twice == once
    assert once == {**_state(), "realm_name": "New", "realm_description": "D"}


def test_no_events_leave_state_unchanged():
    assert _applied([]) == _state()


def test_make_want_none_wants_everything():
    assert EVERYTHING("realm")
    assert EVERYTHING("anything")
    want = make_want(frozenset({"realm"}))
    assert want("realm")
    assert not want("message")
    assert not make_want(frozenset())("realm")


@pytest.mark.parametrize(
    "event",
    [
        {"type": "realm", "op": "update", "property": ["name"], "value": "x"},
        {"type": "realm", "op": "update_dict", "property": {"a": 1}, "data": {"name": "x"}},
        {"type": "realm", "op": "update_dict", "property": "default", "data": ["name"]},
    ],
)
def test_malformed_realm_events_leave_state_unchanged(event):
    assert _applied([event]) == _state()
