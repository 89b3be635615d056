"""The server's queues across restarts: restored at start, saved at a
graceful stop, checkpointed meanwhile for a crash (server/durability/persistence.py for
the files, server/durability/journal.py for the queues registered between checkpoints,
server/delivery/eventlog.py for the events a restored queue missed).

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
import psycopg

from queues.client import ClientDescriptor, QueueOptions
from queues.registry import QueueRegistry
from server.config import Settings
from server.database.db import Database, DatabaseUnavailable
from server.delivery.consumer import NoticeConsumer
from server.delivery.eventlog import EventLogReader
from server.durability import persistence
from server.durability.floors import StreamFloors
from server.durability.journal import QueueJournal

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
        restart_event: Callable[[], dict[str, Any]],
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
        self._restart_event = restart_event
        # True while a checkpoint is being taken.
        self.checkpointing = False
        # The last checkpoint: queues saved, its time, its longest stretch on the loop.
        self.last_checkpoint: dict[str, float] = {}
        # The lowest position the last checkpoint's queues need from the log.
        self.checkpoint_floor: int | None = None

    async def restore_queues(self) -> None:
        """Bring back the queues of the last run: those saved by a graceful
        stop or, after a crash, those of the last checkpoint; then deliver the
        logged events each queue missed since it was saved."""
        state_dir, shard = self.settings.state_dir, self.settings.shard
        path = persistence.queue_file(state_dir, shard)
        checkpoint = persistence.checkpoint_file(state_dir, shard)
        loop = asyncio.get_running_loop()
        removed = await loop.run_in_executor(
            None, persistence.remove_stale_temporaries, [path, checkpoint]
        )
        for tmp in removed:
            log.info("removed %s, left by a run killed while it saved its queues", tmp)
        data: dict[str, Any] | None = None
        for candidate in (path, checkpoint):
            try:
                data = await loop.run_in_executor(None, persistence.load, candidate)
            except persistence.CorruptSnapshot as exc:
                kept = await loop.run_in_executor(None, persistence.quarantine, candidate)
                log.error("%s; starting with no queues from it (the file is kept as %s)", exc, kept)
                continue
            if data is not None:
                path = candidate
                break
        if data is None:
            log.info("no saved queues at %s", path)
            await self._start_stream()
            return
        crashed = path == checkpoint
        if crashed:
            age = time.time() - float(data.get("saved_at", time.time()))
            log.warning(
                "the last run did not stop cleanly: rebuilding its queues from the checkpoint"
                " of %.1f s before (%s) and the event log",
                age,
                path,
            )
        try:
            clients, errors, restarted = await self._load_saved(data, crashed)
        except ValueError as exc:
            kept = await loop.run_in_executor(None, persistence.quarantine, path)
            log.error(
                "saved queues in %s unreadable (%s); starting with no queues (kept as %s)",
                path,
                exc,
                kept,
            )
            await self._start_stream()
            return
        if errors:
            kept = await loop.run_in_executor(None, persistence.keep_copy, path)
            for error in errors[:20]:
                log.error("%s; skipped", error)
            log.error(
                "%d saved queues could not be restored (their clients will re-register);"
                " the file is kept as %s",
                len(errors),
                kept,
            )
        if self.consumer is not None:
            self.consumer.remember(data.get("notice_ids"))
        if crashed:
            await loop.run_in_executor(None, checkpoint.unlink)
        else:
            last = persistence.last_file(state_dir, shard)
            await loop.run_in_executor(None, path.replace, last)
            path = last
        log.info(
            "restored %d queues (kept as %s); restart event sent to %d",
            len(clients),
            path,
            restarted,
        )

    async def _start_stream(self) -> None:
        position = await self.eventlog.start_fresh()
        log.info("event log: starting at position %d", position)

    async def _load_saved(
        self, data: dict[str, Any], crashed: bool
    ) -> tuple[list[ClientDescriptor], list[str], int]:
        """Restore saved queues and deliver the logged events each missed:
        a queue saved at position P gets every logged event above P, in
        order, the others arriving as they come. A file without positions
        (an older version) is restored as it is. Returns the queues, one
        message per queue that could not be restored, and how many got the
        restart event."""
        now = self.clock()
        raw_queues = data.get("queues")
        if not isinstance(raw_queues, list):
            raise ValueError("queues is not a list")
        journal_from = data.get("journal_from")
        if isinstance(journal_from, int | float):
            # Queues registered after the file was begun, journaled at register.
            known = {raw.get("queue_id") for raw in raw_queues if isinstance(raw, dict)}
            later = [
                d for d in await self.journal.since(journal_from) if d.get("queue_id") not in known
            ]
            if later:
                log.info(
                    "%d queues registered after the checkpoint come back from the queue journal",
                    len(later),
                )
                raw_queues = [*raw_queues, *later]
        default = data.get("stream_position")
        if not isinstance(default, int) and not any(
            isinstance(raw, dict) and isinstance(raw.get("stream_position"), int)
            for raw in raw_queues
        ):
            restored, refused = self.registry.restore(data, now)
            restarted = self.registry.push_to_accepting(self._restart_event(), now)
            await self._start_stream()
            return restored, refused, restarted
        # Tombstones (and the version check) first, queues in position order.
        _, errors = self.registry.restore({**data, "queues": []}, now)
        try:
            pruned = await self.db.log_pruned_through()
            last = await self.db.log_last_position()
        except (DatabaseUnavailable, psycopg.Error):
            pruned, last = 0, None  # catching up says what cannot be read
        newest_saved = max(
            (raw.get("stream_position", default) for raw in raw_queues if isinstance(raw, dict)),
            key=lambda p: p if isinstance(p, int) else -1,
            default=default,
        )
        if last is not None and isinstance(newest_saved, int) and newest_saved > last:
            # Its events would be taken for ones already delivered and dropped.
            raise ValueError(
                f"saved at event log position {newest_saved}, but this database's log has"
                f" only reached {last}: the state directory belongs to another database"
            )
        saved: list[tuple[int, int, object]] = []
        for index, raw in enumerate(raw_queues):
            position = raw.get("stream_position", default) if isinstance(raw, dict) else None
            if not isinstance(position, int) or position < 0:
                errors.append(f"saved queue {index}: no stream position")
                continue
            if position < pruned:
                errors.append(
                    f"saved queue {index}: saved at position {position}, but the event log"
                    f" is pruned through {pruned}, so the events it missed are gone"
                )
                continue
            saved.append((position, index, raw))
        saved.sort(key=lambda entry: entry[:2])
        clients: list[ClientDescriptor] = []
        cursor = 0

        def bring_back(below: int) -> None:
            nonlocal cursor
            while cursor < len(saved) and saved[cursor][0] < below:
                _, index, raw = saved[cursor]
                cursor += 1
                try:
                    clients.append(self.registry.restore_queue(raw, now))
                except ValueError as exc:
                    errors.append(f"saved queue {index}: {exc}")

        start = saved[0][0] if saved else (default if isinstance(default, int) else 0)
        self.eventlog.reader.allow_late(
            p for p in data.get("late_positions", []) if isinstance(p, int)
        )
        # Queues saved at the lowest position (all of them after a graceful
        # stop) come back now. After a graceful stop they get the restart
        # event before what they missed. After a crash it comes last: the
        # events replayed from the log must take the ids they had before it,
        # which the clients have acknowledged.
        bring_back(start + 1)
        restarted = 0
        if not crashed:
            restarted = self.registry.push_to_accepting(self._restart_event(), self.clock())
        started = time.monotonic()
        try:
            delivered, late = await self.eventlog.catch_up(start, bring_back)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log.error(
                "cannot read the event log (%s): the restored queues miss the events logged"
                " since they were saved, other than those still in RabbitMQ",
                exc,
            )
            delivered = late = 0
        bring_back(2**63)
        if crashed:
            restarted = self.registry.push_to_accepting(self._restart_event(), self.clock())
        log.info(
            "event log: %d events above position %d delivered to the restored queues in"
            " %.0f ms; now at %d (%d positions not logged yet, accepted if they come)",
            delivered,
            start,
            (time.monotonic() - started) * 1000,
            self.eventlog.position,
            late,
        )
        return clients, errors, restarted

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
            index = 0
            longest = time.perf_counter() - slice_started
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
                                client.to_dict(now, option_forms) | {"stream_position": position}
                            )
                        )
                longest = max(longest, time.perf_counter() - slice_started)
                if index < len(clients):
                    await asyncio.sleep(0)
            slice_started = time.perf_counter()
            body = self.registry.snapshot_without_queues() | self._snapshot_extras()
            body["journal_from"] = began
            longest = max(longest, time.perf_counter() - slice_started)
            path = persistence.checkpoint_file(self.settings.state_dir, self.settings.shard)
            await asyncio.get_running_loop().run_in_executor(
                None, persistence.save_encoded, path, body, saved, self.server_generation
            )
            self.checkpoint_floor = floor
            self.journal.checkpoint_saved(began)
        finally:
            self.checkpointing = False
        took = time.monotonic() - started
        self.last_checkpoint = {
            "queues": len(saved),
            "took_ms": round(took * 1000, 3),
            "longest_slice_ms": round(longest * 1000, 3),
        }
        log.debug("checkpoint of %d queues in %.0f ms", len(saved), took * 1000)
        return took
