"""Per-key rate limiting (Zulip's `api_by_user`: 200 requests per 60 s), in
this process's memory.

A sliding window, counted the cheap way: per key, the requests of the
current fixed window and of the one before; a request is allowed while
`previous * (1 - elapsed / window) + current` is below the limit, so no
60-second span holds much more than `limit` requests (the estimate assumes
the previous window's requests were spread evenly), with three numbers per
key. A refused request does not count. With several shards each counts what
it serves; a user's event requests all end on their own shard. Memory is
bounded by the keys seen within two windows: `forget_idle` (every GC sweep)
drops the others.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.config import Settings

log = logging.getLogger("eventq.ratelimit")


class RateLimiter:
    def __init__(self, limit: int, window_secs: float, what: str = "user"):
        self.limit = limit
        self.window_secs = window_secs
        self.what = what  # for the log line: "user 7", "address 10.0.0.1"
        # key -> [start of the current window, its count, the previous count]
        self._windows: dict[object, list[float]] = {}
        # Keys refused since their last allowed request (logged once).
        self._limited: set[object] = set()
        self.refused = 0

    def __len__(self) -> int:
        return len(self._windows)

    def _current(self, key: object, now: float) -> list[float]:
        entry = self._windows.get(key)
        if entry is None:
            entry = self._windows[key] = [now, 0.0, 0.0]
            return entry
        passed = int((now - entry[0]) // self.window_secs)
        if passed == 1:
            entry[0] += self.window_secs
            entry[1], entry[2] = 0.0, entry[1]
        elif passed > 1:
            entry[0] = now
            entry[1] = entry[2] = 0.0
        return entry

    def wait(self, key: object, now: float) -> float:
        """Like `hit`, without counting a request: 0.0 if one would go on."""
        entry = self._windows.get(key)
        if entry is None:
            return 0.0
        start, current, previous = self._current(key, now)
        if previous * (1.0 - (now - start) / self.window_secs) + current < self.limit:
            self._limited.discard(key)
            return 0.0
        self._refuse(key)
        return self._wait(start, current, previous, now)

    def blocked(self, key: object, now: float) -> bool:
        """Whether `wait` would refuse `key` now; counts and logs nothing."""
        entry = self._windows.get(key)
        if entry is None:
            return False
        start, current, previous = self._current(key, now)
        return previous * (1.0 - (now - start) / self.window_secs) + current >= self.limit

    def hit(self, key: object, now: float) -> float:
        """Count a request; 0.0 if it may go on, else the seconds until one may."""
        entry = self._current(key, now)
        start, current, previous = entry
        weight = 1.0 - (now - start) / self.window_secs
        if previous * weight + current < self.limit:
            entry[1] = current + 1
            self._limited.discard(key)
            return 0.0
        self._refuse(key)
        return self._wait(start, current, previous, now)

    def _refuse(self, key: object) -> None:
        self.refused += 1
        if key not in self._limited:  # once per episode, not per request
            self._limited.add(key)
            log.info(
                "%s %s reached the rate limit (%d requests per %g s); refusing with 429",
                self.what,
                key,
                self.limit,
                self.window_secs,
            )

    def _wait(self, start: float, current: float, previous: float, now: float) -> float:
        """When `previous * weight + current < limit` holds again."""
        window = self.window_secs
        if current < self.limit:
            # Within this window, once enough of the previous one has slid out.
            at = start + window * (1.0 - (self.limit - current) / previous)
        else:
            # In the next window, once enough of this one has slid out.
            at = start + window + window * (1.0 - self.limit / current)
        # A hair past the boundary, where the estimate equals the limit.
        return max(at - now, 0.0) + 1e-6

    def forget_idle(self, now: float) -> int:
        """Drop the keys with no request for two windows; returns how many."""
        idle = [
            key for key, entry in self._windows.items() if now - entry[0] >= 2 * self.window_secs
        ]
        for key in idle:
            del self._windows[key]
            self._limited.discard(key)
        return len(idle)


def limiters(settings: Settings) -> tuple[RateLimiter | None, RateLimiter | None]:
    """The server's limiters, None where off: requests per user
    (EVENTQ_RATE_LIMIT_REQUESTS) and failed authentications per address
    (EVENTQ_AUTH_FAILURE_LIMIT), both over EVENTQ_RATE_LIMIT_WINDOW_SECS."""
    window = settings.rate_limit_window_secs
    requests = settings.rate_limit_requests
    failures = settings.auth_failure_limit
    return (
        RateLimiter(requests, window) if requests > 0 else None,
        RateLimiter(failures, window, "address") if failures > 0 else None,
    )
