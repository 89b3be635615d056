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
from server.db import Database, DatabaseUnavailable

log = logging.getLogger("eventq.journal")


class QueueJournal:
    def __init__(self, db: Database, key: str):
        self.db = db
        self.key = key
        # Queues journaled since the last checkpoint began.
        self._recent: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned = False
        self.written = 0

    def record(self, client: ClientDescriptor, position: int, now: float, wall: float) -> None:
        """Journal `client` as it is now, complete up to `position`."""
        body = orjson.dumps(client.to_dict(now) | {"stream_position": position})
        self._recent.add(client.queue_id)
        self._spawn(self._write(client.queue_id, wall, body))

    def ended(self, queue_id: str) -> None:
        if queue_id in self._recent:
            self._recent.discard(queue_id)
            self._spawn(self._run(self.db.journal_delete([queue_id])))

    def checkpoint_began(self) -> None:
        self._recent.clear()

    def checkpoint_saved(self, began: float) -> None:
        """The checkpoint begun at wall time `began` is on disk."""
        self._spawn(self._run(self.db.journal_trim(self.key, began)))

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
        """Wait for the writes under way (at a graceful stop)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, queue_id: str, wall: float, body: bytes) -> None:
        if await self._run(self.db.journal_write(queue_id, self.key, wall, body)):
            self.written += 1

    async def _run(self, query: Any) -> bool:
        try:
            await query
        except (DatabaseUnavailable, psycopg.Error) as exc:
            if not self._warned:
                log.warning("cannot write the queue journal (%s): a crash now would lose the"
                            " queues registered since the last checkpoint", exc)  # fmt: skip
                self._warned = True
            return False
        self._warned = False
        return True
