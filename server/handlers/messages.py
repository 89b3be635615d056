"""Endpoints of the messages area, at Zulip's paths and with Zulip's
parameters (JSON-encoded non-strings), so that the `zulip` client's
`send_message`, `update_message`, `delete_message`, `update_message_flags`,
`mark_all_as_read`, `add_reaction`, `remove_reaction` and `set_typing_status`
work unchanged:

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
"""

from __future__ import annotations

from typing import Any, TypeGuard

import orjson

from generation.actions import messages as actions
from server.errors import ApiError, missing_argument
from server.handlers.actions import ActionHandler
from server.http.params import INT_MAX, Params

# Far above Zulip's 10,000-character limit (longer content is truncated as
# Zulip does); the request body limit bounds it anyway.
MAX_CONTENT_CHARS = 100_000
MAX_RECIPIENTS = 1000
MAX_FLAG_MESSAGES = 50_000
MAX_EMAIL_CHARS = 254
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


def _recipients(params: Params, name: str = "to") -> list[int | str]:
    """Users named by id or e-mail: a JSON list, one JSON id, or Zulip's
    legacy comma-separated e-mails."""
    raw = params.raw(name)
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


def _stream(params: Params) -> int | str:
    """A channel named by `to`: a JSON id, a name, or Zulip's legacy
    one-element list."""
    raw = params.string("to", max_length=1000)
    if raw is None:
        raise missing_argument("to")
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


def _topic(params: Params) -> str | None:
    """`topic`, or its legacy name `subject`."""
    topic = params.string("topic", max_length=1000)
    subject = params.string("subject", max_length=1000)
    return topic if topic is not None else subject


class MessagesHandler(ActionHandler):
    """`POST messages`: send a channel or direct message."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        kind = params.required_string("type", max_length=20)
        content = params.required_string("content", max_length=MAX_CONTENT_CHARS)
        local_id = params.string("local_id", max_length=MAX_TOKEN_CHARS)
        queue_id = params.string("queue_id", max_length=MAX_TOKEN_CHARS)
        client = self.client_name(params)
        if kind in STREAM_TYPES:
            stream = _stream(params)
            topic = _topic(params) or ""
            message_id = await self.act(
                lambda ctx: actions.do_send_stream_message(
                    ctx, user.user_id, stream, topic, content,
                    local_id=local_id, sender_queue_id=queue_id, client=client,
                )
            )  # fmt: skip
        elif kind in DIRECT_TYPES:
            recipients = _recipients(params)
            message_id = await self.act(
                lambda ctx: actions.do_send_direct_message(
                    ctx, user.user_id, recipients, content,
                    local_id=local_id, sender_queue_id=queue_id, client=client,
                )
            )  # fmt: skip
        else:
            raise ApiError("Invalid message type")
        self.succeed(params, {"id": message_id})


class MessageHandler(ActionHandler):
    """`PATCH messages/{id}` (edit) and `DELETE messages/{id}`."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    async def patch(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        message_id = _message_id(raw_id)
        content = params.string("content", max_length=MAX_CONTENT_CHARS)
        topic = _topic(params)
        mode = params.string("propagate_mode", max_length=20) or "change_one"
        if params.integer("stream_id") is not None:
            raise ApiError("Moving messages to another channel is not supported")
        await self.act(
            lambda ctx: actions.do_update_message(
                ctx, user.user_id, message_id, content=content, topic=topic, propagate_mode=mode
            )
        )
        self.succeed(params, {"detached_uploads": []})

    async def delete(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        message_id = _message_id(raw_id)
        await self.act(lambda ctx: actions.do_delete_messages(ctx, user.user_id, [message_id]))
        self.succeed(params)


class FlagsHandler(ActionHandler):
    """`POST messages/flags`: answers the `messages` it was given, as Zulip."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        if "messages" not in params:
            raise missing_argument("messages")
        messages = _positive_ids(params.json("messages"), "messages", MAX_FLAG_MESSAGES)
        op = params.required_string("op", max_length=20)
        flag = params.required_string("flag", max_length=50)
        await self.act(
            lambda ctx: actions.do_update_message_flags(ctx, user.user_id, op, flag, messages)
        )
        self.succeed(params, {"messages": messages})


class MarkAllAsReadHandler(ActionHandler):
    """`POST mark_all_as_read`: done in one go (`complete`)."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        await self.act(lambda ctx: actions.do_mark_all_as_read(ctx, user.user_id))
        self.succeed(params, {"complete": True})


class MarkStreamAsReadHandler(ActionHandler):
    """`POST mark_stream_as_read` (`stream_id`)."""

    SUPPORTED_METHODS = ("POST",)
    topic = False

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        stream_id = params.integer("stream_id", minimum=1)
        if stream_id is None:
            raise missing_argument("stream_id")
        topic = None
        if self.topic:
            topic = params.string("topic_name", max_length=1000)
            if topic is None:
                raise missing_argument("topic_name")
        await self.act(
            lambda ctx: actions.do_mark_stream_as_read(ctx, user.user_id, stream_id, topic)
        )
        self.succeed(params)


class MarkTopicAsReadHandler(MarkStreamAsReadHandler):
    """`POST mark_topic_as_read` (`stream_id`, `topic_name`)."""

    topic = True


class ReactionsHandler(ActionHandler):
    """`POST` / `DELETE messages/{id}/reactions`."""

    SUPPORTED_METHODS = ("POST", "DELETE")

    def _emoji(self, params: Params) -> tuple[str | None, str | None, str | None]:
        return (
            params.string("emoji_name", max_length=100),
            params.string("emoji_code", max_length=100),
            params.string("reaction_type", max_length=50),
        )

    async def post(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        message_id = _message_id(raw_id)
        name, code, kind = self._emoji(params)
        if name is None:
            raise missing_argument("emoji_name")
        await self.act(
            lambda ctx: actions.do_add_reaction(ctx, user.user_id, message_id, name, code, kind)
        )
        self.succeed(params)

    async def delete(self, raw_id: str) -> None:
        user = await self.authenticate()
        params = self.params()
        message_id = _message_id(raw_id)
        name, code, kind = self._emoji(params)
        await self.act(
            lambda ctx: actions.do_remove_reaction(ctx, user.user_id, message_id, name, code, kind)
        )
        self.succeed(params)


class TypingHandler(ActionHandler):
    """`POST typing`: `type` direct (default; `to`: user ids) or channel
    (`stream_id`, or Zulip's legacy `to` of one id, and `topic`)."""

    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        user = await self.authenticate()
        params = self.params()
        kind = params.string("type", max_length=20) or "direct"
        op = params.required_string("op", max_length=20)
        if kind in STREAM_TYPES:
            stream_id = params.integer("stream_id", minimum=1)
            if stream_id is None and "to" in params:
                legacy = _positive_ids(params.json("to"), "to", 1)
                stream_id = legacy[0] if legacy else None
            if stream_id is None:
                raise missing_argument("stream_id")
            topic = _topic(params)
            if topic is None:
                raise missing_argument("topic")
            await self.act(
                lambda ctx: actions.do_send_stream_typing(ctx, user.user_id, op, stream_id, topic)
            )
        elif kind in DIRECT_TYPES:
            recipients = _recipients(params)
            await self.act(
                lambda ctx: actions.do_send_direct_typing(ctx, user.user_id, op, recipients)
            )
        else:
            raise ApiError("Invalid type")
        self.succeed(params)


ROUTES: list[tuple[str, Any]] = [
    (r"messages", MessagesHandler),
    (r"messages/flags", FlagsHandler),
    (r"messages/([0-9]+)", MessageHandler),
    (r"messages/([0-9]+)/reactions", ReactionsHandler),
    (r"mark_all_as_read", MarkAllAsReadHandler),
    (r"mark_stream_as_read", MarkStreamAsReadHandler),
    (r"mark_topic_as_read", MarkTopicAsReadHandler),
    (r"typing", TypingHandler),
]
