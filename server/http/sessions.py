"""Browser sessions for the `/json/` paths, as Zulip's web app has them.

A page must not hold a user's API key in script: `POST /json/login` (email and
API key, or the demo's password-less dev login) sets two cookies:

- `eventq_session` (HttpOnly, SameSite=Lax): the user id, a tag of the API
  key it was issued under (rotating the key ends the session), the
  generation of the user's sessions it belongs to (a logout moves the user
  to the next: `users.sessions_generation`), an expiry and a nonce, signed
  with a key derived from the installation's API key secret, so that every
  shard accepts it and none is stored;
- `csrftoken` (readable by the page, SameSite=Lax): derived from the session
  by the same key (and the same pair again under per-user names, see
  `USER_HEADER`). Every `/json/` request other than GET/HEAD authenticated
  by the session must echo it in `X-CSRFToken`, and one that says where it
  comes from (`Origin`) must come from this host.

SameSite=Lax keeps other sites' forms and scripts from sending the session at
all; the token and the Origin check stop pages of this same site on another
port or host name (which share its cookies) and older browsers.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import re
import secrets
import urllib.parse

from server.errors import ApiError

SESSION_COOKIE = "eventq_session"
CSRF_COOKIE = "csrftoken"
CSRF_HEADER = "X-CSRFToken"
# A browser may hold the sessions of several users at once (a tab each, as
# the demo does): each login also sets `eventq_session_<user id>` and
# `csrftoken_<user id>`, and a request naming a user in this header is
# authenticated by that user's pair instead of the latest login's.
USER_HEADER = "X-Eventq-User"


def cookie_names(user_id: int | None) -> tuple[str, str]:
    """The session and CSRF cookie names of `user_id` (None: the latest login)."""
    if user_id is None:
        return SESSION_COOKIE, CSRF_COOKIE
    return f"{SESSION_COOKIE}_{user_id}", f"{CSRF_COOKIE}_{user_id}"


# Zulip's (Django's SESSION_COOKIE_AGE): two weeks.
DEFAULT_SESSION_SECS = 14 * 24 * 3600

_TOKEN = re.compile(
    r"v1\.([0-9]{1,18})\.([A-Za-z0-9_-]{16})\.([0-9]{1,10})\.([0-9]{1,12})"
    r"\.([A-Za-z0-9_-]{16,64})\.([A-Za-z0-9_-]{43})"
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """A verified token: whose, for which API key (a tag, not the key's
    id), of which generation of the user's sessions (a logout starts the
    next), until when (s since the epoch), and its nonce."""

    user_id: int
    key_tag: str
    generation: int
    expires: int
    nonce: str


class SessionSigner:
    """Signs and checks session tokens, and derives their CSRF tokens."""

    def __init__(self, secret: bytes):
        # Its own key: a session token says nothing about API key hashes.
        self._key = hmac.digest(secret, b"eventq browser session v1", "sha256")

    def _mac(self, text: str) -> str:
        return _b64(hmac.digest(self._key, text.encode(), "sha256"))

    def key_tag(self, api_key_id: str) -> str:
        """Which API key a session was issued under, without showing any of
        it: rotating the key ends the session."""
        return self._mac(f"key.{api_key_id}")[:16]

    def mint(self, user_id: int, api_key_id: str, generation: int, expires: int) -> str:
        body = (
            f"v1.{user_id}.{self.key_tag(api_key_id)}.{generation}.{expires}"
            f".{secrets.token_urlsafe(18)}"
        )
        return f"{body}.{self._mac(body)}"

    def verify(self, token: str, now: float) -> Session | None:
        """The session of a valid, unexpired token; None for anything else."""
        match = _TOKEN.fullmatch(token)
        if match is None:
            return None
        user_id, tag, generation, expires, nonce, mac = match.groups()
        body = f"v1.{user_id}.{tag}.{generation}.{expires}.{nonce}"
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        if int(expires) <= now:
            return None
        return Session(int(user_id), tag, int(generation), int(expires), nonce)

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.nonce}")


def csrf_failed(reason: str) -> ApiError:
    """Zulip's answer to a request that fails Django's CSRF check."""
    return ApiError(f"CSRF error: {reason}", "CSRF_FAILED", 403)


def check_csrf(
    signer: SessionSigner,
    session: Session,
    method: str,
    token: str | None,
    origin: str | None,
    host: str | None,
) -> None:
    """Raise `csrf_failed` unless a session-authenticated request of
    `method` may go on: a safe method, or the right token from this host."""
    if method in SAFE_METHODS:
        return
    check_origin(origin, host)
    if not token:
        raise csrf_failed("CSRF token missing.")
    if not hmac.compare_digest(token.encode(), signer.csrf_token(session).encode()):
        raise csrf_failed("CSRF token incorrect.")


def check_origin(origin: str | None, host: str | None) -> None:
    """A request that names its origin must come from a page of this host
    (scheme aside: TLS may end at a proxy)."""
    if origin is None:
        return
    netloc = urllib.parse.urlsplit(origin).netloc if origin != "null" else ""
    if not host or netloc.lower() != host.lower():
        shown = origin[:200]
        raise csrf_failed(f"Origin checking failed - {shown} does not match any trusted origins.")
