"""Drawing the report's charts, in processes of their own or in this one.

A run's report draws 13 charts with matplotlib, all CPU in Python: 2-3 s
of an hourly run. A `Painter` with workers draws them side by side in
processes forked when it is made, at the start of the run, while the process
is still one thread (before the pool's own threads, the JVM and py4j's): each worker loads
matplotlib and its fonts while Spark starts, which then costs the run
nothing. Without workers it draws them here, one after the other.

This module does not import matplotlib: the process that only hands charts
to workers never loads it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from analytics.errors import AnalyticsError

# The chart kinds: functions of charts.py.
KINDS = frozenset({"bar", "stacked", "latency", "latency_by_type"})


@dataclass(frozen=True)
class Drawing:
    """One chart to draw: `kind` (KINDS) called with the PNG's path, then
    `args`; `name` is its file name, `caption` what the report says of it."""

    kind: str
    name: str
    caption: str
    args: tuple[Any, ...]

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind


def draw(drawing: Drawing, directory: Path) -> None:
    """Draw `drawing` into `directory` in this process."""
    from analytics import charts  # noqa: PLC0415 (matplotlib, loaded where charts are drawn)

    getattr(charts, drawing.kind)(directory / drawing.name, *drawing.args)


def _start_worker() -> None:
    # ^C reaches the whole process group: the run stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from analytics import charts  # noqa: PLC0415 (as in draw)

    charts.warm_up()


def _ready() -> int:
    return os.getpid()


# Workers at most: a report has 13 charts, and each worker holds matplotlib.
MOST_WORKERS = 4


def workers_for_this_machine() -> int:
    """One worker per core this process may run on (its affinity, not the
    machine's), at most MOST_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MOST_WORKERS, cores or 1))


class Painter:
    """Draws Drawings: in `workers` processes forked now (0: in this one).

    A context manager; leaving it stops the workers."""

    def __init__(self, workers: int = 0) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self.workers = 0
        if workers > 0 and "fork" in multiprocessing.get_all_start_methods():
            self._pool = ProcessPoolExecutor(
                workers, multiprocessing.get_context("fork"), initializer=_start_worker
            )
            # The first task forks every worker: now, while this process is
            # one thread.
            self._pool.submit(_ready)
            self.workers = workers

    def draw_all(
        self,
        drawings: Sequence[Drawing],
        directory: Path,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Draw every drawing into `directory`; returns when all are drawn,
        raises the first failure. `meanwhile`, if given, is called once the
        drawings are handed to the workers, before waiting for them (without
        workers: before drawing)."""
        if self._pool is None:
            if meanwhile is not None:
                meanwhile()
            for drawing in drawings:
                draw(drawing, directory)
            return
        try:
            # (A worker that died before, killed while Spark ran, say, breaks
            # the pool: submit raises then.)
            futures: Iterable[Future[None]] = [
                self._pool.submit(draw, drawing, directory) for drawing in drawings
            ]
        except BrokenProcessPool as exc:
            raise AnalyticsError(
                f"a process drawing the report's charts ended unexpectedly ({exc})"
            ) from exc
        if meanwhile is not None:
            meanwhile()
        try:
            for future in futures:
                future.result()
        except BrokenProcessPool as exc:
            raise AnalyticsError(
                f"a process drawing the report's charts ended unexpectedly ({exc})"
            ) from exc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self.workers = 0

    def __enter__(self) -> Painter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
