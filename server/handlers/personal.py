"""Endpoints of a user's own preferences and words, at Zulip's paths (see
server/handlers/domain.py):

- `POST users/me/status`: the user's status; `GET users/{id}/status`: a
  user's status;
- `POST user_topics`, and Zulip's legacy `PATCH
  users/me/subscriptions/muted_topics`: the user's policy for a topic;
- `POST`/`DELETE users/me/muted_users/{id}`: muting a user;
- `GET`/`POST`/`DELETE users/me/alert_words`: alert words;
- `GET`/`POST drafts`, `PATCH`/`DELETE drafts/{id}`: drafts;
- `GET`/`POST saved_snippets`, `PATCH`/`DELETE saved_snippets/{id}`: saved
  snippets.

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules and the events are the actions' (the package
`generation/actions/personal/`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from generation.actions import personal as actions
from generation.actions.base import ActionContext
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.handlers.users import check_can_access_user
from server.http.auth import AuthUser
from server.http.declared import JsonSchema, Nothing, Param
from server.http.params import INT_MAX, decode_json, optional_boolean

# Bounds of what a request may carry, checked before any action runs: far
# above any real request, low enough that none makes the server work long.
MAX_ITEM_CHARS = 1000
MAX_DRAFT_CONTENT_CHARS = 20_000
_ID: JsonSchema = {"type": "integer", "minimum": 1, "maximum": INT_MAX}


class PersonalHandler(ActionHandler):
    """The base of this area's endpoints."""


# -- status --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateStatus:
    away: Annotated[
        bool | None,
        Param(
            "Zulip's legacy away flag",
            parse=optional_boolean,
            schema={"type": ["boolean", "null"]},
        ),
    ] = None
    status_text: Annotated[
        str | None,
        Param(
            f"The status text (at most {actions.MAX_STATUS_TEXT} characters once stripped;"
            " empty clears it)",
            max_length=MAX_ITEM_CHARS,
        ),
    ] = None
    emoji_name: Annotated[
        str | None, Param("The status emoji's name (empty clears it)", max_length=100)
    ] = None
    emoji_code: Annotated[str | None, Param("The status emoji's code", max_length=100)] = None
    reaction_type: Annotated[
        str | None,
        Param("unicode_emoji, realm_emoji or zulip_extra_emoji", max_length=100),
    ] = None


class StatusHandler(PersonalHandler):
    """`POST users/me/status`: `away`, `status_text`, `emoji_name`,
    `emoji_code`, `reaction_type`; at least one of the first three. Every
    active user of the realm gets the `user_status` event."""

    SUPPORTED_METHODS = ("POST",)

    @operation(UpdateStatus)
    async def post(self, user: AuthUser, args: UpdateStatus) -> Body:
        await self.act(
            lambda ctx: actions.do_update_user_status(
                ctx,
                user.user_id,
                away=args.away,
                status_text=args.status_text,
                emoji_name=args.emoji_name,
                emoji_code=args.emoji_code,
                reaction_type=args.reaction_type,
            )
        )
        return None


class UserStatusHandler(PersonalHandler):
    """`GET users/{id}/status`: a user's `status` as register's
    `user_status` shows it (Zulip 9.0, feature level 262); "No such user"
    for a bot or an id of no user of the realm, "User is deactivated", then
    "Insufficient permission" for a user a restricted guest may not see
    (generation/actions/access.py)."""

    SUPPORTED_METHODS = ("GET",)

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        target = ActionHandler.path_id(raw_id, "No such user")

        async def read(ctx: ActionContext) -> dict[str, Any]:
            status = await actions.user_status(ctx.conn, user.realm_id, target)
            await check_can_access_user(ctx.conn, user, target)
            return status

        return {"status": await self.act(read)}


# -- topics ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SetUserTopic:
    stream_id: Annotated[int, Param("The channel", minimum=1)]
    topic: Annotated[str, Param("The topic", max_length=MAX_ITEM_CHARS)]
    visibility_policy: Annotated[
        int, Param("0 inherit (none), 1 muted, 2 unmuted, 3 followed", minimum=0, maximum=3)
    ]


class UserTopicsHandler(PersonalHandler):
    """`POST user_topics`: the user's policy for a topic of a channel they
    may access; `muted_topics` and `user_topic` events to the user."""

    SUPPORTED_METHODS = ("POST",)

    @operation(SetUserTopic)
    async def post(self, user: AuthUser, args: SetUserTopic) -> Body:
        await self.act(
            lambda ctx: actions.do_set_user_topic_visibility_policy(
                ctx, user.user_id, args.stream_id, args.topic, args.visibility_policy
            )
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MuteTopicLegacy:
    stream_id: Annotated[int | None, Param("The channel, by id", minimum=1)] = None
    stream: Annotated[str | None, Param("The channel, by name", max_length=MAX_ITEM_CHARS)] = None
    topic: Annotated[str, Param("The topic", max_length=MAX_ITEM_CHARS)]
    op: Annotated[str, Param("add (mute) or remove (unmute)", max_length=20)]


class MutedTopicsHandler(PersonalHandler):
    """Zulip's legacy `PATCH users/me/subscriptions/muted_topics`: `stream_id`
    or `stream`, `topic`, `op` (add or remove)."""

    SUPPORTED_METHODS = ("PATCH",)

    @operation(MuteTopicLegacy)
    async def patch(self, user: AuthUser, args: MuteTopicLegacy) -> Body:
        if args.stream_id is not None and args.stream is not None:
            raise ApiError("Please choose one: 'stream' or 'stream_id'.")
        stream: int | str
        if args.stream_id is not None:
            stream = args.stream_id
        elif args.stream is not None:
            stream = args.stream
        else:
            raise ApiError("Please supply 'stream'.")
        await self.act(
            lambda ctx: actions.do_mute_topic_legacy(ctx, user.user_id, stream, args.topic, args.op)
        )
        return None


# -- muted users -------------------------------------------------------------------------


def _muted_user_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "No such user")


class MutedUserHandler(PersonalHandler):
    """`POST users/me/muted_users/{id}` mutes a user of the realm, `DELETE`
    unmutes them; the `muted_users` event to the user."""

    SUPPORTED_METHODS = ("POST", "DELETE")

    @operation(Nothing)
    async def post(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        target = _muted_user_id(raw_id)
        await self.act(lambda ctx: actions.do_mute_user(ctx, user.user_id, target))
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        target = _muted_user_id(raw_id)
        await self.act(lambda ctx: actions.do_unmute_user(ctx, user.user_id, target))
        return None


# -- alert words -------------------------------------------------------------------------


def _alert_words(name: str, raw: str) -> list[str]:
    """A JSON list of strings."""
    value = decode_json(name, raw)
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > actions.MAX_ALERT_WORDS:
        raise ApiError(f"{name} has more than {actions.MAX_ALERT_WORDS} items")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ApiError(f"{name}[{index}] is not a string")
        if len(item) > MAX_ITEM_CHARS:
            raise ApiError(
                f"{name}[{index}] is too long (limit: {actions.MAX_ALERT_WORD_LENGTH} characters)"
            )
    return value


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AlertWords:
    alert_words: Annotated[
        list[str],
        Param(
            f"The words (at most {actions.MAX_ALERT_WORDS:,}, each of at most"
            f" {actions.MAX_ALERT_WORD_LENGTH} characters once stripped)",
            parse=_alert_words,
            schema={"type": "array", "items": {"type": "string"}},
        ),
    ]


class AlertWordsHandler(PersonalHandler):
    """`GET users/me/alert_words`; `POST` adds `alert_words`, `DELETE`
    removes them; each answers the user's words, which the `alert_words`
    event carries."""

    SUPPORTED_METHODS = ("GET", "POST", "DELETE")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        words = await self.act(lambda ctx: actions.user_alert_words(ctx.conn, user.user_id))
        return {"alert_words": words}

    @operation(AlertWords)
    async def post(self, user: AuthUser, args: AlertWords) -> Body:
        words = await self.act(
            lambda ctx: actions.do_add_alert_words(ctx, user.user_id, args.alert_words)
        )
        return {"alert_words": words}

    @operation(AlertWords)
    async def delete(self, user: AuthUser, args: AlertWords) -> Body:
        words = await self.act(
            lambda ctx: actions.do_remove_alert_words(ctx, user.user_id, args.alert_words)
        )
        return {"alert_words": words}


# -- drafts ----------------------------------------------------------------------------------

_DRAFT_KEYS = frozenset({"type", "to", "topic", "content", "timestamp"})


def _draft(where: str, value: object) -> actions.DraftData:
    """Zulip's `DraftData` from a JSON object; unknown keys are refused."""
    if not isinstance(value, dict):
        raise ApiError(f"{where} is not a dict")
    for key in sorted(set(value) - _DRAFT_KEYS):
        raise ApiError(f"{where} has an unknown key '{key}'")
    for key in ("type", "to", "topic", "content"):
        if key not in value:
            raise ApiError(f"{where} is missing '{key}'")
    kind, to, topic, content = value["type"], value["to"], value["topic"], value["content"]
    stamp = value.get("timestamp")
    if kind not in actions.DRAFT_TYPES:
        raise ApiError(f'{where}["type"] is not one of stream, private or ""')
    if not isinstance(to, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in to
    ):
        raise ApiError(f'{where}["to"] is not a list of integers')
    if len(to) > MAX_ITEM_CHARS or any(not 0 < i <= INT_MAX for i in to):
        raise ApiError(f'{where}["to"] is not a list of ids')
    if not isinstance(topic, str) or len(topic) > MAX_ITEM_CHARS:
        raise ApiError(f'{where}["topic"] is not a string of at most {MAX_ITEM_CHARS} characters')
    if not isinstance(content, str) or len(content) > MAX_DRAFT_CONTENT_CHARS:
        raise ApiError(
            f'{where}["content"] is not a string of at most {MAX_DRAFT_CONTENT_CHARS} characters'
        )
    if stamp is not None and (not isinstance(stamp, int | float) or isinstance(stamp, bool)):
        raise ApiError(f'{where}["timestamp"] is not a number')
    return actions.DraftData(kind, list(to), topic, content, stamp)


def _drafts(name: str, raw: str) -> list[actions.DraftData]:
    value = decode_json(name, raw)
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > actions.MAX_DRAFTS:
        raise ApiError(f"{name} has more than {actions.MAX_DRAFTS} items")
    return [_draft(f"{name}[{index}]", item) for index, item in enumerate(value)]


def _one_draft(name: str, raw: str) -> actions.DraftData:
    return _draft(name, decode_json(name, raw))


_DRAFT_SCHEMA: JsonSchema = {
    "type": "object",
    "properties": {
        "type": {"enum": list(actions.DRAFT_TYPES)},
        "to": {"type": "array", "items": _ID},
        "topic": {"type": "string"},
        "content": {"type": "string"},
        "timestamp": {"type": "number", "minimum": 0},
    },
    "required": ["type", "to", "topic", "content"],
    "additionalProperties": False,
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CreateDrafts:
    drafts: Annotated[
        list[actions.DraftData],
        Param(
            f"The drafts (at most {actions.MAX_DRAFTS:,}; topics of at most"
            f" {MAX_ITEM_CHARS:,} characters, content of at most {MAX_DRAFT_CONTENT_CHARS:,})",
            parse=_drafts,
            schema={"type": "array", "items": _DRAFT_SCHEMA},
        ),
    ]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EditDraft:
    draft: Annotated[
        actions.DraftData,
        Param("The draft's new content and recipients", parse=_one_draft, schema=_DRAFT_SCHEMA),
    ]


def _draft_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Draft does not exist")


class DraftsHandler(PersonalHandler):
    """`GET drafts` (`count`, `drafts`); `POST drafts` (`drafts`, answers
    their `ids`). Refused while the user's `enable_drafts_synchronization`
    is off."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        drafts = await self.act(lambda ctx: actions.get_drafts(ctx.conn, user.user_id))
        return {"count": len(drafts), "drafts": drafts}

    @operation(CreateDrafts)
    async def post(self, user: AuthUser, args: CreateDrafts) -> Body:
        ids = await self.act(lambda ctx: actions.do_create_drafts(ctx, user.user_id, args.drafts))
        return {"ids": ids}


class DraftHandler(PersonalHandler):
    """`PATCH drafts/{id}` (`draft`) replaces a draft; `DELETE drafts/{id}`."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(EditDraft)
    async def patch(self, user: AuthUser, args: EditDraft, raw_id: str) -> Body:
        draft_id = _draft_id(raw_id)
        await self.act(lambda ctx: actions.do_edit_draft(ctx, user.user_id, draft_id, args.draft))
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        draft_id = _draft_id(raw_id)
        await self.act(lambda ctx: actions.do_delete_draft(ctx, user.user_id, draft_id))
        return None


# -- saved snippets --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CreateSnippet:
    title: Annotated[str, Param("The title (at most 60 characters)", max_length=MAX_ITEM_CHARS)]
    content: Annotated[str, Param("The content")]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EditSnippet:
    title: Annotated[
        str | None, Param("The new title (at most 60 characters)", max_length=MAX_ITEM_CHARS)
    ] = None
    content: Annotated[str | None, Param("The new content")] = None


def _snippet_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Saved snippet does not exist.")


class SavedSnippetsHandler(PersonalHandler):
    """`GET saved_snippets`; `POST saved_snippets` (`title`, `content`;
    answers `saved_snippet_id`)."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        snippets = await self.act(lambda ctx: actions.user_saved_snippets(ctx.conn, user.user_id))
        return {"saved_snippets": snippets}

    @operation(CreateSnippet)
    async def post(self, user: AuthUser, args: CreateSnippet) -> Body:
        snippet_id = await self.act(
            lambda ctx: actions.do_create_saved_snippet(ctx, user.user_id, args.title, args.content)
        )
        return {"saved_snippet_id": snippet_id}


class SavedSnippetHandler(PersonalHandler):
    """`PATCH saved_snippets/{id}` (`title` and/or `content`); `DELETE`."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(EditSnippet)
    async def patch(self, user: AuthUser, args: EditSnippet, raw_id: str) -> Body:
        snippet_id = _snippet_id(raw_id)
        await self.act(
            lambda ctx: actions.do_edit_saved_snippet(
                ctx, user.user_id, snippet_id, args.title, args.content
            )
        )
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        snippet_id = _snippet_id(raw_id)
        await self.act(lambda ctx: actions.do_delete_saved_snippet(ctx, user.user_id, snippet_id))
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"users/me/status", StatusHandler),
    (r"users/([0-9]+)/status", UserStatusHandler),
    (r"user_topics", UserTopicsHandler),
    (r"users/me/subscriptions/muted_topics", MutedTopicsHandler),
    (r"users/me/muted_users/([0-9]+)", MutedUserHandler),
    (r"users/me/alert_words", AlertWordsHandler),
    (r"drafts", DraftsHandler),
    (r"drafts/([0-9]+)", DraftHandler),
    (r"saved_snippets", SavedSnippetsHandler),
    (r"saved_snippets/([0-9]+)", SavedSnippetHandler),
]
