"""Endpoints of the messages area, at Zulip's paths and with Zulip's
parameters (JSON-encoded non-strings), so that the `zulip` client's
`send_message`, `update_message`, `delete_message`, `update_message_flags`,
`mark_all_as_read`, `add_reaction`, `remove_reaction` and `set_typing_status`
work unchanged:

- `GET messages`, `GET messages/{id}`: history (server/handlers/history.py).
- `POST messages`: send (`type`, `to`, `topic`/`subject`, `content`,
  `local_id`, `queue_id`); answers the new message's `id`.
- `PATCH messages/{id}`: edit content and/or topic (`propagate_mode`).
- `DELETE messages/{id}`.
- `POST messages/flags`: add or remove `read`/`starred` (`messages`, `op`, `flag`).
- `POST mark_all_as_read`, `POST mark_stream_as_read` (`stream_id`),
  `POST mark_topic_as_read` (`stream_id`, `topic_name`).
- `POST` and `DELETE messages/{id}/reactions` (`emoji_name`, `emoji_code`,
  `reaction_type`).
- `POST typing`: direct (`to`: user ids) or channel (`stream_id`, `topic`).
- `POST messages/{id}/typing`: editing that message starts or stops (`op`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, TypeGuard

import orjson

from generation.actions import messages as actions
from generation.topics import topic_from_client
from server.errors import ApiError, missing_argument
from server.handlers.actions import ActionHandler, Body, operation
from server.handlers.history import GetMessage, GetMessages, get_message, get_messages
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, check_length, decode_json

# Far above Zulip's 10,000-character limit (longer content is truncated as
# Zulip does); the request body limit bounds it anyway.
MAX_CONTENT_CHARS = 100_000
MAX_RECIPIENTS = 1000
MAX_FLAG_MESSAGES = 50_000
MAX_EMAIL_CHARS = 254
MAX_TOPIC_CHARS = 1000
# A local id or queue id is an opaque token of the sending client.
MAX_TOKEN_CHARS = 100

STREAM_TYPES = ("stream", "channel")
DIRECT_TYPES = ("private", "direct")


def _message_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Invalid message(s)")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: object) -> TypeGuard[int]:
    """A positive integer that fits a bigint column."""
    return _is_int(value) and 0 < value <= INT_MAX


def _positive_ids(value: object, name: str, max_items: int) -> list[int]:
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > max_items:
        raise ApiError(f"{name} has more than {max_items} items")
    for index, item in enumerate(value):
        if not _is_id(item):
            raise ApiError(f"{name}[{index}] is not a valid id")
    return value


def _message_ids(name: str, raw: str) -> list[int]:
    return _positive_ids(decode_json(name, raw), name, MAX_FLAG_MESSAGES)


# Sizes stated in words (server/http/declared.py, QUERY_MAX_LENGTH).
_MESSAGE_IDS: JsonSchema = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1, "maximum": INT_MAX},
}


def _recipients(raw: str | None, name: str = "to") -> list[int | str]:
    """Users named by id or e-mail: a JSON list, one JSON id, or Zulip's
    legacy comma-separated e-mails."""
    if raw is None:
        raise missing_argument(name)
    try:
        value: object = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = [part for part in (p.strip() for p in raw.split(",")) if part]
    if _is_int(value) or isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ApiError(f"Invalid '{name}': a list of user ids or e-mails is needed")
    if len(value) > MAX_RECIPIENTS:
        raise ApiError(f"{name} has more than {MAX_RECIPIENTS} recipients")
    recipients: list[int | str] = []
    for item in value:
        if not _is_id(item) and not (isinstance(item, str) and 0 < len(item) <= MAX_EMAIL_CHARS):
            raise ApiError(f"Invalid '{name}': {item!r} is neither a user id nor an e-mail")
        recipients.append(item)
    return recipients


def _stream(raw: str) -> int | str:
    """A channel named by `to`: a JSON id, a name, or Zulip's legacy
    one-element list."""
    check_length("to", raw, 1000)
    try:
        value: object = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if _is_int(value):
        if not 0 < value <= INT_MAX:
            raise ApiError(f"Channel with ID '{value}' does not exist", "STREAM_DOES_NOT_EXIST")
        return value
    if isinstance(value, str):
        return value
    return raw


def _topic(topic: str | None, subject: str | None) -> str | None:
    """`topic`, or its legacy name `subject`; the empty topic's display name
    and "(no topic)" name the empty topic "" (generation/topics.py)."""
    chosen = topic if topic is not None else subject
    return None if chosen is None else topic_from_client(chosen)


Topic = Annotated[str | None, Param("The topic (of a channel)", max_length=MAX_TOPIC_CHARS)]
Subject = Annotated[str | None, Param("Zulip's legacy name of `topic`", max_length=MAX_TOPIC_CHARS)]
Emoji = Annotated[str | None, Param("The emoji's name", max_length=100)]
EmojiCode = Annotated[str | None, Param("The emoji's code", max_length=100)]
ReactionType = Annotated[
    str | None, Param("unicode_emoji, realm_emoji or zulip_extra_emoji", max_length=50)
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SendMessage:
    type: Annotated[str, Param("stream (or channel), or private (or direct)", max_length=20)]
    content: Annotated[str, Param("The message, in Markdown", max_length=MAX_CONTENT_CHARS)]
    local_id: Annotated[
        str | None,
        Param("The sender's token, in its own message event", max_length=MAX_TOKEN_CHARS),
    ] = None
    queue_id: Annotated[str | None, Param("The sender's queue", max_length=MAX_TOKEN_CHARS)] = None
    client: Annotated[
        str | None, Param("The client's name (default: from User-Agent)", max_length=1000)
    ] = None
    to: Annotated[
        str,
        Param(
            "A channel: its id or name; users: a JSON list of ids or e-mails, or"
            " comma-separated e-mails",
            max_length=None,
        ),
    ]
    topic: Topic = None
    subject: Subject = None


class MessagesHandler(ActionHandler):
    """`GET messages`: history (server/handlers/history.py); `POST
    messages`: send a channel or direct message."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(GetMessages)
    async def get(self, user: AuthUser, args: GetMessages) -> Body:
        return await get_messages(self.server.db, user, args)

    @operation(SendMessage)
    async def post(self, user: AuthUser, args: SendMessage) -> Body:
        content, local_id, queue_id = args.content, args.local_id, args.queue_id
        client = self.client_of(args.client)
        if args.type in STREAM_TYPES:
            stream = _stream(args.to)
            topic = _topic(args.topic, args.subject) or ""
            message_id = await self.act(
                lambda ctx: actions.do_send_stream_message(
                    ctx, user.user_id, stream, topic, content,
                    local_id=local_id, sender_queue_id=queue_id, client=client,
                )
            )  # fmt: skip
        elif args.type in DIRECT_TYPES:
            recipients = _recipients(args.to)
            message_id = await self.act(
                lambda ctx: actions.do_send_direct_message(
                    ctx, user.user_id, recipients, content,
                    local_id=local_id, sender_queue_id=queue_id, client=client,
                )
            )  # fmt: skip
        else:
            raise ApiError("Invalid message type")
        return {"id": message_id}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EditMessage:
    content: Annotated[str | None, Param("The new content", max_length=MAX_CONTENT_CHARS)] = None
    topic: Topic = None
    subject: Subject = None
    propagate_mode: Annotated[
        str | None,
        Param("change_one (default), change_later or change_all", max_length=20),
    ] = None
    stream_id: Annotated[
        int | None, Param("Refused: moving messages to another channel is not supported")
    ] = None


class MessageHandler(ActionHandler):
    """`GET messages/{id}` (server/handlers/history.py), `PATCH
    messages/{id}` (edit) and `DELETE messages/{id}`."""

    SUPPORTED_METHODS = ("GET", "PATCH", "DELETE")

    @operation(GetMessage)
    async def get(self, user: AuthUser, args: GetMessage, raw_id: str) -> Body:
        return await get_message(self.server.db, user, args, _message_id(raw_id))

    @operation(EditMessage)
    async def patch(self, user: AuthUser, args: EditMessage, raw_id: str) -> Body:
        message_id = _message_id(raw_id)
        content, topic = args.content, _topic(args.topic, args.subject)
        mode = args.propagate_mode or "change_one"
        if args.stream_id is not None:
            raise ApiError("Moving messages to another channel is not supported")
        await self.act(
            lambda ctx: actions.do_update_message(
                ctx, user.user_id, message_id, content=content, topic=topic, propagate_mode=mode
            )
        )
        return {"detached_uploads": []}

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        message_id = _message_id(raw_id)
        await self.act(lambda ctx: actions.do_delete_messages(ctx, user.user_id, [message_id]))
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateFlags:
    messages: Annotated[
        list[int],
        Param(
            f"The messages' ids (at most {MAX_FLAG_MESSAGES:,})",
            parse=_message_ids,
            schema=_MESSAGE_IDS,
        ),
    ]
    op: Annotated[str, Param("add or remove", max_length=20)]
    flag: Annotated[str, Param("read or starred", max_length=50)]


class FlagsHandler(ActionHandler):
    """`POST messages/flags`: answers the `messages` it was given, as Zulip."""

    SUPPORTED_METHODS = ("POST",)

    @operation(UpdateFlags)
    async def post(self, user: AuthUser, args: UpdateFlags) -> Body:
        messages, op, flag = args.messages, args.op, args.flag
        await self.act(
            lambda ctx: actions.do_update_message_flags(ctx, user.user_id, op, flag, messages)
        )
        return {"messages": messages}


class MarkAllAsReadHandler(ActionHandler):
    """`POST mark_all_as_read`: done in one go (`complete`)."""

    SUPPORTED_METHODS = ("POST",)

    @operation(Nothing)
    async def post(self, user: AuthUser, args: Nothing) -> Body:
        await self.act(lambda ctx: actions.do_mark_all_as_read(ctx, user.user_id))
        return {"complete": True}


ChannelId = Annotated[int, Param("The channel's id", minimum=1)]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MarkStreamAsRead:
    stream_id: ChannelId


class MarkStreamAsReadHandler(ActionHandler):
    """`POST mark_stream_as_read` (`stream_id`)."""

    SUPPORTED_METHODS = ("POST",)

    @operation(MarkStreamAsRead)
    async def post(self, user: AuthUser, args: MarkStreamAsRead) -> Body:
        stream_id = args.stream_id
        await self.act(lambda ctx: actions.do_mark_stream_as_read(ctx, user.user_id, stream_id))
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MarkTopicAsRead:
    stream_id: ChannelId
    topic_name: Annotated[str, Param("The topic", max_length=MAX_TOPIC_CHARS)]


class MarkTopicAsReadHandler(ActionHandler):
    """`POST mark_topic_as_read` (`stream_id`, `topic_name`)."""

    SUPPORTED_METHODS = ("POST",)

    @operation(MarkTopicAsRead)
    async def post(self, user: AuthUser, args: MarkTopicAsRead) -> Body:
        # Zulip reads the display name as the empty topic here too.
        stream_id, topic = args.stream_id, topic_from_client(args.topic_name)
        await self.act(
            lambda ctx: actions.do_mark_stream_as_read(ctx, user.user_id, stream_id, topic)
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AddReaction:
    emoji_name: Annotated[str, Param("The emoji's name", max_length=100)]
    emoji_code: EmojiCode = None
    reaction_type: ReactionType = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RemoveReaction:
    emoji_name: Emoji = None
    emoji_code: EmojiCode = None
    reaction_type: ReactionType = None


class ReactionsHandler(ActionHandler):
    """`POST` / `DELETE messages/{id}/reactions`."""

    SUPPORTED_METHODS = ("POST", "DELETE")

    @operation(AddReaction)
    async def post(self, user: AuthUser, args: AddReaction, raw_id: str) -> Body:
        message_id = _message_id(raw_id)
        name, code, kind = args.emoji_name, args.emoji_code, args.reaction_type
        await self.act(
            lambda ctx: actions.do_add_reaction(ctx, user.user_id, message_id, name, code, kind)
        )
        return None

    @operation(RemoveReaction)
    async def delete(self, user: AuthUser, args: RemoveReaction, raw_id: str) -> Body:
        message_id = _message_id(raw_id)
        name, code, kind = args.emoji_name, args.emoji_code, args.reaction_type
        await self.act(
            lambda ctx: actions.do_remove_reaction(ctx, user.user_id, message_id, name, code, kind)
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Typing:
    type: Annotated[str | None, Param("direct (default) or stream", max_length=20)] = None
    op: Annotated[str, Param("start or stop", max_length=20)]
    stream_id: Annotated[int | None, Param("The channel (type stream)", minimum=1)] = None
    to: Annotated[
        str | None,
        Param(
            "The users (type direct), as `to` of `POST messages`; or Zulip's legacy"
            " form of `stream_id` (type stream), a JSON list of one id",
            max_length=None,
        ),
    ] = None
    topic: Topic = None
    subject: Subject = None


class TypingHandler(ActionHandler):
    """`POST typing`: `type` direct (default; `to`: user ids) or channel
    (`stream_id`, or Zulip's legacy `to` of one id, and `topic`)."""

    SUPPORTED_METHODS = ("POST",)

    @operation(Typing)
    async def post(self, user: AuthUser, args: Typing) -> Body:
        kind, op = args.type or "direct", args.op
        if kind in STREAM_TYPES:
            stream_id = args.stream_id
            if stream_id is None and args.to is not None:
                legacy = _positive_ids(decode_json("to", args.to), "to", 1)
                stream_id = legacy[0] if legacy else None
            if stream_id is None:
                raise missing_argument("stream_id")
            topic = _topic(args.topic, args.subject)
            if topic is None:
                raise missing_argument("topic")
            await self.act(
                lambda ctx: actions.do_send_stream_typing(ctx, user.user_id, op, stream_id, topic)
            )
        elif kind in DIRECT_TYPES:
            recipients = _recipients(args.to)
            await self.act(
                lambda ctx: actions.do_send_direct_typing(ctx, user.user_id, op, recipients)
            )
        else:
            raise ApiError("Invalid type")
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EditTyping:
    op: Annotated[str, Param("start or stop", max_length=20)]


class EditTypingHandler(ActionHandler):
    """`POST messages/{id}/typing`: the user started or stopped editing
    their message `id` (Zulip's set-typing-status-for-message-edit)."""

    SUPPORTED_METHODS = ("POST",)

    @operation(EditTyping)
    async def post(self, user: AuthUser, args: EditTyping, raw_id: str) -> Body:
        message_id, op = _message_id(raw_id), args.op
        await self.act(lambda ctx: actions.do_send_edit_typing(ctx, user.user_id, op, message_id))
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"messages", MessagesHandler),
    (r"messages/flags", FlagsHandler),
    (r"messages/([0-9]+)", MessageHandler),
    (r"messages/([0-9]+)/reactions", ReactionsHandler),
    (r"messages/([0-9]+)/typing", EditTypingHandler),
    (r"mark_all_as_read", MarkAllAsReadHandler),
    (r"mark_stream_as_read", MarkStreamAsReadHandler),
    (r"mark_topic_as_read", MarkTopicAsReadHandler),
    (r"typing", TypingHandler),
]
