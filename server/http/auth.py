"""HTTP Basic authentication with `email:api_key`, cached briefly.

Errors are Zulip's (401 with `WWW-Authenticate`, `INVALID_API_KEY`). A
long-poll every 45-55 s per client must not cost a query each, so a
successful authentication is remembered for `auth_cache_secs`; concurrent
misses for the same credentials share one query.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import functools
import hmac
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from generation.accounts import (
    HASH_SHA256,
    HASH_WRAPPED,
    ROLE_GUEST,
    api_key_id,
    hash_api_key,
    is_well_formed_api_key,
    legacy_hash_api_key,
    wrap_legacy_hash,
)
from server.database.db import ApiKeyRow, DatabaseUnavailable, SessionRow
from server.errors import BASIC_CHALLENGE, SESSION_CHALLENGE, ApiError
from server.http.sessions import Session

# Background re-checks at once: a burst of stale entries must not take the
# whole database pool from registers and actions.
MAX_BACKGROUND_CHECKS = 4
# Compared against when a key's id is unknown (see `_check`).
_NO_HASH = bytes(32)


@dataclasses.dataclass(frozen=True, slots=True)
class AuthUser:
    """An authenticated, active user of an active realm."""

    user_id: int
    realm_id: int
    email: str
    full_name: str
    role: int

    @property
    def is_guest(self) -> bool:
        return self.role == ROLE_GUEST


def _unauthorized(msg: str, code: str = "UNAUTHORIZED", *, session: bool = False) -> ApiError:
    challenge = SESSION_CHALLENGE if session else BASIC_CHALLENGE
    return ApiError(msg, code, 401, headers={"WWW-Authenticate": challenge})


def not_logged_in() -> ApiError:
    """/json/ without credentials or a valid session."""
    return _unauthorized("Not logged in: API authentication or user session required", session=True)


def parse_basic(header: str | None) -> tuple[str, str]:
    """(email, api_key) from an Authorization header, or the matching error."""
    if header is None:
        raise _unauthorized("Missing authorization header for basic auth")
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise ApiError("This endpoint requires HTTP basic authentication.")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # ValueError: non-ASCII, or not UTF-8
        raise _unauthorized("Invalid authorization header for basic auth") from None
    email, sep, api_key = decoded.partition(":")
    if not sep:
        raise _unauthorized("Invalid authorization header for basic auth")
    return email, api_key


# Cache keys: the Authorization header itself (a string: the long poll's hot
# path looks it up as it comes), or ("session", user id, key tag, session
# generation) for a browser session. A string never equals a tuple: neither
# kind can be taken for the other.
CacheKey = str | tuple[str, ...]


class Authenticator:
    """Checks credentials against the database, remembering successes.

    IO loop only. `lookup` finds the user of an API key id; `session_lookup`
    the user of a browser session, by user id, with their API key's id and
    the generation of their sessions; `key_tag` is the signer's tag of a key
    id.
    """

    def __init__(
        self,
        lookup: Callable[[str], Awaitable[ApiKeyRow | None]],
        *,
        upgrade: Callable[[int, bytes, bytes], Awaitable[None]] | None = None,
        session_lookup: Callable[[int], Awaitable[SessionRow | None]] | None = None,
        key_tag: Callable[[str], str] | None = None,
        ttl_secs: float = 60.0,
        stale_secs: float = 600.0,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._lookup = lookup
        self._upgrade = upgrade
        self._session_lookup = session_lookup
        self._key_tag = key_tag
        self._ttl = ttl_secs
        self._stale = stale_secs
        self._max_entries = max_entries
        self._clock = clock
        # key -> (user, fresh until); least recently used first. A fresh
        # entry is trusted; one stale by less than `stale_secs` is still
        # served while it is checked again in the background. Each entry's
        # freshness is jittered by +-25% so that clients that connected
        # together are not all re-checked in the same second.
        self._cache: OrderedDict[CacheKey, tuple[AuthUser, float]] = OrderedDict()
        # user id -> their keys in the cache, so that forgetting a user costs
        # what they have, not the cache's size (logout can be asked often).
        self._keys_of: dict[int, set[CacheKey]] = {}
        self._inflight: dict[CacheKey, asyncio.Future[AuthUser]] = {}
        self._refreshing: set[asyncio.Task[None]] = set()
        # Counts forget_user calls; a check that began before a user was
        # forgotten does not cache its (older) answer for them.
        self._forgets = 0
        self._forgotten_at: dict[int, int] = {}
        # Likewise per realm (`forget_realm`): a deactivated realm is rare,
        # so this holds a handful of entries.
        self._realm_forgotten_at: dict[int, int] = {}
        self.lookups = 0  # database lookups made, for stats and tests

    def epoch(self) -> int:
        """A mark to compare `forgotten(user_id)` with later."""
        return self._forgets

    def forgotten(self, user_id: int) -> int:
        """The `epoch()` at which `user_id` was last forgotten (0: never):
        above a mark taken before authenticating them, their access changed
        since (a new role, a deactivation, a logout, a new key)."""
        return self._forgotten_at.get(user_id, 0)

    def forget_user(self, user_id: int) -> None:
        """Drop a user's cached credentials (deactivated, logged out)."""
        self._forgets += 1
        self._forgotten_at[user_id] = self._forgets
        for key in self._keys_of.pop(user_id, ()):
            self._cache.pop(key, None)

    def forget_realm(self, realm_id: int) -> int:
        """Drop the cached credentials of every user of a realm (deactivated);
        returns how many entries went. Visits the whole cache (at most
        `max_entries`): a realm is deactivated rarely, and its users'
        entries are found in no other way without a per-realm index that
        every authentication would pay for."""
        self._forgets += 1
        self._realm_forgotten_at[realm_id] = self._forgets
        keys = [key for key, (user, _) in self._cache.items() if user.realm_id == realm_id]
        for key in keys:
            self._drop(key)
        return len(keys)

    def _drop(self, key: CacheKey) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            keys = self._keys_of.get(entry[0].user_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._keys_of[entry[0].user_id]

    async def authenticate(self, header: str | None) -> AuthUser:
        """The user behind an Authorization header; raises `ApiError` (401/400)
        or `server.database.db.DatabaseUnavailable`.

        A long-poll never waits on the database once its credentials were
        checked: past the TTL the cached user is served while a background
        check runs; a deactivated user or a rotated key is refused from the
        request after that check (so within one poll of the TTL), and a
        database outage shorter than `stale_secs` does not cut clients off.
        """
        if header is not None:
            user = self.cached(header)
            if user is not None:
                return user
        email, api_key = parse_basic(header)
        assert header is not None
        return await self._check_once(header, lambda: self._check(email, api_key))

    async def authenticate_session(self, session: Session) -> AuthUser:
        """The user of a browser session (server/http/sessions.py) whose token
        was verified: still active, still holding the API key the session
        was issued under, and not logged out since. Cached like credentials."""
        key = ("session", str(session.user_id), session.key_tag, str(session.generation))
        user = self._cached(key)
        if user is not None:
            return user
        return await self._check_once(key, functools.partial(self._check_session, key))

    async def session_user(self, user_id: int) -> tuple[AuthUser, str, int]:
        """An active user by id, their API key's id and their sessions'
        generation (for a new session), read afresh."""
        row = await self._session_row(user_id)
        return self._active(row.row), row.api_key_id, row.sessions_generation

    async def _session_row(self, user_id: int) -> SessionRow:
        if self._session_lookup is None:
            raise not_logged_in()
        self.lookups += 1
        row = await self._session_lookup(user_id)
        if row is None:
            raise not_logged_in()
        return row

    async def _check_session(self, key: tuple[str, ...]) -> AuthUser:
        _, user_id, tag, generation = key
        row = await self._session_row(int(user_id))
        if self._key_tag is None or not hmac.compare_digest(self._key_tag(row.api_key_id), tag):
            raise not_logged_in()  # the API key was rotated
        if int(generation) != row.sessions_generation:
            raise not_logged_in()  # logged out since
        return self._active(row.row)

    def cached(self, header: str) -> AuthUser | None:
        """The user of the Authorization header `header` if its credentials
        were checked recently (see `authenticate`), without waiting: None
        means ask `authenticate`. A stale entry is served and checked again
        in the background."""
        return self._cached(header)

    def _cached(self, key: CacheKey) -> AuthUser | None:
        cached = self._cache.get(key)
        if cached is None:
            return None
        user, fresh_until = cached
        now = self._clock()
        if now < fresh_until:
            self._cache.move_to_end(key)
            return user
        if now < fresh_until + self._stale:
            self._cache.move_to_end(key)
            self._refresh_later(key)
            return user
        self._drop(key)
        return None

    async def _check_once(
        self, key: CacheKey, check: Callable[[], Awaitable[AuthUser]]
    ) -> AuthUser:
        """Check credentials, sharing one query among concurrent requests."""
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[AuthUser] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        began = self._forgets
        try:
            user = await check()
        except BaseException as exc:
            if isinstance(exc, ApiError):
                self._drop(key)  # no longer valid
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._inflight[key]
        future.set_result(user)
        if (
            self._forgotten_at.get(user.user_id, 0) > began
            or self._realm_forgotten_at.get(user.realm_id, 0) > began
        ):
            return user  # forgotten meanwhile: this answer may predate it
        jitter = random.uniform(0.75, 1.25)  # noqa: S311 (spreading load, not a secret)
        self._cache[key] = (user, self._clock() + self._ttl * jitter)
        self._cache.move_to_end(key)
        self._keys_of.setdefault(user.user_id, set()).add(key)
        while len(self._cache) > self._max_entries:
            self._drop(next(iter(self._cache)))
        return user

    def _refresh_later(self, key: CacheKey) -> None:
        if key in self._inflight or len(self._refreshing) >= MAX_BACKGROUND_CHECKS:
            return  # served stale; a later request checks it
        check: Callable[[], Awaitable[AuthUser]]
        if isinstance(key, tuple):
            check = functools.partial(self._check_session, key)
        else:
            check = functools.partial(self._check, *parse_basic(key))

        async def refresh() -> None:
            # ApiError: dropped from the cache, the next request gets the 401.
            # DatabaseUnavailable: the cached user stays; the next request
            # past the TTL tries again.
            with contextlib.suppress(ApiError, DatabaseUnavailable):
                await self._check_once(key, check)

        task = asyncio.get_running_loop().create_task(refresh())
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _check(self, email: str, api_key: str) -> AuthUser:
        if not is_well_formed_api_key(api_key):
            raise _unauthorized("Invalid API key", "INVALID_API_KEY")
        self.lookups += 1
        row = await self._lookup(api_key_id(api_key))
        keyed = hash_api_key(api_key)
        if row is None:
            # As long as a wrong key of a known id: the answer's timing does
            # not tell which ids exist.
            hmac.compare_digest(keyed, _NO_HASH)
            raise _unauthorized("Invalid API key", "INVALID_API_KEY")
        scheme = row.api_key_hash_scheme
        legacy = scheme in (HASH_SHA256, HASH_WRAPPED)
        if scheme == HASH_SHA256:
            expected = legacy_hash_api_key(api_key)
        elif scheme == HASH_WRAPPED:
            expected = wrap_legacy_hash(legacy_hash_api_key(api_key))
        else:
            expected = keyed
        if (
            not hmac.compare_digest(row.api_key_hash, expected)
            or row.email.lower() != email.lower()
        ):
            raise _unauthorized("Invalid API key", "INVALID_API_KEY")
        if legacy and self._upgrade is not None:
            # Written before keyed hashes (or wrapped since without the key):
            # rewrite it as a plain keyed hash now that the key is known.
            with contextlib.suppress(DatabaseUnavailable):
                await self._upgrade(row.user_id, row.api_key_hash, keyed)
        return self._active(row)

    @staticmethod
    def _active(row: ApiKeyRow) -> AuthUser:
        if row.realm_deactivated:
            raise _unauthorized("This organization has been deactivated", "REALM_DEACTIVATED")
        if not row.is_active:
            raise _unauthorized("Account is deactivated", "USER_DEACTIVATED")
        return AuthUser(row.user_id, row.realm_id, row.email, row.full_name, row.role)
