"""The base of endpoints that change the domain: an authenticated request runs
one action on a pooled connection; its events go to the server's queues after
commit; an `ActionError` becomes the API error it names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from generation.actions.base import ActionContext, ActionError
from server.errors import ApiError
from server.handlers.base import BaseHandler

T = TypeVar("T")


class ActionHandler(BaseHandler):
    async def act(self, action: Callable[[ActionContext], Awaitable[T]]) -> T:
        """Run `action` in its own transaction(s) on a pooled connection."""
        try:
            async with self.server.db.connection() as conn:
                return await action(ActionContext(conn, self.server.sink))
        except ActionError as exc:
            raise ApiError(exc.msg, exc.code, exc.status) from None
