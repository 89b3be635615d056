"""Checkpoints take at most their share of the server's time
(server/upkeep.py, CHECKPOINT_SHARE): after a long one, the periodic
checkpoints wait."""

from __future__ import annotations

import asyncio
import time

from server.config import Settings
from server.upkeep import CHECKPOINT_SHARE, Upkeep


class _Saved:
    """A checkpoint that says it took `took` seconds."""

    def __init__(self, took: float):
        self.took = took
        self.checkpointing = False
        self.runs = 0

    async def checkpoint(self, slice_secs: float) -> float:
        self.runs += 1
        return self.took


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


def test_a_long_checkpoint_holds_the_periodic_ones_back_for_its_share():
    async def scenario() -> tuple[list[int], float]:
        saved = _Saved(took=0.01)
        upkeep = _upkeep(saved)
        runs = []
        started = time.monotonic()
        upkeep._checkpoint_soon()  # the timer's call
        await _turns(3)
        runs.append(saved.runs)
        upkeep._checkpoint_soon()  # too soon after one of 10 ms
        await _turns(3)
        runs.append(saved.runs)
        while saved.runs < 2:
            upkeep._checkpoint_soon()
            await asyncio.sleep(0.005)
        return runs, time.monotonic() - started

    runs, waited = asyncio.run(scenario())
    assert runs == [1, 1]
    assert waited >= 0.01 / CHECKPOINT_SHARE


def test_short_checkpoints_keep_their_period():
    async def scenario() -> int:
        saved = _Saved(took=0.0)
        upkeep = _upkeep(saved)
        for _ in range(3):
            upkeep._checkpoint_soon()
            await _turns(3)
        return saved.runs

    assert asyncio.run(scenario()) == 3
