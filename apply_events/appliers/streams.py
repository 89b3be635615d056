"""Appliers of the streams area's sections: `stream` (the streams the user
can see), `subscription` (subscribed, unsubscribed and never-subscribed
streams, with subscriber lists when asked for) and `default_streams`.

Every list is kept sorted by `stream_id`, as the fetch returns it. Each
applier sets, replaces, inserts-if-absent or takes set differences, so that
an event whose change is already in the fetched state changes nothing more.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable
from typing import Any, NotRequired, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext
from generation.events.streams import SUBSCRIPTION_NOTIFICATIONS, BasicStream

Entry = dict[str, Any]

# The lists of the `subscription` section, each an entry per stream.
SUBSCRIPTION_LISTS = ("subscriptions", "unsubscribed", "never_subscribed")
# Subscription settings a `subscription` update may set.
SUBSCRIPTION_PROPERTIES = frozenset(
    {"color", "is_muted", "in_home_view", "pin_to_top", *SUBSCRIPTION_NOTIFICATIONS}
)


class SubscriptionEntry(BasicStream):
    """A stream the user is (or was) subscribed to, with their settings;
    `subscribers` only when the client registered with include_subscribers."""

    color: str
    is_muted: bool
    in_home_view: bool
    pin_to_top: bool
    # The channel's own notification settings; None: the user's apply.
    desktop_notifications: bool | None
    audible_notifications: bool | None
    push_notifications: bool | None
    email_notifications: bool | None
    wildcard_mentions_notify: bool | None
    subscribers: NotRequired[list[int]]


class NeverSubscribedEntry(BasicStream):
    """A stream the user can see but never joined."""

    subscribers: NotRequired[list[int]]


class StreamsState(TypedDict, total=False):
    """The `stream` section: every stream the user can see."""

    streams: list[BasicStream]


class SubscriptionsState(TypedDict, total=False):
    """The `subscription` section: the streams the user can see, split by
    whether they are subscribed (`subscriptions`), were (`unsubscribed`) or
    never were (`never_subscribed`)."""

    subscriptions: list[SubscriptionEntry]
    unsubscribed: list[SubscriptionEntry]
    never_subscribed: list[NeverSubscribedEntry]


class DefaultStreamsState(TypedDict, total=False):
    """The `default_streams` section: ids of the streams new users join
    (empty for guests, as Zulip's)."""

    realm_default_streams: list[int]


# -- list helpers -------------------------------------------------------------


def _stream_id(entry: Entry) -> int:
    stream_id: int = entry["stream_id"]
    return stream_id


def _upsert(entries: list[Entry], entry: Entry) -> None:
    """Insert `entry`, or replace the one with its stream id, keeping the
    list sorted by stream id."""
    index = bisect.bisect_left(entries, _stream_id(entry), key=_stream_id)
    if index < len(entries) and _stream_id(entries[index]) == _stream_id(entry):
        entries[index] = entry
    else:
        entries.insert(index, entry)


def _pop(entries: list[Entry], stream_id: int) -> Entry | None:
    index = bisect.bisect_left(entries, stream_id, key=_stream_id)
    if index < len(entries) and _stream_id(entries[index]) == stream_id:
        return entries.pop(index)
    return None


def _ids(values: Iterable[Any]) -> set[int]:
    return {value for value in values if isinstance(value, int)}


def _update_stream_entry(entry: Entry, event: Event) -> None:
    """One stream property, as a `stream` update event sets it."""
    prop = event.get("property")
    value = event.get("value")
    if prop in ("name", "invite_only", "is_archived"):
        entry[prop] = value
    elif prop == "description":
        entry["description"] = value
        entry["rendered_description"] = event.get("rendered_description", "")


# -- the `stream` section -----------------------------------------------------


def apply_stream_to_streams(state: State, event: Event, ctx: StateContext) -> None:
    streams: list[Entry] = state["streams"]
    op = event.get("op")
    if op == "create":
        for stream in event.get("streams", ()):
            _upsert(streams, copy.deepcopy(stream))
    elif op == "delete":
        gone = _ids(event.get("stream_ids", ()))
        streams[:] = [stream for stream in streams if _stream_id(stream) not in gone]
    elif op == "update":
        for stream in streams:
            if _stream_id(stream) == event.get("stream_id"):
                _update_stream_entry(stream, event)


# -- the `subscription` section -----------------------------------------------


def _lists(state: State) -> list[list[Entry]]:
    return [state[key] for key in SUBSCRIPTION_LISTS]


def apply_stream_to_subscriptions(state: State, event: Event, ctx: StateContext) -> None:
    """Streams appear (never subscribed, until a subscription event says
    otherwise), disappear from every list, or change."""
    op = event.get("op")
    if op == "create":
        known = {_stream_id(entry) for entries in _lists(state) for entry in entries}
        for stream in event.get("streams", ()):
            if stream["stream_id"] in known:
                continue
            entry = copy.deepcopy(stream)
            if ctx.include_subscribers:
                # Its subscribers follow as peer_add events.
                entry["subscribers"] = []
            _upsert(state["never_subscribed"], entry)
    elif op == "delete":
        gone = _ids(event.get("stream_ids", ()))
        for entries in _lists(state):
            entries[:] = [entry for entry in entries if _stream_id(entry) not in gone]
    elif op == "update":
        for entries in _lists(state):
            for entry in entries:
                if _stream_id(entry) == event.get("stream_id"):
                    _update_stream_entry(entry, event)


def _add(state: State, event: Event, ctx: StateContext) -> None:
    for subscription in event.get("subscriptions", ()):
        stream_id = subscription["stream_id"]
        _pop(state["unsubscribed"], stream_id)
        _pop(state["never_subscribed"], stream_id)
        entry = copy.deepcopy(subscription)
        if ctx.include_subscribers:
            entry["subscribers"] = sorted(_ids(entry.get("subscribers", ())))
        else:
            entry.pop("subscribers", None)
        # Replace rather than skip: the event's subscription is the truth
        # as of this event, and later events bring it up to date.
        _upsert(state["subscriptions"], entry)


def _remove(state: State, event: Event, ctx: StateContext) -> None:
    for removed in event.get("subscriptions", ()):
        entry = _pop(state["subscriptions"], removed["stream_id"])
        if entry is None:
            continue  # already gone in the fetched state
        if entry["invite_only"]:
            # Out of a private stream is out of sight (a `stream` delete
            # follows; this way a client without `stream` events agrees).
            continue
        if "subscribers" in entry:
            entry["subscribers"] = [u for u in entry["subscribers"] if u != ctx.user_id]
        # A guest loses sight of a public stream too: a `stream` delete follows.
        _upsert(state["unsubscribed"], entry)


def _update(state: State, event: Event, ctx: StateContext) -> None:
    prop = event.get("property")
    if prop not in SUBSCRIPTION_PROPERTIES:
        return
    for entry in state["subscriptions"]:
        if _stream_id(entry) == event.get("stream_id"):
            entry[prop] = event.get("value")


def _peers(state: State, event: Event, *, add: bool) -> None:
    stream_ids = _ids(event.get("stream_ids", ()))
    user_ids = _ids(event.get("user_ids", ()))
    for entries in _lists(state):
        for entry in entries:
            if _stream_id(entry) in stream_ids and "subscribers" in entry:
                current = set(entry["subscribers"])
                entry["subscribers"] = sorted(current | user_ids if add else current - user_ids)


def apply_subscription(state: State, event: Event, ctx: StateContext) -> None:
    op = event.get("op")
    if op == "add":
        _add(state, event, ctx)
    elif op == "remove":
        _remove(state, event, ctx)
    elif op == "update":
        _update(state, event, ctx)
    elif op in ("peer_add", "peer_remove"):
        _peers(state, event, add=op == "peer_add")


# -- the `default_streams` section --------------------------------------------


def apply_default_streams(state: State, event: Event, ctx: StateContext) -> None:
    state["realm_default_streams"] = sorted(_ids(event.get("default_streams", ())))


STREAM_APPLIERS: dict[str, Applier] = {"stream": apply_stream_to_streams}
SUBSCRIPTION_APPLIERS: dict[str, Applier] = {
    "stream": apply_stream_to_subscriptions,
    "subscription": apply_subscription,
}
DEFAULT_STREAMS_APPLIERS: dict[str, Applier] = {"default_streams": apply_default_streams}
