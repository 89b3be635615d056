"""The event log as this process reads it: notices with a position are handed
to the queues in position order, over the contiguous prefix of complete
positions (`queues.positions.PositionReader`).

A notice above a gap waits while the gap is looked up in the event log: a
position found there was committed (its event is delivered from the log; its
own notice, if it comes, is a duplicate); a position still missing once every
transaction that was running when the gap was seen has ended (the snapshot's
xmin passed their horizon) was rolled back. A gap that stays open longer than
`gap_timeout_secs` (a writer stalled between writing and committing) is given
up on, with a warning: the events behind it are delivered, and the missing
ones still are if they come, out of order. Notices without a position (an
ephemeral event from an older producer, `EVENTQ_EVENT_LOG=0`) are delivered
as they come. The log's tail is also read every second (`read_tail`), so an
event whose notice never came (the broker was down when it was sent) is
delivered all the same.

A positioned notice whose delivery raises, and that will come again (the
consumer republishes it behind the notices that arrived after it,
server/delivery/consumer.py), stops the stream at its position: the events
released behind it wait, in position order, for its next try, so that no
queue gets them before it. The stop ends when a try succeeds (they follow
it); when its last try fails (it is dead-lettered, and skipped: they go on
without it); or, like a gap, after `gap_timeout_secs` or MAX_HELD events
behind it (they go on, and it is accepted late: its retry, or the log's
tail, delivers it out of order). Meanwhile `position` stays below it. A
failure with no try to come (a notice from the internal endpoint or the
server's own actions, an event read from the log) is raised or logged, and
the events behind it go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator

import psycopg

from generation.errors import BadNotice
from generation.notice import Notice, parse_notice
from queues.positions import PositionReader
from server.database.db import Database, DatabaseUnavailable

log = logging.getLogger("eventq.stream")

# How long a gap is left to close by itself (its notice is usually a
# millisecond or two behind the one above it: another publisher's, sent after
# its own commit) before the resolver looks at the log, and its first wait
# between two looks, doubling to the second.
FIRST_LOOK_SECS = 0.002
FIRST_WAIT_SECS = 0.001
MAX_WAIT_SECS = 0.05
# Positions read from the log per query when catching up.
CATCH_UP_PAGE = 1000
# How far below the newest logged position a fresh start accepts late events.
START_WINDOW = 10_000
# Late positions (given up on, or holes found at start) looked up in the log
# at each read of its tail, the newest first.
LATE_PAGE = 1000

# A notice and when its producer published it.
Arrival = tuple[Notice, float | None]
Deliver = Callable[[Notice, float | None], object]


def notice_from_log(position: int, body: bytes) -> Notice:
    """A logged notice with its position (`BadNotice` if the row is corrupt)."""
    return dataclasses.replace(parse_notice(body), position=position)


class EventLogReader:
    """Orders this process's positioned notices. Every method runs on the loop."""

    def __init__(
        self,
        db: Database,
        deliver: Deliver,
        *,
        gap_timeout_secs: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.db = db
        self._deliver = deliver
        # Lists that `recording()` callers fill with every notice handed to
        # the queues meanwhile (a resume reading the log, see server/durability/resume.py).
        self._recorders: list[list[Notice]] = []
        # The position being handed to the queues, while a batch released at
        # once is (`position` is already the batch's last).
        self._handing: int | None = None
        self.gap_timeout_secs = gap_timeout_secs
        self.clock = clock
        self.reader: PositionReader[Arrival] = PositionReader()
        # Missing position -> the xmax of a snapshot taken after it was missed.
        self._horizons: dict[int, int] = {}
        # The same for the late positions of the last look (`_read_late`).
        self._late_horizons: dict[int, int] = {}
        self._resolver: asyncio.Task[None] | None = None
        self._db_warned = False
        self._unanchored = False
        self.lookups = 0  # looks at the log to close a gap
        # The position of an event whose delivery raised and whose notice
        # comes again: the stream is stopped at it (see the module's
        # docstring). Everything released meanwhile waits in `_behind`, in
        # the order released; `_deadline` ends the stop. While None, `_behind`
        # is empty and `_deadline` None.
        self._stopped_at: int | None = None
        self._behind: list[tuple[int, Arrival]] = []
        self._deadline: asyncio.TimerHandle | None = None
        self.retry_stops = 0  # stops at a failed event, for stats and tests
        self.waited_for_retry = 0  # events that waited behind one

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Notice]]:
        """A list of every notice handed to the queues, in that order, from
        now until the block ends (what a queue made at its end would have
        missed; see server/durability/resume.py)."""
        recorder: list[Notice] = []
        self._recorders.append(recorder)
        try:
            yield recorder
        finally:
            self._recorders.remove(recorder)

    def _is_stopped(self) -> bool:
        return self._stopped_at is not None

    @property
    def position(self) -> int:
        """Every logged event at or below this has been delivered here."""
        stopped = self._stopped_at
        return self.reader.current if stopped is None else stopped - 1

    @property
    def handed(self) -> int:
        """Every logged event at or below this has reached the queues, even
        in the middle of handing on a batch (a gap closed, or the log's tail
        read): there `position` is the batch's last already, while a queue
        ended by one of its events never gets those behind it."""
        handing = self._handing
        return self.position if handing is None else handing

    def stats(self) -> dict[str, int]:
        reader = self.reader
        return {
            "position": reader.current,
            "held": reader.held,
            "duplicates": reader.duplicates,
            "late_arrivals": reader.late_arrivals,
            "rolled_back": reader.aborted,
            "given_up": reader.given_up,
            "lookups": self.lookups,
            "retry_stops": self.retry_stops,
            "waited_for_retry": self.waited_for_retry,
        }

    def offer(
        self, notice: Notice, published_at: float | None = None, *, will_retry: bool = False
    ) -> object:
        """A notice arrived; returns what delivering it returned, or None if it
        was not delivered now (held above a gap or behind a failed event, or
        a duplicate). An error delivering it propagates; one delivering an
        event let through behind it is logged. `will_retry`: if delivering
        it raises, the notice comes again (the consumer's retry), and the
        stream stops at it until then (see the module's docstring)."""
        if notice.position is None:
            outcome = self._deliver(notice, published_at)
            for recorder in self._recorders:
                recorder.append(notice)
            return outcome
        if self._unanchored:
            # The log could not be read at start: this position starts the stream.
            self._unanchored = False
            self.reader.current = max(self.reader.current, notice.position - 1)
        own: list[object] = []
        if notice.position == self._stopped_at:
            self._try_again(notice, published_at, own, will_retry)
        else:
            floor = self.reader.current
            released = self.reader.offer(notice.position, (notice, published_at), self.clock())
            in_order = notice.position > floor
            self._hand_on(released, notice.position, own, will_retry and in_order)
            if will_retry and not in_order and own and _transient(own[0]):
                # Late already: its retry is accepted, late as well.
                self.reader.allow_late([notice.position])
        self._resolve_soon()
        if not own:
            return None
        if isinstance(own[0], BaseException):
            raise own[0]
        return own[0]

    def _hand_on(
        self,
        released: list[tuple[int, Arrival]],
        own: int = 0,
        result: list[object] | None = None,
        stop_on_failure: bool = False,
    ) -> None:
        """Deliver `released` in order; `own`'s outcome (or error) goes to
        `result`. `stop_on_failure`: an error delivering `own`, which is in
        order and comes again, stops the stream at it."""
        if self._stopped_at is not None:
            self._behind.extend(released)
            self.waited_for_retry += len(released)
            if len(self._behind) > self.reader.max_held:
                self._give_up_retry()
            return
        try:
            for index, (position, (notice, published_at)) in enumerate(released):
                self._handing = position
                try:
                    outcome = self._deliver(notice, published_at)
                except Exception as exc:  # one bad event must not stop the ones behind it...
                    if position == own and result is not None:
                        result.append(exc)
                        if stop_on_failure and _transient(exc):
                            # ...unless it is tried again: they wait for it.
                            self._stop(position, released[index + 1 :])
                            return
                    else:
                        log.exception("event at position %d could not be delivered", position)
                    continue
                for recorder in self._recorders:
                    recorder.append(notice)
                if position == own and result is not None:
                    result.append(outcome)
        finally:
            self._handing = None

    def _stop(self, position: int, behind: list[tuple[int, Arrival]]) -> None:
        """Stop the stream at `position`, whose delivery failed and whose
        notice comes again; `behind` was released after it."""
        self._stopped_at = position
        self._behind = [*behind, *self._behind]
        if self._deadline is None:  # its first failure: the stop is timed from it
            self.retry_stops += 1
            self.waited_for_retry += len(behind)
            self._deadline = asyncio.get_running_loop().call_later(
                self.gap_timeout_secs, self._give_up_retry
            )

    def _try_again(
        self, notice: Notice, published_at: float | None, result: list[object], will_retry: bool
    ) -> None:
        """The notice of the event the stream is stopped at came again."""
        position = self._stopped_at
        assert position is not None
        assert notice.position == position
        behind, self._behind = self._behind, []
        self._stopped_at = None
        self._hand_on([(position, (notice, published_at)), *behind], position, result, will_retry)
        # Read through a call: `_hand_on` may have stopped the stream again,
        # which the type checker (and the compiled module, queues/compiled.py)
        # would not see after the assignment above.
        if not self._is_stopped():
            self._end_stop()
            if result and isinstance(result[0], BaseException):
                log.error(
                    "event log position %d failed its last try (%s) and is skipped; the %d"
                    " events held behind it are delivered now",
                    position,
                    result[0],
                    len(behind),
                )

    def _give_up_retry(self) -> None:
        """The stop lasted `gap_timeout_secs`, or too many events wait: they
        are delivered, and the failed event is accepted late."""
        position = self._stopped_at
        if position is None:
            return
        behind, self._behind = self._behind, []
        self._stopped_at = None
        self._end_stop()
        self.reader.allow_late([position])
        log.warning(
            "event log position %d failed and was not delivered by a retry (%s); the %d events"
            " held behind it are delivered now, and it will be if it comes",
            position,
            "too many events held"
            if len(behind) > self.reader.max_held
            else f"{self.gap_timeout_secs:.1f} s",
            len(behind),
        )
        self._hand_on(behind)

    def _end_stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _resolve_soon(self) -> None:
        if self.reader.held and (self._resolver is None or self._resolver.done()):
            self._resolver = asyncio.get_running_loop().create_task(self._resolve())

    async def read_tail(self) -> int:
        """Offer the logged events above the stream position, as if their
        notices had come: an event whose notice was never published (the
        broker was down when it was sent) or was lost still arrives. Left to
        the gap resolver while events are held. Returns how many were new.
        Late positions are looked up too (`_read_late`)."""
        await self._read_late()
        if self.reader.held or self._unanchored:
            return 0
        try:
            rows = await self.db.log_after(self.reader.current, CATCH_UP_PAGE)
        except (DatabaseUnavailable, psycopg.Error):
            return 0  # the resolver and the next read say so when it matters
        before = self.reader.current
        for position, body in rows:
            try:
                notice = notice_from_log(position, body)
            except BadNotice:
                continue  # found again, and logged, by the gap resolver
            self._hand_on(self.reader.offer(position, (notice, None), self.clock()))
        self._resolve_soon()
        return self.reader.current - before

    async def _read_late(self) -> int:
        """Look for the newest LATE_PAGE late positions in the log. Only its
        own notice could deliver a late position otherwise, and a notice
        with a position is transient in RabbitMQ (a broker restart loses
        it): one found in the log is delivered now, out of order, as that
        notice would have been; one still missing once every transaction
        running when it was first looked for has ended never will be, and
        is no longer accepted. Returns how many were delivered."""
        reader = self.reader
        page = reader.newest_late(LATE_PAGE)
        if not page:
            self._late_horizons.clear()
            return 0
        try:
            xmin, xmax, rows = await self.db.log_lookup(page)
        except (DatabaseUnavailable, psycopg.Error):
            return 0  # looked for again at the next read
        found, never, unreadable = _examine(page, xmin, xmax, rows, self._late_horizons)
        reader.forget_late(never + unreadable)
        # Kept for this page's positions only (a position also leaves the late
        # set when its notice comes): bounded by LATE_PAGE.
        looked = set(page)
        self._late_horizons = {p: h for p, h in self._late_horizons.items() if p in looked}
        if found:
            log.info(
                "event log: %d events given up on were found in the log and are delivered"
                " now, out of order (positions %s)",
                len(found),
                _ranges(sorted(found)),
            )
        self._hand_on(reader.resolve(found, [], self.clock()))
        return len(found)

    async def stop(self) -> None:
        # What waits behind a failed event is in the log above `position`:
        # read again at the next start.
        self._end_stop()
        if self._resolver is not None:
            self._resolver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resolver

    async def _resolve(self) -> None:
        # Most gaps close by themselves when the notice below arrives: give it
        # a moment before costing the database a look (and the notice a parse
        # more, when the look finds the event first).
        await asyncio.sleep(FIRST_LOOK_SECS)
        wait = FIRST_WAIT_SECS
        reader = self.reader
        while reader.held:
            missing = reader.missing()
            released: list[tuple[int, Arrival]] = []
            if missing:
                released = await self._look_up(missing)
            self._hand_on(released)
            if released:
                wait = FIRST_WAIT_SECS
                continue
            now = self.clock()
            since = reader.waiting_since
            if reader.overflowing or (since is not None and now - since >= self.gap_timeout_secs):
                gap = reader.missing()
                skipped, released = reader.give_up(now)
                for position in skipped:
                    self._horizons.pop(position, None)
                log.warning(
                    "gave up waiting for event log position%s %s after %.1f s (%s); %d events"
                    " held behind them are delivered now, and the missing ones will be if"
                    " they come",
                    "s" if len(skipped) > 1 else "",
                    _ranges(skipped or gap),
                    now - (since or now),
                    "too many events held"
                    if reader.overflowing
                    else "a transaction took them and has neither committed nor rolled back",
                    len(released),
                )
                self._hand_on(released)
                wait = FIRST_WAIT_SECS
                continue
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_WAIT_SECS)

    async def _look_up(self, missing: list[int]) -> list[tuple[int, Arrival]]:
        self.lookups += 1
        try:
            xmin, xmax, rows = await self.db.log_lookup(missing)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            if not self._db_warned:
                log.warning("cannot read the event log to fill a gap (%s); waiting", exc)
                self._db_warned = True
            return []
        self._db_warned = False
        # An unreadable row stays missing: the gap is given up on in time.
        found, never, _ = _examine(missing, xmin, xmax, rows, self._horizons)
        return self.reader.resolve(found, never, self.clock())

    async def catch_up(
        self, start: int, before: Callable[[int], None] | None = None
    ) -> tuple[int, int]:
        """Deliver every logged event above `start` (the position saved queues
        were complete up to), in order; `before(p)` runs before the event at
        `p` is delivered (it brings back the queues saved at lower
        positions). Holes in the log are accepted late. Returns (events
        delivered, positions accepted late)."""
        reader = self.reader
        reader.current = start
        delivered = late = 0
        while True:
            rows = await self.db.log_after(reader.current, CATCH_UP_PAGE)
            for position, body in rows:
                late += len(reader.skip_to(position))
                if before is not None:
                    before(position)
                try:
                    notice = notice_from_log(position, body)
                except BadNotice as exc:
                    log.error("event log position %d is unreadable (%s); skipped", position, exc)
                    reader.current = position
                    continue
                delivered += 1
                self._hand_on(reader.offer(position, (notice, None), self.clock()))
            if len(rows) < CATCH_UP_PAGE:
                return delivered, late

    async def start_fresh(self) -> int:
        """With no saved queues: start at the newest logged position, accepting
        late the holes just below it (transactions still committing).
        Returns that position. If the log cannot be read, the first
        positioned notice to arrive starts the stream."""
        try:
            _, newest = await self.db.log_bounds()
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log.warning("cannot read the event log at start (%s): the first event starts it", exc)
            self._unanchored = True
            return 0
        self.reader.current = max(0, newest - START_WINDOW)
        await self.catch_up_positions_only(newest)
        return newest

    async def catch_up_positions_only(self, newest: int) -> None:
        """Move to `newest` without delivering (no queue can want the events),
        accepting late the positions not logged yet."""
        reader = self.reader
        while reader.current < newest:
            rows = await self.db.log_after(reader.current, CATCH_UP_PAGE)
            for position, _ in rows:
                reader.skip_to(position)
                reader.current = position
            if len(rows) < CATCH_UP_PAGE:
                break


def _examine(
    positions: list[int], xmin: int, xmax: int, rows: dict[int, bytes], horizons: dict[int, int]
) -> tuple[dict[int, Arrival], list[int], list[int]]:
    """What one look at the log (`Database.log_lookup`: its snapshot's xmin
    and xmax, and the rows found) says of `positions`: (found, with their
    notices; never to come; logged but unreadable, each logged). A position
    not found is never to come once every transaction running when it was
    first looked for has ended: `horizons` keeps that first look's xmax,
    and drops the positions this look settles."""
    found: dict[int, Arrival] = {}
    never: list[int] = []
    unreadable: list[int] = []
    for position in positions:
        body = rows.get(position)
        if body is not None:
            horizons.pop(position, None)
            try:
                found[position] = (notice_from_log(position, body), None)
            except BadNotice as exc:
                log.error("event log position %d is unreadable (%s); skipped", position, exc)
                unreadable.append(position)
        elif xmin >= horizons.setdefault(position, xmax):
            del horizons[position]
            never.append(position)
    return found, never, unreadable


def _transient(outcome: object) -> bool:
    """Whether a delivery's outcome is an error that another try may not meet
    (a `BadNotice` would fail the same way)."""
    return isinstance(outcome, Exception) and not isinstance(outcome, BadNotice)


def _ranges(positions: list[int]) -> str:
    if len(positions) <= 5:
        return ", ".join(map(str, positions))
    return f"{positions[0]}..{positions[-1]} ({len(positions)})"
