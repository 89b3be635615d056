"""`POST submessage` (Zulip's path and parameters, see
server/handlers/domain.py): a reader adds to a message's widget log
(`message_id`, `msg_type` "widget", `content` a JSON string); the rules and
the `submessage` event are the action's
(generation/actions/messages/submessages.py)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from generation.actions import messages as actions
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import Param


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AddSubmessage:
    message_id: Annotated[int, Param("The widget's message", minimum=1)]
    msg_type: Annotated[str, Param("widget", max_length=50)]
    content: Annotated[
        str,
        Param(
            "A JSON object the widget's protocol defines (a vote, a new option, ...)",
            max_length=actions.MAX_SUBMESSAGE_CHARS,
        ),
    ]


class SubmessageHandler(ActionHandler):
    """`POST submessage`."""

    SUPPORTED_METHODS = ("POST",)

    @operation(AddSubmessage)
    async def post(self, user: AuthUser, args: AddSubmessage) -> Body:
        message_id, msg_type, content = args.message_id, args.msg_type, args.content
        await self.act(
            lambda ctx: actions.do_add_submessage(ctx, user.user_id, message_id, msg_type, content)
        )
        return None


ROUTES: list[tuple[str, Any]] = [(r"submessage", SubmessageHandler)]
