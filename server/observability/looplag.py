"""How late the IO loop runs a timer: the delay every request on it suffers.

A sampler sleeps `interval` seconds at a time; whatever it oversleeps is lag.
The last `window` samples give percentiles; a lag over `warn_secs` is logged
with the operator's next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

log = logging.getLogger("eventq.looplag")


class LoopLagMonitor:
    def __init__(self, interval: float = 0.1, window: int = 600, warn_secs: float = 0.5):
        self.interval = interval
        self.warn_secs = warn_secs
        self._samples: deque[float] = deque(maxlen=window)
        self.max_secs = 0.0
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
        while True:
            started = time.monotonic()
            await asyncio.sleep(self.interval)
            lag = max(0.0, time.monotonic() - started - self.interval)
            self._samples.append(lag)
            self.max_secs = max(self.max_secs, lag)
            if lag > self.warn_secs:
                log.warning(
                    "IO loop lag %.0f ms: requests waited that long; look for CPU-heavy"
                    " work on the loop (a huge fan-out or GC sweep) or an overloaded host",
                    lag * 1000,
                )

    def percentiles(self) -> dict[str, float]:
        """p50, p99 and max over the recent window, and the max since start, in ms."""
        samples = sorted(self._samples)
        if not samples:
            return {"p50_ms": 0.0, "p99_ms": 0.0, "window_max_ms": 0.0, "max_ms": 0.0}

        def pick(q: float) -> float:
            return samples[min(len(samples) - 1, int(q * len(samples)))] * 1000

        return {
            "p50_ms": round(pick(0.50), 3),
            "p99_ms": round(pick(0.99), 3),
            "window_max_ms": round(samples[-1] * 1000, 3),
            "max_ms": round(self.max_secs * 1000, 3),
        }
