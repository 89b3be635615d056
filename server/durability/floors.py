"""Each user's stream floor: the lowest stream position a register gave them
within the log's retention, which `resume_from` may not go below
(server/durability/resume.py; the table is deploy/migrations/0012_event_log_recipients.sql).

A register's floor is written after the client has its answer, with those of
the registers answered meanwhile, in one statement: register's latency does
not include it. One not written (the database away, a crash just after the
answer) costs that client a register with its state when it next resumes
(RESUME_POSITION_UNKNOWN), never a resume it should not have.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from server.database.db import Database, DatabaseUnavailable

log = logging.getLogger("eventq.register")

# Users whose floors wait at most, beyond which the newest are dropped (the
# database away for long under a flood of registers): each costs its user a
# full register later, and memory stays bounded.
MAX_PENDING = 100_000


class StreamFloors:
    """Batches floors to write; IO loop only."""

    def __init__(self, db: Database):
        self.db = db
        self._pending: dict[int, int] = {}
        # The batch being written.
        self._writing: dict[int, int] = {}
        self._writer: asyncio.Task[None] | None = None
        self._warned = False
        self.written = 0
        self.dropped = 0

    def record(self, user_id: int, position: int) -> None:
        """A register gave `user_id` the stream position `position`."""
        pending = self._pending
        if user_id in pending:
            pending[user_id] = min(pending[user_id], position)
        elif len(pending) < MAX_PENDING:
            pending[user_id] = position
        else:
            self.dropped += 1
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    def unwritten(self, user_id: int) -> int | None:
        """The lowest floor recorded for `user_id` and not yet written."""
        floors = [f.get(user_id) for f in (self._pending, self._writing)]
        return min((f for f in floors if f is not None), default=None)

    async def lowest(self, user_id: int) -> int | None:
        """The lowest stream position registers gave `user_id`, those of
        this process's registers not yet written included (not waited for:
        under a flood of registers the writer is never done). Looked at
        before the read too: a floor whose write commits while the read
        runs is in neither the read's answer nor, once written, here."""
        before = self.unwritten(user_id)
        written = await self.db.stream_floor(user_id)
        floors = [f for f in (before, written, self.unwritten(user_id)) if f is not None]
        return min(floors, default=None)

    async def drain(self) -> None:
        """Wait until every floor recorded so far is written (or failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        while self._pending:
            floors, self._pending = self._pending, {}
            self._writing = floors
            try:
                await self.db.record_stream_floors(floors)
            except (DatabaseUnavailable, psycopg.Error) as exc:
                if not self._warned:
                    log.warning(
                        "cannot record users' stream floors (%s): %d users will register"
                        " with their state instead of resuming",
                        exc,
                        len(floors),
                    )
                    self._warned = True
                self.dropped += len(floors)
            else:
                self._warned = False
                self.written += len(floors)
            finally:
                self._writing = {}
