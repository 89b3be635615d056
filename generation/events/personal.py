"""Events of a user's own preferences and words: their status (seen by the
realm), and, for their own clients only, their visibility policies for
topics (`user_topic`, and Zulip's legacy `muted_topics`), the users they
muted, their alert words, their drafts and their saved snippets. Shapes are
Zulip's (zulip.yaml, GET /events)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from generation.events.declaration import EventType, empty_topic_rule

ReactionType = Literal["unicode_emoji", "realm_emoji", "zulip_extra_emoji"]
# Zulip's UserTopic.VisibilityPolicy: 0 inherit (no policy), 1 muted,
# 2 unmuted, 3 followed.
VisibilityPolicy = Literal[0, 1, 2, 3]
INHERIT, MUTED, UNMUTED, FOLLOWED = 0, 1, 2, 3


class UserStatusEvent(TypedDict):
    """A user changed their status; sent to every active user of the realm.
    Only the fields the request set are present; an empty string clears
    one. The emoji fields come together."""

    id: int
    type: Literal["user_status"]
    user_id: int
    away: NotRequired[bool]
    status_text: NotRequired[str]
    emoji_name: NotRequired[str]
    emoji_code: NotRequired[str]
    reaction_type: NotRequired[ReactionType]


class UserTopicEvent(TypedDict):
    """The user's visibility policy for a topic changed (0: it has none now);
    sent to the user only."""

    id: int
    type: Literal["user_topic"]
    stream_id: int
    topic_name: str
    # UNIX seconds
    last_updated: int
    visibility_policy: VisibilityPolicy


class MutedTopicsEvent(TypedDict):
    """Zulip's legacy form of the user's muted topics, sent before each
    `user_topic` event: the whole list, each entry `[channel name, topic,
    last_updated]`, of the channels the user can see. Sent to the user only."""

    id: int
    type: Literal["muted_topics"]
    muted_topics: list[list[str | int]]


class MutedUser(TypedDict):
    id: int
    # UNIX seconds: when the user was muted.
    timestamp: int


class MutedUsersEvent(TypedDict):
    """The users the user muted, all of them; sent to the user only."""

    id: int
    type: Literal["muted_users"]
    muted_users: list[MutedUser]


class AlertWordsEvent(TypedDict):
    """The user's alert words, all of them, in the order they were added;
    sent to the user only."""

    id: int
    type: Literal["alert_words"]
    alert_words: list[str]


class Draft(TypedDict):
    """Zulip's draft object."""

    id: int
    type: Literal["stream", "private", ""]
    # a channel's id for "stream"; the other participants' ids for
    # "private" (the user's own for a note to self); empty for "".
    to: list[int]
    topic: str
    content: str
    # UNIX seconds: when it was last edited.
    timestamp: int


class DraftsAddEvent(TypedDict):
    """Drafts were created; sent to the user only."""

    id: int
    type: Literal["drafts"]
    op: Literal["add"]
    drafts: list[Draft]


class DraftsUpdateEvent(TypedDict):
    """A draft was edited; sent to the user only."""

    id: int
    type: Literal["drafts"]
    op: Literal["update"]
    draft: Draft


class DraftsRemoveEvent(TypedDict):
    """A draft was deleted; sent to the user only."""

    id: int
    type: Literal["drafts"]
    op: Literal["remove"]
    draft_id: int


class SavedSnippet(TypedDict):
    """Zulip's saved snippet object."""

    id: int
    title: str
    content: str
    # UNIX seconds
    date_created: int


class SavedSnippetsAddEvent(TypedDict):
    """A snippet was saved; sent to the user only."""

    id: int
    type: Literal["saved_snippets"]
    op: Literal["add"]
    saved_snippet: SavedSnippet


class SavedSnippetsUpdateEvent(TypedDict):
    """A snippet was edited; sent to the user only."""

    id: int
    type: Literal["saved_snippets"]
    op: Literal["update"]
    saved_snippet: SavedSnippet


class SavedSnippetsRemoveEvent(TypedDict):
    """A snippet was deleted; sent to the user only."""

    id: int
    type: Literal["saved_snippets"]
    op: Literal["remove"]
    saved_snippet_id: int


TYPES: tuple[EventType, ...] = (
    EventType("user_status", {None: UserStatusEvent}, state=("user_status",), capability=None),
    EventType(
        "user_topic",
        {None: UserTopicEvent},
        state=("user_topic",),
        capability=empty_topic_rule("topic_name"),
    ),
    EventType("muted_topics", {None: MutedTopicsEvent}, state=("muted_topics",), capability=None),
    EventType("muted_users", {None: MutedUsersEvent}, state=("muted_users",), capability=None),
    EventType("alert_words", {None: AlertWordsEvent}, state=("alert_words",), capability=None),
    EventType(
        "drafts",
        {"add": DraftsAddEvent, "update": DraftsUpdateEvent, "remove": DraftsRemoveEvent},
        state=("drafts",),
        capability=None,
    ),
    EventType(
        "saved_snippets",
        {
            "add": SavedSnippetsAddEvent,
            "update": SavedSnippetsUpdateEvent,
            "remove": SavedSnippetsRemoveEvent,
        },
        state=("saved_snippets",),
        capability=None,
    ),
)


def format_status(
    *, away: bool, status_text: str, emoji_name: str, emoji_code: str, reaction_type: str
) -> dict[str, Any]:
    """A stored status as Zulip shows it: only what is set
    (`format_user_status`), the emoji as a whole."""
    status: dict[str, Any] = {}
    if away:
        status["away"] = True
    if status_text:
        status["status_text"] = status_text
    if emoji_name:
        status.update(emoji_name=emoji_name, emoji_code=emoji_code, reaction_type=reaction_type)
    return status
