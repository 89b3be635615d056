"""Progress lines of a long run, for the operator watching it.

The job reads the log in chunks of whole hours (job.chunks: at most
job.CHUNK_BYTES of Parquet each) and reports after each chunk: one line on
the given stream (the CLI passes stderr, so stdout keeps only the console
summary; under spark-submit, Spark merges the two), e.g.

    analytics: 12/24 hours, 5,000,000 records in 21.4 s (233,600 records/s)

A run of one chunk prints nothing: it is over soon after Spark has started.
The clock is a parameter (seconds, monotonic), so tests drive it by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    """Counts the hours and records of a run as its chunks complete; the job
    calls `started` once, then `chunk_done` after each chunk, from the
    thread that runs it."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic):
        self.stream = stream
        self.clock = clock
        self.total_hours = 0
        self.chunks = 0
        # Invariants: hours <= total_hours; both only grow.
        self.hours = 0
        self.records = 0
        self.began = 0.0

    def started(self, total_hours: int, chunks: int) -> None:
        """A run of `total_hours` hours in `chunks` chunks begins now."""
        self.total_hours = total_hours
        self.chunks = chunks
        self.hours = self.records = 0
        self.began = self.clock()

    def chunk_done(self, hours: int, records: int) -> None:
        """A chunk of `hours` hours holding `records` records is processed."""
        self.hours += hours
        self.records += records
        assert self.hours <= self.total_hours, (self.hours, self.total_hours)
        if self.chunks > 1:
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def line(self) -> str:
        """Where the run is: hours done of all, records so far, elapsed
        seconds since `started`, records per second."""
        elapsed = self.clock() - self.began
        rate = f"{self.records / elapsed:,.0f}" if elapsed > 0 else "-"
        return (
            f"analytics: {self.hours}/{self.total_hours} hours, {self.records:,} records "
            f"in {elapsed:.1f} s ({rate} records/s)"
        )
