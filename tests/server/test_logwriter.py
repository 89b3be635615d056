"""The server's log lines written by a thread of their own: every line
reaches the handlers logging was set up with, in order, by the time the
server's life ends; a writer that falls behind loses lines, counted and
reported, instead of stopping the loggers."""

from __future__ import annotations

import io
import logging
import queue
import threading

import pytest

from server.observability.logwriter import logs_off_the_loop


@pytest.fixture
def stream_root():
    """The root logger writing to a StringIO only, restored afterwards."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    yield out, handler
    root.handlers = saved
    root.setLevel(level)


def test_every_line_is_written_in_order_by_the_end(stream_root):
    out, _ = stream_root
    before = list(logging.getLogger().handlers)  # pytest's capture too
    with logs_off_the_loop() as queued:
        assert logging.getLogger().handlers == [queued]
        for n in range(500):
            logging.getLogger("eventq.test").info("line %d", n)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("eventq.test").exception("failed")
    assert logging.getLogger().handlers == before
    lines = out.getvalue().splitlines()
    assert lines[:500] == [f"INFO eventq.test: line {n}" for n in range(500)]
    assert lines[500] == "ERROR eventq.test: failed"
    assert "ValueError: boom" in out.getvalue()


class _Blocked(logging.Handler):
    """A destination that takes nothing until released."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()  # not `release`: a Handler's lock method
        self.lines: list[str] = []

    def emit(self, record):
        self.gate.wait(30)
        self.lines.append(record.getMessage())


def test_a_stalled_destination_drops_lines_and_says_how_many():
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    blocked = _Blocked()
    root.handlers = [blocked]  # alone: pytest's capture would take the lines too
    root.setLevel(logging.INFO)
    try:
        with logs_off_the_loop(max_pending=10) as queued:
            pending = queued.queue
            assert isinstance(pending, queue.Queue)
            for n in range(100):  # never waits, though nothing is written
                logging.getLogger("eventq.test").info("line %d", n)
            assert queued.dropped >= 80
            blocked.gate.set()
            pending.join()  # the writer caught up
            logging.getLogger("eventq.test").info("after")
    finally:
        root.handlers = saved
        root.setLevel(level)
    assert blocked.lines[0] == "line 0"
    assert any(line.endswith("log lines were dropped in all") for line in blocked.lines), (
        blocked.lines
    )
    notices = [line for line in blocked.lines if "log lines dropped: the log's destination" in line]
    assert notices, blocked.lines
    assert blocked.lines.index(notices[0]) < blocked.lines.index("after")
