"""Rows turned into Python objects a slice at a time, so that a realm of
thousands of users does not stop the server's IO loop for the whole of it.

A query's result is in memory once `execute` returns; what costs is making
its rows (a dataclass each, a datetime each) and then the dictionaries the
clients see, all on the loop. Both are done `SLICE_ROWS` rows at a time,
letting the loop run between slices: a register in a realm of 2,001 users
stopped the loop for 17-28 ms in one step (tests/benchmarks/resume.py,
phase f). The fetch is not atomic anyway (see this package's docstring), so
nothing is lost by letting other work in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

from psycopg import AsyncCursor

T = TypeVar("T")

# About a millisecond of row making on this machine kind (a person's row and
# its dictionary, ~2 µs each; GET /users and register build both).
SLICE_ROWS = 500


async def fetch_all_sliced(cur: AsyncCursor[T]) -> list[T]:
    """`cur.fetchall()`, `SLICE_ROWS` rows at a time, yielding between."""
    rows: list[T] = []
    while True:
        batch = await cur.fetchmany(SLICE_ROWS)
        rows.extend(batch)
        if len(batch) < SLICE_ROWS:
            return rows
        await asyncio.sleep(0)


async def sliced(items: Sequence[T]) -> AsyncIterator[T]:
    """`items`, yielding to the loop after every `SLICE_ROWS` of them."""
    for start in range(0, len(items), SLICE_ROWS):
        if start:
            await asyncio.sleep(0)
        for item in items[start : start + SLICE_ROWS]:
            yield item
