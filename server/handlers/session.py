"""Browser sessions (server/http/sessions.py): `POST /json/login` with an email and
an API key, `POST /json/dev_login` with a demo user's email (only when the
demo is on, EVENTQ_DEMO=1), `GET /json/dev_users` (the demo's users), and
`POST /json/logout`."""

from __future__ import annotations

import base64
import logging
import time

from generation.actions.base import ActionContext
from generation.actions.users import do_end_sessions
from server.config import DEMO_REALM
from server.errors import ApiError, missing_argument
from server.handlers.base import BaseHandler
from server.http.sessions import check_origin, cookie_names
from server.interface import DomainApi

log = logging.getLogger("eventq.sessions")


class SessionHandler(BaseHandler):
    server: DomainApi
    SUPPORTED_METHODS = ("POST",)

    async def start_session(self, user_id: int) -> None:
        # Read afresh: the user as they are now, with their key and the
        # generation of their sessions.
        user, key_id, generation = await self.server.auth.session_user(user_id)
        now = time.time()
        expires = int(now + self.server.settings.session_secs)
        signer = self.server.sessions
        token = signer.mint(user.user_id, key_id, generation, expires)
        session = signer.verify(token, now)
        assert session is not None
        csrf = signer.csrf_token(session)
        for session_cookie, csrf_cookie in (cookie_names(None), cookie_names(user.user_id)):
            self._cookie(session_cookie, token, expires, httponly=True)
            self._cookie(csrf_cookie, csrf, expires, httponly=False)
        log.info("user %d logged in from %s", user.user_id, self.client_address())
        self.write_success(
            {"user_id": user.user_id, "email": user.email, "full_name": user.full_name}
        )

    def _cookie(self, name: str, value: str, expires: int, *, httponly: bool) -> None:
        self.set_cookie(
            name,
            value,
            path="/",
            expires=expires,
            httponly=httponly,
            secure=self.over_tls(),
            samesite="Lax",
        )

    def refuse_other_origins(self) -> None:
        # Login CSRF: another site must not log a browser into its account.
        headers = self.request.headers
        check_origin(headers.get("Origin"), headers.get("Host"))


class LoginHandler(SessionHandler):
    async def post(self) -> None:
        self.refuse_other_origins()
        if "api_key" in self.request.query_arguments:
            # It would be in access logs, proxies' logs and browser history.
            raise ApiError("Send the API key in the request body, not in the URL")
        params = self.params()
        email = params.string("username", max_length=254) or params.string("email", max_length=254)
        api_key = params.string("api_key", max_length=256)
        if not email:
            raise missing_argument("username")
        if not api_key:
            raise missing_argument("api_key")
        credentials = base64.b64encode(f"{email}:{api_key}".encode()).decode()
        user = await self._basic_user(f"Basic {credentials}")
        await self.start_session(user.user_id)


class DevLoginHandler(SessionHandler):
    """The demo's password-less login, as Zulip's development server has."""

    async def post(self) -> None:
        if not self.server.settings.demo:
            raise ApiError(f"Invalid API path: {self.request.path}", "NOT_FOUND", 404)
        self.refuse_other_origins()
        email = self.params().string("email", max_length=254)
        if not email:
            raise missing_argument("email")
        self.refuse_other_hosts()
        users = await self.server.db.realm_users(DEMO_REALM)
        found = next((u for u in users if u[1].lower() == email.lower()), None)
        if found is None:
            raise ApiError(f"No demo user {email}", "BAD_REQUEST", 400)
        await self.start_session(found[0])


class DevUsersHandler(BaseHandler):
    server: DomainApi
    SUPPORTED_METHODS = ("GET",)

    async def get(self) -> None:
        if not self.server.settings.demo:
            raise ApiError(f"Invalid API path: {self.request.path}", "NOT_FOUND", 404)
        self.refuse_other_hosts()
        users = await self.server.db.realm_users(DEMO_REALM)
        self.write_success(
            {"users": [{"user_id": u[0], "email": u[1], "full_name": u[2]} for u in users]}
        )


class LogoutHandler(SessionHandler):
    async def post(self) -> None:
        user = await self.authenticate()  # the session, with its CSRF check
        # Every session of the user issued until now ends, in every browser
        # (a copied cookie included): at once here, and on every other shard
        # as soon as the notice reaches it (each forgets what it cached).
        async with self.server.db.connection() as conn:
            await do_end_sessions(
                ActionContext(conn, self.server.sink), user.user_id, user.realm_id
            )
        # Here at once, whatever the notice waits behind in the stream.
        self.server.auth.forget_user(user.user_id)
        names = [*cookie_names(user.user_id)]
        latest = self.get_cookie(cookie_names(None)[0])
        session = self.server.sessions.verify(latest, time.time()) if latest else None
        if session is not None and session.user_id == user.user_id:
            names += cookie_names(None)  # the latest login was this user's too
        for name in names:
            self.clear_cookie(name, path="/")
        log.info("user %d logged out", user.user_id)
        self.write_success()
