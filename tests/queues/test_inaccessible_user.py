"""Zulip's `user_list_incomplete` on live `realm_user` events: an add of a
user the recipient may not see ("Unknown user", marked `INACCESSIBLE_USER`)
is dropped for clients with the capability and reaches the others without
its mark; every other `realm_user` event is one payload for every client."""

from __future__ import annotations

from typing import Any

from generation.actions.access import inaccessible_person, removed_person
from generation.events import CLIENT_RULES
from generation.events.users import INACCESSIBLE_USER as GENERATION_MARK
from queues.client import ClientDescriptor
from queues.event_queue import EventQueue
from queues.payload import Payload
from queues.specialize import INACCESSIBLE_USER, NoticePayloads
from tests.queues.helpers import encode, options

INCOMPLETE = frozenset({"user_list_incomplete"})


def _client(queue_id: str, capabilities: frozenset[str], gravatar: bool) -> ClientDescriptor:
    return ClientDescriptor(
        queue_id,
        1,
        1,
        options(capabilities=capabilities, client_gravatar=gravatar),
        0.0,
        EventQueue(encode),
    )


def _event(payload: Payload | tuple[Payload, ...] | None) -> dict[str, Any] | None:
    if payload is None:
        return None
    assert isinstance(payload, Payload), payload
    event = payload.client_event(0)
    del event["id"]
    return event


def _clients(event: dict[str, Any]) -> list[Payload | tuple[Payload, ...] | None]:
    """What four clients receive: with and without `user_list_incomplete`,
    each with and without `client_gravatar`."""
    payloads = NoticePayloads(event, encode, rules=CLIENT_RULES[event["type"]])
    return [
        payloads.for_client(_client(f"q{n}", capabilities, gravatar), None)
        for n, (capabilities, gravatar) in enumerate(
            [(INCOMPLETE, False), (INCOMPLETE, True), (frozenset(), False), (frozenset(), True)]
        )
    ]


def test_the_mark_is_generations():
    assert INACCESSIBLE_USER == GENERATION_MARK == "inaccessible_user"


def test_an_unknown_user_is_dropped_for_incomplete_lists_and_unmarked_for_the_others():
    unknown = inaccessible_person(12, "zulip")
    add = {"type": "realm_user", "op": "add", "person": unknown, INACCESSIBLE_USER: True}
    incomplete, incomplete_gravatar, complete, complete_gravatar = _clients(add)
    assert incomplete is None
    assert incomplete_gravatar is None
    shown = {"type": "realm_user", "op": "add", "person": unknown}
    assert _event(complete) == shown
    # The unknown-user picture is not a Gravatar: client_gravatar keeps it.
    assert _event(complete_gravatar) == shown
    assert shown["person"]["full_name"] == "Unknown user"
    assert shown["person"]["email"] == "user12@zulip.eventq.invalid"


def test_other_realm_user_events_reach_every_client_alike():
    removed = {"type": "realm_user", "op": "remove", "person": removed_person(12)}
    renamed = {"type": "realm_user", "op": "update", "person": {"user_id": 12, "full_name": "A"}}
    for event in (removed, renamed):
        received = _clients(event)
        assert all(payload is received[0] for payload in received)
        assert _event(received[0]) == event
