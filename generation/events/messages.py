"""Events of the messages area (see generation/events/__init__.py): new
messages, edits, deletions, flags, reactions, widgets' submessages and typing
notifications, in Zulip's shapes (GET /events in Zulip's OpenAPI document),
the fields we model.

Names of nested TypedDicts start with the area's words (Message..., Typing...,
Reaction...): the OpenAPI document keys its components by class name.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from generation.events.declaration import ClientRule, EventType, Transient, empty_topic_rule

MessageType = Literal["stream", "private"]
PropagateMode = Literal["change_one", "change_later", "change_all"]
ReactionType = Literal["unicode_emoji", "realm_emoji", "zulip_extra_emoji"]
# The flags a user changes through `update_message_flags`.
EditableFlag = Literal["read", "starred"]

# The optional key of a `message` notice listing the recipients who may not
# see its sender (Zulip's `user_ids_without_access_to_sender`; a guest of a
# realm that restricts them, generation/actions/access.py): the queues give
# them the message with the sender as "Unknown user" (`queues/specialize.py`,
# `NoticePayloads`, which holds the same text). It never reaches a client.
USER_IDS_WITHOUT_ACCESS_TO_SENDER = "user_ids_without_access_to_sender"


class MessageRecipientUser(TypedDict):
    """One participant of a direct message (`display_recipient`)."""

    id: int
    email: str
    full_name: str
    is_mirror_dummy: bool


class MessageTopicLink(TypedDict):
    """A link found in a topic by a linkifier (eventq has none: always [])."""

    text: str
    url: str


class MessageReaction(TypedDict):
    """An emoji reaction on a message."""

    emoji_name: str
    emoji_code: str
    reaction_type: ReactionType
    user_id: int


class MessageSubmessage(TypedDict):
    """One entry of a message's widget log (Zulip's submessage): the first
    declares the widget (a poll, a todo list), the later ones are what its
    readers did. `content` is a JSON string."""

    id: int
    message_id: int
    sender_id: int
    msg_type: str
    content: str


class MessageObject(TypedDict):
    """A message as a client receives it (Zulip's message object, without
    `recipient_id`, `edit_history` and `last_edit_timestamp`). `content` is
    HTML (`content_type` text/html) for clients that registered with
    `apply_markdown`, else the Markdown the sender wrote."""

    id: int
    type: MessageType
    sender_id: int
    sender_email: str
    sender_full_name: str
    sender_realm_str: str
    avatar_url: str | None
    client: str
    content: str
    content_type: Literal["text/html", "text/x-markdown"]
    # The channel's name, or the participants (sender included) of a direct message.
    display_recipient: str | list[MessageRecipientUser]
    stream_id: NotRequired[int]
    subject: str
    topic_links: list[MessageTopicLink]
    is_me_message: bool
    reactions: list[MessageReaction]
    submessages: list[MessageSubmessage]
    timestamp: int


class MessageEvent(TypedDict):
    """A new message, to everyone who receives it (each with their own
    `flags`), and to `all_public_streams` queues for public channels (flags
    []). `local_message_id` only on the sending client's own queue."""

    id: int
    type: Literal["message"]
    message: MessageObject
    flags: list[str]
    local_message_id: NotRequired[str]


class UpdateMessageEvent(TypedDict):
    """A message's content and/or topic was edited; to everyone who has one of
    the messages, each with their own `flags` for `message_id`. Topic fields
    only for a topic change, content fields only for a content change."""

    id: int
    type: Literal["update_message"]
    user_id: int | None
    rendering_only: bool
    message_id: int
    message_ids: list[int]
    flags: list[str]
    edit_timestamp: int
    stream_name: NotRequired[str]
    stream_id: NotRequired[int]
    propagate_mode: NotRequired[PropagateMode]
    orig_subject: NotRequired[str]
    subject: NotRequired[str]
    topic_links: NotRequired[list[MessageTopicLink]]
    orig_content: NotRequired[str]
    orig_rendered_content: NotRequired[str]
    content: NotRequired[str]
    rendered_content: NotRequired[str]
    is_me_message: NotRequired[bool]


class DeleteMessageEvent(TypedDict):
    """Messages were deleted. `message_ids` for clients with the
    `bulk_message_deletion` capability; one event per message with
    `message_id` for the others (the queue rewrites it)."""

    id: int
    type: Literal["delete_message"]
    message_ids: NotRequired[list[int]]
    message_id: NotRequired[int]
    message_type: MessageType
    stream_id: NotRequired[int]
    topic: NotRequired[str]


class UpdateMessageFlagsAddEvent(TypedDict):
    """The user set a flag on messages (`all`: every message, for `read`,
    with `messages` empty). `operation` is the legacy name of `op`."""

    id: int
    type: Literal["update_message_flags"]
    op: Literal["add"]
    operation: Literal["add"]
    flag: EditableFlag
    messages: list[int]
    all: bool


class MessageFlagDetails(TypedDict):
    """What a client needs to put a message back into `unread_msgs`."""

    type: MessageType
    mentioned: NotRequired[bool]
    # direct messages: the other participants
    user_ids: NotRequired[list[int]]
    stream_id: NotRequired[int]
    topic: NotRequired[str]
    unmuted_stream_msg: NotRequired[bool]


class UpdateMessageFlagsRemoveEvent(TypedDict):
    """The user cleared a flag; removing `read` carries `message_details`
    (keyed by message id as a string)."""

    id: int
    type: Literal["update_message_flags"]
    op: Literal["remove"]
    operation: Literal["remove"]
    flag: EditableFlag
    messages: list[int]
    all: bool
    message_details: NotRequired[dict[str, MessageFlagDetails]]


class ReactionUser(TypedDict):
    """Who reacted (Zulip's deprecated duplicate of `user_id`)."""

    user_id: int
    email: str
    full_name: str


class ReactionAddEvent(TypedDict):
    """An emoji reaction was added; to everyone who has the message."""

    id: int
    type: Literal["reaction"]
    op: Literal["add"]
    message_id: int
    emoji_name: str
    emoji_code: str
    reaction_type: ReactionType
    user_id: int
    user: ReactionUser


class ReactionRemoveEvent(TypedDict):
    """An emoji reaction was removed; to everyone who has the message."""

    id: int
    type: Literal["reaction"]
    op: Literal["remove"]
    message_id: int
    emoji_name: str
    emoji_code: str
    reaction_type: ReactionType
    user_id: int
    user: ReactionUser


class SubmessageEvent(TypedDict):
    """A reader added to a message's widget log (a vote, a new poll option, a
    struck task): to everyone who may see the message."""

    id: int
    type: Literal["submessage"]
    msg_type: str
    content: str
    message_id: int
    sender_id: int
    submessage_id: int


class TypingUser(TypedDict):
    user_id: int
    email: str


class TypingStartEvent(TypedDict):
    """Someone started typing: a direct message (to its participants, with
    `recipients`) or a channel topic (to its subscribers whose clients
    declared `stream_typing_notifications`, with `stream_id` and `topic`)."""

    id: int
    type: Literal["typing"]
    op: Literal["start"]
    message_type: Literal["direct", "stream"]
    sender: TypingUser
    recipients: NotRequired[list[TypingUser]]
    stream_id: NotRequired[int]
    topic: NotRequired[str]


class TypingStopEvent(TypedDict):
    """Someone stopped typing (same audience as `start`)."""

    id: int
    type: Literal["typing"]
    op: Literal["stop"]
    message_type: Literal["direct", "stream"]
    sender: TypingUser
    recipients: NotRequired[list[TypingUser]]
    stream_id: NotRequired[int]
    topic: NotRequired[str]


class TypingEditMessageRecipient(TypedDict):
    """Where the edited message is: a channel topic (`channel_id`, `topic`)
    or a direct conversation (`user_ids`: those told)."""

    type: Literal["channel", "direct"]
    channel_id: NotRequired[int]
    topic: NotRequired[str]
    user_ids: NotRequired[list[int]]


class TypingEditMessageStartEvent(TypedDict):
    """Someone started editing a message's content: to those who would see
    the edit (the channel's subscribers, or the conversation's participants)."""

    id: int
    type: Literal["typing_edit_message"]
    op: Literal["start"]
    sender_id: int
    message_id: int
    recipient: TypingEditMessageRecipient


class TypingEditMessageStopEvent(TypedDict):
    """Someone stopped editing a message (same audience as `start`)."""

    id: int
    type: Literal["typing_edit_message"]
    op: Literal["stop"]
    sender_id: int
    message_id: int
    recipient: TypingEditMessageRecipient


TYPES: tuple[EventType, ...] = (
    EventType(
        "message",
        {None: MessageEvent},
        state=("message", "update_message_flags"),
        # apply_markdown, client_gravatar and empty_topic_name shape the
        # message itself, per variant, in queues/specialize.py
        capability=None,
    ),
    EventType(
        "update_message",
        {None: UpdateMessageEvent},
        # moves unread messages to their new topic; mentions in new content
        state=("update_message_flags",),
        capability=empty_topic_rule("orig_subject"),
    ),
    EventType(
        "delete_message",
        {None: DeleteMessageEvent},
        state=("message", "update_message_flags", "starred_messages"),
        capability=(
            empty_topic_rule("topic"),
            ClientRule("bulk_message_deletion", without_it="one_per_message"),
        ),
    ),
    EventType(
        "update_message_flags",
        {"add": UpdateMessageFlagsAddEvent, "remove": UpdateMessageFlagsRemoveEvent},
        state=("update_message_flags", "starred_messages"),
        # the topics of `message_details` (removing `read`)
        capability=empty_topic_rule("message_details"),
    ),
    EventType(
        "reaction",
        {"add": ReactionAddEvent, "remove": ReactionRemoveEvent},
        state=Transient("register's state has no messages, so no reactions (Zulip's too)"),
        capability=None,
    ),
    EventType(
        "submessage",
        {None: SubmessageEvent},
        state=Transient(
            "register's state has no messages, so no submessages (Zulip's apply_event ignores it)"
        ),
        capability=None,
    ),
    EventType(
        "typing",
        {"start": TypingStartEvent, "stop": TypingStopEvent},
        state=Transient("who is typing now is not part of register's state (Zulip's neither)"),
        # Channel typing notifications only to clients that declared them;
        # direct ones (no `stream_id`) to every client.
        capability=(
            ClientRule("stream_typing_notifications", without_it="dropped", when_key="stream_id"),
            empty_topic_rule("topic"),
        ),
    ),
    EventType(
        "typing_edit_message",
        {"start": TypingEditMessageStartEvent, "stop": TypingEditMessageStopEvent},
        state=Transient("who is editing now is not part of register's state (Zulip's neither)"),
        # Zulip filters only channel `typing` by a capability, not this.
        capability=None,
    ),
)
