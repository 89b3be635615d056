"""The benchmark scripts of tests/benchmarks, each in its `--quick` mode as
tests/benchmarks/README.md runs it: the script must finish and report sane
figures (every count what was sent, nothing lost or doubled, positive rates
and sizes). No timing is checked. The scripts that build a world (database,
RabbitMQ vhost, a work directory) must leave none behind. fanout.py and spark_job.py have
tests of their own (tests/test_fanout_benchmark.py,
tests/analytics/test_benchmark_script.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from server.delivery.consumer import PREFETCH
from tests.support import run_quick_benchmark

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "tests" / "benchmarks"
# A quick run takes 1 to 15 s on the 2-core machine; the rest is headroom
# for a loaded one.
RUN_LIMIT_SECS = 150
# After SIGTERM a script stops its server and drops what it created.
CLEANUP_SECS = 60


def run_quick(script: str) -> dict[str, Any]:
    return run_quick_benchmark(script, limit_secs=RUN_LIMIT_SECS, cleanup_secs=CLEANUP_SECS)


def run_quick_with_figures(
    script: str,
    database_url: str,
    figures: set[str],
    *,
    limit_secs: float,
    may_be_zero: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """A script's quick run against this session's database server that
    completed without problems and reported exactly `figures`, each one
    positive (or zero, for those in `may_be_zero`); its results."""
    results = run_quick_benchmark(
        script,
        env={"EVENTQ_DATABASE_URL": database_url},
        limit_secs=limit_secs,
        cleanup_secs=CLEANUP_SECS,
    )
    assert results["config"]["quick"]
    assert results["completed"]
    assert results["problems"] == []
    assert set(results["figures"]) == figures
    for key, value in results["figures"].items():
        assert value is not None, key
        assert value >= 0 if key in may_be_zero else value > 0, (key, value)
    return results


def database_exists(database_url: str, name: str) -> bool:
    """Whether the PostgreSQL server of `database_url` (this session's, the
    scripts' too) has a database `name`."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        found = row.fetchone()
    assert found is not None
    return bool(found[0])


def vhosts() -> set[str]:
    command = ["rabbitmqctl", "--quiet", "list_vhosts", "name"]
    if os.geteuid() != 0 and shutil.which("sudo"):
        command = ["sudo", "-n", *command]
    listing = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60)
    return {line.strip() for line in listing.stdout.splitlines() if line.strip()}


def assert_positive(figures: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert figures[key] > 0, (key, figures[key])


def assert_spread(spread: dict[str, float] | None) -> None:
    """A latency spread (ms): positive and ordered."""
    assert spread is not None
    assert 0 < spread["p50"] <= spread["p99"] <= spread["max"], spread


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_rabbitmq_quick_delivers_every_notice_once_and_removes_its_world(database_url):
    figures = run_quick("rabbitmq.py")
    config = figures["config"]
    assert config["quick"]
    assert figures["problems"] == []
    counters = figures["counters"]
    for key in (
        "duplicate_ids",
        "id_gaps",
        "error_responses",
        "re_registered",
        "connections_lost",
        "other_events",
    ):
        assert counters[key] == 0, counters

    assert len(figures["latency"]) == len(config["latency"])
    for label, phase in figures["latency"].items():
        assert phase["notices"] > 0, label
        # Every client of the phase read every notice, once.
        assert phase["events"] == phase["notices"] * phase["clients"], label
        assert phase["consumer_delta"] == {
            "processed": phase["notices"],
            "duplicates": 0,
            "retried": 0,
            "dead_lettered": 0,
            "connections": 0,
        }, label
        assert_positive(phase, "notices_per_sec", "events_per_response")
        assert_spread(phase["per_client_ms"])
        assert_spread(phase["last_client_per_notice_ms"])
        assert_spread(phase["send_event_ms"])

    drains = figures["drain"]
    assert {name: drain["notices"] for name, drain in drains.items()} == {
        "one-user": config["drain_one"],
        "all": config["drain_all"],
    }
    for name, drain in drains.items():
        assert drain["events"] == drain["notices"] * drain["clients"], name
        # Frozen, the server holds at most a prefetch window; the rest waits.
        assert drain["depth_before_resume"] >= drain["notices"] - PREFETCH, name
        # (Not the server's CPU: /proc counts it in 10 ms ticks, and a drain
        # of 50 notices can take less than one.)
        assert_positive(drain, "consume_secs", "deliver_secs")
        assert_positive(drain["publisher"], "send_event_per_sec", "cpu_per_call_us")
        assert_spread(drain["publisher"]["send_event_ms"])
    consumer = figures["consumer"]
    assert (consumer["duplicates"], consumer["retried"], consumer["dead_lettered"]) == (0, 0, 0)
    assert consumer["connections"] == 1
    assert len(figures["loop_lag"]) == len(figures["latency"]) + len(drains)

    assert not database_exists(database_url, config["database"])
    assert config["vhost"] not in vhosts()
    assert not Path(config["workdir"]).exists()


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_register_quick_measures_every_phase_on_the_realm_it_built(database_url):
    figures = run_quick("register.py")
    config = figures["config"]
    assert config["quick"]
    users, streams, subs = config["users"], config["streams"], config["subs_per_user"]
    assert figures["rows"] == {
        "users": users,
        "streams": streams,
        "subscriptions": users * subs,
        "messages": config["messages"],
        # each message goes to every subscriber of its stream
        "user_messages": config["messages"] * users * subs // streams,
    }
    assert len(figures["phases"]) == 3
    for name, phase in figures["phases"].items():
        assert phase["registers"] == config["registers"], name
        assert 0 < phase["p50_ms"] <= phase["p99_ms"] <= phase["max_ms"], name
        assert_positive(phase, "per_sec", "response_kb")
        assert phase["subscriptions"] == subs, name
        assert isinstance(phase["unread"], int), name
        assert phase["loop_lag"]["window_max_ms"] >= 0, name
    assert figures["injected"] > 0
    assert not database_exists(database_url, figures["database"])
    # (The server saves its queues there as it stops: removed after it.)
    assert not Path(figures["workdir"]).exists()


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_history_quick_measures_every_phase_on_the_realm_it_built(database_url):
    figures = run_quick("history.py")
    config = figures["config"]
    assert config["quick"]
    assert figures["completed"]
    assert figures["rows"]["messages"] == config["messages"]
    # Every message has its recipients' rows: a channel's subscribers, a
    # direct message's two users.
    assert figures["rows"]["user_messages"] > config["messages"]
    assert set(figures["phases"]) == set("abcdefghi")
    for key, phase in figures["phases"].items():
        assert 0 < phase["p50_ms"] <= phase["p99_ms"] <= phase["max_ms"], key
        assert phase["server_cpu_ms_per_request"] >= 0, key
    # Full pages where the realm has the messages; one message for f.
    assert figures["phases"]["a"]["messages_per_answer"] == 50
    assert figures["phases"]["c"]["messages_per_answer"] == 50
    assert figures["phases"]["f"]["messages_per_answer"] == 1
    assert figures["phases"]["d"]["messages_per_answer"] > 0
    assert figures["peer"]["p50_ms"] > 0
    assert not database_exists(database_url, figures["database"])
    assert not Path(figures["workdir"]).exists()


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_resume_quick_measures_every_phase(database_url):
    figures = run_quick("resume.py")
    config = figures["config"]
    assert config["quick"]
    assert figures["completed"]
    assert figures["problems"] == []
    logged = figures["world"]["log"]
    # About --log-bytes: the row count comes from a sample's mean size.
    assert abs(logged["notice_bytes"] - config["log_bytes"]) < config["log_bytes"] * 0.05
    assert logged["total_relation_bytes"] > 0
    # Every kind of row was compared with the writers' wire form.
    assert logged["kinds_checked"] == ["delete_message/", "message/private", "message/stream"]
    assert {
        "event_log_realm_position",
        "event_log_recipients",
        "event_log_public_messages",
        "event_log_unknown_recipients",
    } <= set(logged["indexes"])
    assert 0 < logged["guest_rows"] < config["resume_max_events"]
    phases = {phase["key"]: phase for phase in figures["phases"].values()}
    assert {key: phase["answer"] for key, phase in phases.items()} == {
        "a": "resumed",
        "b": "RESUME_POSITION_UNKNOWN",
        "c": "resumed",
        "d": "RESUME_EXPIRED",
        "e": "resumed",
        "f": "state",
        "g": "resumed",
        "ax": "resumed",
    }
    for key, phase in phases.items():
        assert phase["correct"], (key, phase["wrong"])
        assert phase["requests"] == config["repeat"] * phase["concurrency"], key
        assert len(phase["latencies_ms"]) == phase["requests"], key
        assert 0 < phase["p50_ms"] <= phase["p99_ms"] <= phase["max_ms"], key
        assert phase["first_ms"] > 0, key
        assert phase["server_cpu_ms_per_request"] >= 0, key
        assert phase["postgres_cpu_ms_per_request"] >= 0, key
        assert phase["loop_lag"]["window_max_ms"] >= phase["loop_lag"]["p99_ms"] >= 0, key
    assert phases["ax"]["concurrency"] == config["concurrency"]
    # The resumed queues held exactly their events (checked by the script).
    for key in ("a", "c", "e", "g", "ax"):
        assert phases[key]["events_expected"] > 0, key
    assert phases["g"]["events_expected"] <= config["resume_max_events"]
    assert phases["a"]["events_expected"] == logged["guest_rows"] - 1  # one deleted since
    assert figures["idle"]["loop_lag"]["window_max_ms"] >= 0
    assert set(figures["ratios"]) == {"p50", "p99", "server_cpu", "postgres_cpu"}
    assert figures["ratios"]["p50"] > 0
    bar = figures["bar"]
    assert bar["limit_ms"] == 5.0
    assert bar["met"] == (bar["value_ms"] <= bar["limit_ms"])
    for name, plan in figures["plans"].items():
        assert plan["custom_ms"] is not None, name
        assert plan["prepared_ms"] is not None, name
        # The server plans its read of a user's log with the values each time.
        assert plan["prepared_by_server"] == name.startswith("deleted_messages"), name
    assert not database_exists(database_url, figures["database"])
    assert not Path(figures["workdir"]).exists()


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_soak_quick_churns_collects_queues_and_loses_nothing(database_url):
    figures = run_quick("soak.py")
    config, run, summary = figures["config"], figures["run"], figures["summary"]
    assert config["quick"]
    seconds = run["seconds"]
    assert seconds >= config["minutes"] * 60 - 1
    assert run["clients_left"] == run["clients_joined"] == seconds * config["churn"]
    assert run["notices"] == seconds * config["notices"]
    # Queues of clients that left get events too, until they are collected.
    assert 0 < run["events_received"] <= run["queue_deliveries_reported_by_server"]
    counters = run["counters"]
    assert (
        counters["duplicate_ids"],
        counters["id_gaps"],
        counters["error_responses"],
        counters["connections_lost"],
    ) == (0, 0, 0, 0), counters
    assert len(run["samples"]) >= 3
    for sample in run["samples"]:
        assert sample["rss_kb"] > 0
        assert sample["queues"] >= config["clients"]
    # The idle GC ran and its log lines were found (their format is parsed).
    assert summary["queues_collected_total"] > 0
    assert summary["gc_sweeps_logged"] > 0
    assert summary["lag_ok"]
    assert summary["memory_ok"]
    assert_positive(summary, "rss_warm_mb", "rss_end_mb")
    assert not database_exists(database_url, figures["database"])
    assert not Path(figures["workdir"]).exists()


# notifications.py's headline figures; a batch's lateness may round to 0.
NOTIFICATION_LATENESS = frozenset(
    {"email_late_p99_secs", "email_late_max_secs", "webhook_late_p99_secs", "webhook_late_max_secs"}
)
NOTIFICATION_FIGURES = set(NOTIFICATION_LATENESS) | {
    "server_cpu_us_per_event_on",
    "server_cpu_us_per_event_off",
    "server_cpu_ratio",
    "emails",
    "webhook_calls",
    "worker_cpu_secs",
}


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_notifications_quick_notifies_every_away_mention_once_and_removes_its_world(
    database_url,
):
    results = run_quick_with_figures(
        "notifications.py",
        database_url,
        NOTIFICATION_FIGURES,
        limit_secs=RUN_LIMIT_SECS,
        may_be_zero=NOTIFICATION_LATENESS,
    )
    config = results["config"]
    assert config["parked_per_server"] == config["users"] - config["away"]
    away_mentions = 0
    for mode in ("on", "off"):
        rounds = results["rounds"][mode]
        assert len(rounds) == config["rounds"], mode
        for each in [results["warmup"][mode], *rounds]:
            assert each["notices"] == each["notices_planned"] > 0, mode
            assert each["reads"] == each["reads_expected"] > 0, mode
            assert (each["missing"], each["extra"]) == (0, 0), mode
            assert each["cpu_secs"]["server"] > 0, mode
            if mode == "on":
                assert each["worker"]["all_sent"]
                away_mentions += each["mentions_of_away_users"]
        summary = results["modes"][mode]
        # The mentioned user is away in the proportion away / users.
        mentions = summary["mentions_of_away_users"] + summary["mentions_of_present_users"]
        assert summary["mentions_of_away_users"] * config["users"] == mentions * config["away"]
    worker = results["worker"]
    # Each away user's mention was notified once by email and once by webhook.
    assert worker["expected"] == away_mentions > 0
    for kind in ("email", "push"):
        assert worker[kind]["notifications"] == away_mentions, kind
        assert 0 < worker[kind]["batches"] <= away_mentions, kind
    assert worker["status"]["counters"]["email_sent"] == away_mentions
    assert worker["status"]["pending"] == {"email": 0, "push": 0}
    assert results["server_notifier"]["enqueued"] == {"delivery": away_mentions, "gc": 0}
    assert results["server_off_notifier"] is None
    assert not database_exists(database_url, config["database"])
    assert config["vhost"] not in vhosts()
    assert not Path(config["workdir"]).exists()


@pytest.mark.timeout(RUN_LIMIT_SECS + 30)
def test_deliverylog_quick_writes_and_compacts_every_record():
    figures = run_quick("deliverylog.py")
    config = figures["config"]
    assert config["quick"]
    assert [row["response"] for row in figures["loop_cost"]] == [
        "1 events",
        "10 events",
        "100 events",
        "heartbeat",
    ]
    for row in figures["loop_cost"]:
        assert row["us_per_call"] > 0, row
    writer = figures["writer"]
    # Whole responses are buffered: up to one response (10 records) past --records.
    assert config["records"] <= writer["records"] < config["records"] + 11
    assert writer["written"] == writer["parquet_rows"] == writer["records"]
    assert writer["dropped"] == 0
    assert_positive(
        writer,
        "write_records_per_sec",
        "write_cpu_us_per_record",
        "spool_bytes_per_record",
        "compact_records_per_sec",
        "parquet_bytes_per_record",
    )
    fanout = figures["fanout"]
    assert (fanout["clients"], fanout["rounds"]) == (config["clients"], config["rounds"])
    assert_positive(
        fanout,
        "loop_us_per_recipient_log_off",
        "loop_us_per_recipient_log_on",
        "with_encoding_us_per_recipient",
    )


@pytest.mark.timeout(RUN_LIMIT_SECS + 30)
def test_logsynth_quick_writes_the_records_asked_in_the_servers_schema():
    figures = run_quick("logsynth.py")
    config = figures["config"]
    assert figures["rows"] == config["records"]
    # A file per shard and roll of the server's default, an hour: far under
    # the spool's size limit at this volume.
    assert config["roll_secs"] == 3600
    assert figures["files"] == figures["files_written"] == config["hours"] * config["shards"]
    assert figures["schema_is_the_servers"]
    assert figures["times_in_hours"]
    for kind, weight in figures["kind_weight"].items():
        assert abs(figures["kind_share"][kind] - weight) < 0.01, kind
    assert_positive(figures, "bytes", "bytes_per_record", "records_per_sec")


def test_positions_quick_prints_both_costs_and_drops_its_database(database_url):
    before = _bench_databases(database_url)
    result = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.positions", "--quick"],
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_SECS,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0].startswith("transactions: 200 ")
    assert any(line.strip().startswith("without the log: p50") for line in lines)
    assert any(line.strip().startswith("added by send_event_on_commit: p50") for line in lines)
    assert _bench_databases(database_url) == before


def _bench_databases(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'eventq_bench_%'")
        return {row[0] for row in rows.fetchall()}
