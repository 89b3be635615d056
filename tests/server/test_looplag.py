"""The loop-lag sampler and the GC pause timer (server/observability/looplag.py)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from server.observability.looplag import GcPauses, LoopLagMonitor, RunQueueWait

REPO = Path(__file__).resolve().parents[2]


def _held(hold: Callable[[], None], warn_secs: float = 0.5) -> dict[str, float]:
    """The sampler's figures once `hold` has held the loop for about 80 ms."""

    async def scenario() -> dict[str, float]:
        monitor = LoopLagMonitor(interval=0.01, window=100, warn_secs=warn_secs)
        monitor.start()
        try:
            while monitor.sample_count < 3:  # noqa: ASYNC110 (a few quiet samples first)
                await asyncio.sleep(0.01)
            hold()
            # The sampler's next wake-up records it.
            while monitor.own_max_secs < 0.05:  # noqa: ASYNC110 (the sampler's own state)
                await asyncio.sleep(0.01)
            return monitor.percentiles()
        finally:
            await monitor.stop()

    return asyncio.run(scenario())


def test_a_callback_that_holds_the_loop_shows_as_lag():
    # The point: a callback that holds the loop for 80 ms.
    lag = _held(lambda: time.sleep(0.08))
    assert lag["window_max_ms"] >= 50
    assert lag["max_ms"] == lag["window_max_ms"]
    assert lag["p50_ms"] < lag["window_max_ms"]
    # No wait for a CPU in it: the lag is the process's own (less whatever
    # wait the host added: a few ms at most here).
    assert lag["own_window_max_ms"] >= 50
    assert lag["own_max_ms"] == lag["own_window_max_ms"] <= lag["window_max_ms"]


def _spin() -> None:
    began = time.thread_time()
    while time.thread_time() - began < 0.08:  # 80 ms on a CPU, however long it waits
        pass


@pytest.mark.skipif(not os.path.exists(RunQueueWait.PATH), reason="the kernel gives no schedstat")
def test_a_loop_blocked_is_told_from_a_loop_at_work():
    # Blocked (as on the GIL another thread holds, or on the disk): the
    # loop's thread was off the CPU for most of its longest own lag.
    blocked = _held(lambda: time.sleep(0.08))
    assert blocked["own_window_max_ms"] >= 50
    assert blocked["own_window_max_ran_ms"] < blocked["own_window_max_ms"] - 40
    # At work: it ran for at least that lag.
    busy = _held(_spin)
    assert busy["own_window_max_ms"] >= 50
    assert busy["own_window_max_ran_ms"] >= 0.9 * busy["own_window_max_ms"]


@pytest.mark.skipif(not os.path.exists(RunQueueWait.PATH), reason="the kernel gives no schedstat")
def test_a_loop_waiting_for_the_gil_shows_the_other_thread_at_work():
    # A thread in one long C call that never lets the GIL go (a sort of a
    # million floats, about 0.4 s here): the loop cannot run meanwhile,
    # and the sample shows another thread on the CPU, not the loop's.
    values = [random.random() for _ in range(1_000_000)]

    def sort_in_a_thread() -> None:
        sorter = threading.Thread(target=sorted, args=(values,))
        sorter.start()
        sorter.join()  # the loop held here too: the sample that ends after counts it

    lag = _held(sort_in_a_thread)
    assert lag["own_window_max_ms"] >= 50
    assert lag["own_window_max_others_ms"] >= 0.5 * lag["own_window_max_ms"]
    assert lag["own_window_max_ran_ms"] < 0.5 * lag["own_window_max_ms"]


@pytest.mark.skipif(not os.path.exists(RunQueueWait.PATH), reason="the kernel gives no schedstat")
def test_the_warning_says_whether_the_loop_was_blocked_or_at_work(caplog):
    with caplog.at_level(logging.WARNING, logger="eventq.looplag"):
        _held(lambda: time.sleep(0.08), warn_secs=0.05)
    blocked = [r.getMessage() for r in caplog.records if r.name == "eventq.looplag"]
    assert any("the loop's thread blocked" in line for line in blocked), blocked
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="eventq.looplag"):
        _held(_spin, warn_secs=0.05)
    busy = [r.getMessage() for r in caplog.records if r.name == "eventq.looplag"]
    assert any("the process's own work" in line for line in busy), busy


_COMPETE = """
import os, sys, time
from server.observability.looplag import RunQueueWait

os.sched_setaffinity(0, {int(sys.argv[1])})
waits = RunQueueWait()
before = waits.read()
print("ready", flush=True)
sys.stdin.readline()  # the competitor is on the same CPU
began = time.monotonic()
while time.monotonic() - began < 0.4:
    pass
print(waits.read() - before)
"""


@pytest.mark.skipif(not os.path.exists(RunQueueWait.PATH), reason="the kernel gives no schedstat")
def test_the_time_a_thread_waits_for_a_cpu_is_counted():
    # Two busy processes on one CPU: each runs about half the time, and
    # waits for the CPU the other half.
    cpu = min(os.sched_getaffinity(0))
    measured = subprocess.Popen(
        [sys.executable, "-c", _COMPETE, str(cpu)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nprint(flush=True)\nwhile True: pass"
    competitor = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    try:
        assert measured.stdout is not None
        assert measured.stdin is not None
        assert competitor.stdout is not None
        assert measured.stdout.readline() == "ready\n"
        competitor.stdout.readline()  # spinning
        measured.stdin.write("go\n")
        measured.stdin.flush()
        waited = float(measured.stdout.readline())
        assert measured.wait(30) == 0
    finally:
        for proc in (competitor, measured):
            proc.kill()
            proc.communicate()  # and closes its pipes
    # 0.4 s of wall time shared with a competitor: about 0.2 s waited.
    assert 0.05 < waited < 0.4


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
    last = after["recent"][-1]
    assert last["generation"] == 2
    # The collecting thread was on a CPU for the collection, or most of it.
    assert 0 < last["cpu_ms"] <= last["ms"] + 1
    # Stopped: a collection after stop() is not counted.
    gc.collect(2)
    assert pauses.stats()["count"] == count


def test_stats_taken_while_collections_run_answer():
    """Building the stats allocates, and a collection it starts appends to
    the recent pauses as they are read: an operator's stats request once
    answered 500 for it ("deque mutated during iteration")."""
    pauses = GcPauses(keep=8, min_secs=0.0)
    threshold = gc.get_threshold()
    pauses.start()
    try:
        for _ in range(8):
            gc.collect(0)
        gc.set_threshold(1)  # a young collection at nearly every allocation
        stats = [pauses.stats() for _ in range(50)]
    finally:
        gc.set_threshold(*threshold)
        pauses.stop()
    assert all(len(each["recent"]) == 8 for each in stats)
    assert stats[-1]["count"][0] > 8


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
