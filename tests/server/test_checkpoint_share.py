"""Checkpoints take at most their share of the server's time
(server/upkeep.py, CHECKPOINT_SHARE): after a long one, the periodic
checkpoints wait."""

from __future__ import annotations

import asyncio
import time

from server import upkeep as upkeep_module
from server.config import Settings
from server.upkeep import CHECKPOINT_SHARE, Upkeep


class _Saved:
    """A checkpoint that says it took `cpu` seconds of CPU (and `wall`)."""

    def __init__(self, cpu: float, wall: float = 0.0):
        self.cpu = cpu
        self.wall = wall
        self.checkpointing = False
        self.runs = 0
        self.last_checkpoint: dict[str, float] = {}

    async def checkpoint(self, slice_secs: float) -> float:
        self.runs += 1
        self.last_checkpoint = {"took_ms": self.wall * 1000, "cpu_ms": self.cpu * 1000}
        return self.wall


def _upkeep(saved: _Saved) -> Upkeep:
    return Upkeep(
        Settings(),
        None,  # type: ignore[arg-type]  # the registry, unused by checkpoints
        None,  # type: ignore[arg-type]  # the database, unused
        None,  # type: ignore[arg-type]  # the event log reader, unused
        saved,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # the observers, unused
        (),
        None,
        "reader",
        time.monotonic,
        lambda: False,
    )


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def _runs_of(saved: _Saved, calls: int) -> int:
    """The checkpoints run when the timer calls `calls` times, one after
    the other."""
    upkeep = _upkeep(saved)
    for _ in range(calls):
        upkeep._checkpoint_soon()
        await _turns(3)
    return saved.runs


def test_a_long_checkpoint_holds_the_periodic_ones_back_for_its_share():
    async def scenario() -> tuple[list[int], float]:
        saved = _Saved(cpu=0.01)
        upkeep = _upkeep(saved)
        runs = []
        started = time.monotonic()
        upkeep._checkpoint_soon()  # the timer's call
        await _turns(3)
        runs.append(saved.runs)
        upkeep._checkpoint_soon()  # too soon after one of 10 ms of CPU
        await _turns(3)
        runs.append(saved.runs)
        while saved.runs < 2:
            upkeep._checkpoint_soon()
            await asyncio.sleep(0.005)
        return runs, time.monotonic() - started

    runs, waited = asyncio.run(scenario())
    assert runs == [1, 1]
    assert waited >= 0.01 / CHECKPOINT_SHARE


def test_a_checkpoint_that_waited_for_the_disk_holds_nothing_back():
    """Its time waiting for a slow disk is not the server's time."""

    assert asyncio.run(_runs_of(_Saved(cpu=0.0, wall=30.0), calls=2)) == 2


def test_the_hold_back_has_a_ceiling(monkeypatch):
    monkeypatch.setattr(upkeep_module, "MAX_CHECKPOINT_GAP_SECS", 0.05)

    async def scenario() -> float:
        saved = _Saved(cpu=100.0)  # 2,000 s by its share alone
        upkeep = _upkeep(saved)
        started = time.monotonic()
        while saved.runs < 2:
            upkeep._checkpoint_soon()
            await asyncio.sleep(0.005)
        return time.monotonic() - started

    assert 0.05 <= asyncio.run(scenario()) < 5


def test_short_checkpoints_keep_their_period():
    assert asyncio.run(_runs_of(_Saved(cpu=0.0), calls=3)) == 3
