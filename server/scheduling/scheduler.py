"""Sending scheduled messages when they are due (docs/architecture.md,
"Scheduled messages").

The table is the scheduler's state (generation/actions/messages/scheduled.py):
nothing is held in memory that a restart could lose, so a message scheduled
before a stop or a crash is sent after the next start. Every shard runs a
scheduler on its IO loop; each message is claimed with FOR UPDATE SKIP
LOCKED by the one that sends it, so none is sent twice.

When to look: a timer at the next due time, read from the table, and a
re-check every `RECHECK_SECS`. The re-check is how a shard learns of a
message scheduled or moved elsewhere (by another shard, the command line or
a backend): any writer is covered with no channel between them, at the cost
of one read of an index's first entry per second per shard, the same
cadence as the event log's tail. A message is sent at most about a second
after its time (Zulip's worker looks once a minute).

Never blocks the loop: every query awaits the pooled connection.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from prometheus_client import CollectorRegistry, Counter
from tornado.ioloop import PeriodicCallback

from generation.actions.base import ActionContext, EventSink
from generation.actions.messages import deliver_due_scheduled_message, seconds_until_due
from server.database.db import Database, DatabaseUnavailable

log = logging.getLogger("eventq.scheduler")

# How often the table is read for the next due time (see the docstring).
RECHECK_SECS = 1.0
# Messages sent per pass, one transaction each: a backlog (after downtime,
# or thousands scheduled for the same minute) drains at up to 100 per
# re-check per shard instead of holding the loop and a pooled connection
# until it is gone; clients' requests interleave with it meanwhile.
MAX_PER_PASS = 100


class Scheduler:
    """One process's scheduler: `start()` on the IO loop, `await stop()` at
    shutdown. Every method runs on the IO loop."""

    def __init__(
        self,
        db: Database,
        sink: EventSink,
        registry: CollectorRegistry,
        *,
        recheck_secs: float = RECHECK_SECS,
        max_per_pass: int = MAX_PER_PASS,
    ):
        self.db = db
        self.sink = sink
        self.recheck_secs = recheck_secs
        self.max_per_pass = max_per_pass
        self.sent = Counter(
            "eventq_scheduled_messages",
            "Due scheduled messages this process handled, by outcome (sent; failed: the"
            " sender was told, as Zulip's `failed`)",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("sent", "failed"):
            self.sent.labels(outcome)
        self._periodic: PeriodicCallback | None = None
        # The wake-up at the next due time, when it is nearer than the next
        # re-check; at most one.
        self._wakeup: asyncio.TimerHandle | None = None
        # The look (and the pass it may start) in progress; at most one, so
        # that a pass never races this process's next one.
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # Whether the last read failed: an outage is logged once, not at
        # every re-check.
        self._unreachable = False

    def start(self) -> None:
        self._periodic = PeriodicCallback(self._look_soon, self.recheck_secs * 1000)
        self._periodic.start()
        self._look_soon()

    async def stop(self) -> None:
        """No more looks; the message being sent, if any, is finished (its
        events go out before the queues are saved)."""
        self._stopping = True
        if self._periodic is not None:
            self._periodic.stop()
        if self._wakeup is not None:
            self._wakeup.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def _look_soon(self) -> None:
        """The timers' callback: look now, unless a look is in progress."""
        if self._stopping or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        try:
            async with self.db.connection() as conn:
                due_in = await seconds_until_due(conn)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            if not self._unreachable:
                log.warning("cannot read the scheduled messages (%s); trying every second", exc)
            self._unreachable = True
            return
        if self._unreachable:
            log.info("reading the scheduled messages again")
            self._unreachable = False
        if due_in is None:
            return
        if due_in > 0:
            if due_in < self.recheck_secs:
                self._wake_in(due_in)
            return
        if await self._pass() == self.max_per_pass:
            # More may be due: the next pass after the loop's other work.
            self._wake_in(0)

    def _wake_in(self, secs: float) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup = asyncio.get_running_loop().call_later(secs, self._look_soon)

    async def _pass(self) -> int:
        """Send due messages, oldest first, until none is due (or another
        server holds the rest), at most `max_per_pass`; returns how many
        were handled."""
        handled = 0
        while handled < self.max_per_pass and not self._stopping:
            try:
                async with self.db.connection() as conn:
                    attempt = await deliver_due_scheduled_message(ActionContext(conn, self.sink))
            except (DatabaseUnavailable, psycopg.Error) as exc:
                log.warning("cannot send scheduled messages now (%s); trying again", exc)
                break
            except Exception:
                # A bug: rolled back, so the message is due again; looked at
                # again at the next re-check, not in a tight loop.
                log.exception("sending a scheduled message failed")
                break
            if attempt is None:
                break
            handled += 1
            if attempt.failure is None:
                self.sent.labels("sent").inc()
                log.info(
                    "scheduled message %d of user %d sent as message %s",
                    attempt.scheduled_id,
                    attempt.sender_id,
                    attempt.message_id,
                )
            else:
                self.sent.labels("failed").inc()
                log.warning(
                    "scheduled message %d of user %d not sent: %s",
                    attempt.scheduled_id,
                    attempt.sender_id,
                    attempt.failure,
                )
        return handled
