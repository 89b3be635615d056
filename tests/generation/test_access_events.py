"""The events that change what a server must know of a user or a realm, and
the types the delivery path asks about (server/delivering.py skips the
checks for every other type)."""

from __future__ import annotations

from generation.events.realm import REALM_EVENT_TYPE, deactivated_realm_id
from generation.events.users import (
    ACCESS_EVENT_TYPES,
    AccessChange,
    access_change,
    credentials_changed,
    is_control,
)
from server.delivering import WATCHED_TYPES


def test_each_kind_of_access_change_is_reported():
    deactivated = {
        "type": "realm_user",
        "op": "update",
        "person": {"user_id": 7, "is_active": False},
    }
    role = {"type": "realm_user", "op": "update", "person": {"user_id": 7, "role": 600}}
    assert access_change(deactivated) == AccessChange(7, deactivated=True)
    assert access_change(role) == AccessChange(7, role=600)
    assert access_change(credentials_changed(7)) == AccessChange(7)
    assert is_control(credentials_changed(7))


def test_the_same_fields_under_another_type_are_no_change():
    person = {"user_id": 7, "is_active": False, "role": 600}
    for event_type in ("message", "realm_bot", "subscription", "presence"):
        assert event_type not in ACCESS_EVENT_TYPES
        event = {"type": event_type, "op": "update", "person": person, "user_id": 7}
        assert access_change(event) is None
        assert not is_control(event)


def test_a_realm_deactivation_is_reported_for_its_type_only():
    event = {"type": REALM_EVENT_TYPE, "op": "deactivated", "realm_id": 3}
    assert deactivated_realm_id(event) == 3
    assert deactivated_realm_id({**event, "type": "realm_user"}) is None


def test_the_delivery_path_watches_every_type_that_can_change_access():
    assert ACCESS_EVENT_TYPES | {REALM_EVENT_TYPE} == WATCHED_TYPES
    assert credentials_changed(7)["type"] in WATCHED_TYPES


def test_an_event_whose_type_is_not_a_string_is_no_change():
    assert access_change({"type": ["realm_user"], "op": "update"}) is None
    assert deactivated_realm_id({"type": ["realm"], "op": "deactivated", "realm_id": 3}) is None
