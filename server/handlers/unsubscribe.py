"""`/accounts/unsubscribe/missed_messages/<token>`: the unsubscribe link of
the missed-message emails (server/notifications/unsubscribe.py), Zulip's path.

GET shows a page with one button; POST (the button, or a mail client's
one-click unsubscribe of RFC 8058, which the email's List-Unsubscribe-Post
header offers) turns the user's `enable_offline_email_notifications` off,
with the `user_settings` event their clients get for any settings change.
A GET changes nothing: mail scanners follow links in emails, and must not
unsubscribe anyone. The token is the only credential: no login is needed.
"""

from __future__ import annotations

import html
from typing import Protocol

from generation.actions.base import ActionContext
from generation.actions.users import do_change_user_setting
from server.errors import ApiError
from server.handlers.actions import ActionHandler
from server.interface import DomainApi
from server.notifications.unsubscribe import user_of

_SETTING = "enable_offline_email_notifications"
_STYLE = "font-family: sans-serif; max-width: 36em; margin: 3em auto; line-height: 1.5"


class UnsubscribeApi(DomainApi, Protocol):
    @property
    def api_key_secret(self) -> bytes:
        """The installation's key, which signs the links."""


class UnsubscribeHandler(ActionHandler):
    SUPPORTED_METHODS = ("GET", "POST")
    server: UnsubscribeApi

    def _user_id(self, token: str) -> int:
        user_id = user_of(self.server.api_key_secret, token)
        if user_id is None:
            raise ApiError("This unsubscribe link is not valid.", "BAD_REQUEST", 400)
        return user_id

    def _page(self, title: str, body: str) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header(
            "Content-Security-Policy",
            "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none';"
            " style-src 'unsafe-inline'",
        )
        self.set_header("X-Frame-Options", "DENY")
        self.finish(
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head><body style='{_STYLE}'><h1>{html.escape(title)}</h1>{body}"
            "</body></html>"
        )

    async def get(self, token: str) -> None:
        self._user_id(token)
        self._page(
            "Unsubscribe from missed-message emails",
            "<p>You get an email when messages reach you while you are away."
            " Stop these emails?</p>"
            "<form method='post'><button type='submit'>Unsubscribe</button></form>",
        )

    async def post(self, token: str) -> None:
        user_id = self._user_id(token)

        async def unsubscribe(ctx: ActionContext) -> bool:
            # A deactivated user: refused ("Invalid user ID"), as by any action.
            return await do_change_user_setting(ctx, user_id, _SETTING, False)

        await self.act(unsubscribe)
        self._page(
            "Unsubscribed",
            "<p>You will no longer get emails about messages you miss."
            " You can turn them back on in your notification settings.</p>",
        )
