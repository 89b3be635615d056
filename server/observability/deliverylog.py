"""The delivery log's writer: the observer that records what the server
delivers (one record per event delivered to a queue, plus the lifecycle
records: poll outcome, register, queue end, dead letter; and one per
notification enqueued for a user found away) for the analytics jobs
(docs/architecture.md, "Analytics"), and the thread that writes them. The
format and the files are `server/observability/logfiles.py`.

Guarantees:
- The IO loop never waits on the disk: the observer hooks build a tuple per
  record and append it to a bounded in-memory buffer; past `max_pending`
  records, new ones are dropped and counted.
- A writer thread takes the buffer every `flush_secs`, appends it as spool
  lines to the open (hidden) file of the records' hour and fsyncs it: a
  crash loses at most one flush interval.
- It closes the file at the hour, every `roll_secs` (by default only at the
  hour) and at `logfiles.MAX_FILE_BYTES`, then compacts the closed files into Parquet;
  it applies the retention once an hour, and recovers what a crash of its
  shard left when it starts.
- A failing disk (full, I/O error, permissions) drops the batch, counts it
  in `dropped` and logs a rate-limited warning; delivery never stalls.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queues.client import ClientDescriptor
from queues.event_queue import Item
from queues.registry import EndReason
from server.observability.logfiles import (
    FORMAT_VERSION,
    MAX_FILE_BYTES,
    NAMES,
    ROLL_SECS,
    Record,
    Spool,
    encode_record,
    encode_records,
    prune,
    try_compact,
)
from server.observability.observe import Observer, PollOutcome, Responder
from server.observability.pollrecords import RecordBuffer

if TYPE_CHECKING:
    from server.config import Settings

log = logging.getLogger("eventq.deliverylog")

_TIME = NAMES.index("time")
# Every column null: what `DeliveryLog._record` fills in.
_BLANK: dict[str, Any] = dict.fromkeys(NAMES)
# At most one warning a minute about failing writes: a full disk fails every
# flush, and the log line must not be what fills it further.
WARN_EVERY_SECS = 60.0
# Records encoded per orjson call: enough to spread the cost of a call (a
# few µs), few enough that the call, which holds the GIL the IO loop needs,
# lasts about half a millisecond (tests/benchmarks/deliverylog.py).
ENCODE_CHUNK = 2000


class DeliveryLog(Observer):
    """The observer that writes the delivery log of one shard.

    Hooks run on the IO loop and only append to the buffer. `start()` starts
    the writer thread (which first recovers what a crash left); `await
    stop()` writes everything buffered, closes and compacts the open file
    and joins the thread, at most `stop_timeout_secs`.

    Counters (plain ints, read by the metrics from the loop): `written` and
    `dropped` records, `files_compacted` spool files turned into
    Parquet; `pending` records not written yet.
    """

    def __init__(
        self,
        log_dir: Path,
        shard: str = "default",
        *,
        flush_secs: float = 1.0,
        roll_secs: float = ROLL_SECS,
        retention_days: int = 30,
        max_pending: int = 500_000,
        max_file_bytes: int = MAX_FILE_BYTES,
        stop_timeout_secs: float = 30.0,
        write: Callable[[int, bytes], int] = os.write,
    ):
        self.log_dir = log_dir
        self.shard = shard
        self.flush_secs = flush_secs
        self.retention_days = retention_days
        self.max_pending = max_pending
        self.stop_timeout_secs = stop_timeout_secs
        self.spool = Spool(
            log_dir, shard, write=write, roll_secs=roll_secs, max_file_bytes=max_file_bytes
        )
        self.written = 0
        self.files_compacted = 0
        # Records the loop added and the writer has not taken; never more
        # than max_pending. The writer swaps its list out whole under its
        # lock, which the loop holds for one extend. Its `responded` is the
        # server's hook for each answer (`responder`), compiled.
        self._buffer = RecordBuffer(shard, max_pending)
        # Records the writer took and has not written (or dropped) yet.
        self._taking = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Failed writes not yet reported, and when the last warning went out
        # (monotonic; -inf: the first failure is reported at once).
        self._unreported = 0
        self._warned_at = float("-inf")
        self._pruned_hour = -1
        # How many of the records the loop dropped because the buffer was
        # full (`overflowed`) the writer has reported.
        self._overflow_reported = 0
        self._overflow_warned_at = float("-inf")
        # `spool.closed_files` at the last compaction: more means files to compact.
        self._closed_seen = 0

    @property
    def pending(self) -> int:
        return len(self._buffer.records) + self._taking

    @property
    def dropped(self) -> int:
        """Records lost: the loop's past `max_pending`, the writer's failures."""
        return self._buffer.dropped

    @property
    def overflowed(self) -> int:
        """Records the loop dropped because `max_pending` were waiting."""
        return self._buffer.overflowed

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread; records are buffered from now on."""
        assert self._thread is None, "started twice"
        self._thread = threading.Thread(
            target=self._run, name=f"delivery-log-{self.shard}", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Write what is buffered, close and compact the open file, and end the
        thread; gives up waiting after `stop_timeout_secs` (with a warning)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        await asyncio.to_thread(thread.join, self.stop_timeout_secs)
        if thread.is_alive():
            log.warning(
                "delivery log: the writer did not finish within %.0f s (slow disk?);"
                " %d records still pending are lost",
                self.stop_timeout_secs,
                self.pending,
            )
        else:
            self._thread = None

    # -- the writer thread ------------------------------------------------------

    def _run(self) -> None:
        self._guard("recovering files left by a crash", self._recover)
        while not self._stopping.wait(self.flush_secs):
            self._cycle(final=False)
        self._cycle(final=True)

    def _guard(self, what: str, step: Callable[[], None]) -> None:
        """Run a step of the writer; nothing it raises stops the thread."""
        try:
            step()
        except OSError as exc:
            self._warn_disk(what, exc, 0)
        except Exception:
            log.exception("delivery log: %s failed", what)

    def _recover(self) -> None:
        recovered = self.spool.recover()
        if recovered:
            log.warning(
                "delivery log: recovered %d files left open by a stopped process: %s",
                len(recovered),
                ", ".join(str(path) for path in recovered),
            )
        self._compact(wait=True)
        self._prune(time.time())

    def _cycle(self, final: bool) -> None:
        buffer = self._buffer
        with buffer.lock:
            batch, buffer.records = buffer.records, []
            self._taking = len(batch)
        try:
            if batch:
                self._write_batch(batch)
        except Exception:
            log.exception("delivery log: %d records lost", self._taking)
            self._count_dropped(self._taking)
        finally:
            self._taking = 0
        self._warn_overflow()
        now = time.time()
        if final or self.spool.due(now):
            self._guard("closing the open file", self._roll)
        elif self.spool.closed_files != self._closed_seen:  # rolled by size
            self._guard("compacting", lambda: self._compact(wait=False))
        if int(now // 3600) != self._pruned_hour:
            self._guard("deleting old partitions", lambda: self._prune(now))

    def _write_batch(self, batch: list[Record]) -> None:
        by_hour: dict[int, list[Record]] = {}
        for record in batch:
            by_hour.setdefault(int(record[_TIME] // 3600), []).append(record)
        for hour in sorted(by_hour):
            records = by_hour[hour]
            pieces: list[bytes] = []
            count = size = 0
            for start in range(0, len(records), ENCODE_CHUNK):
                data, encoded = self._encode(records[start : start + ENCODE_CHUNK])
                if pieces and size + len(data) > self.spool.max_file_bytes:
                    self._append(hour, b"".join(pieces), count)
                    pieces, count, size = [], 0, 0
                pieces.append(data)
                count += encoded
                size += len(data)
            self._append(hour, b"".join(pieces), count)

    def _encode(self, records: list[Record]) -> tuple[bytes, int]:
        """The lines of `records` and how many they hold: a record that
        cannot be encoded (a bug) is dropped and logged, not its neighbours."""
        try:
            return encode_records(records), len(records)
        except (TypeError, ValueError):
            pass
        lines = []
        for record in records:
            try:
                lines.append(encode_record(record))
            except (TypeError, ValueError):  # a bug: a value of no column's type, a short tuple
                log.exception("delivery log: record %r dropped", record[:4])
                self._count_dropped(1)
                self._taking -= 1
        return b"".join(lines), len(lines)

    def _append(self, hour: int, data: bytes, count: int) -> None:
        if not count:
            return
        try:
            self.spool.append(hour, data)
        except OSError as exc:
            self._count_dropped(count)
            self._warn_disk("writing", exc, count)
        else:
            self.written += count
        self._taking -= count

    def _roll(self) -> None:
        self.spool.roll()
        self._compact(wait=self._stopping.is_set())

    def _compact(self, wait: bool) -> None:
        self._closed_seen = self.spool.closed_files
        result = try_compact(self.log_dir, self.shard, wait=wait)
        if result is not None:
            self.files_compacted += result.inputs
            for path in result.written:
                log.debug("delivery log: compacted into %s", path)

    def _prune(self, now: float) -> None:
        self._pruned_hour = int(now // 3600)
        for partition in prune(self.log_dir, self.retention_days, now):
            log.info(
                "delivery log: deleted %s (older than %d days)", partition, self.retention_days
            )

    def _count_dropped(self, count: int) -> None:
        self._buffer.count_dropped(count)

    def _warn_disk(self, what: str, exc: OSError, lost: int) -> None:
        """A rate-limited warning an operator can act on."""
        self._unreported += lost
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY_SECS:
            return
        self._warned_at = now
        hint = {
            errno.ENOSPC: "free space on that disk",
            errno.EDQUOT: "raise the quota",
            errno.EACCES: "give the server write access",
            errno.EROFS: "the file system is read-only",
        }.get(exc.errno or 0, "check the disk")
        log.warning(
            "delivery log: %s failed in %s (%s: %s); %d records dropped since the last"
            " warning, %d in all; %s (next warning at most in %.0f s)",
            what,
            exc.filename or self.log_dir,
            errno.errorcode.get(exc.errno or 0, "error"),
            exc.strerror or exc,
            self._unreported,
            self.dropped,
            hint,
            WARN_EVERY_SECS,
        )
        self._unreported = 0

    def _warn_overflow(self) -> None:
        overflowed = self.overflowed
        if overflowed == self._overflow_reported:
            return
        now = time.monotonic()
        if now - self._overflow_warned_at < WARN_EVERY_SECS:
            return
        log.warning(
            "delivery log: %d records dropped because %d were already waiting to be"
            " written (EVENTQ_LOG_MAX_PENDING); the disk of %s is too slow for this"
            " load, or the limit too low",
            overflowed - self._overflow_reported,
            self.max_pending,
            self.log_dir,
        )
        self._overflow_reported = overflowed
        self._overflow_warned_at = now

    # -- the observer hooks (IO loop) ------------------------------------------

    def _add(self, records: Sequence[Record]) -> None:
        self._buffer.add(records)

    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: PollOutcome,
        waited_secs: float,
        now: float,
    ) -> None:
        self._buffer.responded(client, items, response_bytes, outcome, waited_secs, now)

    def responder(self) -> Responder:
        return self._buffer.responded

    def _record(self, kind: str, now: float, **fields: Any) -> Record:
        """A record of a rarer kind, by column name (the hot path, `responded`,
        writes its tuples out in column order)."""
        assert fields.keys() <= _BLANK.keys(), fields.keys() - _BLANK.keys()
        row = _BLANK | fields
        row.update(v=FORMAT_VERSION, kind=kind, time=now, shard=self.shard)
        return tuple(row.values())

    def poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str, now: float
    ) -> None:
        record = self._record(
            "poll",
            now,
            realm_id=realm_id,
            user_id=user_id,
            queue_id=queue_id,
            batch_events=0,
            outcome="error",
            code=code,
            waited_secs=0.0,
        )
        self._add((record,))

    def registered(self, client: ClientDescriptor, latency_secs: float, now: float) -> None:
        record = self._record(
            "register",
            now,
            realm_id=client.realm_id,
            user_id=client.user_id,
            queue_id=client.queue_id,
            client=client.options.client_name,
            latency_secs=latency_secs,
            options=client.options,  # encoded by the writer
        )
        self._add((record,))

    def queue_ended(
        self, client: ClientDescriptor, reason: EndReason, lifetime_secs: float, now: float
    ) -> None:
        record = self._record(
            "end",
            now,
            realm_id=client.realm_id,
            user_id=client.user_id,
            queue_id=client.queue_id,
            client=client.options.client_name,
            queue_depth=len(client.event_queue),
            reason=reason,
            lifetime_secs=lifetime_secs,
        )
        self._add((record,))

    def notice_dead_lettered(
        self, notice_id: str | None, failures: int, error: str, now: float, realm_id: int | None
    ) -> None:
        record = self._record(
            "dead_letter",
            now,
            realm_id=realm_id,
            notice_id=notice_id,
            failures=failures,
            error=error,
        )
        self._add((record,))

    def notification_enqueued(
        self,
        user_id: int,
        realm_id: int | None,
        message_id: int,
        kinds: Sequence[str],
        via: str,
        now: float,
    ) -> None:
        # Columns of the other kinds, so that the format stays v1 (and no
        # record pays for columns of its own): docs/delivery-log.md.
        record = self._record(
            "notification",
            now,
            realm_id=realm_id,
            user_id=user_id,
            event_id=message_id,
            outcome=",".join(kinds),
            reason=via,
        )
        self._add((record,))


def delivery_log_for(settings: Settings) -> DeliveryLog | None:
    """The server's delivery log as configured; None without EVENTQ_LOG_DIR."""
    if settings.log_dir is None:
        return None
    return DeliveryLog(
        settings.log_dir,
        settings.shard_name,
        flush_secs=settings.log_flush_secs,
        roll_secs=settings.log_roll_secs,
        retention_days=settings.log_retention_days,
        max_pending=settings.log_max_pending,
    )
