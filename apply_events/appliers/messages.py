"""Appliers and post-processing of the messages area's sections:
`max_message_id` (section `message`), `unread_msgs` (section
`update_message_flags`, which needs `message`) and `starred_messages`.

They are fetched as raw structures (`raw_recent_message_ids`,
`raw_unread_msgs`, `raw_starred_messages`) that events update by message id,
and turned into the keys clients read by post-processing, as Zulip's
`post_process_state`. Every applier sets or removes entries by id, so applying
an event whose effect is already in the fetched state changes nothing.

Which event types each section applies is declared with the types
(`generation.events`, `state`); reactions and typing notifications are
declared transient there, and have no applier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext

# -- state keys -----------------------------------------------------------------


class MessageState(TypedDict, total=False):
    """The `message` section of register's response."""

    # The newest message the user received; -1 if none.
    max_message_id: int


class UnreadDirectConversation(TypedDict):
    """Unread one-on-one direct messages with one user (oneself for notes to self)."""

    other_user_id: int
    # Zulip's deprecated name of `other_user_id`.
    sender_id: int
    unread_message_ids: list[int]


class UnreadChannelTopic(TypedDict):
    """Unread messages of one channel topic."""

    stream_id: int
    topic: str
    unread_message_ids: list[int]


class UnreadGroupConversation(TypedDict):
    """Unread group direct messages of one set of users."""

    # The participants' ids (the user's included), ascending, comma-separated.
    user_ids_string: str
    unread_message_ids: list[int]


class UnreadMessages(TypedDict):
    """Zulip's `unread_msgs`. `count` leaves out channels the user muted;
    `mentions` holds unread messages that mention the user, by name or by a
    wildcard."""

    count: int
    pms: list[UnreadDirectConversation]
    streams: list[UnreadChannelTopic]
    huddles: list[UnreadGroupConversation]
    mentions: list[int]
    old_unreads_missing: bool


class UnreadState(TypedDict, total=False):
    """The `update_message_flags` section of register's response."""

    unread_msgs: UnreadMessages


class StarredState(TypedDict, total=False):
    """The `starred_messages` section of register's response."""

    # ascending
    starred_messages: list[int]


# -- raw structures -------------------------------------------------------------


@dataclasses.dataclass
class RawRecentMessages:
    """The ids of the newest messages the user received (the fetch keeps a
    bounded number), so that deleting the newest leaves the next newest."""

    ids: set[int]


@dataclasses.dataclass
class RawUnread:
    """The user's unread messages by id: each id is in at most one of
    `direct`, `channel` and `group`; `mentions` and `muted_stream_ids` are
    independent of them until post-processing."""

    # message id -> the other participant of a one-on-one conversation
    direct: dict[int, int]
    # message id -> (stream id, topic)
    channel: dict[int, tuple[int, str]]
    # message id -> user_ids_string
    group: dict[int, str]
    mentions: set[int]
    # channels whose messages `count` leaves out
    muted_stream_ids: set[int]
    old_unreads_missing: bool
    # Messages deleted while events are replayed. Ids are never reused, so an
    # event that would make one unread again is stale: the queue's collapsed
    # flag events can arrive after a deletion that followed them.
    deleted: set[int] = dataclasses.field(default_factory=set)

    def add_channel(self, message_id: int, stream_id: int, topic: str) -> None:
        if message_id not in self.deleted:
            self.channel[message_id] = (stream_id, topic)

    def add_direct(self, message_id: int, participants: Iterable[int], user_id: int) -> None:
        """A direct message with these participants (the user among them)."""
        if message_id in self.deleted:
            return
        everyone = sorted(set(participants) | {user_id})
        if len(everyone) <= 2:
            others = [p for p in everyone if p != user_id]
            self.direct[message_id] = others[0] if others else user_id
        else:
            self.group[message_id] = ",".join(map(str, everyone))

    def add_mention(self, message_id: int) -> None:
        if message_id not in self.deleted:
            self.mentions.add(message_id)

    def remove(self, message_id: int) -> None:
        self.direct.pop(message_id, None)
        self.channel.pop(message_id, None)
        self.group.pop(message_id, None)
        self.mentions.discard(message_id)

    def is_unread(self, message_id: int) -> bool:
        return message_id in self.direct or message_id in self.channel or message_id in self.group

    def clear(self) -> None:
        self.direct.clear()
        self.channel.clear()
        self.group.clear()
        self.mentions.clear()
        self.old_unreads_missing = False

    def aggregate(self) -> UnreadMessages:
        """Zulip's `unread_msgs`: conversations sorted by their key, message
        ids ascending."""
        direct: dict[int, list[int]] = {}
        for message_id, other in self.direct.items():
            direct.setdefault(other, []).append(message_id)
        channel: dict[tuple[int, str], list[int]] = {}
        for message_id, key in self.channel.items():
            channel.setdefault(key, []).append(message_id)
        group: dict[str, list[int]] = {}
        for message_id, users in self.group.items():
            group.setdefault(users, []).append(message_id)
        unmuted = sum(
            1 for stream_id, _ in self.channel.values() if stream_id not in self.muted_stream_ids
        )
        return {
            "count": len(self.direct) + len(self.group) + unmuted,
            "pms": [
                {"other_user_id": other, "sender_id": other, "unread_message_ids": sorted(ids)}
                for other, ids in sorted(direct.items())
            ],
            "streams": [
                {"stream_id": stream_id, "topic": topic, "unread_message_ids": sorted(ids)}
                for (stream_id, topic), ids in sorted(channel.items())
            ],
            "huddles": [
                {"user_ids_string": users, "unread_message_ids": sorted(ids)}
                for users, ids in sorted(group.items())
            ],
            "mentions": sorted(self.mentions),
            "old_unreads_missing": self.old_unreads_missing,
        }


RAW_RECENT = "raw_recent_message_ids"
RAW_UNREAD = "raw_unread_msgs"


def _recent(state: State) -> RawRecentMessages | None:
    raw = state.get(RAW_RECENT)
    return raw if isinstance(raw, RawRecentMessages) else None


def _unread(state: State) -> RawUnread | None:
    raw = state.get(RAW_UNREAD)
    return raw if isinstance(raw, RawUnread) else None


def _ids(values: Any) -> list[int]:
    """The integer ids of a list from an event (anything else is ignored)."""
    if not isinstance(values, list):
        return []
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _deleted_ids(event: Event) -> list[int]:
    """Both forms of `delete_message`: bulk (`message_ids`) and one per message."""
    if "message_ids" in event:
        return _ids(event["message_ids"])
    return _ids([event.get("message_id")])


# -- section `message` ------------------------------------------------------------


def apply_message_max(state: State, event: Event, ctx: StateContext) -> None:
    recent = _recent(state)
    message = event.get("message")
    if recent is not None and isinstance(message, dict) and isinstance(message.get("id"), int):
        recent.ids.add(message["id"])


def apply_delete_max(state: State, event: Event, ctx: StateContext) -> None:
    recent = _recent(state)
    if recent is not None:
        recent.ids.difference_update(_deleted_ids(event))


def post_process_message(state: State, ctx: StateContext) -> None:
    recent = state.pop(RAW_RECENT, None)
    if isinstance(recent, RawRecentMessages):
        state["max_message_id"] = max(recent.ids, default=-1)


MESSAGE_APPLIERS: dict[str, Applier] = {
    "message": apply_message_max,
    "delete_message": apply_delete_max,
}

# -- section `update_message_flags` (unread_msgs) ---------------------------------------


def _mentions(flags: Any) -> bool:
    return isinstance(flags, list) and ("mentioned" in flags or "wildcard_mentioned" in flags)


def apply_message_unread(state: State, event: Event, ctx: StateContext) -> None:
    """A new message is unread unless its flags say read."""
    raw = _unread(state)
    message = event.get("message")
    flags = event.get("flags")
    if raw is None or not isinstance(message, dict) or not isinstance(flags, list):
        return
    message_id = message.get("id")
    if not isinstance(message_id, int) or "read" in flags:
        return
    if message.get("type") == "stream":
        raw.add_channel(message_id, message["stream_id"], message["subject"])
    else:
        recipients = message.get("display_recipient")
        if not isinstance(recipients, list):
            return
        raw.add_direct(message_id, (r["id"] for r in recipients), ctx.user_id)
    if _mentions(flags):
        raw.add_mention(message_id)


def apply_update_message_unread(state: State, event: Event, ctx: StateContext) -> None:
    """A topic edit moves unread messages to the new topic; a content edit
    may mention the user, or no longer."""
    raw = _unread(state)
    if raw is None:
        return
    new_stream = event.get("new_stream_id")
    new_topic = event.get("subject")
    for message_id in _ids(event.get("message_ids")):
        where = raw.channel.get(message_id)
        if where is not None:
            stream_id, topic = where
            if isinstance(new_stream, int):
                stream_id = new_stream
            if isinstance(new_topic, str):
                topic = new_topic
            raw.channel[message_id] = (stream_id, topic)
    edited = event.get("message_id")
    if "rendered_content" in event and isinstance(edited, int) and raw.is_unread(edited):
        if _mentions(event.get("flags")):
            raw.mentions.add(edited)
        else:
            raw.mentions.discard(edited)


def apply_delete_unread(state: State, event: Event, ctx: StateContext) -> None:
    raw = _unread(state)
    if raw is not None:
        for message_id in _deleted_ids(event):
            raw.remove(message_id)
            raw.deleted.add(message_id)


def apply_flags_unread(state: State, event: Event, ctx: StateContext) -> None:
    """`read` added: no longer unread (`all`: nothing is); removed: unread
    again, where `message_details` says."""
    raw = _unread(state)
    if raw is None or event.get("flag") != "read":
        return
    op = event.get("op")
    if op == "add":
        if event.get("all") is True:
            raw.clear()
        for message_id in _ids(event.get("messages")):
            raw.remove(message_id)
    elif op == "remove":
        details = event.get("message_details")
        if not isinstance(details, dict):
            return
        for message_id in _ids(event.get("messages")):
            detail = details.get(str(message_id))
            if not isinstance(detail, dict):
                continue
            if detail.get("type") == "stream":
                raw.add_channel(message_id, detail["stream_id"], detail["topic"])
            else:
                raw.add_direct(message_id, _ids(detail.get("user_ids")), ctx.user_id)
            if detail.get("mentioned") is True:
                raw.add_mention(message_id)


def _stream_ids(items: Any) -> list[int]:
    if not isinstance(items, list):
        return []
    return _ids([item.get("stream_id") for item in items if isinstance(item, dict)])


def apply_subscription_unread(state: State, event: Event, ctx: StateContext) -> None:
    """Which channels the user muted (for `count`): their subscriptions'
    `is_muted` (or its legacy inverse `in_home_view`)."""
    raw = _unread(state)
    if raw is None:
        return
    op = event.get("op")
    if op == "add":
        for sub in event.get("subscriptions") or ():
            if isinstance(sub, dict) and isinstance(sub.get("stream_id"), int):
                if sub.get("is_muted") is True:
                    raw.muted_stream_ids.add(sub["stream_id"])
                else:
                    raw.muted_stream_ids.discard(sub["stream_id"])
    elif op == "remove":
        raw.muted_stream_ids.difference_update(_stream_ids(event.get("subscriptions")))
    elif op == "update" and isinstance(event.get("stream_id"), int):
        prop, value = event.get("property"), event.get("value")
        if prop in ("is_muted", "in_home_view") and isinstance(value, bool):
            muted = value if prop == "is_muted" else not value
            if muted:
                raw.muted_stream_ids.add(event["stream_id"])
            else:
                raw.muted_stream_ids.discard(event["stream_id"])


def apply_stream_unread(state: State, event: Event, ctx: StateContext) -> None:
    """A deleted channel is no longer muted (its unread messages stay)."""
    raw = _unread(state)
    if raw is not None and event.get("op") == "delete":
        raw.muted_stream_ids.difference_update(_stream_ids(event.get("streams")))
        raw.muted_stream_ids.difference_update(_ids(event.get("stream_ids")))


def post_process_unread(state: State, ctx: StateContext) -> None:
    raw = state.pop(RAW_UNREAD, None)
    if isinstance(raw, RawUnread):
        state["unread_msgs"] = raw.aggregate()


UNREAD_APPLIERS: dict[str, Applier] = {
    "message": apply_message_unread,
    "update_message": apply_update_message_unread,
    "delete_message": apply_delete_unread,
    "update_message_flags": apply_flags_unread,
    "subscription": apply_subscription_unread,
    "stream": apply_stream_unread,
}

# -- section `starred_messages` --------------------------------------------------


@dataclasses.dataclass
class RawStarred:
    """The user's starred messages, and those deleted while events are
    replayed (a collapsed `starred` event can arrive after such a deletion:
    it is stale for them, as for `RawUnread.deleted`)."""

    ids: set[int]
    deleted: set[int] = dataclasses.field(default_factory=set)


RAW_STARRED = "raw_starred_messages"


def _starred(state: State) -> RawStarred | None:
    raw = state.get(RAW_STARRED)
    return raw if isinstance(raw, RawStarred) else None


def apply_flags_starred(state: State, event: Event, ctx: StateContext) -> None:
    raw = _starred(state)
    if raw is None or event.get("flag") != "starred":
        return
    changed = set(_ids(event.get("messages")))
    if event.get("op") == "add":
        raw.ids |= changed - raw.deleted
    elif event.get("op") == "remove":
        raw.ids -= changed


def apply_delete_starred(state: State, event: Event, ctx: StateContext) -> None:
    raw = _starred(state)
    if raw is not None:
        deleted = set(_deleted_ids(event))
        raw.ids -= deleted
        raw.deleted |= deleted


def post_process_starred(state: State, ctx: StateContext) -> None:
    raw = state.pop(RAW_STARRED, None)
    if isinstance(raw, RawStarred):
        state["starred_messages"] = sorted(raw.ids)


STARRED_APPLIERS: dict[str, Applier] = {
    "update_message_flags": apply_flags_starred,
    "delete_message": apply_delete_starred,
}
