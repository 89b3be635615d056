"""Stream positions as one reader sees them (docs/architecture.md, "Delivery";
Synapse's streams and its `MultiWriterIdGenerator`).

Every logged event has a position from one sequence. Writers commit out of
order, and a writer that rolls back leaves a hole, so a reader cannot take
"the highest position seen" as the point up to which it has everything.
`PositionReader` keeps `current`: every position at or below it is complete
(its event was handed on, or it is known never to come). An event above the
next expected position is held until the positions below it are complete;
the caller learns which ones are missing (`missing`), looks them up in the
log (`resolve`: found, or known never to commit), and, after a bounded wait,
gives up on them (`give_up`), which lets the held events through and keeps
the skipped positions as "late": if one does arrive, it is handed on then,
out of order, rather than dropped.

Pure and single-threaded; time is a parameter.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")

# Events held above a gap before the reader gives up waiting on it.
MAX_HELD = 10_000
# Positions given up on (or unknown at start) whose late arrival is still
# accepted; the oldest are forgotten first.
MAX_LATE = 100_000


class PositionReader(Generic[T]):
    """The contiguous prefix of one stream, with what is held above it."""

    def __init__(self, current: int = 0, *, max_held: int = MAX_HELD, max_late: int = MAX_LATE):
        if current < 0:
            raise ValueError("a position is never negative")
        self.current = current
        self.max_held = max_held
        self.max_late = max_late
        self._held: dict[int, T] = {}
        # Positions above `current` known never to carry an event (rolled back).
        self._done: set[int] = set()
        self._late: OrderedDict[int, None] = OrderedDict()
        self._top = current  # the highest position held or done
        # When the reader started waiting on the gap at current + 1.
        self.waiting_since: float | None = None
        # Counters, for stats and tests.
        self.duplicates = 0
        self.late_arrivals = 0
        self.aborted = 0
        self.given_up = 0

    def __repr__(self) -> str:
        return f"PositionReader(current={self.current}, held={sorted(self._held)})"

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def overflowing(self) -> bool:
        return len(self._held) > self.max_held

    def late(self) -> list[int]:
        """Positions at or below `current` whose event may still arrive."""
        return list(self._late)

    def newest_late(self, limit: int) -> list[int]:
        """The `limit` most recently accepted late positions, newest first."""
        return list(itertools.islice(reversed(self._late), limit))

    def forget_late(self, positions: Iterable[int]) -> None:
        """These late positions are known never to come (their transaction
        ended without them): stop accepting them."""
        for position in positions:
            self._late.pop(position, None)

    def offer(self, position: int, item: T, now: float) -> list[tuple[int, T]]:
        """An event at `position` arrived; returns what may be handed on now,
        in position order (often just this one, or nothing: a duplicate, or
        held above a gap)."""
        if position <= self.current:
            if position in self._late:
                del self._late[position]
                self.late_arrivals += 1
                return [(position, item)]
            self.duplicates += 1
            return []
        if position in self._held or position in self._done:
            self.duplicates += 1
            return []
        self._held[position] = item
        self._top = max(self._top, position)
        return self._advance(now)

    def missing(self, limit: int = 1000) -> list[int]:
        """Positions below the highest held one that are neither held nor
        known to be done, lowest first (at most `limit`)."""
        found: list[int] = []
        position = self.current + 1
        while position < self._top and len(found) < limit:
            if position not in self._held and position not in self._done:
                found.append(position)
            position += 1
        return found

    def resolve(
        self, found: Mapping[int, T], never: Iterable[int], now: float
    ) -> list[tuple[int, T]]:
        """What a look at the log said about missing positions: `found` were
        committed (their events, read from the log), `never` will not be
        (rolled back). Returns what may be handed on now."""
        late: list[tuple[int, T]] = []
        for position, item in found.items():
            if position in self._late:  # given up on, and committed after all
                del self._late[position]
                self.late_arrivals += 1
                late.append((position, item))
            elif position > self.current and position not in self._held:
                self._held[position] = item
                self._top = max(self._top, position)
        for position in never:
            if (
                position > self.current
                and position not in self._held
                and position not in self._done
            ):
                self._done.add(position)
                self._top = max(self._top, position)
                self.aborted += 1
        return late + self._advance(now)

    def give_up(self, now: float) -> tuple[list[int], list[tuple[int, T]]]:
        """Stop waiting for the missing positions below the lowest held event:
        they become late (accepted if they come) and the held events behind
        them are let through. Returns (positions given up on, events let through)."""
        if not self._held:
            return [], []
        lowest = min(self._held)
        skipped = [p for p in range(self.current + 1, lowest) if p not in self._done]
        self._done.update(skipped)
        self.given_up += len(skipped)
        self.allow_late(skipped)
        return skipped, self._advance(now)

    def skip_to(self, position: int) -> list[int]:
        """Move `current` to just below `position` (reading the log from the
        start, where a hole is a position not logged yet): the positions
        passed over become late. Returns them. Only with nothing held."""
        if self._held:
            raise RuntimeError("skip_to with events held")
        skipped = [p for p in range(self.current + 1, position) if p not in self._done]
        self.allow_late(skipped)
        self._done.clear()
        self.current = max(self.current, position - 1)
        self._top = max(self._top, self.current)
        return skipped

    def allow_late(self, positions: Iterable[int]) -> None:
        """Accept these positions (at or below `current`) if they arrive later."""
        for position in positions:
            self._late[position] = None
        while len(self._late) > self.max_late:
            self._late.popitem(last=False)

    def _advance(self, now: float) -> list[tuple[int, T]]:
        released: list[tuple[int, T]] = []
        held, done = self._held, self._done
        start = self.current
        while True:
            following = self.current + 1
            if following in held:
                released.append((following, held.pop(following)))
            elif following in done:
                done.remove(following)
            else:
                break
            self.current = following
        if not held and not done:
            self.waiting_since = None
        elif self.current != start or self.waiting_since is None:
            # A new gap (or the first): its wait starts now.
            self.waiting_since = now
        return released
