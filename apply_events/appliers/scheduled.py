"""Appliers of the `scheduled_messages` section (Zulip's apply_event for
`scheduled_messages`). Each tolerates being applied to a state that already
has its change: an add replaces an entry of the same id, an update or a
remove of an entry the state lacks changes nothing."""

from __future__ import annotations

from typing import Any, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext
from generation.events.scheduled import ScheduledMessageObject


class ScheduledMessagesState(TypedDict, total=False):
    """The `scheduled_messages` section of register's response."""

    scheduled_messages: list[ScheduledMessageObject]


def order(scheduled: dict[str, Any]) -> tuple[int, int]:
    """Soonest first; the same second by id (the fetch's order)."""
    return scheduled["scheduled_delivery_timestamp"], scheduled["scheduled_message_id"]


def apply_scheduled_messages(state: State, event: Event, ctx: StateContext) -> None:
    current = state.get("scheduled_messages")
    if not isinstance(current, list):
        return  # section not fetched
    op = event.get("op")
    if op == "add":
        added = list(event.get("scheduled_messages") or [])
        ids = {message["scheduled_message_id"] for message in added}
        kept = [m for m in current if m["scheduled_message_id"] not in ids]
        state["scheduled_messages"] = sorted(kept + added, key=order)
    elif op == "update":
        changed = event["scheduled_message"]
        found = False
        for index, message in enumerate(current):
            if message["scheduled_message_id"] == changed["scheduled_message_id"]:
                current[index] = changed
                found = True
        if found:
            current.sort(key=order)
    elif op == "remove":
        removed = event.get("scheduled_message_id")
        state["scheduled_messages"] = [m for m in current if m["scheduled_message_id"] != removed]


APPLIERS: dict[str, Applier] = {"scheduled_messages": apply_scheduled_messages}
