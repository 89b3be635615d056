"""`eventq db background run` as operators use it: how it stops on a signal,
what `--until-done` says is left, and `--wait-secs`."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psycopg

from server.database import background
from tests.server.test_background import (
    _copied,
    _enqueue,
    _items,
    _processes,
    _rows,
    _runner_env,
    _start_runner,
)
from tests.support import run_eventq, wait_for


def _in_batch(url: str) -> bool:
    return bool(
        _rows(
            url,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'eventq-background cli'"
            " AND state = 'idle in transaction'",
        )
    )


def _progress(url: str) -> int:
    ((progress,),) = _rows(url, "SELECT progress FROM background_updates WHERE name = 'copy_items'")
    return int(progress.get("last_id", 0))


def test_run_stops_after_the_batch_at_a_signal_and_at_once_at_a_second(own_db: str, tmp_path: Path):
    _items(own_db, 300)
    _enqueue(own_db, "copy_items")
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with _processes() as started:
        # Each batch (3 items) pauses 1 s in its transaction.
        first = _start_runner(own_db, first_log, "--until-done", EVENTQ_TEST_BATCH_PAUSE_SECS="1")
        started.append(first)
        wait_for(lambda: _in_batch(own_db), 20, "a batch in progress")
        before = _copied(own_db)
        first.send_signal(signal.SIGINT)
        assert first.wait(20) == 1  # --until-done, and not done
        text = first_log.read_text()
        assert "SIGINT: stopping after the current batch (again to exit now)" in text
        # The batch in progress was finished and committed, with its progress.
        assert _copied(own_db) > before
        assert _progress(own_db) == _copied(own_db)
        assert "eventq: 1 background updates not done:" in text
        assert re.search(r"\n  copy_items: running \(\d+ items done\)\n", text), text

        # Each batch now pauses a minute: a second signal does not wait for it.
        second = _start_runner(own_db, second_log, EVENTQ_TEST_BATCH_PAUSE_SECS="60")
        started.append(second)
        wait_for(lambda: "copy_items resumed after" in second_log.read_text(), 20, "resumed")
        wait_for(lambda: _in_batch(own_db), 20, "a batch in progress")
        before = _copied(own_db)
        second.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping after the current batch" in second_log.read_text(), 10)
        second.send_signal(signal.SIGTERM)
        assert second.wait(10) == 128 + signal.SIGTERM
        assert "SIGTERM again: exiting now" in second_log.read_text()
    # Its batch was rolled back with its connection: nothing copied twice or
    # lost. (Its backend ends once it sees the connection closed: waited on.)
    wait_for(lambda: not _in_batch(own_db), 10, "the batch's backend to end")
    assert _copied(own_db) == before
    assert _progress(own_db) == before


def test_run_until_done_fails_and_says_what_is_left(own_db: str):
    _items(own_db, 5)
    _enqueue(own_db, "copy_items")
    with psycopg.connect(own_db, autocommit=True) as conn:
        # Enqueued by a newer version's migration, and one of ours after it.
        conn.execute("INSERT INTO background_updates (name) VALUES ('from_a_newer_version')")
        background.enqueue_sync(conn, "wrap_legacy_api_key_hashes", ["from_a_newer_version"])
        # Failed twice (in another runner): not to be tried again for a minute.
        background.enqueue_sync(conn, "event_log_realm_index")
        conn.execute(
            "UPDATE background_updates SET failures = 2, last_error = 'RuntimeError: boom',"
            " retry_at = now() + interval '60 s' WHERE name = 'event_log_realm_index'"
        )
    done = run_eventq("db", "background", "run", "--until-done", **_runner_env(own_db))
    assert done.returncode == 1, done.stderr
    assert "background update copy_items finished: 5 items" in done.stderr
    assert "eventq: 3 background updates not done:" in done.stderr
    assert (
        "\n  from_a_newer_version: unknown (enqueued by a newer version; run that version's runner)"
        in done.stderr
    )
    assert "\n  wrap_legacy_api_key_hashes: waiting for from_a_newer_version\n" in done.stderr
    assert re.search(
        r"\n  event_log_realm_index: failing \(2 failures in a row, next try in \d+ s;"
        r" last: RuntimeError: boom\)",
        done.stderr,
    ), done.stderr
    assert "copy_items:" not in done.stderr.split("not done:")[1]
    assert _copied(own_db) == 5


def test_run_gives_up_after_wait_secs_while_another_runner_works(own_db: str):
    _enqueue(own_db)
    with psycopg.connect(own_db, autocommit=True, application_name="another runner") as other:
        other.execute("SELECT pg_advisory_lock(%s)", (background.RUNNER_LOCK,))
        began = time.monotonic()
        busy = run_eventq("db", "background", "run", "--wait-secs", "0.5", **_runner_env(own_db))
        took = time.monotonic() - began
    assert busy.returncode == 1, busy.stderr
    assert re.search(
        r"eventq: another runner works on database \S+ \(backend pid \d+, another runner,"
        r" from [^)]+\); gave up after waiting 0\.5 s",
        busy.stderr,
    ), busy.stderr
    assert took < 30
    refused = run_eventq("db", "background", "run", "--wait-secs", "-1", **_runner_env(own_db))
    assert refused.returncode == 2
    assert "--wait-secs must be 0 or more" in refused.stderr
