"""Progress lines: one per chunk of a run of several, none for a run of one."""

from __future__ import annotations

import io

from analytics.progress import Progress


class Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_chunk_of_a_long_run_reports_hours_records_time_and_rate():
    stream, clock = io.StringIO(), Clock()
    progress = Progress(stream, clock)
    progress.started(total_hours=24, chunks=3)
    clock.now += 10.0
    progress.chunk_done(hours=8, records=2_500_000)
    assert stream.getvalue() == (
        "analytics: 8/24 hours, 2,500,000 records in 10.0 s (250,000 records/s)\n"
    )
    clock.now += 2.5
    progress.chunk_done(hours=16, records=500_000)
    assert stream.getvalue().splitlines()[1] == (
        "analytics: 24/24 hours, 3,000,000 records in 12.5 s (240,000 records/s)"
    )


def test_a_run_of_one_chunk_is_quiet():
    stream, clock = io.StringIO(), Clock()
    progress = Progress(stream, clock)
    progress.started(total_hours=3, chunks=1)
    clock.now += 1.0
    progress.chunk_done(hours=3, records=44)
    assert stream.getvalue() == ""
    assert progress.line() == "analytics: 3/3 hours, 44 records in 1.0 s (44 records/s)"


def test_no_time_elapsed_gives_no_rate():
    progress = Progress(io.StringIO(), Clock())
    progress.started(total_hours=1, chunks=2)
    assert progress.line() == "analytics: 0/1 hours, 0 records in 0.0 s (- records/s)"
