"""The server's log lines, written by a thread of their own.

A log line written on the IO loop is a `write()` to stderr (a file, a pipe
to journald) that can block: a pipe whose reader is behind, a file system
throttling writers while it flushes (eventq's host writes the event log,
PostgreSQL's WAL and checkpoints to the same disks). The loop's client
errors are logged at INFO, one line per refused request, so a burst of
refusals was a burst of writes on the loop: tests/benchmarks/resume.py's
phase of refused resume_from=0 requests (0.5 ms of CPU each) stopped the
loop for 6.6 and 13.1 ms, none of it waiting for a CPU.

`logs_off_the_loop` puts a bounded queue between every logger and the
handlers `logging` was set up with (the standard library's QueueHandler,
and a thread in the place of its QueueListener): a caller only formats its
line and appends it; the writer's thread writes. When the writer falls 10,000 lines behind, new
lines are dropped and counted, and the count is written as soon as there
is room, rather than the loop waiting for the disk.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import queue
import threading
from collections.abc import Iterator

log = logging.getLogger("eventq.logs")

# Lines waiting for the writer before new ones are dropped: about 2 MB of
# lines, minutes of a busy shard's logging.
MAX_PENDING = 10_000


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that never waits: a line that does not fit is dropped
    and counted. Called by any thread that logs."""

    def __init__(self, pending: queue.Queue[logging.LogRecord | None]):
        super().__init__(pending)
        self.dropped = 0
        # Dropped lines not yet reported in the log itself.
        self._unreported = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self._unreported:
                self.queue.put_nowait(self._drop_notice())
                self._unreported = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            self._unreported += 1

    def _drop_notice(self) -> logging.LogRecord:
        return log.makeRecord(
            log.name,
            logging.WARNING,
            __file__,
            0,
            "%d log lines dropped: the log's destination (stderr) took them slower than"
            " they came; check where stderr goes (a full disk, a stalled journald)",
            (self._unreported,),
            None,
        )


# How long stopping waits for the writer to take what is queued: a
# destination stalled for good must not keep the process from exiting.
STOP_TIMEOUT_SECS = 10.0


class _Writer:
    """The thread that hands queued lines to the handlers (what the standard
    QueueListener does, with a stop that neither raises on a full queue nor
    waits forever on a stalled destination)."""

    def __init__(
        self, pending: queue.Queue[logging.LogRecord | None], handlers: list[logging.Handler]
    ):
        self.pending = pending
        self.handlers = handlers
        self.thread = threading.Thread(target=self._run, name="eventq-log-writer", daemon=True)

    def _run(self) -> None:
        while (record := self.pending.get()) is not None:
            for handler in self.handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)  # filters, the handler's lock, handleError
            self.pending.task_done()  # `pending.join()` returns once all are written

    def stop(self) -> None:
        """Returns once what was queued is written, or after
        STOP_TIMEOUT_SECS; the thread is a daemon, so what is left then is
        lost at exit rather than holding the process."""
        try:
            self.pending.put(None, timeout=STOP_TIMEOUT_SECS)
        except queue.Full:
            return
        self.thread.join(STOP_TIMEOUT_SECS)


@contextlib.contextmanager
def logs_off_the_loop(max_pending: int = MAX_PENDING) -> Iterator[DroppingQueueHandler]:
    """While inside, the root logger's handlers are written by a thread of
    their own; on leaving, every line queued is written and the handlers are
    the root logger's again. Wraps the whole life of a server process."""
    root = logging.getLogger()
    targets = list(root.handlers)
    pending: queue.Queue[logging.LogRecord | None] = queue.Queue(max_pending)
    handler = DroppingQueueHandler(pending)
    writer = _Writer(pending, targets)
    root.handlers = [handler]
    writer.thread.start()
    try:
        yield handler
    finally:
        root.handlers = targets
        writer.stop()  # what is queued is written first
        if handler.dropped:
            log.warning("%d log lines were dropped in all", handler.dropped)
