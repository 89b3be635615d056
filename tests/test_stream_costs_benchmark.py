"""tests/benchmarks/stream_costs.py in its --quick mode, run as the other
benchmarks' quick tests run theirs (`tests.support.run_quick_benchmark`):
every phase of what stream positions cost must finish and report every figure, every
event sent must be read (phase 1) or found in its queues after each restart
(phase 4) exactly once, and the run must leave nothing behind (database,
vhost, working directory). No timing is checked; a quick run's figures mean
nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.test_benchmarks import (
    CLEANUP_SECS,
    assert_spread,
    database_exists,
    run_quick_with_figures,
    vhosts,
)

# A quick run takes about 20 s on the 2-core machine; the rest is headroom
# for a loaded one.
RUN_LIMIT_SECS = 180
# Figures that may be exactly 0: an idle loop's lag (uvloop fires a timer on
# its millisecond clock, up to a millisecond early: the lag is then 0), and
# the server's own log lines, which round to whole milliseconds.
MAY_BE_ZERO = {
    "checkpoint_loop_lag_p99_ms",
    "no_checkpoint_loop_lag_p99_ms",
    "graceful_save_ms",
}
FIGURES = {
    "latency_log_on_p50_ms",
    "latency_log_on_p99_ms",
    "latency_log_off_p50_ms",
    "latency_log_off_p99_ms",
    "register_p50_ms",
    "register_p99_ms",
    "register_under_load_log_on_p50_ms",
    "register_under_load_log_on_p99_ms",
    "register_under_load_log_off_p50_ms",
    "register_under_load_log_off_p99_ms",
    "checkpoint_ms",
    "checkpoint_longest_slice_ms",
    "graceful_stop_secs",
    "recovery_sigterm_secs",
    "recovery_sigkill_secs",
} | MAY_BE_ZERO


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_quick_mode_measures_every_cost_loses_nothing_and_removes_its_world(database_url):
    results = run_quick_with_figures(
        "stream_costs.py",
        database_url,
        FIGURES,
        limit_secs=RUN_LIMIT_SECS,
        may_be_zero=frozenset(MAY_BE_ZERO),
    )
    config = results["config"]

    # 1. Every notice sent was read by each of its recipients' clients, once.
    publishers, recipients = config["publishers"], config["recipients"]
    latency = results["latency"]
    for label, secs, rounds in (
        ("warm-up", config["warmup"], 1),
        ("log on", config["duration"], config["rounds"]),
        ("log off", config["duration"], config["rounds"]),
    ):
        phase = latency[label]
        per_round = math.ceil(round(config["rate"] * secs) / publishers) * publishers
        assert phase["rounds"] == rounds, label
        sent = rounds * per_round
        assert phase["notices"] == sent, label
        assert phase["reads"] == phase["reads_expected"] == sent * recipients, label
        assert (phase["missing"], phase["extra"], phase["missing_seqs"]) == (0, 0, []), label
        assert_spread(phase["latency_ms"])
        assert_spread(phase["send_event_ms"])
        assert phase["notices_per_sec"] > 0, label
        for process in ("server", "postgres", "publishers", "generator"):
            assert phase["cpu_shares"][process] >= 0, (label, process)
        assert phase["stream"]["rolled_back"] == phase["stream"]["given_up"] == 0, label
    clients = latency["problems"]
    assert {key: value for key, value in clients.items() if key != "last_error"} == {
        "error_responses": 0,
        "connections_lost": 0,
        "re_registered": 0,
        "duplicate_event_ids": 0,
        "event_id_gaps": 0,
        "other_events": 0,
    }

    # 2. register.py's phases, and its load phase with the event log on and off.
    register = results["register"]
    assert len(register) == 4
    for name, phase in register.items():
        assert phase["registers"] == config["registers"], name
        assert 0 < phase["p50_ms"] <= phase["p99_ms"] <= phase["max_ms"], name
        if name.startswith("under "):
            assert phase["notices"] > 0, name

    # 3. The checkpoints held every queue.
    checkpoint = results["checkpoint"]
    assert checkpoint["queues"] == checkpoint["first_full"]["queues"] == config["queues"]
    for window in ("with", "without"):
        assert checkpoint[window]["uptime_secs"] >= config["lag_window"], window
    for seen in checkpoint["with"]["checkpoints"]:
        assert seen["queues"] == config["queues"]

    # 4. After each start every queue is back, with every event sent to its
    # user so far, once; the notices waiting in RabbitMQ were consumed.
    recovery = results["recovery"]
    assert config["queues"] % config["users"] == 0  # as many queues for every user
    queues_per_user = config["queues"] // config["users"]
    expected = 0
    for label in ("SIGTERM", "SIGKILL", "without checkpoints"):
        restart = recovery[label]
        assert restart["queues_after"] == config["queues"], label
        assert restart["consumer_processed"] == restart["notices"] + publishers, label
        # The publishers' first notices (to nobody) are logged too.
        assert restart["catch_up"]["events"] == restart["notices"] + publishers, label
        assert restart["rebuilt_from_checkpoint"] == (label == "SIGKILL"), label
        check = restart["check"]
        expected += restart["notices"] * recipients * queues_per_user
        assert check["events_found"] == check["events_expected"] == expected, label
        assert (check["missing"], check["extra"], check["failed_polls"]) == (0, 0, 0), label
        assert check["other_events"] == 0, label
    assert recovery["SIGTERM"]["saved"]["queues"] == config["queues"]

    assert not database_exists(database_url, config["database"])
    assert config["vhost"] not in vhosts()
    assert not Path(config["workdir"]).exists()
