"""Bringing back the queues of the last run at start: those a graceful stop
saved or, after a crash, those of the last checkpoint and of the queue
journal (server/durability/saved_queues.py writes both), then the events
each missed from the event log (server/delivery/eventlog.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg

from queues.client import ClientDescriptor
from queues.payload import SharedPayloads
from server.database.db import DatabaseUnavailable
from server.durability import persistence
from server.durability.saved_queues import SavedQueues

# The server's logger: these messages are the server's.
log = logging.getLogger("eventq.server")


async def restore_queues(saved: SavedQueues) -> None:
    """Bring back the queues of the last run: those saved by a graceful
    stop or, after a crash, those of the last checkpoint; then deliver the
    logged events each queue missed since it was saved."""
    state_dir, shard = saved.settings.state_dir, saved.settings.shard
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
        await _start_stream(saved)
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
        clients, errors, restarted = await _load_saved(saved, data, crashed)
    except ValueError as exc:
        kept = await loop.run_in_executor(None, persistence.quarantine, path)
        log.error(
            "saved queues in %s unreadable (%s); starting with no queues (kept as %s)",
            path,
            exc,
            kept,
        )
        await _start_stream(saved)
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
    if saved.consumer is not None:
        saved.consumer.remember(data.get("notice_ids"))
    # The file's decoded form is no longer needed: its memory goes back.
    data = None
    persistence.release_freed_memory()
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


async def _start_stream(saved: SavedQueues) -> None:
    position = await saved.eventlog.start_fresh()
    log.info("event log: starting at position %d", position)


async def _load_saved(
    saved: SavedQueues, data: dict[str, Any], crashed: bool
) -> tuple[list[ClientDescriptor], list[str], int]:
    """Restore saved queues and deliver the logged events each missed:
    a queue saved at position P gets every logged event above P, in
    order, the others arriving as they come. A file without positions
    (an older version) is restored as it is. Returns the queues, one
    message per queue that could not be restored, and how many got the
    restart event."""
    now = saved.clock()
    raw_queues = data.get("queues")
    if not isinstance(raw_queues, list):
        raise ValueError("queues is not a list")
    journal_from = data.get("journal_from")
    if isinstance(journal_from, int | float):
        # Queues registered after the file was begun, journaled at register.
        known = {
            queue_id
            for raw in raw_queues
            if isinstance(raw, dict) and isinstance(queue_id := raw.get("queue_id"), str)
        }
        later = [
            d
            for d in await saved.journal.since(journal_from)
            if not (isinstance(queue_id := d.get("queue_id"), str) and queue_id in known)
        ]
        if later:
            log.info(
                "%d queues registered after the checkpoint come back from the queue journal",
                len(later),
            )
            raw_queues = [*raw_queues, *later]
    default = data.get("stream_position")
    if not isinstance(default, int) and not any(
        isinstance(raw, dict) and isinstance(raw.get("stream_position"), int) for raw in raw_queues
    ):
        restored, refused = saved.registry.restore(data, now)
        restarted = saved.registry.push_to_accepting(saved.restart_event(), now)
        await _start_stream(saved)
        return restored, refused, restarted
    # Tombstones (and the version check) first, queues in position order.
    _, errors = saved.registry.restore({**data, "queues": []}, now)
    try:
        pruned = await saved.db.log_pruned_through()
        last = await saved.db.log_last_position()
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
    waiting: list[tuple[int, int, object]] = []
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
        waiting.append((position, index, raw))
    waiting.sort(key=lambda entry: entry[:2])
    clients: list[ClientDescriptor] = []
    cursor = 0
    # The queues' events, each once however many queues hold it.
    shared = SharedPayloads(saved.registry.encode, data.get("payloads"))

    def bring_back(below: int) -> None:
        nonlocal cursor
        while cursor < len(waiting) and waiting[cursor][0] < below:
            _, index, raw = waiting[cursor]
            cursor += 1
            try:
                clients.append(saved.registry.restore_queue(raw, now, shared))
            except ValueError as exc:
                errors.append(f"saved queue {index}: {exc}")

    start = waiting[0][0] if waiting else (default if isinstance(default, int) else 0)
    late_positions = data.get("late_positions", [])
    if not isinstance(late_positions, list):
        late_positions = []
    saved.eventlog.reader.allow_late(p for p in late_positions if isinstance(p, int))
    # Queues saved at the lowest position (all of them after a graceful
    # stop) come back now. After a graceful stop they get the restart
    # event before what they missed. After a crash it comes last: the
    # events replayed from the log must take the ids they had before it,
    # which the clients have acknowledged.
    bring_back(start + 1)
    restarted = 0
    if not crashed:
        restarted = saved.registry.push_to_accepting(saved.restart_event(), saved.clock())
    started = time.monotonic()
    try:
        delivered, late = await saved.eventlog.catch_up(start, bring_back)
    except (DatabaseUnavailable, psycopg.Error) as exc:
        log.error(
            "cannot read the event log (%s): the restored queues miss the events logged"
            " since they were saved, other than those still in RabbitMQ",
            exc,
        )
        delivered = late = 0
    bring_back(2**63)
    if crashed:
        restarted = saved.registry.push_to_accepting(saved.restart_event(), saved.clock())
    log.info(
        "event log: %d events above position %d delivered to the restored queues in"
        " %.0f ms; now at %d (%d positions not logged yet, accepted if they come)",
        delivered,
        start,
        (time.monotonic() - started) * 1000,
        saved.eventlog.position,
        late,
    )
    return clients, errors, restarted
