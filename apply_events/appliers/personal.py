"""Appliers and post-processing of the personal area's sections: statuses
(`user_status`), the user's topic policies (`user_topic`, and Zulip's legacy
`muted_topics`), muted users, alert words, drafts and saved snippets.

Every applier is correct when the event's change is already in the fetched
state: it sets values, never adds to them.
"""

from __future__ import annotations

from typing import Any, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext, event_int
from generation.events.personal import (
    INHERIT,
    Draft,
    MutedUser,
    ReactionType,
    SavedSnippet,
    VisibilityPolicy,
    format_status,
)

# -- state shapes (register's response, after post-processing) -----------------


class UserStatus(TypedDict, total=False):
    """A user's status as register shows it: only what is set."""

    away: bool
    status_text: str
    emoji_name: str
    emoji_code: str
    reaction_type: ReactionType


class UserStatusState(TypedDict, total=False):
    """The `user_status` section: the status of each active user of the
    realm who has one, keyed by user id (a string)."""

    user_status: dict[str, UserStatus]


class UserTopic(TypedDict):
    stream_id: int
    topic_name: str
    # UNIX seconds
    last_updated: int
    visibility_policy: VisibilityPolicy


class UserTopicState(TypedDict, total=False):
    """The `user_topic` section: the user's policy of every topic that has
    one, by channel id and topic."""

    user_topics: list[UserTopic]


class MutedTopicsState(TypedDict, total=False):
    """The `muted_topics` section: Zulip's legacy list of the user's muted
    topics, `[channel name, topic, last_updated]`, in the channels they can
    see, by channel id and topic."""

    muted_topics: list[list[str | int]]


class MutedUsersState(TypedDict, total=False):
    """The `muted_users` section."""

    muted_users: list[MutedUser]


class AlertWordsState(TypedDict, total=False):
    """The `alert_words` section, in the order the words were added."""

    alert_words: list[str]


class DraftsState(TypedDict, total=False):
    """The `drafts` section, by id; empty while the user's
    `enable_drafts_synchronization` is off."""

    drafts: list[Draft]


class SavedSnippetsState(TypedDict, total=False):
    """The `saved_snippets` section, by id."""

    saved_snippets: list[SavedSnippet]


# -- user_status -------------------------------------------------------------------
#
# `raw_user_status` is {user_id: {"active": bool, "status": UserStatus}} for
# every user of the realm with a status row, so that a user deactivated and
# reactivated shows their status again exactly as a fresh fetch does.

_EMOJI_KEYS = ("emoji_name", "emoji_code", "reaction_type")


def status_entry(
    *, active: bool, away: bool, text: str, emoji_name: str, emoji_code: str, reaction_type: str
) -> dict[str, Any]:
    """A raw entry from a stored status: only what is set (Zulip's
    `format_user_status`)."""
    status = format_status(
        away=away,
        status_text=text,
        emoji_name=emoji_name,
        emoji_code=emoji_code,
        reaction_type=reaction_type,
    )
    return {"active": active, "status": status}


def apply_user_status(state: State, event: Event, ctx: StateContext) -> None:
    """The event's fields replace the stored ones; an empty one (or `away`
    false) clears it; the emoji goes as a whole."""
    raw = state.get("raw_user_status")
    user_id = event_int(event.get("user_id"))
    if not isinstance(raw, dict) or user_id is None:
        return
    entry = raw.setdefault(user_id, {"active": True, "status": {}})
    status = entry["status"]
    away = event.get("away")
    if away is True:
        status["away"] = True
    elif away is False:
        status.pop("away", None)
    text = event.get("status_text")
    if isinstance(text, str):
        if text:
            status["status_text"] = text
        else:
            status.pop("status_text", None)
    name = event.get("emoji_name")
    if isinstance(name, str):
        if name:
            status.update({key: event.get(key) for key in _EMOJI_KEYS})
        else:
            for key in _EMOJI_KEYS:
                status.pop(key, None)


def apply_user_status_people(state: State, event: Event, ctx: StateContext) -> None:
    """Only active users' statuses are shown: `realm_user` events say who is."""
    raw = state.get("raw_user_status")
    person = event.get("person")
    if not isinstance(raw, dict) or not isinstance(person, dict):
        return
    user_id = event_int(person.get("user_id"))
    active = person.get("is_active")
    if user_id in raw and isinstance(active, bool) and event.get("op") in ("add", "update"):
        raw[user_id]["active"] = active


def post_process_user_status(state: State, ctx: StateContext) -> None:
    raw = state.pop("raw_user_status", None)
    if not isinstance(raw, dict):
        return
    state["user_status"] = {
        str(user_id): dict(entry["status"])
        for user_id, entry in sorted(raw.items())
        if entry["active"] and entry["status"]
    }


# -- user_topic ----------------------------------------------------------------------


def topic_key(stream_id: object, topic: object) -> tuple[object, str]:
    """How the user's topics are told apart (and sorted): by channel, then
    topic ignoring letter case."""
    return stream_id, topic.lower() if isinstance(topic, str) else ""


def apply_user_topic(state: State, event: Event, ctx: StateContext) -> None:
    topics = state.get("user_topics")
    stream_id = event_int(event.get("stream_id"))
    topic = event.get("topic_name")
    policy = event_int(event.get("visibility_policy"))
    if not isinstance(topics, list) or stream_id is None or not isinstance(topic, str):
        return
    key = topic_key(stream_id, topic)
    kept = [t for t in topics if topic_key(t.get("stream_id"), t.get("topic_name")) != key]
    if policy is not None and policy != INHERIT:
        kept.append(
            {
                "stream_id": stream_id,
                "topic_name": topic,
                "last_updated": event.get("last_updated"),
                "visibility_policy": policy,
            }
        )
    kept.sort(key=lambda t: topic_key(t["stream_id"], t["topic_name"]))
    topics[:] = kept


# -- muted_topics ----------------------------------------------------------------------
#
# `raw_muted_topics` is {"names": {stream_id: name}, "rows": {(stream_id,
# topic lowercased): [stream_id, topic, last_updated]}}: the names of the
# channels the user can see (kept by `stream` events, which reach exactly
# those who gain, lose or see a channel), and every muted topic of the
# user, seen or not. A `muted_topics` event lists the muted topics of the
# channels the user sees, by name: those replace the seen rows; rows of
# channels the user cannot see cannot change meanwhile (a policy is set
# only in a channel one may access).


def apply_muted_topics(state: State, event: Event, ctx: StateContext) -> None:
    raw = state.get("raw_muted_topics")
    entries = event.get("muted_topics")
    if not isinstance(raw, dict) or not isinstance(entries, list):
        return
    names: dict[int, str] = raw["names"]
    by_name = {name: stream_id for stream_id, name in names.items()}
    rows: dict[tuple[int, str], list[Any]] = {
        key: row for key, row in raw["rows"].items() if key[0] not in names
    }
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 3:
            continue
        name, topic, stamp = entry
        stream_id = by_name.get(name)
        if stream_id is not None and isinstance(topic, str):
            rows[(stream_id, topic.lower())] = [stream_id, topic, stamp]
    raw["rows"] = rows


def apply_muted_topics_streams(state: State, event: Event, ctx: StateContext) -> None:
    """Which channels the user sees, and their names."""
    raw = state.get("raw_muted_topics")
    if not isinstance(raw, dict):
        return
    names: dict[int, str] = raw["names"]
    op = event.get("op")
    if op == "create":
        for stream in event.get("streams") or ():
            if (
                isinstance(stream, dict)
                and event_int(stream.get("stream_id")) is not None
                and isinstance(stream.get("name"), str)
                and stream.get("is_archived") is not True
            ):
                names[stream["stream_id"]] = stream["name"]
    elif op == "delete":
        for stream_id in event.get("stream_ids") or ():
            names.pop(stream_id, None)
    elif op == "update" and event.get("property") == "is_archived":
        # An archived channel is not among them (a client with
        # `archived_channels` keeps seeing it: this update, not a delete).
        stream_id = event_int(event.get("stream_id"))
        if stream_id is not None and event.get("value") is True:
            names.pop(stream_id, None)
        elif stream_id is not None and isinstance(event.get("name"), str):
            names[stream_id] = event["name"]
    elif op == "update" and event.get("property") == "name":
        stream_id = event_int(event.get("stream_id"))
        if stream_id in names and isinstance(event.get("value"), str):
            names[stream_id] = event["value"]


def post_process_muted_topics(state: State, ctx: StateContext) -> None:
    raw = state.pop("raw_muted_topics", None)
    if not isinstance(raw, dict):
        return
    names = raw["names"]
    state["muted_topics"] = [
        [names[stream_id], topic, stamp]
        for (stream_id, _key), (_, topic, stamp) in sorted(raw["rows"].items())
        if stream_id in names
    ]


# -- whole lists: muted users, alert words ----------------------------------------------


def _replacing(key: str) -> Applier:
    """The applier of an event that carries the section's whole list under
    the section's own key."""

    def apply(state: State, event: Event, ctx: StateContext) -> None:
        value = event.get(key)
        if key in state and isinstance(value, list):
            state[key] = list(value)

    return apply


# -- drafts and saved snippets: lists of objects by id -----------------------------------


def _by_id(items: list[Any], added: list[Any]) -> list[Any]:
    """`items` with `added` in place of any of the same id, by id."""
    new = {item["id"]: item for item in added if isinstance(item, dict) and "id" in item}
    kept = [item for item in items if item.get("id") not in new]
    return sorted([*kept, *new.values()], key=lambda item: item["id"])


def apply_drafts(state: State, event: Event, ctx: StateContext) -> None:
    drafts = state.get("drafts")
    if not isinstance(drafts, list):
        return
    op = event.get("op")
    if op == "add" and isinstance(event.get("drafts"), list):
        state["drafts"] = _by_id(drafts, event["drafts"])
    elif op == "update" and isinstance(event.get("draft"), dict):
        state["drafts"] = _by_id(drafts, [event["draft"]])
    elif op == "remove":
        state["drafts"] = [d for d in drafts if d.get("id") != event.get("draft_id")]


def apply_drafts_setting(state: State, event: Event, ctx: StateContext) -> None:
    """Turning `enable_drafts_synchronization` off deletes the drafts (and
    none can be made while it is off)."""
    if (
        event.get("op") == "update"
        and event.get("property") == "enable_drafts_synchronization"
        and event.get("value") is False
        and "drafts" in state
    ):
        state["drafts"] = []


def apply_saved_snippets(state: State, event: Event, ctx: StateContext) -> None:
    snippets = state.get("saved_snippets")
    if not isinstance(snippets, list):
        return
    op = event.get("op")
    if op in ("add", "update") and isinstance(event.get("saved_snippet"), dict):
        state["saved_snippets"] = _by_id(snippets, [event["saved_snippet"]])
    elif op == "remove":
        removed = event.get("saved_snippet_id")
        state["saved_snippets"] = [s for s in snippets if s.get("id") != removed]


USER_STATUS_APPLIERS: dict[str, Applier] = {
    "user_status": apply_user_status,
    "realm_user": apply_user_status_people,
}
USER_TOPIC_APPLIERS: dict[str, Applier] = {"user_topic": apply_user_topic}
MUTED_TOPICS_APPLIERS: dict[str, Applier] = {
    "muted_topics": apply_muted_topics,
    "stream": apply_muted_topics_streams,
}
MUTED_USERS_APPLIERS: dict[str, Applier] = {"muted_users": _replacing("muted_users")}
ALERT_WORDS_APPLIERS: dict[str, Applier] = {"alert_words": _replacing("alert_words")}
DRAFTS_APPLIERS: dict[str, Applier] = {
    "drafts": apply_drafts,
    "user_settings": apply_drafts_setting,
}
SAVED_SNIPPETS_APPLIERS: dict[str, Applier] = {"saved_snippets": apply_saved_snippets}
