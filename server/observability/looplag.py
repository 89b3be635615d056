"""How late the IO loop runs a timer: the delay every request on it suffers.

A sampler sleeps `interval` seconds at a time; whatever it oversleeps is lag.
The last `window` samples give percentiles; a lag over `warn_secs` is logged
with the operator's next step. Lag has two makers: the process's own work
(a long callback, a GC collection) and a host that does not run the loop's
thread when it could run (more runnable threads than CPUs). On Linux the
kernel counts the second (`/proc/thread-self/schedstat`: time spent waiting
for a CPU), so each sample also gives its `own` lag, the oversleep less that
wait. `GcPauses` times one cause of lag by itself:
Python's cyclic GC, which stops the process for each collection.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections import deque
from typing import BinaryIO, NamedTuple, TypedDict

log = logging.getLogger("eventq.looplag")


class RunQueueWait:
    """The calling thread's time spent runnable but waiting for a CPU, in
    seconds, from the kernel's scheduler statistics (the second field of
    /proc/thread-self/schedstat, in nanoseconds); `read()` is None where
    there are none (not Linux, or a kernel without them). Open it on the
    thread to be measured."""

    PATH = "/proc/thread-self/schedstat"

    def __init__(self) -> None:
        self._file: BinaryIO | None
        try:
            self._file = open(self.PATH, "rb")  # noqa: SIM115 (kept open: closed by close())
        except OSError:
            self._file = None

    def read(self) -> float | None:
        both = self.read_both()
        return None if both is None else both[1]

    def read_both(self) -> tuple[float, float] | None:
        """(time on a CPU, time waiting for one), in seconds: the first two
        fields of the file."""
        if self._file is None:
            return None
        try:
            self._file.seek(0)
            fields = self._file.read().split()
            return int(fields[0]) / 1e9, int(fields[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Sample(NamedTuple):
    """One wake-up of the sampler, in seconds."""

    lag: float  # how late it woke
    # The lag less the loop thread's wait for a CPU in the sample (the lag
    # itself where the kernel does not say).
    own: float
    # The loop thread's time on a CPU in the sample (None where the kernel
    # does not say): an own lag longer than that was not all the loop's
    # work, the thread was blocked (on the GIL another thread held, on the
    # disk) for the difference at least.
    ran: float | None = None
    # The process's other threads' CPU time in the sample: a blocked loop
    # while they ran is one of them holding the GIL.
    others: float | None = None


class LoopLagMonitor:
    def __init__(self, interval: float = 0.1, window: int = 600, warn_secs: float = 0.5):
        self.interval = interval
        self.warn_secs = warn_secs
        self._samples: deque[Sample] = deque(maxlen=window)
        self.max_secs = 0.0
        self.own_max_secs = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        waits = RunQueueWait()  # on the loop's thread
        try:
            counted = waits.read_both()
            process = time.process_time()  # every thread's CPU time
            while True:
                started = time.monotonic()
                await asyncio.sleep(self.interval)
                lag = max(0.0, time.monotonic() - started - self.interval)
                before, counted = counted, waits.read_both()
                process_before, process = process, time.process_time()
                if before is None or counted is None:
                    self._record(Sample(lag, lag))
                else:
                    wait = counted[1] - before[1]
                    ran = counted[0] - before[0]
                    others = max(0.0, process - process_before - ran)
                    self._record(Sample(lag, max(0.0, lag - wait), ran, others))
        finally:
            waits.close()

    def _record(self, sample: Sample) -> None:
        self._samples.append(sample)
        lag, own = sample.lag, sample.own
        self.max_secs = max(self.max_secs, lag)
        self.own_max_secs = max(self.own_max_secs, own)
        if lag <= self.warn_secs:
            return
        if sample.ran is not None and sample.ran < own / 2:
            log.warning(
                "IO loop lag %.0f ms, %.0f ms of it the loop's thread blocked (it ran %.0f ms;"
                " the server's other threads ran %.0f ms): requests waited that long; a thread"
                " holding the GIL in a long C call, or the disk (a blocking file or log write"
                " on the loop)",
                lag * 1000,
                (own - sample.ran) * 1000,
                sample.ran * 1000,
                (sample.others or 0.0) * 1000,
            )
        else:
            log.warning(
                "IO loop lag %.0f ms (%.0f ms of it the process's own work, the rest waiting"
                " for a CPU): requests waited that long; look for CPU-heavy work on the loop"
                " (a huge fan-out or GC sweep) or an overloaded host",
                lag * 1000,
                own * 1000,
            )

    @property
    def sample_count(self) -> int:
        """Samples in the window now."""
        return len(self._samples)

    def percentiles(self) -> dict[str, float]:
        """p50, p99 and max over the recent window, and the max since start, in
        ms; and the same maxima of the lag of the process's own making."""
        samples = sorted(sample.lag for sample in self._samples)
        if not samples:
            return dict.fromkeys(
                (
                    "p50_ms",
                    "p99_ms",
                    "window_max_ms",
                    "max_ms",
                    "own_window_max_ms",
                    "own_window_max_ran_ms",
                    "own_window_max_others_ms",
                    "own_max_ms",
                ),
                0.0,
            )

        def pick(q: float) -> float:
            return samples[min(len(samples) - 1, int(q * len(samples)))] * 1000

        longest = max(self._samples, key=lambda sample: sample.own)
        ran, others = longest.ran, longest.others
        return {
            "p50_ms": round(pick(0.50), 3),
            "p99_ms": round(pick(0.99), 3),
            "window_max_ms": round(samples[-1] * 1000, 3),
            "max_ms": round(self.max_secs * 1000, 3),
            "own_window_max_ms": round(longest.own * 1000, 3),
            # The loop thread's time on a CPU over the sample of that longest
            # own lag (the sampler's interval and the lag): less than the lag
            # means the thread was blocked for the difference at least.
            "own_window_max_ran_ms": round((ran if ran is not None else 0.0) * 1000, 3),
            # The process's other threads' CPU time in that sample: a blocked
            # loop while they ran was most likely waiting for the GIL.
            "own_window_max_others_ms": round((others if others is not None else 0.0) * 1000, 3),
            "own_max_ms": round(self.own_max_secs * 1000, 3),
        }


class GcPause(TypedDict):
    ago_secs: float
    generation: int
    ms: float
    cpu_ms: float


class GcPauseStats(TypedDict):
    count: list[int]
    total_ms: list[float]
    max_ms: list[float]
    recent: list[GcPause]


class GcPauses:
    """How long each of Python's cyclic GC collections stopped the process,
    per generation (young first): count, total and longest since start, and
    the last `keep` collections of at least `min_secs` with when they ended
    (monotonic clock) and the CPU time the collecting thread spent in them
    (`cpu_ms`: a stop longer than its CPU time includes a wait for a CPU,
    the host's share). Timed by `gc.callbacks`, a callback at each start and
    stop of a collection: about a microsecond each."""

    GENERATIONS = 3

    def __init__(self, keep: int = 64, min_secs: float = 0.001):
        self.min_secs = min_secs
        self.count = [0] * self.GENERATIONS
        self.total_secs = [0.0] * self.GENERATIONS
        self.max_secs = [0.0] * self.GENERATIONS
        self.recent: deque[tuple[float, int, float, float]] = deque(maxlen=keep)
        self._began = 0.0
        self._began_cpu = 0.0

    def start(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        cpu = time.thread_time()
        if phase == "start":
            self._began = now
            self._began_cpu = cpu
            return
        generation = min(max(info.get("generation", 0), 0), self.GENERATIONS - 1)
        secs = now - self._began
        self.count[generation] += 1
        self.total_secs[generation] += secs
        self.max_secs[generation] = max(self.max_secs[generation], secs)
        if secs >= self.min_secs:
            self.recent.append((time.monotonic(), generation, secs, cpu - self._began_cpu))

    def stats(self) -> GcPauseStats:
        now = time.monotonic()
        # A copy first: building the answer allocates, which may start a
        # collection, whose callback appends to `recent` mid-iteration.
        # list() allocates its list before it iterates, and nothing the
        # collector tracks while it does (tuple() would: its tuple).
        recent = list(self.recent)
        return {
            "count": list(self.count),
            "total_ms": [round(t * 1000, 3) for t in self.total_secs],
            "max_ms": [round(t * 1000, 3) for t in self.max_secs],
            "recent": [
                {
                    "ago_secs": round(now - ended, 3),
                    "generation": g,
                    "ms": round(secs * 1000, 3),
                    "cpu_ms": round(cpu * 1000, 3),
                }
                for ended, g, secs, cpu in recent
            ],
        }
