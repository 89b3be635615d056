"""Message history, at Zulip's paths and with its parameters, so that
Zulip's clients start as they do against Zulip (the terminal client's first
request is `GET /messages`):

- `GET messages`: the messages of a `narrow` around an `anchor` (an id,
  `newest`, `oldest` or `first_unread`), `num_before` and `num_after` of
  it; or the `message_ids` asked for. Answers `anchor`, `found_anchor`,
  `found_oldest`, `found_newest`, `history_limited` and the `messages`,
  each with the reader's `flags`.
- `GET messages/{id}`: one message (`message`, and its Markdown as
  `raw_content`).
- `GET messages/{id}/history`: the message as it was after each edit.
- `GET messages/matches_narrow`: which of `msg_ids` a narrow matches.
- `GET users/me/{stream_id}/topics`: a channel's topics, newest first.

Who may read which message: server/database/history.py; the narrow:
server/database/narrow.py; both in docs/behaviour.md, "Message history".
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from generation.topics import topic_for_client
from server.database import history
from server.database.db import Database
from server.database.history import LARGER_THAN_MAX_MESSAGE_ID, Matcher
from server.database.message_rows import edit_snapshots, message_content, message_dicts
from server.database.narrow import OPERATOR_NAMES, Term, parse_narrow
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, decode_json

# Zulip's limit of one fetch (MAX_MESSAGES_PER_FETCH).
MAX_MESSAGES_PER_FETCH = 5000
MAX_MESSAGE_IDS = MAX_MESSAGES_PER_FETCH

_TERM: JsonSchema = {
    "anyOf": [
        {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
        {
            "type": "object",
            "properties": {
                "operator": {"type": "string", "enum": sorted(OPERATOR_NAMES)},
                "operand": {
                    "anyOf": [
                        {"type": "integer"},
                        {"type": "array", "items": {"type": "integer"}},
                        {"type": "string"},
                    ]
                },
                "negated": {"type": "boolean"},
            },
            "required": ["operator", "operand"],
        },
    ]
}
_NARROW: JsonSchema = {"type": "array", "items": _TERM}
_IDS: JsonSchema = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": INT_MAX}}


def _narrow(name: str, raw: str) -> list[Term]:
    return parse_narrow(decode_json(name, raw))


def _ids(name: str, raw: str) -> list[int]:
    value = decode_json(name, raw)
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise ApiError(f"{name} is not a list of integers")
    if len(value) > MAX_MESSAGE_IDS:
        raise ApiError(f"{name} has more than {MAX_MESSAGE_IDS} items")
    return [i for i in value if 0 < i <= INT_MAX]


Narrow = Annotated[
    list[Term],
    Param(
        "Search terms, all of which a message matches: objects {operator, operand,"
        " negated} or Zulip's legacy [operator, operand] pairs",
        parse=_narrow,
        schema=_NARROW,
    ),
]
ApplyMarkdown = Annotated[bool, Param("content as HTML (true) or the Markdown sent")]
ClientGravatar = Annotated[bool, Param("avatar_url null for a Gravatar")]
AllowEmptyTopicName = Annotated[
    bool,
    Param('The empty topic as "" (true), or as realm_empty_topic_display_name ("general chat")'),
]


def _anchor(raw: str | None, use_first_unread: bool) -> int | None:
    """The anchor id; None for the first unread message."""
    if use_first_unread:
        return None
    if raw is None:
        raise ApiError("Missing 'anchor' argument.")
    if raw == "newest":
        return LARGER_THAN_MAX_MESSAGE_ID
    if raw == "oldest":
        return 0
    if raw == "first_unread":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError("Invalid anchor") from None
    return min(max(value, 0), LARGER_THAN_MAX_MESSAGE_ID)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GetMessages:
    anchor: Annotated[
        str | None,
        Param("A message id, or newest, oldest or first_unread", max_length=30, json=False),
    ] = None
    use_first_unread_anchor: Annotated[
        bool, Param("Zulip's legacy form of anchor=first_unread")
    ] = False
    num_before: Annotated[
        int, Param("How many messages before the anchor", minimum=0, maximum=INT_MAX)
    ] = 0
    num_after: Annotated[
        int, Param("How many messages after the anchor", minimum=0, maximum=INT_MAX)
    ] = 0
    include_anchor: Annotated[bool, Param("Whether the anchor message itself is answered")] = True
    narrow: Narrow = dataclasses.field(default_factory=list)
    message_ids: Annotated[
        list[int] | None,
        Param(
            f"The messages to answer, instead of an anchor (at most {MAX_MESSAGE_IDS:,})",
            parse=_ids,
            schema=_IDS,
        ),
    ] = None
    apply_markdown: ApplyMarkdown = True
    client_gravatar: ClientGravatar = True
    allow_empty_topic_name: AllowEmptyTopicName = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Page:
    ids: list[int]
    anchor: int
    found_anchor: bool
    found_oldest: bool
    found_newest: bool


async def _page(
    conn: Any, found: Matcher, anchor: int, before: int, after: int, include_anchor: bool
) -> _Page:
    """Zulip's window around an anchor: up to `before` matching ids below
    it, the anchor itself (if it matches and `include_anchor`, or nothing
    else was asked for), and up to `after` above it. As in Zulip, a side is
    known to end (`found_oldest`, `found_newest`) when it gave fewer than
    asked, or the anchor is `oldest` (0) or `newest`."""
    to_left = anchor == 0
    to_right = anchor >= LARGER_THAN_MAX_MESSAGE_ID
    if to_right:
        after = 0
    below: list[int] = []
    above: list[int] = []
    if before and not to_left:
        highest = anchor if to_right else anchor - 1
        below = await history.ids_around(conn, found, below=highest, above=None, limit=before)
    if after and not to_right:
        above = await history.ids_around(conn, found, below=None, above=anchor + 1, limit=after)
    at = [] if to_left or to_right else await history.matching(conn, found, [anchor])
    found_oldest = to_left or len(below) < before
    found_newest = to_right or len(above) < after
    # A window of nothing but the anchor answers it, include_anchor or not.
    shown = at if include_anchor or not (before or after) else []
    # Zulip's found_anchor: the anchor is in the answer.
    return _Page(sorted(below) + shown + above, anchor, bool(shown), found_oldest, found_newest)


_COMBINATION = (
    "num_before", "num_after", "anchor", "message_ids", "include_anchor",
    "use_first_unread_anchor",
)  # fmt: skip


async def get_messages(db: Database, user: AuthUser, args: GetMessages) -> Body:
    """`GET messages` (served by `server.handlers.messages.MessagesHandler`,
    whose path it shares with sending)."""
    by_ids = args.message_ids is not None
    if by_ids and (
        args.num_before or args.num_after or args.anchor is not None
        or args.use_first_unread_anchor
    ):  # fmt: skip
        raise ApiError(
            f"Unsupported parameter combination: {', '.join(_COMBINATION)}",
            parameters=list(_COMBINATION),
        )
    anchor = None if by_ids else _anchor(args.anchor, args.use_first_unread_anchor)
    if args.num_before + args.num_after > MAX_MESSAGES_PER_FETCH:
        raise ApiError(f"Too many messages requested (maximum {MAX_MESSAGES_PER_FETCH}).")
    if args.num_before and args.num_after and not args.include_anchor:
        raise ApiError("The anchor can only be excluded at an end of the range")
    async with db.connection() as conn:
        reader = await history.reader_of(conn, user.user_id)
        found = await history.matcher(conn, reader, args.narrow)
        if args.message_ids is not None:
            ids = await history.matching(conn, found, args.message_ids)
            page = _Page(ids, 0, False, False, False)
        else:
            if anchor is None:
                names_channel = any(t.operator == "channel" and not t.negated for t in args.narrow)
                unread = await history.first_unread(conn, found, names_channel)
                anchor = LARGER_THAN_MAX_MESSAGE_ID if unread is None else unread
            page = await _page(
                conn, found, anchor, args.num_before, args.num_after, args.include_anchor
            )
        messages = await message_dicts(
            conn, user.user_id, user.realm_id, page.ids,
            apply_markdown=args.apply_markdown, client_gravatar=args.client_gravatar,
        )  # fmt: skip
        _name_empty_topics(messages, args.allow_empty_topic_name)
        if _searched(args.narrow):
            await _mark_matches(conn, messages, args.narrow)
    body: dict[str, Any] = {
        "found_anchor": page.found_anchor,
        "found_oldest": page.found_oldest,
        "found_newest": page.found_newest,
        "history_limited": False,
        "messages": messages,
    }
    if not by_ids:
        body["anchor"] = page.anchor
    return body


def _name_empty_topics(messages: list[dict[str, Any]], allow_empty_topic_name: bool) -> None:
    """Zulip's topics for clients that did not pass `allow_empty_topic_name`:
    a channel message in the empty topic "" shows its display name."""
    if allow_empty_topic_name:
        return
    for message in messages:
        if message["type"] == "stream":
            message["subject"] = topic_for_client(message["subject"], False)


def _searched(narrow: list[Term]) -> bool:
    return any(t.operator == "search" and not t.negated for t in narrow)


async def _mark_matches(conn: Any, messages: list[dict[str, Any]], narrow: list[Term]) -> None:
    """A search's answer: each message with `match_content` and `match_subject`."""
    marked = await history.highlights(conn, [m["id"] for m in messages], narrow)
    for message in messages:
        content, subject = marked.get(message["id"], (message["content"], message["subject"]))
        message["match_content"] = content
        message["match_subject"] = subject


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GetMessage:
    apply_markdown: ApplyMarkdown = True
    allow_empty_topic_name: AllowEmptyTopicName = False


async def get_message(db: Database, user: AuthUser, args: GetMessage, message_id: int) -> Body:
    """`GET messages/{id}` (served by `MessageHandler`, whose path it shares
    with editing and deleting): the message, and its Markdown."""
    async with db.connection() as conn:
        reader = await history.reader_of(conn, user.user_id)
        if not await history.visible_messages(conn, reader, [message_id]):
            raise ApiError("Invalid message(s)")
        [message] = await message_dicts(
            conn, user.user_id, user.realm_id, [message_id],
            apply_markdown=args.apply_markdown, client_gravatar=False,
        )  # fmt: skip
        _name_empty_topics([message], args.allow_empty_topic_name)
        raw = await message_content(conn, message_id)
    return {"raw_content": raw, "message": message}


class MessageHistoryHandler(ActionHandler):
    """`GET messages/{id}/history`: the message as first sent, then after
    each edit, oldest first."""

    SUPPORTED_METHODS = ("GET",)

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        message_id = self.path_id(raw_id, "Invalid message(s)")
        async with self.server.db.connection() as conn:
            reader = await history.reader_of(conn, user.user_id)
            if not await history.visible_messages(conn, reader, [message_id]):
                raise ApiError("Invalid message(s)")
            snapshots = await edit_snapshots(conn, message_id)
        return {"message_history": snapshots}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MatchesNarrow:
    msg_ids: Annotated[
        list[int],
        Param(f"The messages to test (at most {MAX_MESSAGE_IDS:,})", parse=_ids, schema=_IDS),
    ]
    narrow: Annotated[list[Term], Param("The narrow, as GET messages takes it", parse=_narrow,
                                        schema=_NARROW)]  # fmt: skip


class MatchesNarrowHandler(ActionHandler):
    """`GET messages/matches_narrow`: of `msg_ids`, those the narrow matches
    (and the user may read), each with its content and topic as a search
    shows them (`match_content`, `match_subject`)."""

    SUPPORTED_METHODS = ("GET",)

    @operation(MatchesNarrow)
    async def get(self, user: AuthUser, args: MatchesNarrow) -> Body:
        async with self.server.db.connection() as conn:
            reader = await history.reader_of(conn, user.user_id)
            # Zulip matches only the messages the user received.
            found = await history.matcher(conn, reader, args.narrow, own_only=True)
            ids = await history.matching(conn, found, args.msg_ids)
            matches = await history.highlights(conn, ids, args.narrow)
        return {
            "messages": {
                str(message_id): {"match_content": content, "match_subject": subject}
                for message_id, (content, subject) in matches.items()
            }
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GetTopics:
    allow_empty_topic_name: AllowEmptyTopicName = False


class TopicsHandler(ActionHandler):
    """`GET users/me/{stream_id}/topics`: the channel's topics the user may
    read, each with its newest message's id (`max_id`), newest first; the
    empty topic under its display name unless `allow_empty_topic_name`."""

    SUPPORTED_METHODS = ("GET",)

    @operation(GetTopics)
    async def get(self, user: AuthUser, args: GetTopics, raw_id: str) -> Body:
        stream_id = self.path_id(raw_id, "Invalid channel ID")
        async with self.server.db.connection() as conn:
            reader = await history.reader_of(conn, user.user_id)
            topics = await history.topics(conn, reader, stream_id)
        if topics is None:
            raise ApiError("Invalid channel ID")
        allow_empty = args.allow_empty_topic_name
        return {
            "topics": [
                {"name": topic_for_client(name, allow_empty), "max_id": max_id}
                for name, max_id in topics
            ]
        }


ROUTES: list[tuple[str, Any]] = [
    (r"messages/matches_narrow", MatchesNarrowHandler),
    (r"messages/([0-9]+)/history", MessageHistoryHandler),
    (r"users/me/([0-9]+)/topics", TopicsHandler),
]
