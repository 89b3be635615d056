"""/metrics of a server that runs background updates (server/observability/metrics.py) show
what `eventq db background status` shows, whichever runner does the work."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psycopg
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.server.test_background import _enqueue, _processes, _rows, _start_runner
from tests.support import ServerProcess, World, run_eventq, wait_for

WRAP = "wrap_legacy_api_key_hashes"
# The servers' settings: the tests' module, no retention rows.
SETTINGS = {"EVENTQ_MODULES": "tests.server.background_module", "EVENTQ_EVENT_LOG_PRUNE_SECS": "0"}


def _legacy_users(url: str, count: int) -> None:
    """`count` users whose API key hashes predate migration 0004."""
    realm = World(url).realm()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO users (realm_id, email, full_name, api_key_id, api_key_hash,
                               api_key_hash_scheme)
            SELECT r.id, 'legacy' || g || '@example.com', 'Legacy', lpad(g::text, 8, '0'),
                   sha256(g::text::bytea), 1
            FROM realms r, generate_series(1, %s) g WHERE r.subdomain = %s
            """,
            (count, realm),
        )


def _status(url: str) -> dict[str, dict[str, Any]]:
    """`db background status --json`, by update, as /metrics would show it."""
    shown = run_eventq("db", "background", "status", "--json", EVENTQ_DATABASE_URL=url, **SETTINGS)
    assert shown.returncode == 0, shown.stderr
    expected: dict[str, dict[str, Any]] = {}
    for update in json.loads(shown.stdout)["updates"]:
        state = "waiting" if update["state"].startswith("waiting") else update["state"]
        entry: dict[str, Any] = {"state": state, "done": 1.0 if state == "done" else 0.0}
        for key, field in (
            ("items_done", "items_done"),
            ("items_left", "items_left"),
            ("items_per_second", "items_per_sec"),
            ("batch_size", "batch_size"),
            ("seconds_left", "seconds_left"),
            ("failures", "failures"),
        ):
            if update[field] is not None:
                entry[key] = float(update[field])
        expected[update["name"]] = entry
    return expected


def _metrics(server: ServerProcess) -> dict[str, dict[str, Any]]:
    """The background updates' figures of the server's /metrics, by update."""
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    shown: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("eventq_background_update_"):
            continue
        key = family.name.removeprefix("eventq_background_update_")
        for sample in family.samples:
            entry = shown.setdefault(sample.labels["update"], {})
            if key != "state":
                entry[key] = sample.value
            elif sample.value == 1.0:
                assert "state" not in entry, text  # one state at a time
                entry["state"] = sample.labels["state"]
    return shown


def _same(server: ServerProcess, url: str) -> dict[str, dict[str, Any]] | None:
    expected = _status(url)
    return expected if _metrics(server) == expected else None


def test_metrics_show_what_status_shows_while_another_runner_works(own_db: str, tmp_path: Path):
    _legacy_users(own_db, 3000)
    _enqueue(own_db, WRAP)
    log = tmp_path / "runner.log"
    with _processes() as started:
        # The default controller, 100 hashes a batch, 0.2 s apart: 6 s in all.
        runner = _start_runner(
            own_db,
            log,
            "--until-done",
            EVENTQ_TEST_SMALL_BATCHES="0",
            EVENTQ_BACKGROUND_TARGET_MS="1",
            EVENTQ_BACKGROUND_SLEEP_MS="200",
        )
        started.append(runner)
        wait_for(lambda: "this process runs them" in log.read_text(), 20, "the command's runner")
        wait_for(
            lambda: _rows(own_db, "SELECT items_done FROM background_updates WHERE name = %s",
                          (WRAP,))[0][0] >= 100,
            30,
            "some hashes wrapped",
        )  # fmt: skip
        # Held still mid-update (its lock held): the table stops moving. Held
        # before the server starts, which on a slow machine can take longer
        # than the rest of the update.
        runner.send_signal(signal.SIGSTOP)
        server = ServerProcess(
            own_db,
            tmp_path / "state",
            {"EVENTQ_BACKGROUND_TASKS": "on", "EVENTQ_BACKGROUND_IDLE_SECS": "0.05", **SETTINGS},
        )
        try:
            try:
                server.start()
                wait_for(lambda: "another runner works on database" in server.log(), 20, "waiting")
                # 60 s: each look runs `eventq db background status` (seconds
                # on a slow machine).
                shown = wait_for(lambda: _same(server, own_db), 60, "/metrics to show the status")
            finally:
                runner.send_signal(signal.SIGCONT)
            wrap = shown[WRAP]
            assert wrap["state"] == "running"
            assert 100 <= wrap["items_done"] < 3000
            assert wrap["items_left"] == 3000 - wrap["items_done"]
            assert wrap["batch_size"] == 100.0
            assert wrap["items_per_second"] > 0
            assert wrap["seconds_left"] > 0
            assert shown["event_log_realm_index"]["state"] == "done"
            assert (
                "eventq_background_runner_working 0.0"
                in requests.get(f"{server.url}/metrics", timeout=10).text
            )

            assert runner.wait(120) == 0, log.read_text()[-3000:]
            done = wait_for(lambda: _same(server, own_db), 60, "/metrics to show the end")
            assert done[WRAP]["state"] == "done"
            assert done[WRAP]["items_done"] == 3000.0
        finally:
            server.stop()
