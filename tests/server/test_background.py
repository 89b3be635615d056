"""Background updates (docs/background-updates.md): the runner, its controller, the updates
that use it, and what operators see, against a database of each test's own."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from generation.accounts import CreatedUser, create_user, hash_api_key
from server.admin import db_commands
from server.config import Settings
from server.database import background
from server.database.background import (
    BackgroundUpdate,
    Batch,
    Conn,
    Controller,
    DefaultController,
    Runner,
)
from server.database.db import DELETED_MESSAGES, LOG_FOR_USER
from server.database.retention import event_log_retention
from server.database.updates import (
    EVENT_LOG_REALM_INDEX,
    EVENT_LOG_RECIPIENT_INDEXES,
    event_log_realm_index,
    event_log_recipients_index,
    standard_updates,
    wrap_legacy_api_key_hashes,
)
from tests.support import (
    API_KEY_SECRET,
    REPO,
    Api,
    ServerProcess,
    World,
    run_eventq,
    wait_for,
)


def _rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql.encode(), params)
        return list(cur.fetchall()) if cur.description else []


def _run(url: str, updates: list[BackgroundUpdate], controller: Controller, **kw: Any) -> Runner:
    runner = Runner(url, updates, controller, idle_secs=0.05, **kw)
    asyncio.run(runner.run(until_idle=True))
    return runner


def _enqueue(url: str, *names: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        # The migration's own updates first: the tests here run their own.
        conn.execute("UPDATE background_updates SET finished_at = now()")
        for name in names:
            background.enqueue_sync(conn, name)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_batch_sizes_converge_on_the_target_and_never_go_below_the_minimum(own_db: str):
    clock = FakeClock()
    sizes: list[int] = []

    def counting(cost_secs: float, total: int) -> BackgroundUpdate:
        async def batch(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
            sizes.append(size)
            done = int(progress.get("done", 0))
            items = min(size, total - done)
            # 0.25 ms per item, +-20 % from one batch to the next.
            clock.now += items * cost_secs * (0.8 if len(sizes) % 2 else 1.2)
            return Batch(items, {"done": done + items}, done=done + items >= total)

        return BackgroundUpdate("counting", batch)

    sleeps: list[float] = []

    async def fake_sleep(secs: float) -> None:
        sleeps.append(secs)

    controller = Controller(DefaultController(target_ms=100, sleep_ms=1000, sleep=fake_sleep))
    _enqueue(own_db, "counting")
    _run(own_db, [counting(0.00025, 200_000)], controller, clock=clock)

    assert sizes[0] == 100  # default_batch_size
    # 100 ms at 4,000 items/s: 400 per batch, within the noise.
    settled = sizes[5:-1]
    assert len(settled) > 100
    assert all(300 <= size <= 520 for size in settled), sizes
    assert abs(sum(settled) / len(settled) - 400) < 40, sizes
    assert sleeps
    assert all(secs == 1.0 for secs in sleeps)
    with psycopg.connect(own_db) as conn:
        (status,) = [s for s in background.read_status_sync(conn) if s.name == "counting"]
    assert status.state == "done"
    assert status.items_done == 200_000
    assert status.progress == {"done": 200_000}

    # A slow update: the rate asks for 20 per batch; the minimum (100) holds.
    sizes.clear()
    _enqueue(own_db, "counting")
    _run(own_db, [counting(0.005, 2_000)], controller, clock=clock)
    assert min(sizes) == 100, sizes


def test_custom_callbacks_are_called_with_the_right_arguments_and_a_second_is_refused(
    own_db: str, caplog: pytest.LogCaptureFixture
):
    calls: list[tuple[Any, ...]] = []

    @contextlib.asynccontextmanager
    async def iteration(name: str, one_shot: bool) -> AsyncIterator[int]:
        calls.append(("enter", name, one_shot))
        yield 1  # 1 ms: a batched update's batches shrink to the minimum
        calls.append(("exit", name, one_shot))

    def on_update(name: str, database: str, one_shot: bool) -> Any:
        calls.append(("on_update", name, database, one_shot))
        return iteration(name, one_shot)

    async def default_batch_size(name: str, database: str) -> int:
        calls.append(("default_batch_size", name, database))
        return 7

    async def min_batch_size(name: str, database: str) -> int:
        calls.append(("min_batch_size", name, database))
        return 5

    one_shot_calls: list[int] = []

    async def slow_one_shot(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        one_shot_calls.append(size)
        await conn.execute("SELECT pg_sleep(0.05)")  # far past the 1 ms target
        return Batch(1, {"built": True}, done=True)

    seen: list[int] = []

    async def batched(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        seen.append(size)
        done = int(progress.get("done", 0)) + size
        await conn.execute("SELECT pg_sleep(0.002)")
        return Batch(size, {"done": done}, done=done >= 30)

    controller = Controller(DefaultController(sleep_ms=0))
    first = background.ModuleApi(controller, "first.module")
    assert first.register_background_update_controller_callbacks(
        on_update, default_batch_size, min_batch_size
    )
    caplog.set_level(logging.INFO, logger="eventq.background")
    late = background.ModuleApi(controller, "late.module")
    assert not late.register_background_update_controller_callbacks(on_update)
    assert "callbacks of late.module refused: first.module registered first" in caplog.text

    _enqueue(own_db, "batched")
    with psycopg.connect(own_db, autocommit=True) as conn:
        background.enqueue_sync(conn, "slow_one_shot", ["batched"])
    database = psycopg.conninfo.conninfo_to_dict(own_db)["dbname"]
    _run(
        own_db,
        [
            BackgroundUpdate("batched", batched),
            BackgroundUpdate("slow_one_shot", slow_one_shot, one_shot=True),
        ],
        controller,
    )
    # default_batch_size once per update, before its first batch; then
    # min_batch_size and on_update (entered and exited) around every batch.
    assert calls[:5] == [
        ("min_batch_size", "batched", database),
        ("default_batch_size", "batched", database),
        ("on_update", "batched", database, False),
        ("enter", "batched", False),
        ("exit", "batched", False),
    ]
    assert seen == [7, 5, 5, 5, 5, 5]  # the first, then the floor
    assert ("on_update", "slow_one_shot", database, True) in calls
    assert calls[-2:] == [("enter", "slow_one_shot", True), ("exit", "slow_one_shot", True)]
    assert one_shot_calls == [7]  # once, whatever the target said
    assert "background update batched started\n" in caplog.text
    assert "background update slow_one_shot started (one shot)" in caplog.text
    with psycopg.connect(own_db) as conn:
        statuses = {s.name: s for s in background.read_status_sync(conn)}
    assert statuses["slow_one_shot"].state == "done"
    assert statuses["slow_one_shot"].progress == {"built": True}


def _runner_env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
    env |= {
        "EVENTQ_DATABASE_URL": url,
        "EVENTQ_API_KEY_SECRET": API_KEY_SECRET,
        "EVENTQ_MODULES": "tests.server.background_module",
        "EVENTQ_BACKGROUND_IDLE_SECS": "0.1",
        "EVENTQ_EVENT_LOG_PRUNE_SECS": "0",  # only the updates under test
        "EVENTQ_LOG_LEVEL": "DEBUG",
    }
    return env | extra


def _start_runner(url: str, log: Path, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "server", "db", "background", "run", *args],
            cwd=REPO,
            env=_runner_env(url, **extra),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextlib.contextmanager
def _processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait()


def _items(url: str, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bg_items (id bigint PRIMARY KEY)")
        conn.execute("CREATE TABLE bg_done (id bigint PRIMARY KEY)")
        conn.execute("INSERT INTO bg_items SELECT generate_series(1, %s)", (count,))


def _copied(url: str) -> int:
    return int(_rows(url, "SELECT count(*) FROM bg_done")[0][0])


def test_a_runner_killed_mid_update_resumes_from_the_committed_progress(
    own_db: str, tmp_path: Path
):
    _items(own_db, 3000)
    _enqueue(own_db, "copy_items")
    log = tmp_path / "runner.log"
    with _processes() as started:
        # Small batches, each pausing 20 ms inside its transaction.
        runner = _start_runner(own_db, log, EVENTQ_TEST_BATCH_PAUSE_SECS="0.02")
        started.append(runner)
        wait_for(lambda: _copied(own_db) >= 300, 30, "300 items copied")
        # Killed while a batch's transaction is open (it pauses in there).
        wait_for(
            lambda: _rows(
                own_db,
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'eventq-background cli'"
                " AND state = 'idle in transaction'",
            ),
            10,
            "a batch in progress",
        )
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        ((progress, items_done),) = _rows(
            own_db, "SELECT progress, items_done FROM background_updates WHERE name = 'copy_items'"
        )
        copied = _copied(own_db)
        # What was committed is exactly what the progress says.
        assert progress == {"last_id": copied}
        assert items_done == copied
        assert copied < 3000

        again = _start_runner(own_db, log, "--until-done")
        started.append(again)
        assert again.wait(120) == 0, log.read_text()[-3000:]
    assert _rows(own_db, "SELECT count(*), min(id), max(id) FROM bg_done") == [(3000, 1, 3000)]
    text = log.read_text()
    assert text.count("background update copy_items started") == 1
    assert f"background update copy_items resumed after {copied} items" in text
    assert "background update copy_items finished: 3000 items" in text


def test_two_runners_at_once_one_works_and_the_other_waits(own_db: str, tmp_path: Path):
    # The first runner would need 20 s at least for them all (400 batches of
    # 3, each pausing 50 ms): it still works when the second has started and
    # the status was read, a few seconds on a slow machine. The second, once
    # it takes over, does not pause.
    _items(own_db, 1200)
    _enqueue(own_db, "copy_items")
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with _processes() as started:
        first = _start_runner(own_db, first_log, EVENTQ_TEST_BATCH_PAUSE_SECS="0.05")
        started.append(first)
        wait_for(lambda: "this process runs them" in first_log.read_text(), 20, "the first")
        second = _start_runner(own_db, second_log, EVENTQ_TEST_BATCH_PAUSE_SECS="0")
        started.append(second)
        wait_for(lambda: "another runner works on database" in second_log.read_text(), 20)
        status = run_eventq("db", "background", "status", EVENTQ_DATABASE_URL=own_db)
        assert status.returncode == 0, status.stderr
        assert re.search(r"runner: backend pid \d+, eventq-background cli", status.stdout)
        wait_for(lambda: _copied(own_db) >= 30, 20, "some items copied")
        assert "copy_items" not in second_log.read_text()  # it only waits

        first.send_signal(signal.SIGTERM)  # stops after its batch
        assert first.wait(20) == 0
        wait_for(lambda: "this process runs them" in second_log.read_text(), 20, "takeover")
        wait_for(lambda: _copied(own_db) == 1200, 60, "every item copied")
        wait_for(
            lambda: "background update copy_items finished: 1200 items" in second_log.read_text(),
            20,
        )
    assert "resumed after" in second_log.read_text()
    assert _rows(own_db, "SELECT count(*), max(id) FROM bg_done") == [(1200, 1200)]


def _make_legacy(url: str, *users: CreatedUser) -> dict[int, bytes]:
    """Give `users` unkeyed API key hashes (before migration 0004); by user id."""
    legacy = {user.user_id: hashlib.sha256(user.api_key.encode()).digest() for user in users}
    with psycopg.connect(url, autocommit=True) as conn:
        for user_id, hashed in legacy.items():
            conn.execute(
                "UPDATE users SET api_key_hash = %s, api_key_hash_scheme = 1 WHERE id = %s",
                (hashed, user_id),
            )
    return legacy


def test_legacy_api_key_hashes_are_wrapped_and_still_authenticate(own_db: str, tmp_path: Path):
    realm = World(own_db).realm()
    with psycopg.connect(own_db, autocommit=True) as conn:  # one connection, not 250
        users = [
            create_user(conn, realm, f"u{n}-{uuid.uuid4().hex[:8]}@example.com", "Test User")
            for n in range(250)
        ]
    legacy = _make_legacy(own_db, *users[:240])
    assert run_eventq("db", "background", "enqueue", "wrap_legacy_api_key_hashes",
                      EVENTQ_DATABASE_URL=own_db).returncode == 0  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "server", "db", "background", "run", "--until-done"],
        cwd=REPO,
        env=_runner_env(own_db, EVENTQ_MODULES="", EVENTQ_BACKGROUND_SLEEP_MS="0"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "background update wrap_legacy_api_key_hashes finished: 240 items" in done.stderr
    schemes = dict(_rows(own_db, "SELECT api_key_hash_scheme, count(*) FROM users GROUP BY 1"))
    assert schemes == {2: 10, 3: 240}

    # A dump of the database holds none of the unkeyed hashes.
    pg_dump = shutil.which("pg_dump") or max(
        (str(p) for p in Path("/usr/lib/postgresql").glob("*/bin/pg_dump")), default=None
    )
    assert pg_dump, "pg_dump not found"
    dump = subprocess.run(
        [str(pg_dump), "--data-only", "--table=users", own_db],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    wrapped = hmac.digest(API_KEY_SECRET.encode(), legacy[users[0].user_id], "sha256")
    assert wrapped.hex() in dump  # bytea as hex: the keyed hash is there
    assert not [h for h in legacy.values() if h.hex() in dump]

    # Every key still works; a wrapped row becomes a plain keyed one at login.
    server = ServerProcess(own_db, tmp_path / "state").start()
    try:
        for user in users[:3] + users[-3:]:
            client = Api(server, user)
            assert client.request("GET", "users/me").status_code == 200
            client.close()
        wrong = Api(server, dataclasses.replace(users[0], api_key=users[1].api_key))
        assert wrong.request("GET", "users/me").status_code == 401
        wrong.close()
    finally:
        server.stop()
    expected = hash_api_key(users[0].api_key, API_KEY_SECRET.encode())
    assert _rows(own_db, "SELECT api_key_hash, api_key_hash_scheme FROM users WHERE id = %s",
                 (users[0].user_id,)) == [(expected, 2)]  # fmt: skip


def _index_valid(url: str) -> bool | None:
    rows = _rows(
        url,
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = %s",
        (EVENT_LOG_REALM_INDEX,),
    )
    return rows[0][0] if rows else None


def test_the_realm_index_is_built_concurrently_and_built_again_when_left_invalid(own_db: str):
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO event_log (position, realm_id, event_type, notice)"
            " SELECT nextval('event_log_position'), g % 50, 'message', '\\x7b7d'"
            " FROM generate_series(1, 20000) g"
        )
        conn.execute("DROP INDEX IF EXISTS event_log_realm_position")
    controller = Controller(DefaultController(sleep_ms=0))
    _enqueue(own_db, "event_log_realm_index")
    _run(own_db, [event_log_realm_index()], controller)
    assert _index_valid(own_db) is True
    # A build that did not finish leaves an invalid index of that name (as a
    # killed one does): a unique one over duplicates fails just so.
    _rows(own_db, f"DROP INDEX {EVENT_LOG_REALM_INDEX}")
    with (
        psycopg.connect(own_db, autocommit=True) as conn,
        pytest.raises(psycopg.errors.UniqueViolation),
    ):
        conn.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY {EVENT_LOG_REALM_INDEX} ON event_log (realm_id)"
        )
    assert _index_valid(own_db) is False
    _enqueue(own_db, "event_log_realm_index")
    _run(own_db, [event_log_realm_index()], controller)
    assert _index_valid(own_db) is True
    ((progress,),) = _rows(
        own_db, "SELECT progress FROM background_updates WHERE name = 'event_log_realm_index'"
    )
    assert progress == {"index": EVENT_LOG_REALM_INDEX, "built": True}
    # resume_from's read of one realm uses it.
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("ANALYZE event_log")
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT position, notice FROM event_log WHERE position > 100"
                " AND position <= 20000 AND (realm_id = 7 OR realm_id IS NULL)"
                " ORDER BY position LIMIT 1000"
            )
        )
    assert EVENT_LOG_REALM_INDEX in plan, plan


def _logged(url: str, hours_ago: list[float]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for hours in hours_ago:
            conn.execute(
                "INSERT INTO event_log (position, realm_id, event_type, notice, created_at)"
                " VALUES (nextval('event_log_position'), 1, 'note', '{}',"
                " now() - make_interval(hours => %s))",
                (hours,),
            )


def _small_batches(batch: int) -> Controller:
    async def size(name: str, database: str) -> int:
        return batch

    controller = Controller(DefaultController(sleep_ms=0))
    controller.register(controller.default.on_update, size, size, module="test")
    return controller


def test_retention_by_age_prunes_the_old_rows_only_in_batches(own_db: str):
    _logged(own_db, [50, 30, 25, 2, 1, 0])
    _enqueue(own_db)
    retention = event_log_retention(24, 1 << 30, 3600)
    _run(own_db, [retention], _small_batches(2))
    assert [r[0] for r in _rows(own_db, "SELECT position FROM event_log ORDER BY 1")] == [4, 5, 6]
    assert _rows(own_db, "SELECT through FROM event_log_pruned") == [(3,)]
    ((progress, items, batches),) = _rows(
        own_db,
        "SELECT progress, items_done, batches FROM background_updates"
        " WHERE name = 'event_log_retention'",
    )
    assert (progress, items, batches) == ({"cut": 3, "through": 3}, 3, 2)
    # Not again until `every_secs` has passed since it finished.
    _rows(own_db, "UPDATE event_log SET created_at = now() - interval '40 h' WHERE position = 4")
    _run(own_db, [retention], _small_batches(2))
    assert _rows(own_db, "SELECT count(*) FROM event_log") == [(3,)]
    # Once due, a new run starts from nothing.
    _run(own_db, [event_log_retention(24, 1 << 30, 0.001)], _small_batches(2))
    assert [r[0] for r in _rows(own_db, "SELECT position FROM event_log ORDER BY 1")] == [5, 6]


def _recurring(
    name: str, ran: list[str], every_secs: float, enough: asyncio.Event | None = None
) -> BackgroundUpdate:
    """A recurring update that does one item a run and notes each run (and
    sets `enough` once 8 runs are noted)."""

    async def batch(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        ran.append(name)
        if enough is not None and len(ran) >= 8:
            enough.set()
        return Batch(1, {"ran": True}, done=True)

    return BackgroundUpdate(name, batch, every_secs=every_secs)


def test_a_run_until_done_ends_when_the_clock_makes_a_recurring_update_due_again(own_db: str):
    _enqueue(own_db)
    ran: list[str] = []

    @contextlib.asynccontextmanager
    async def two_hours_pass(name: str, database: str, one_shot: bool) -> AsyncIterator[int]:
        yield 100
        # After each batch the database's clock has moved on 2 hours: the
        # hourly update is due again at the runner's next look.
        async with await psycopg.AsyncConnection.connect(own_db, autocommit=True) as conn:
            await conn.execute(
                "UPDATE background_updates SET finished_at = finished_at - interval '2 hours'"
                " WHERE finished_at IS NOT NULL"
            )

    async def size(name: str, database: str) -> int:
        return 100

    controller = Controller(DefaultController(sleep_ms=0))
    controller.register(two_hours_pass, size, size, module="test")
    updates = [_recurring("hourly", ran, 3600), _recurring("also_hourly", ran, 3600)]

    async def until_done() -> bool:
        runner = Runner(own_db, updates, controller, idle_secs=0.05)
        return await asyncio.wait_for(runner.run(until_idle=True), 120)

    assert asyncio.run(until_done())
    assert sorted(ran) == ["also_hourly", "hourly"]  # each once
    # Due again now: the next run does each once more.
    assert asyncio.run(until_done())
    assert sorted(ran) == ["also_hourly", "also_hourly", "hourly", "hourly"]

    # A runner that keeps going does run it again as the clock says (what
    # the run above would have done for ever).
    async def keeps_going() -> None:
        enough = asyncio.Event()
        updates = [_recurring(name, ran, 3600, enough) for name in ("hourly", "also_hourly")]
        runner = Runner(own_db, updates, controller, idle_secs=0.05)
        task = asyncio.create_task(runner.run())
        await asyncio.wait_for(enough.wait(), 120)
        runner.stop()
        await asyncio.wait_for(task, 60)

    asyncio.run(keeps_going())


def test_a_run_until_done_ends_when_the_period_is_shorter_than_the_run(own_db: str):
    _enqueue(own_db)
    ran: list[str] = []
    # 1 ms, with 20 ms between two batches: due again at every look.
    update = _recurring("often", ran, 0.001)
    controller = Controller(DefaultController(sleep_ms=20))

    async def until_done() -> bool:
        runner = Runner(own_db, [update], controller, idle_secs=0.05)
        return await asyncio.wait_for(runner.run(until_idle=True), 120)

    assert asyncio.run(until_done())
    assert ran == ["often"]
    # The command line as an operator runs it: `--until-done` returns.
    done = run_eventq(
        "db", "background", "run", "--until-done",
        **_runner_env(own_db, EVENTQ_EVENT_LOG_PRUNE_SECS="0.001"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    finished = _rows(
        own_db,
        "SELECT name FROM background_updates WHERE name LIKE '%%_retention'"
        " AND finished_at IS NOT NULL ORDER BY 1",
    )
    assert finished == [("event_log_retention",), ("queue_journal_retention",)]


def test_retention_keeps_what_a_server_still_needs_unless_it_went_silent(own_db: str):
    _logged(own_db, [30] * 10)  # all past the retention
    _enqueue(own_db)
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("INSERT INTO stream_readers (reader, floor) VALUES ('a', 6), ('b', 8)")
        # Silent for longer than the retention: a removed shard.
        conn.execute(
            "INSERT INTO stream_readers (reader, floor, updated_at)"
            " VALUES ('gone', 2, now() - interval '25 hours')"
        )
    _run(own_db, [event_log_retention(24, 1 << 30, 0.001)], _small_batches(100))
    assert [r[0] for r in _rows(own_db, "SELECT position FROM event_log ORDER BY 1")] == [
        7,
        8,
        9,
        10,
    ]
    _rows(own_db, "UPDATE stream_readers SET floor = 10")
    _run(own_db, [event_log_retention(24, 1 << 30, 0.001)], _small_batches(100))
    assert _rows(own_db, "SELECT count(*) FROM event_log") == [(0,)]
    assert _rows(own_db, "SELECT through FROM event_log_pruned") == [(10,)]


def test_a_failing_batch_is_rolled_back_reported_and_retried(own_db: str, caplog):
    attempts: list[int] = []

    async def flaky(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        attempts.append(size)
        await conn.execute("INSERT INTO bg_done VALUES (1)")  # rolled back when it fails
        if len(attempts) == 1:
            raise RuntimeError("disk on fire")
        if len(attempts) == 2:
            # A database error that is not a lost connection is a failure too.
            await conn.execute("SELECT 1/0")
        return Batch(1, {"ok": True}, done=True)

    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE bg_done (id bigint PRIMARY KEY)")
    _enqueue(own_db, "flaky")
    caplog.set_level(logging.INFO, logger="eventq.background")
    controller = Controller(DefaultController(sleep_ms=0))
    update = BackgroundUpdate("flaky", flaky)

    # Run to the end (as `db background run --until-done`): a failure stops it.
    assert not asyncio.run(Runner(own_db, [update], controller).run(until_idle=True))
    with psycopg.connect(own_db) as conn:
        (failing,) = [s for s in background.read_status_sync(conn) if s.name == "flaky"]
    assert (failing.state, failing.failures) == ("failing", 1)
    assert failing.last_error == "RuntimeError: disk on fire"
    assert "background update flaky failed (1 in a row), trying again in 2 s" in caplog.text
    assert _rows(own_db, "SELECT count(*) FROM bg_done") == [(0,)]

    # A runner that keeps going retries it after the pause.
    runner = Runner(own_db, [update], controller, idle_secs=0.05)

    def succeeded() -> bool:
        rows = _rows(own_db, "SELECT finished_at FROM background_updates WHERE name = 'flaky'")
        return rows[0][0] is not None

    async def until_done() -> None:
        task = asyncio.create_task(runner.run())
        # Two pauses (2 s, 4 s) and three tries: 60 s is room for a slow
        # machine. Looked at from a thread: the runner has the loop.
        await asyncio.to_thread(wait_for, succeeded, 60, "the third try to succeed")
        runner.stop()
        await asyncio.wait_for(task, 30)

    asyncio.run(until_done())
    assert "background update flaky failed (2 in a row), trying again in 4 s" in caplog.text
    assert "ZeroDivisionError" in caplog.text or "DivisionByZero" in caplog.text
    assert len(attempts) == 3
    assert _rows(own_db, "SELECT id FROM bg_done") == [(1,)]  # once
    ((finished, failures, error),) = _rows(
        own_db,
        "SELECT finished_at IS NOT NULL, failures, last_error FROM background_updates"
        " WHERE name = 'flaky'",
    )
    assert (finished, failures, error) == (True, 0, None)


def test_an_update_waits_for_what_its_code_depends_on_and_recurring_ones_go_first(own_db: str):
    order: list[str] = []

    def update(name: str, depends_on: tuple[str, ...] = (), every: float | None = None) -> Any:
        async def batch(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
            order.append(name)
            n = int(progress.get("n", 0)) + 1
            return Batch(1, {"n": n}, done=n >= 2)

        return BackgroundUpdate(name, batch, depends_on=depends_on, every_secs=every)

    # Enqueued by "a migration" without the dependency, in this order.
    _enqueue(own_db, "second", "first")
    updates = [update("second", ("first",)), update("first"), update("pruning", every=3600)]
    _run(own_db, updates, Controller(DefaultController(sleep_ms=0)))
    assert order == ["pruning", "pruning", "first", "first", "second", "second"]
    with psycopg.connect(own_db) as conn:
        statuses = {s.name: s for s in background.read_status_sync(conn)}
    assert statuses["second"].state == "done"


def test_status_and_metrics_show_the_updates_of_a_server_that_runs_them(
    own_db: str, tmp_path: Path
):
    world = World(own_db)
    user = world.user()
    _make_legacy(own_db, user)
    with psycopg.connect(own_db, autocommit=True) as conn:
        background.enqueue_sync(conn, "wrap_legacy_api_key_hashes")
    server = ServerProcess(
        own_db,
        tmp_path / "state",
        {
            "EVENTQ_BACKGROUND_TASKS": "on",
            "EVENTQ_BACKGROUND_IDLE_SECS": "0.05",
            "EVENTQ_MODULES": "tests.server.background_module,tests.server.background_module_late",
        },
    ).start()
    try:
        wait_for(lambda: "wrap_legacy_api_key_hashes finished: 1 items" in server.log(), 20)
        log = server.settled_log()
        assert "callbacks registered by tests.server.background_module" in log
        assert (
            "callbacks of tests.server.background_module_late refused:"
            " tests.server.background_module registered first"
        ) in log
        session = Api(server, user).session
        # The log line comes before the runner reads the status again and
        # lets the lock go: wait for both.
        metrics = wait_for(
            lambda: (
                text
                if "eventq_background_runner_working 0.0"
                in (text := session.get(f"{server.url}/metrics", timeout=10).text)
                and 'eventq_background_update_done{update="wrap_legacy_api_key_hashes"} 1.0' in text
                else None
            ),
            20,
            "the runner idle with the update done in /metrics",
        )
        assert (
            'eventq_background_update_items_done{update="wrap_legacy_api_key_hashes"} 1.0'
            in metrics
        )
        assert (
            'eventq_background_update_batch_size{update="wrap_legacy_api_key_hashes"} 3.0'
            in metrics
        )

        # Idle, the runner still takes the lock for each look at the table
        # (every 0.05 s here): a status between two looks says none works.
        def idle_status() -> subprocess.CompletedProcess[str] | None:
            status = run_eventq("db", "background", "status", EVENTQ_DATABASE_URL=own_db,
                                EVENTQ_MODULES="tests.server.background_module")  # fmt: skip
            assert status.returncode == 0, status.stderr
            return status if "runner: none working now" in status.stdout else None

        status = wait_for(idle_status, 60, "a status between two of the runner's looks")
        line = next(x for x in status.stdout.splitlines() if x.startswith("wrap_legacy"))
        assert line.split()[:3] == ["wrap_legacy_api_key_hashes", "done", "1"]
        assert "copy_items" not in status.stdout  # enqueued by nobody
        as_json = run_eventq("db", "background", "status", "--json", EVENTQ_DATABASE_URL=own_db)
        statuses = json.loads(as_json.stdout)["updates"]
        wrapped = next(u for u in statuses if u["name"] == "wrap_legacy_api_key_hashes")
        assert wrapped["state"] == "done"
        assert wrapped["progress"]["wrapped"] == 1
    finally:
        server.stop()
    assert "background updates: this process runs them" in server.settled_log()


def test_the_command_line_refuses_what_it_cannot_do(own_db: str):
    unknown = run_eventq("db", "background", "enqueue", "no_such", EVENTQ_DATABASE_URL=own_db)
    assert unknown.returncode == 1
    assert "no background update named 'no_such'; this version knows wrap_legacy" in unknown.stderr
    bad = run_eventq("db", "background", "status", EVENTQ_DATABASE_URL=own_db,
                     EVENTQ_MODULES="no.such.module")  # fmt: skip
    assert bad.returncode == 2
    assert "EVENTQ_MODULES: cannot import no.such.module" in bad.stderr
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("DROP TABLE background_updates")
    missing = run_eventq("db", "background", "status", EVENTQ_DATABASE_URL=own_db)
    assert missing.returncode == 1
    assert "no background_updates table: run `eventq db migrate` first" in missing.stderr


def test_a_one_shot_update_runs_when_the_controller_gives_it_no_duration(own_db: str):
    @contextlib.asynccontextmanager
    async def no_duration() -> AsyncIterator[None]:
        yield None  # Synapse ignores a one-shot's duration: a module may give none

    controller = Controller(DefaultController(sleep_ms=0))
    controller.register(lambda name, database, one_shot: no_duration(), module="test")
    sizes: list[int] = []

    async def build(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        sizes.append(size)
        return Batch(1, {"built": True}, done=True)

    _enqueue(own_db, "build")
    runner = Runner(own_db, [BackgroundUpdate("build", build, one_shot=True)], controller)
    assert asyncio.run(runner.run(until_idle=True))
    assert sizes == [100]  # the default batch size, for what it is worth
    with psycopg.connect(own_db) as conn:
        (built,) = [s for s in background.read_status_sync(conn) if s.name == "build"]
    assert (built.state, built.failures, built.progress) == ("done", 0, {"built": True})


def test_an_enqueue_while_a_one_shot_update_runs_makes_it_run_again(
    own_db: str, caplog: pytest.LogCaptureFixture
):
    runs: list[int] = []

    async def build(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            # An operator's `db background enqueue` while the index builds.
            with psycopg.connect(own_db, autocommit=True) as other:
                background.enqueue_sync(other, "build")
        return Batch(1, {"run": len(runs)}, done=True)

    _enqueue(own_db, "build")
    caplog.set_level(logging.INFO, logger="eventq.background")
    controller = Controller(DefaultController(sleep_ms=0))
    _run(own_db, [BackgroundUpdate("build", build, one_shot=True)], controller)
    assert runs == [1, 2]
    assert "background update build was enqueued again while it ran: it runs again" in caplog.text
    assert caplog.text.count("background update build started (one shot)") == 2
    assert caplog.text.count("background update build finished") == 1
    ((progress, finished),) = _rows(
        own_db,
        "SELECT progress, finished_at IS NOT NULL FROM background_updates WHERE name = 'build'",
    )
    assert (progress, finished) == ({"run": 2}, True)


def test_a_failed_update_waits_for_its_next_try_whichever_runner_looks(own_db: str):
    attempts: list[int] = []

    async def flaky(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        attempts.append(size)
        raise RuntimeError("not yet")

    update = BackgroundUpdate("flaky", flaky)
    controller = Controller(DefaultController(sleep_ms=0))
    _enqueue(own_db, "flaky")

    def run_once() -> bool:
        # A new runner each time, as another process would be.
        return asyncio.run(
            Runner(own_db, [update], controller, idle_secs=0.05).run(until_idle=True)
        )

    def flaky_status() -> background.UpdateStatus:
        with psycopg.connect(own_db) as conn:
            (status,) = [
                s for s in background.read_status_sync(conn, [update]) if s.name == "flaky"
            ]
        return status

    assert not run_once()
    assert len(attempts) == 1
    failing = flaky_status()
    assert failing.state == "failing"
    assert failing.retry_in is not None
    assert 0 < failing.retry_in <= 2

    # Another runner finds nothing it may do yet: the pause is in the row.
    assert run_once()
    assert len(attempts) == 1

    # Once the pause is over, the next runner tries again, and pauses longer.
    _rows(own_db, "UPDATE background_updates SET retry_at = now() WHERE name = 'flaky'")
    assert not run_once()
    assert len(attempts) == 2
    again = flaky_status()
    assert again.failures == 2
    assert again.retry_in is not None
    assert 2 < again.retry_in <= 4

    # An enqueue starts it afresh, with no pause.
    with psycopg.connect(own_db, autocommit=True) as conn:
        background.enqueue_sync(conn, "flaky")
    assert flaky_status().retry_in is None
    assert not run_once()
    assert len(attempts) == 3


def test_the_crash_pause_starts_again_from_2_s_after_a_cycle_that_worked(
    own_db: str, caplog: pytest.LogCaptureFixture
):
    class Crashing(Runner):
        """Crashes (out of its session) at its 1st, 2nd and 4th look for work."""

        looks = 0

        async def _rearm_recurring(self, conn: Conn) -> None:
            self.looks += 1
            if self.looks in (1, 2, 4):
                raise RuntimeError(f"crash at look {self.looks}")
            if self.looks == 5:
                self.stop()

        async def _pause(self, secs: float) -> None:
            await asyncio.sleep(0)  # the pauses are what the log says

    _enqueue(own_db)
    caplog.set_level(logging.INFO, logger="eventq.background")
    runner = Crashing(own_db, [], Controller(), idle_secs=0.05, watch_status=False)
    asyncio.run(asyncio.wait_for(runner.run(), 30))
    assert runner.looks == 5
    waits = re.findall(r"the runner failed; again in (\d+) s", caplog.text)
    # Two crashes in a row, a cycle that ended well, then a first crash again.
    assert waits == ["2", "4", "2"]


def test_a_batch_grows_at_most_tenfold(own_db: str):
    clock = FakeClock()
    sizes: list[int] = []

    async def fast(conn: Conn, progress: dict[str, Any], size: int) -> Batch:
        sizes.append(size)
        clock.now += size * 0.000_001  # 1,000,000 items/s: 100,000 in the 100 ms target
        return Batch(size, {"batches": len(sizes)}, done=len(sizes) == 6)

    _enqueue(own_db, "fast")
    _run(own_db, [BackgroundUpdate("fast", fast)], Controller(DefaultController(sleep_ms=0)),
         clock=clock)  # fmt: skip
    assert sizes[:3] == [100, 1_000, 10_000]
    assert all(99_000 <= size <= 100_000 for size in sizes[3:]), sizes


def test_retention_goes_on_from_its_progress_and_a_new_run_from_the_bottom(own_db: str):
    _logged(own_db, [30] * 6)  # positions 1-6, all past the retention
    _enqueue(own_db)
    # A run that stopped having pruned through 3 of 5; 1-3 left behind (a
    # late commit below what a batch had deleted) are not this run's to scan.
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("UPDATE event_log_pruned SET through = 3")
        conn.execute(
            "INSERT INTO background_updates (name, progress, items_done, batches, started_at)"
            """ VALUES ('event_log_retention', '{"cut": 5, "through": 3}', 3, 1, now())"""
        )
    _run(own_db, [event_log_retention(24, 1 << 30, 3600)], _small_batches(100))
    assert [r[0] for r in _rows(own_db, "SELECT position FROM event_log ORDER BY 1")] == [
        1,
        2,
        3,
        6,
    ]
    assert _rows(own_db, "SELECT through FROM event_log_pruned") == [(5,)]
    ((progress, items),) = _rows(
        own_db,
        "SELECT progress, items_done FROM background_updates WHERE name = 'event_log_retention'",
    )
    assert (progress, items) == ({"cut": 5, "through": 5}, 5)
    # A new run starts below the oldest row left, whatever was pruned before.
    _run(own_db, [event_log_retention(24, 1 << 30, 0.001)], _small_batches(100))
    assert _rows(own_db, "SELECT count(*) FROM event_log") == [(0,)]
    assert _rows(own_db, "SELECT through FROM event_log_pruned") == [(6,)]


def _retention_rows(url: str) -> None:
    """The rows a runner with pruning on inserts (another shard's)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO background_updates (name) VALUES"
            " ('event_log_retention'), ('queue_journal_retention')"
        )


def test_status_shows_retention_as_disabled_here_where_pruning_is_off(own_db: str):
    _enqueue(own_db)
    _retention_rows(own_db)

    def states(**env: str) -> dict[str, str]:
        shown = run_eventq("db", "background", "status", "--json", EVENTQ_DATABASE_URL=own_db,
                           **env)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        return {u["name"]: u["state"] for u in json.loads(shown.stdout)["updates"]}

    off = states(EVENTQ_EVENT_LOG_PRUNE_SECS="0")
    assert off["event_log_retention"] == "disabled here"  # not "unknown": this version knows it
    assert off["queue_journal_retention"] == "disabled here"
    assert states()["event_log_retention"] == "pending"
    # ... and a runner with pruning off leaves them alone.
    _logged(own_db, [30])
    off_settings = Settings.from_env({"EVENTQ_DATABASE_URL": own_db,
                                      "EVENTQ_EVENT_LOG_PRUNE_SECS": "0"})  # fmt: skip
    updates = standard_updates(off_settings, API_KEY_SECRET.encode())
    runner = _run(own_db, updates, Controller(DefaultController(sleep_ms=0)))
    assert {s.name: s.state for s in runner.status}["event_log_retention"] == "disabled here"
    assert _rows(own_db, "SELECT count(*) FROM event_log") == [(1,)]
    # Nor do they make `run --until-done` fail: they are the servers' to run.
    done = run_eventq("db", "background", "run", "--until-done", **_runner_env(own_db))
    assert done.returncode == 0, done.stderr
    assert "not done" not in done.stderr


def test_a_wrap_begun_by_the_version_before_goes_on_with_its_secret_fingerprint(own_db: str):
    world = World(own_db)
    realm = world.realm()
    users = [world.user(realm) for _ in range(5)]
    for user in users:
        _make_legacy(own_db, user)
    update = wrap_legacy_api_key_hashes(API_KEY_SECRET.encode())
    # What the version before wrote after its first batch: the fingerprint
    # under "secret".
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("UPDATE background_updates SET finished_at = now()")
        background.enqueue_sync(conn, update.name)
        before: dict[str, Any] = {"last_id": users[1].user_id, "wrapped": 2, "total": 5}
        before["secret"] = _fingerprint(API_KEY_SECRET.encode())
        conn.execute(
            "UPDATE users SET api_key_hash_scheme = 3 WHERE id = ANY(%s)",
            ([users[0].user_id, users[1].user_id],),
        )
        conn.execute(
            "UPDATE background_updates SET progress = %s, started_at = now() WHERE name = %s",
            (json.dumps(before), update.name),
        )
    runner = _run(own_db, [update], Controller(DefaultController(sleep_ms=0)))
    (status,) = [s for s in runner.status if s.name == update.name]
    assert (status.state, status.failures) == ("done", 0), status.last_error
    assert status.progress == {
        "last_id": users[-1].user_id,
        "wrapped": 5,
        "total": 5,
        "secret_fingerprint": before["secret"],
        "secret": before["secret"],  # what a runner of the version before reads
    }
    schemes = _rows(own_db, "SELECT api_key_hash_scheme, count(*) FROM users GROUP BY 1")
    assert dict(schemes) == {3: 5}
    # Another secret is refused under either key.
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute(
            "UPDATE background_updates SET progress = %s, finished_at = NULL WHERE name = %s",
            (json.dumps(before), update.name),
        )
    wrong = wrap_legacy_api_key_hashes(b"another secret")
    failed = Runner(own_db, [wrong], Controller(DefaultController(sleep_ms=0)))
    assert not asyncio.run(failed.run(until_idle=True))


def _fingerprint(secret: bytes) -> str:
    return hmac.digest(secret, b"eventq wrap_legacy_api_key_hashes", "sha256").hex()[:16]


def test_a_freshly_migrated_database_lists_the_updates_of_its_migrations_as_pending(
    own_db: str, capsys: pytest.CaptureFixture[str]
):
    settings = Settings.from_env({"EVENTQ_DATABASE_URL": own_db})
    assert db_commands.cmd_background_status(settings, argparse.Namespace(json=True)) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["runner"] is None
    assert [(u["name"], u["state"], u["items_done"]) for u in shown["updates"]] == [
        ("wrap_legacy_api_key_hashes", "pending", 0),  # 0009
        ("event_log_realm_index", "pending", 0),  # 0009
        ("event_log_recipients_index", "pending", 0),  # 0012
        ("message_history_indexes", "pending", 0),  # 0013
    ]


def test_the_recipient_indexes_are_built_concurrently_and_serve_resume_reads(own_db: str):
    with psycopg.connect(own_db, autocommit=True) as conn:
        # A realm's log: 200 users' events, with public channel messages
        # and rows of the version before (no recipients).
        conn.execute(
            "INSERT INTO event_log (position, realm_id, event_type, notice, recipients,"
            " public_message)"
            " SELECT nextval('event_log_position'), 1, 'message', '\\x7b7d',"
            " CASE WHEN g % 100 <> 0 THEN ARRAY[g % 200, (g + 1) % 200]::bigint[] END,"
            " CASE WHEN g % 100 <> 0 THEN g % 1000 = 0 END"
            " FROM generate_series(1, 20000) g"
        )
    controller = Controller(DefaultController(sleep_ms=0))
    _enqueue(own_db, "event_log_recipients_index")
    _run(own_db, [event_log_recipients_index()], controller)
    ((progress,),) = _rows(
        own_db, "SELECT progress FROM background_updates WHERE name = 'event_log_recipients_index'"
    )
    assert progress == {"built": sorted(EVENT_LOG_RECIPIENT_INDEXES, key=list(
        EVENT_LOG_RECIPIENT_INDEXES).index)}  # fmt: skip
    valid = _rows(
        own_db,
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indisvalid AND c.relname = ANY(%s) ORDER BY 1",
        (list(EVENT_LOG_RECIPIENT_INDEXES),),
    )
    assert [r[0] for r in valid] == sorted(EVENT_LOG_RECIPIENT_INDEXES)
    # Run again: nothing to build.
    _enqueue(own_db, "event_log_recipients_index")
    _run(own_db, [event_log_recipients_index()], controller)
    ((progress,),) = _rows(
        own_db, "SELECT progress FROM background_updates WHERE name = 'event_log_recipients_index'"
    )
    assert progress == {"built": []}
    # One user's read (server/database/db.py log_for_user) uses them, not a scan.
    with psycopg.connect(own_db, autocommit=True) as conn:
        conn.execute("ANALYZE event_log")
        params = {"user": 7, "after": 100, "upto": 20000, "realm": 1, "types": None,
                  "public": True, "limit": 1000}  # fmt: skip
        plan = "\n".join(
            row[0] for row in conn.execute(b"EXPLAIN " + LOG_FOR_USER.encode(), params)
        )
        deletions = {"realm": 1, "after": 100, "upto": 20000, "ids": [5, 6]}
        plan += "\n".join(
            row[0] for row in conn.execute(b"EXPLAIN " + DELETED_MESSAGES.encode(), deletions)
        )
    for name in EVENT_LOG_RECIPIENT_INDEXES:
        assert name in plan, plan
