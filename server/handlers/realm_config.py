"""Endpoints of the realm's configuration, at Zulip's paths (see
server/handlers/domain.py):

- `GET realm/emoji`; `POST realm/emoji/{emoji_name}` (one image file,
  multipart), `DELETE realm/emoji/{emoji_name}` (deactivate);
- `GET realm/linkifiers`, `PATCH realm/linkifiers` (reorder); `POST
  realm/filters`, `PATCH/DELETE realm/filters/{filter_id}`;
- `POST realm/playgrounds`, `DELETE realm/playgrounds/{playground_id}`;
- `GET/POST realm/domains`, `PATCH/DELETE realm/domains/{domain}`;

and, outside the API, each custom emoji's image at its `source_url`
(`EmojiImageHandler`, routed in server/routes.py).

Parameters are decoded as Zulip clients encode them (JSON for non-strings);
the rules, limits and events are the actions' (the package
`generation/actions/realm_config/`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import tornado.httputil

from generation.actions import realm_config as actions
from server.errors import ApiError
from server.handlers.actions import ActionHandler, Body, operation
from server.handlers.base import BaseHandler
from server.http.auth import AuthUser
from server.http.declared import Nothing, Param
from server.http.params import check_length, decode_json
from server.interface import DomainApi

# A name or domain in the path: longer than any the actions accept.
MAX_PATH_NAME = 300
# `ordered_linkifier_ids`: far more than a realm may have (the action's
# MAX_LINKIFIERS), few enough to check at once.
MAX_ORDERED_IDS = 1000


def _path_name(raw: str) -> str:
    return check_length("name", raw, MAX_PATH_NAME)


# -- custom emoji ---------------------------------------------------------------------


class RealmEmojiHandler(ActionHandler):
    """`GET realm/emoji`: every custom emoji of the realm, deactivated ones
    included (`emoji`, as register's `realm_emoji`)."""

    SUPPORTED_METHODS = ("GET",)

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        async with self.server.db.connection() as conn:
            emoji = await actions.realm_emoji(conn, user.realm_id)
        return {"emoji": emoji}


class EmojiHandler(ActionHandler):
    """`POST realm/emoji/{emoji_name}`: add a custom emoji from the one file
    of a multipart upload (PNG, GIF, JPEG or WebP, at most 512 KiB); any user
    but a guest. `DELETE realm/emoji/{emoji_name}`: deactivate it;
    administrators and its author."""

    SUPPORTED_METHODS = ("POST", "DELETE")

    def uploaded_files(self) -> list[tuple[str, bytes]]:
        """The files of a multipart body, (field name, content) each. The
        body's size was checked when the parameters were read."""
        content_type = self.request.headers.get("Content-Type", "")
        if not content_type.startswith("multipart/form-data"):
            return []
        files: dict[str, list[tornado.httputil.HTTPFile]] = {}
        # The body as streamed (BaseHandler keeps it until the request ends).
        body = b"".join(self._chunks)
        try:
            tornado.httputil.parse_body_arguments(
                content_type, body, {}, files, self.request.headers
            )
        except tornado.httputil.HTTPInputError as exc:  # no boundary, a broken part
            raise ApiError(f"Malformed request body: {exc}") from None
        return [(name, upload.body) for name, uploads in files.items() for upload in uploads]

    @operation(Nothing)
    async def post(self, user: AuthUser, args: Nothing, raw_name: str) -> Body:
        name = _path_name(raw_name)
        files = self.uploaded_files()
        if len(files) != 1:
            raise ApiError("You must upload exactly one file.")
        image = files[0][1]
        await self.act(
            lambda ctx: actions.do_add_realm_emoji(ctx, user.user_id, user.realm_id, name, image)
        )
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_name: str) -> Body:
        name = _path_name(raw_name)
        await self.act(
            lambda ctx: actions.do_remove_realm_emoji(ctx, user.user_id, user.realm_id, name)
        )
        return None


class EmojiImageHandler(BaseHandler):
    """`GET /user_avatars/{realm_id}/emoji/images/{file_name}`: a custom
    emoji's image, as uploaded. Public, as Zulip's emoji images are (browsers
    load them in `<img>`, clients without credentials in hand): the file
    name is random, so an image is found only through `realm_emoji`."""

    SUPPORTED_METHODS = ("GET", "HEAD")
    server: DomainApi

    def compute_etag(self) -> None:
        return  # immutable: the name changes with the image

    async def get(self, raw_realm_id: str, file_name: str) -> None:
        realm_id = ActionHandler.path_id(raw_realm_id, "Invalid realm")
        async with self.server.db.connection() as conn:
            found = await actions.emoji_image(conn, realm_id, file_name)
        if found is None:
            raise ApiError("Not Found", "NOT_FOUND", 404)
        content_type, image = found
        self.set_header("Content-Type", content_type)
        # Never changes: a new image is a new name.
        self.set_header("Cache-Control", "public, max-age=31536000, immutable")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Content-Security-Policy", "default-src 'none'; sandbox")
        if self.request.method == "HEAD":
            self.set_header("Content-Length", str(len(image)))
            self.finish()
            return
        self.finish(image)

    async def head(self, raw_realm_id: str, file_name: str) -> None:
        await self.get(raw_realm_id, file_name)


# The image route (not under /api/v1/ or /json/): the realm's id, then one
# of the file names `generation.actions.realm_config.emoji` makes.
EMOJI_IMAGE_ROUTE = r"/user_avatars/([0-9]+)/emoji/images/([0-9a-f]{16}\.(?:png|gif|jpg|webp))"


# -- linkifiers -----------------------------------------------------------------------


def _linkifier_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "Linkifier not found.")


def _ordered_ids(name: str, raw: str) -> list[int]:
    value = decode_json(name, raw)
    if not isinstance(value, list):
        raise ApiError(f"{name} is not a list")
    if len(value) > MAX_ORDERED_IDS:
        raise ApiError(f"{name} has more than {MAX_ORDERED_IDS} items")
    for index, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool):
            raise ApiError(f"{name}[{index}] is not an integer")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReorderLinkifiers:
    ordered_linkifier_ids: Annotated[
        list[int],
        Param(
            "Every linkifier's id, in the order they are to apply",
            parse=_ordered_ids,
            schema={"type": "array", "items": {"type": "integer"}},
        ),
    ]


class LinkifiersHandler(ActionHandler):
    """`GET realm/linkifiers`: the realm's linkifiers in the order they apply
    (`linkifiers`); `PATCH realm/linkifiers`: reorder them
    (`ordered_linkifier_ids`, each exactly once); administrators."""

    SUPPORTED_METHODS = ("GET", "PATCH")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        async with self.server.db.connection() as conn:
            linkifiers = await actions.realm_linkifiers(conn, user.realm_id)
        return {"linkifiers": linkifiers}

    @operation(ReorderLinkifiers)
    async def patch(self, user: AuthUser, args: ReorderLinkifiers) -> Body:
        await self.act(
            lambda ctx: actions.do_reorder_linkifiers(
                ctx, user.user_id, user.realm_id, args.ordered_linkifier_ids
            )
        )
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Linkifier:
    # The actions' bounds are checked there, with their messages; these only
    # keep a parameter from being absurdly long.
    pattern: Annotated[str, Param("A regular expression (Python syntax)", max_length=10_000)]
    url_template: Annotated[str, Param("An RFC 6570 URL template", max_length=10_000)]


class NewLinkifierHandler(ActionHandler):
    """`POST realm/filters`: add a linkifier, applied after the others
    (`pattern`, `url_template`; answers its `id`); administrators."""

    SUPPORTED_METHODS = ("POST",)

    @operation(Linkifier)
    async def post(self, user: AuthUser, args: Linkifier) -> Body:
        linkifier_id = await self.act(
            lambda ctx: actions.do_add_linkifier(
                ctx, user.user_id, user.realm_id, args.pattern, args.url_template
            )
        )
        return {"id": linkifier_id}


class LinkifierHandler(ActionHandler):
    """`PATCH realm/filters/{filter_id}`: change a linkifier's `pattern` and
    `url_template`; `DELETE`: remove it; administrators."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(Linkifier)
    async def patch(self, user: AuthUser, args: Linkifier, raw_id: str) -> Body:
        linkifier_id = _linkifier_id(raw_id)
        await self.act(
            lambda ctx: actions.do_update_linkifier(
                ctx, user.user_id, user.realm_id, linkifier_id, args.pattern, args.url_template
            )
        )
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        linkifier_id = _linkifier_id(raw_id)
        await self.act(
            lambda ctx: actions.do_remove_linkifier(ctx, user.user_id, user.realm_id, linkifier_id)
        )
        return None


# -- code playgrounds -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewPlayground:
    name: Annotated[str, Param("The playground's name", max_length=1000)]
    pygments_language: Annotated[str, Param("The code blocks' language", max_length=1000)]
    url_template: Annotated[str, Param("An RFC 6570 URL template of `code`", max_length=10_000)]


class PlaygroundsHandler(ActionHandler):
    """`POST realm/playgrounds`: add a code playground (`name`,
    `pygments_language`, `url_template`; answers its `id`); administrators."""

    SUPPORTED_METHODS = ("POST",)

    @operation(NewPlayground)
    async def post(self, user: AuthUser, args: NewPlayground) -> Body:
        playground_id = await self.act(
            lambda ctx: actions.do_add_realm_playground(
                ctx,
                user.user_id,
                user.realm_id,
                args.name,
                args.pygments_language,
                args.url_template,
            )
        )
        return {"id": playground_id}


class PlaygroundHandler(ActionHandler):
    """`DELETE realm/playgrounds/{playground_id}`: administrators."""

    SUPPORTED_METHODS = ("DELETE",)

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        playground_id = ActionHandler.path_id(raw_id, "Invalid playground")
        await self.act(
            lambda ctx: actions.do_remove_realm_playground(
                ctx, user.user_id, user.realm_id, playground_id
            )
        )
        return None


# -- domains ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewDomain:
    domain: Annotated[str, Param("The domain", max_length=1000)]
    allow_subdomains: Annotated[bool, Param("Its subdomains too")]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DomainChange:
    allow_subdomains: Annotated[bool, Param("Its subdomains too")]


class DomainsHandler(ActionHandler):
    """`GET realm/domains`: the realm's domains (`domains`); `POST`: add one
    (`domain`, `allow_subdomains`; answers Zulip's `new_domain`, [its id, the
    domain as stored]); administrators."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        async with self.server.db.connection() as conn:
            domains = await actions.realm_domains(conn, user.realm_id)
        return {"domains": domains}

    @operation(NewDomain)
    async def post(self, user: AuthUser, args: NewDomain) -> Body:
        domain_id, added = await self.act(
            lambda ctx: actions.do_add_realm_domain(
                ctx, user.user_id, user.realm_id, args.domain, args.allow_subdomains
            )
        )
        return {"new_domain": [domain_id, added["domain"]]}


class DomainHandler(ActionHandler):
    """`PATCH realm/domains/{domain}`: whether its subdomains are allowed
    (`allow_subdomains`); `DELETE`: remove it; administrators."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(DomainChange)
    async def patch(self, user: AuthUser, args: DomainChange, raw_domain: str) -> Body:
        domain = _path_name(raw_domain)
        await self.act(
            lambda ctx: actions.do_change_realm_domain(
                ctx, user.user_id, user.realm_id, domain, args.allow_subdomains
            )
        )
        return None

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_domain: str) -> Body:
        domain = _path_name(raw_domain)
        await self.act(
            lambda ctx: actions.do_remove_realm_domain(ctx, user.user_id, user.realm_id, domain)
        )
        return None


ROUTES: list[tuple[str, Any]] = [
    (r"realm/emoji", RealmEmojiHandler),
    (r"realm/emoji/([^/]+)", EmojiHandler),
    (r"realm/linkifiers", LinkifiersHandler),
    (r"realm/filters", NewLinkifierHandler),
    (r"realm/filters/([0-9]+)", LinkifierHandler),
    (r"realm/playgrounds", PlaygroundsHandler),
    (r"realm/playgrounds/([0-9]+)", PlaygroundHandler),
    (r"realm/domains", DomainsHandler),
    (r"realm/domains/([^/]+)", DomainHandler),
]
