"""apply_events/fetch/slices.py: the rows of a large section are made a
slice at a time, and the IO loop runs between slices (the real PostgreSQL)."""

from __future__ import annotations

import asyncio

import psycopg

from apply_events.fetch.slices import SLICE_ROWS, fetch_all_sliced, sliced

ROWS = 2 * SLICE_ROWS + 234


class Ticker:
    """A task that counts the IO loop's turns it gets."""

    def __init__(self) -> None:
        self.turns = 0
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turns += 1


def test_rows_are_fetched_whole_and_in_order_with_the_loop_running_between_slices(database_url):
    async def scenario() -> tuple[list[int], int]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT generate_series(1, %s)", (ROWS,))
            ticker = Ticker()
            await asyncio.sleep(0)  # the ticker starts
            before = ticker.turns
            rows = await fetch_all_sliced(cur)
            turns = ticker.turns - before
            ticker.task.cancel()
            return [row[0] for row in rows], turns

    values, turns = asyncio.run(scenario())
    assert values == list(range(1, ROWS + 1))
    # Three slices, two turns of the loop between them.
    assert turns >= 2


def test_a_result_of_exactly_one_slice_and_an_empty_one():
    async def scenario(n: int) -> list[int]:
        return [item async for item in sliced(list(range(n)))]

    assert asyncio.run(scenario(SLICE_ROWS)) == list(range(SLICE_ROWS))
    assert asyncio.run(scenario(0)) == []


def test_the_items_come_in_order_with_the_loop_running_between_slices():
    async def scenario() -> tuple[list[int], list[int]]:
        ticker = Ticker()
        await asyncio.sleep(0)
        seen: list[int] = []
        turns_at: list[int] = []
        async for item in sliced(list(range(ROWS))):
            seen.append(item)
            turns_at.append(ticker.turns)
        ticker.task.cancel()
        return seen, turns_at

    seen, turns_at = asyncio.run(scenario())
    assert seen == list(range(ROWS))
    # Within a slice the loop does not run; between slices it does.
    assert turns_at[0] == turns_at[SLICE_ROWS - 1]
    assert turns_at[SLICE_ROWS] > turns_at[SLICE_ROWS - 1]
    assert turns_at[2 * SLICE_ROWS] > turns_at[2 * SLICE_ROWS - 1]
