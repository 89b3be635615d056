"""The base of endpoints that change the domain: an authenticated request runs
one action on a pooled connection; its events go to the server's queues after
commit; an `ActionError` becomes the API error it names.

Each operation (a handler's method) declares its parameters with `operation`
(server/http/declared.py): the declaration parses the request, the method
gets the typed result, and the OpenAPI document is written from it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from generation.actions.base import ActionContext, ActionError
from server.errors import ApiError
from server.handlers.base import BaseHandler, clean_client_name
from server.http.auth import AuthUser
from server.http.declared import fields_of, parse
from server.http.params import INT_MAX, Params
from server.interface import DomainApi

T = TypeVar("T")
A = TypeVar("A")
H = TypeVar("H", bound="ActionHandler")
P = ParamSpec("P")
# What an operation answers besides the envelope (None: nothing).
Body = dict[str, Any] | None
Method = Callable[Concatenate[H, AuthUser, A, P], Awaitable[Body]]
Served = Callable[Concatenate[H, P], Awaitable[None]]

# Each operation's method, as Tornado calls it, to its declaration.
_DECLARED: dict[Callable[..., Any], type] = {}


def operation(declared: type[A]) -> Callable[[Method[H, A, P]], Served[H, P]]:
    """The method serves an operation whose parameters `declared` declares:
    it is called with the authenticated user, the parsed parameters (an
    instance of `declared`) and the path's arguments, and what it returns is
    the success's body, with the parameters nobody declared reported in
    `ignored_parameters_unsupported`."""
    fields_of(declared)  # a bad declaration fails on import

    def decorate(method: Method[H, A, P]) -> Served[H, P]:
        async def serve(self: H, /, *args: P.args, **kwargs: P.kwargs) -> None:
            user = await self.authenticate()
            params = BaseHandler.params(self)
            body = await method(self, user, parse(declared, params), *args, **kwargs)
            self.succeed(params, body)

        functools.update_wrapper(serve, method)
        _DECLARED[serve] = declared
        return serve

    return decorate


def declaration_of(handler: type[BaseHandler], method: str) -> type | None:
    """The declaration of `handler`'s operation `method` ("get", "post",
    ...), None if that method is not an `operation`."""
    served = getattr(handler, method, None)
    return _DECLARED.get(served) if callable(served) else None


class ActionHandler(BaseHandler):
    server: DomainApi

    def params(self) -> Params:
        """Refused: an operation's parameters are those it declares
        (`operation`), so it cannot read one the document does not list."""
        raise TypeError(f"{type(self).__name__}: declare the parameters with @operation")

    def succeed(self, params: Params, data: Body = None) -> None:
        """Success, reporting the parameters the endpoint does not know in
        `ignored_parameters_unsupported`, as Zulip does."""
        body = dict(data or {})
        ignored = params.unread()
        if ignored:
            body["ignored_parameters_unsupported"] = ignored
        self.write_success(body)

    def client_of(self, given: str | None) -> str:
        """Zulip's client name from a declared `client` parameter: as
        `BaseHandler.client_name` makes it of a request's `client`."""
        return clean_client_name(given) if given else self.client_name()

    @staticmethod
    def path_id(raw: str, invalid: str) -> int:
        """An id from the URL path (digits, by the route's pattern); `invalid`
        is the error for 0 or a number beyond any id."""
        # More digits than any id has is not one (and past 4,300 int() refuses).
        value = int(raw) if len(raw) <= len(str(INT_MAX)) else 0
        if not 0 < value <= INT_MAX:
            raise ApiError(invalid)
        return value

    async def act(self, action: Callable[[ActionContext], Awaitable[T]]) -> T:
        """Run `action` in its own transaction(s) on a pooled connection."""
        try:
            async with self.server.db.connection() as conn:
                return await action(ActionContext(conn, self.server.sink))
        except ActionError as exc:
            raise ApiError(exc.msg, exc.code, exc.status) from None
