"""The report's charts drawn in worker processes (analytics/painter.py):
the same files as drawn in the run's own process, failures surfaced."""

from __future__ import annotations

import os
import signal
import time

import pytest

from analytics.errors import AnalyticsError
from analytics.painter import Drawing, Painter, _ready

LABELS = [f"2026-11-{day:02}" for day in range(1, 31)]
DRAWINGS = [
    Drawing("bar", "bar.png", "Bars", ("Bars", ["a", "b", "c"], [1.0, 0.0, 7.5], "units")),
    Drawing(
        "stacked",
        "stacked.png",
        "Stacked",
        ("Stacked", LABELS, [("s1", [float(i) for i in range(30)]), ("s2", [2.0] * 30)]),
    ),
    Drawing(
        "latency",
        "latency.png",
        "Latency",
        (
            "Latency",
            LABELS,
            [{"slot": i, "p50": 0.001 * i, "p95": 0.002 * i, "p99": 0.01} for i in range(1, 30, 3)],
        ),
    ),
    Drawing(
        "latency_by_type",
        "by_type.png",
        "By type",
        ([{"key": "message", "p50": 0.002, "p95": 0.02, "p99": 0.05}],),
    ),
]


def test_workers_draw_the_bytes_the_run_draws_itself(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    Painter().draw_all(DRAWINGS, here)
    with Painter(2) as painter:
        assert painter.workers == 2
        pids = {painter._pool.submit(_ready).result() for _ in range(8)}  # type: ignore[union-attr]
        assert os.getpid() not in pids
        painter.draw_all(DRAWINGS, there)
    for drawing in DRAWINGS:
        drawn = (here / drawing.name).read_bytes()
        assert drawn.startswith(b"\x89PNG")
        assert (there / drawing.name).read_bytes() == drawn, drawing.name


def test_a_chart_that_fails_in_a_worker_fails_the_report(tmp_path):
    wrong = Drawing(
        "stacked", "wrong.png", "Wrong", ("Wrong", ["a", "b", "c"], [("s", [1.0, 2.0])])
    )
    with Painter(1) as painter, pytest.raises(ValueError, match="shape mismatch"):
        painter.draw_all([*DRAWINGS[:1], wrong], tmp_path)


def test_a_worker_that_dies_is_an_error_the_operator_reads(tmp_path):
    # Killed while the charts are drawn (the pool breaks under them) ...
    with Painter(1) as painter:
        pid = painter._pool.submit(_ready).result()  # type: ignore[union-attr]
        with pytest.raises(AnalyticsError, match="drawing the report's charts ended unexpectedly"):
            painter.draw_all(DRAWINGS, tmp_path, lambda: os.kill(pid, signal.SIGKILL))
    # ... or before, while Spark ran: the pool is known broken, and refuses
    # the drawings.
    with Painter(1) as painter:
        pid = painter._pool.submit(_ready).result()  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not painter._pool._broken:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the pool never saw its worker die"
            time.sleep(0.01)
        with pytest.raises(AnalyticsError, match="drawing the report's charts ended unexpectedly"):
            painter.draw_all(DRAWINGS, tmp_path)


def test_an_unknown_kind_of_chart_is_refused():
    with pytest.raises(AssertionError):
        Drawing("pie", "pie.png", "Pie", ())


@pytest.mark.parametrize("workers", [0, 2])
def test_meanwhile_runs_once_after_the_drawings_are_handed_over(tmp_path, workers):
    calls = []

    def meanwhile():
        calls.append(sorted(p.name for p in tmp_path.iterdir()))

    with Painter(workers) as painter:
        painter.draw_all(DRAWINGS, tmp_path, meanwhile)
    assert len(calls) == 1
    if workers == 0:
        assert calls == [[]]  # before drawing, in this process
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(d.name for d in DRAWINGS)
