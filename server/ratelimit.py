"""Per-user rate limiting of the API (Zulip's `api_by_user`: 200 requests per
60 s), in this process's memory.

A token bucket per user: `limit` tokens, refilled at `limit / window_secs`
per second, one per request; a burst of `limit` requests is allowed, then
one every `window_secs / limit` seconds. A refused request is answered 429
`RATE_LIMIT_HIT` with `Retry-After` (reference 1.3). With several shards each
counts what it serves; a user's event requests all end on their own shard.
Memory is bounded by the users seen within a window: `forget_idle` (on every
GC sweep) drops the buckets that have filled up again.
"""

from __future__ import annotations

import logging

log = logging.getLogger("eventq.ratelimit")


class RateLimiter:
    def __init__(self, limit: int, window_secs: float):
        self.limit = limit
        self.window_secs = window_secs
        self.rate = limit / window_secs
        # user id -> [tokens left, when they were counted]
        self._buckets: dict[int, list[float]] = {}
        # Users refused since their last allowed request (logged once).
        self._limited: set[int] = set()
        self.refused = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def hit(self, user_id: int, now: float) -> float:
        """Count a request; 0.0 if it may go on, else the seconds until one may."""
        bucket = self._buckets.get(user_id)
        if bucket is None:
            self._buckets[user_id] = [self.limit - 1.0, now]
            return 0.0
        tokens = min(float(self.limit), bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0 - 1e-9:  # float refills land a hair short of a token
            bucket[0] = max(0.0, tokens - 1.0)
            self._limited.discard(user_id)
            return 0.0
        bucket[0] = tokens
        self.refused += 1
        if user_id not in self._limited:  # once per episode, not per request
            self._limited.add(user_id)
            log.info(
                "user %d reached the rate limit (%d requests per %g s); refusing with 429",
                user_id,
                self.limit,
                self.window_secs,
            )
        return (1.0 - tokens) / self.rate

    def forget_idle(self, now: float) -> int:
        """Drop the buckets that are full again; returns how many."""
        idle = [
            user_id
            for user_id, (tokens, when) in self._buckets.items()
            if tokens + (now - when) * self.rate >= self.limit
        ]
        for user_id in idle:
            del self._buckets[user_id]
            self._limited.discard(user_id)
        return len(idle)
