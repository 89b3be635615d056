"""Queue definitions journaled at register, so that a queue made after the
last checkpoint is rebuilt after a crash too.

Each register writes one row (the queue as a checkpoint saves it, with the
stream position its contents are complete to) after the client has its
answer: register's latency does not include it, and a crash in the few
milliseconds between the answer and the row costs that client one
`BAD_EVENT_QUEUE_ID`, as before. A queue ended soon after its row was written
has the row deleted; each checkpoint deletes the rows journaled before it
began, which it has saved. Rows are keyed by shard and state directory: a
server reads back only what it wrote.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import psycopg

from queues.client import ClientDescriptor
from server.database.db import Database, DatabaseUnavailable

log = logging.getLogger("eventq.journal")


# One journal operation: kind, queue id, time, definition (see Database.journal_apply).
Op = tuple[str, str, float, bytes]


class QueueJournal:
    """Operations are applied in the order they were made (a queue deleted
    just after register loses its row), by one writer, all those pending
    at once in one transaction."""

    def __init__(self, db: Database, key: str):
        self.db = db
        self.key = key
        # Queues journaled since the last checkpoint began.
        self._recent: set[str] = set()
        self._pending: list[Op] = []
        self._writer: asyncio.Task[None] | None = None
        self._warned = False
        self.written = 0

    def record(self, client: ClientDescriptor, position: int, now: float, wall: float) -> None:
        """Journal `client` as it is now, complete up to `position`."""
        body = orjson.dumps(
            client.to_dict(now, embed=orjson.Fragment) | {"stream_position": position}
        )
        self._recent.add(client.queue_id)
        self._add(("write", client.queue_id, wall, body))

    def ended(self, queue_id: str) -> None:
        if queue_id in self._recent:
            self._recent.discard(queue_id)
            self._add(("delete", queue_id, 0.0, b""))

    def checkpoint_began(self) -> None:
        self._recent.clear()

    def checkpoint_saved(self, began: float) -> None:
        """The checkpoint begun at wall time `began` is on disk."""
        self._add(("trim", "", began, b""))

    async def since(self, began: float) -> list[dict[str, Any]]:
        """The queues journaled at or after `began` (an unreadable row is skipped)."""
        try:
            rows = await self.db.journal_since(self.key, began)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log.error("cannot read the queue journal (%s): queues registered since the"
                      " last checkpoint are lost", exc)  # fmt: skip
            return []
        definitions = []
        for row in rows:
            try:
                definition = orjson.loads(row)
            except orjson.JSONDecodeError:
                log.error("unreadable queue journal row skipped")
                continue
            if isinstance(definition, dict):
                definitions.append(definition)
        return definitions

    async def drain(self) -> None:
        """Wait until every operation made so far is applied (or failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def _add(self, op: Op) -> None:
        self._pending.append(op)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._pending:
            ops, self._pending = self._pending, []
            try:
                await self.db.journal_apply(self.key, ops)
            except (DatabaseUnavailable, psycopg.Error) as exc:
                if not self._warned:
                    log.warning(
                        "cannot write the queue journal (%s): a crash now would lose"
                        " the queues registered since the last checkpoint",
                        exc,
                    )
                    self._warned = True
                continue
            self._warned = False
            self.written += sum(1 for op in ops if op[0] == "write")
