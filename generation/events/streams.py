"""Events of the streams area: streams (Zulip's channels), subscriptions and
the realm's default streams (see generation/events/__init__.py).

Shapes are Zulip's (feature level 419) for the fields we model; a stream
object carries `stream_id`, `name`, `description`, `rendered_description`,
`invite_only`, `date_created` and `is_archived`, a subscription adds the
user's own `color`, `is_muted` (with its legacy inverse `in_home_view`) and
`pin_to_top`, and its own notification settings (`SUBSCRIPTION_NOTIFICATIONS`).

Who can see a stream (and its subscriber list): its active subscribers, and
for a public stream every active user who is not a guest. Every event about a
stream goes only to users who can see it.
"""

from __future__ import annotations

import html
import re
from typing import Literal, NotRequired, TypedDict, get_args

from generation.events.declaration import ClientRule, EventType

# The stream properties a `stream` update event may carry.
StreamProperty = Literal["name", "description", "invite_only", "is_archived"]
# A subscription's own notification settings (the columns of migration
# 0023 have their names): None until the user sets one, and then the user's
# setting applies (Zulip's `enable_stream_email_notifications` for
# `email_notifications`, ...; `wildcard_mentions_notify` for its namesake).
SubscriptionNotification = Literal[
    "desktop_notifications",
    "audible_notifications",
    "push_notifications",
    "email_notifications",
    "wildcard_mentions_notify",
]
SUBSCRIPTION_NOTIFICATIONS: tuple[SubscriptionNotification, ...] = get_args(
    SubscriptionNotification
)
# The per-user subscription properties a `subscription` update event may carry.
SubscriptionProperty = Literal[
    "color", "is_muted", "in_home_view", "pin_to_top", SubscriptionNotification
]


class BasicStream(TypedDict):
    """A stream as every user who can see it knows it. The last five fields
    are what every eventq channel is (`CHANNEL_POLICIES`)."""

    stream_id: int
    name: str
    description: str
    # The description as HTML (see `render_description`).
    rendered_description: str
    invite_only: bool
    # UNIX seconds.
    date_created: int
    # Archived (Zulip's feature level 315): only clients with the
    # `archived_channels` capability ever hold an archived channel.
    is_archived: bool
    history_public_to_subscribers: bool
    is_web_public: bool
    stream_post_policy: int
    is_announcement_only: bool
    message_retention_days: int | None


# What every eventq channel is, beside what it stores, in the fields Zulip's
# clients read: its history is shared with its subscribers (docs/behaviour.md,
# "Message history"), it is not web-public, anyone who may post does (Zulip's
# post policy 1), and its messages are kept as long as the realm keeps them
# (None: the realm's policy).
CHANNEL_POLICIES: dict[str, bool | int | None] = {
    "history_public_to_subscribers": True,
    "is_web_public": False,
    "stream_post_policy": 1,
    "is_announcement_only": False,
    "message_retention_days": None,
}


class SubscribedStream(BasicStream):
    """A stream as one of its subscribers knows it: the stream, the user's
    settings for it, and its active subscribers (user ids, ascending)."""

    color: str
    is_muted: bool
    # Zulip's legacy name for `not is_muted`, kept for older clients.
    in_home_view: bool
    pin_to_top: bool
    subscribers: list[int]
    desktop_notifications: bool | None
    audible_notifications: bool | None
    push_notifications: bool | None
    email_notifications: bool | None
    wildcard_mentions_notify: bool | None


class StreamCreateEvent(TypedDict):
    """Streams the user can now see: new ones, or ones they gained access to
    (a private stream made public, a private stream they were added to, a
    public one a guest was added to)."""

    id: int
    type: Literal["stream"]
    op: Literal["create"]
    streams: list[BasicStream]


class DeletedStream(TypedDict):
    stream_id: int


class StreamDeleteEvent(TypedDict):
    """Streams the user can no longer see: deleted (archived) ones, or ones
    they lost access to. `streams` is Zulip's legacy form of `stream_ids`."""

    id: int
    type: Literal["stream"]
    op: Literal["delete"]
    streams: list[DeletedStream]
    stream_ids: list[int]


class StreamUpdateEvent(TypedDict):
    """One property of a stream changed. `name` is the stream's name before
    the change (for a rename, `value` is the new one); `rendered_description`
    comes with a description change only. `is_archived` (the stream was
    archived or unarchived) reaches only clients with the `archived_channels`
    capability; the others get `delete` or `create` instead."""

    id: int
    type: Literal["stream"]
    op: Literal["update"]
    stream_id: int
    name: str
    property: StreamProperty
    value: str | bool
    rendered_description: NotRequired[str]


class SubscriptionAddEvent(TypedDict):
    """The user was subscribed to these streams."""

    id: int
    type: Literal["subscription"]
    op: Literal["add"]
    subscriptions: list[SubscribedStream]


class RemovedSubscription(TypedDict):
    name: str
    stream_id: int


class SubscriptionRemoveEvent(TypedDict):
    """The user was unsubscribed from these streams."""

    id: int
    type: Literal["subscription"]
    op: Literal["remove"]
    subscriptions: list[RemovedSubscription]


class SubscriptionUpdateEvent(TypedDict):
    """One of the user's own settings for a stream changed."""

    id: int
    type: Literal["subscription"]
    op: Literal["update"]
    stream_id: int
    property: SubscriptionProperty
    value: str | bool


class SubscriptionPeerAddEvent(TypedDict):
    """Other users were subscribed to streams whose subscribers the user can
    see (or the user just gained sight of these subscribers)."""

    id: int
    type: Literal["subscription"]
    op: Literal["peer_add"]
    stream_ids: list[int]
    user_ids: list[int]


class SubscriptionPeerRemoveEvent(TypedDict):
    """Users left streams whose subscribers the user can see."""

    id: int
    type: Literal["subscription"]
    op: Literal["peer_remove"]
    stream_ids: list[int]
    user_ids: list[int]


class DefaultStreamsEvent(TypedDict):
    """The realm's default streams (new users join them), all of them, as
    stream ids (Zulip's form since it stopped sending stream objects)."""

    id: int
    type: Literal["default_streams"]
    default_streams: list[int]


# The key of an event a producer meant only for clients without the
# `archived_channels` capability (what unarchiving tells them: the channel
# as `stream` create, their subscription as `subscription` add). The
# queues drop such an event for the other clients and remove the key for
# these (`queues/specialize.py`, forms "archived_kept" and
# "archived_hidden", which hold the same text): it never reaches a client.
WITHOUT_ARCHIVED_CHANNELS = "only_without_archived_channels"

# Zulip's `archived_channels` capability on the stream and subscription
# events: with it, a client keeps archived channels (`stream` update
# `is_archived`); without it, an archived channel is a `stream` delete and
# an unarchived one a `stream` create, and it holds no archived channel.
ARCHIVED_CHANNELS = ClientRule(
    "archived_channels", with_it="archived_kept", without_it="archived_hidden"
)

TYPES: tuple[EventType, ...] = (
    EventType(
        "stream",
        {"create": StreamCreateEvent, "delete": StreamDeleteEvent, "update": StreamUpdateEvent},
        # a deleted stream is no longer muted for `unread_msgs`; the legacy
        # `muted_topics` names the channels the user sees
        state=("stream", "subscription", "update_message_flags", "muted_topics"),
        capability=ARCHIVED_CHANNELS,
    ),
    EventType(
        "subscription",
        {
            "add": SubscriptionAddEvent,
            "remove": SubscriptionRemoveEvent,
            "update": SubscriptionUpdateEvent,
            "peer_add": SubscriptionPeerAddEvent,
            "peer_remove": SubscriptionPeerRemoveEvent,
        },
        # which streams are muted, for `unread_msgs`
        state=("subscription", "update_message_flags"),
        capability=ARCHIVED_CHANNELS,
    ),
    EventType(
        "default_streams",
        {None: DefaultStreamsEvent},
        state=("default_streams",),
        capability=None,
    ),
)

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def render_description(description: str) -> str:
    """A stream description as the HTML clients display: its paragraphs
    (split at blank lines), escaped, with single newlines as line breaks; ""
    for an empty description. Pure and deterministic: actions put it in
    events and the state fetch computes it, and the two must agree."""
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(description.strip()) if p.strip()]
    return "".join(
        "<p>" + html.escape(paragraph).replace("\n", "<br>\n") + "</p>" for paragraph in paragraphs
    )
