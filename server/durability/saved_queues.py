"""The server's queues across restarts: saved at a graceful stop,
checkpointed meanwhile for a crash (server/durability/persistence.py for the
files), and journaled when registered between checkpoints
(server/durability/journal.py). server/durability/restore.py brings them back
at start, with the events they missed from the event log
(server/delivery/eventlog.py).

`EventServer` keeps the timers and the order of its lifecycle; this is what
each step does with the files.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from queues.client import ClientDescriptor, QueueOptions
from queues.payload import PayloadTable
from queues.registry import QueueRegistry
from server.config import Settings
from server.database.db import Database
from server.delivery.consumer import NoticeConsumer
from server.delivery.eventlog import EventLogReader
from server.durability import persistence
from server.durability.floors import StreamFloors
from server.durability.journal import QueueJournal
from server.version import ZULIP_FEATURE_LEVEL, ZULIP_MERGE_BASE, ZULIP_VERSION

# The server's logger: these messages are the server's.
log = logging.getLogger("eventq.server")

# A checkpoint's longest stretch on the IO loop at a time. 1 ms: a slice is
# sometimes stretched by a few ms it does not control (the process descheduled
# on a busy machine, another thread's turn with the GIL); at 2 ms one such
# slice took 5.5 ms in nine measured (stream_costs.py).
CHECKPOINT_SLICE_SECS = 0.001


class SavedQueues:
    """Restores, saves and checkpoints a server's queues. Every method runs
    on the IO loop."""

    def __init__(
        self,
        settings: Settings,
        registry: QueueRegistry,
        stream: EventLogReader,
        db: Database,
        journal: QueueJournal,
        floors: StreamFloors,
        consumer: NoticeConsumer | None,
        *,
        clock: Callable[[], float],
        server_generation: int,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.eventlog = stream
        self.db = db
        self.journal = journal
        self.floors = floors
        self.consumer = consumer
        self.clock = clock
        self.server_generation = server_generation
        # True while a checkpoint is being taken.
        self.checkpointing = False
        # The last checkpoint: queues saved, its time, its longest stretch on the loop.
        self.last_checkpoint: dict[str, float] = {}
        # The lowest position the last checkpoint's queues need from the log.
        self.checkpoint_floor: int | None = None

    def restart_event(self) -> dict[str, Any]:
        """The event restored queues get: the server restarted (Zulip's)."""
        return {
            "type": "restart",
            "zulip_version": ZULIP_VERSION,
            "zulip_merge_base": ZULIP_MERGE_BASE,
            "zulip_feature_level": ZULIP_FEATURE_LEVEL,
            "server_generation": self.server_generation,
        }

    def journal_queue(self, client: ClientDescriptor) -> None:
        """Journal a queue just registered, as it is now; only when
        checkpoints are on, the journal being their complement."""
        if self.settings.checkpoint_secs > 0:
            self.journal.record(client, self.eventlog.position, self.clock(), time.time())

    def _snapshot_extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = {
            "stream_position": self.eventlog.position,
            "late_positions": self.eventlog.reader.late()[-10_000:],
        }
        if self.consumer is not None:
            extras["notice_ids"] = self.consumer.recent_ids()
        return extras

    async def save_queues(self) -> None:
        path = persistence.queue_file(self.settings.state_dir, self.settings.shard)
        await self.journal.drain()
        await self.floors.drain()
        began = time.time()
        started = time.monotonic()
        snapshot = self.registry.snapshot(self.clock()) | self._snapshot_extras()
        snapshot["journal_from"] = began
        loop = asyncio.get_running_loop()
        size = await loop.run_in_executor(
            None, persistence.save, path, snapshot, self.server_generation
        )
        self.journal.checkpoint_saved(began)
        await self.journal.drain()
        # The graceful save supersedes the last checkpoint.
        checkpoint = persistence.checkpoint_file(self.settings.state_dir, self.settings.shard)
        await loop.run_in_executor(None, lambda: checkpoint.unlink(missing_ok=True))
        log.info(
            "saved %d queues to %s (%d bytes, %.0f ms)",
            len(snapshot["queues"]),
            path,
            size,
            (time.monotonic() - started) * 1000,
        )

    async def checkpoint(self, slice_secs: float = CHECKPOINT_SLICE_SECS) -> float:
        """Save every queue with the stream position it is complete up to, for
        recovery after a crash. Queues are copied a slice at a time (at most
        `slice_secs` of the loop per iteration), each with the position of
        its own slice; the file is written off the loop. Returns the seconds
        it took."""
        if self.checkpointing:
            return 0.0
        self.checkpointing = True
        started = time.monotonic()
        slice_started = time.perf_counter()
        try:
            floor = self.eventlog.position
            began = time.time()
            self.journal.checkpoint_began()
            clients = list(self.registry)
            saved: list[bytes] = []
            option_forms: dict[QueueOptions, dict[str, Any]] = {}
            table = PayloadTable()
            index = 0
            longest = busy = time.perf_counter() - slice_started
            while index < len(clients):
                slice_started = time.perf_counter()
                slice_end = slice_started + slice_secs
                now, position = self.clock(), self.eventlog.position
                while index < len(clients) and time.perf_counter() < slice_end:
                    client = clients[index]
                    index += 1
                    if client in self.registry:
                        saved.append(
                            orjson.dumps(
                                client.to_dict(now, option_forms, orjson.Fragment, table)
                                | {"stream_position": position}
                            )
                        )
                took_slice = time.perf_counter() - slice_started
                longest = max(longest, took_slice)
                busy += took_slice
                if index < len(clients):
                    await asyncio.sleep(0)
            slice_started = time.perf_counter()
            body = self.registry.snapshot_without_queues() | self._snapshot_extras()
            body["journal_from"] = began
            took_slice = time.perf_counter() - slice_started
            longest = max(longest, took_slice)
            busy += took_slice
            path = persistence.checkpoint_file(self.settings.state_dir, self.settings.shard)

            def write() -> float:
                """The file, off the loop (the table of payloads too: one
                event to each of 5,000 queues of their own makes 5,000);
                the thread's CPU time for it."""
                began = time.thread_time()
                body["payloads"] = table.saved(orjson.Fragment)
                persistence.save_encoded(path, body, saved, self.server_generation)
                return time.thread_time() - began

            busy += await asyncio.get_running_loop().run_in_executor(None, write)
            self.checkpoint_floor = floor
            self.journal.checkpoint_saved(began)
        finally:
            self.checkpointing = False
        took = time.monotonic() - started
        self.last_checkpoint = {
            "queues": len(saved),
            "took_ms": round(took * 1000, 3),
            "longest_slice_ms": round(longest * 1000, 3),
            # Its CPU time: its slices on the loop and the file's writing
            # (without the waits for the disk): what CHECKPOINT_SHARE counts.
            "cpu_ms": round(busy * 1000, 3),
        }
        log.debug("checkpoint of %d queues in %.0f ms", len(saved), took * 1000)
        return took
