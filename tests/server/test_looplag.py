"""The loop-lag sampler and the GC pause timer (server/observability/looplag.py)."""

from __future__ import annotations

import asyncio
import gc
import time

from server.observability.looplag import GcPauses, LoopLagMonitor


def test_a_callback_that_holds_the_loop_shows_as_lag():
    async def scenario() -> dict[str, float]:
        monitor = LoopLagMonitor(interval=0.01, window=100)
        monitor.start()
        try:
            while monitor.sample_count < 3:  # noqa: ASYNC110 (a few quiet samples first)
                await asyncio.sleep(0.01)
            time.sleep(0.08)  # noqa: ASYNC251 (the point: the loop held for 80 ms)
            # The sampler's next wake-up records it.
            while monitor.max_secs < 0.05:  # noqa: ASYNC110 (the sampler's own state)
                await asyncio.sleep(0.01)
            return monitor.percentiles()
        finally:
            await monitor.stop()

    lag = asyncio.run(scenario())
    assert lag["window_max_ms"] >= 50
    assert lag["max_ms"] == lag["window_max_ms"]
    assert lag["p50_ms"] < lag["window_max_ms"]


def test_each_collection_is_timed_by_generation():
    pauses = GcPauses(min_secs=0.0)
    pauses.start()
    try:
        before = pauses.stats()
        assert before["count"] == [0, 0, 0]
        cycles = []
        for _ in range(10_000):
            a: list[object] = []
            a.append(a)
            cycles.append(a)
        del cycles, a
        gc.collect(2)
    finally:
        pauses.stop()
    after = pauses.stats()
    count = after["count"]
    assert count[2] >= 1
    assert after["max_ms"][2] > 0
    assert after["recent"][-1]["generation"] == 2
    # Stopped: a collection after stop() is not counted.
    gc.collect(2)
    assert pauses.stats()["count"] == count


def test_only_pauses_as_long_as_the_floor_are_kept_as_recent():
    pauses = GcPauses(min_secs=3600.0)
    pauses.start()
    try:
        gc.collect(0)
    finally:
        pauses.stop()
    stats = pauses.stats()
    assert stats["count"][0] >= 1
    assert stats["recent"] == []
