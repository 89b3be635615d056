"""A module for EVENTQ_MODULES in the tests of background updates: small,
fast batches (so that a test sees several), and an update of its own,
`copy_items`, that is not idempotent: it copies `bg_items` into `bg_done`
(whose primary key refuses a row copied twice) in id order, pausing
EVENTQ_TEST_BATCH_PAUSE_SECS inside each batch's transaction so that a
SIGKILL lands mid-batch."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from server.database.background import BackgroundUpdate, Batch, Conn, ModuleApi

BATCH = 3


@contextlib.asynccontextmanager
async def _iteration() -> AsyncIterator[int]:
    await asyncio.sleep(0.01)
    yield 10


def on_update(
    name: str, database: str, one_shot: bool
) -> contextlib.AbstractAsyncContextManager[int]:
    return _iteration()


async def batch_size(name: str, database: str) -> int:
    return BATCH


async def copy_items(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
    after = int(progress.get("last_id", 0))
    cur = await conn.execute(
        "INSERT INTO bg_done (id) SELECT id FROM bg_items WHERE id > %s ORDER BY id LIMIT %s"
        " RETURNING id",
        (after, size),
    )
    ids = [int(row[0]) for row in await cur.fetchall()]
    await asyncio.sleep(float(os.environ.get("EVENTQ_TEST_BATCH_PAUSE_SECS", "0")))
    return Batch(len(ids), {"last_id": max(ids, default=after)}, done=len(ids) < size)


def setup(api: ModuleApi) -> None:
    if os.environ.get("EVENTQ_TEST_SMALL_BATCHES", "1") == "1":
        api.register_background_update_controller_callbacks(on_update, batch_size, batch_size)
    api.register_background_update(BackgroundUpdate("copy_items", copy_items))
