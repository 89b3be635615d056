"""The base of endpoints that change the domain: an authenticated request runs
one action on a pooled connection; its events go to the server's queues after
commit; an `ActionError` becomes the API error it names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from generation.actions.base import ActionContext, ActionError
from server.errors import ApiError
from server.handlers.base import BaseHandler
from server.http.params import INT_MAX, Params

T = TypeVar("T")


class ActionHandler(BaseHandler):
    def succeed(self, params: Params, data: dict[str, Any] | None = None) -> None:
        """Success, reporting the parameters the endpoint does not know in
        `ignored_parameters_unsupported`, as Zulip does."""
        body = dict(data or {})
        ignored = params.unread()
        if ignored:
            body["ignored_parameters_unsupported"] = ignored
        self.write_success(body)

    @staticmethod
    def path_id(raw: str, invalid: str) -> int:
        """An id from the URL path (digits, by the route's pattern); `invalid`
        is the error for 0 or a number beyond any id."""
        value = int(raw)
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
