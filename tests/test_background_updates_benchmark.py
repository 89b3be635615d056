"""tests/benchmarks/background_updates.py in its --quick mode, run as the other
benchmarks' quick tests run theirs (`tests.support.run_quick_benchmark`): the
rounds with and without the update must each finish and report every figure
with its ratio and its bars (a running update may cost clients at most
1.5x); every event sent must be read once; the update must run in every
"with" window and in no "without" one; once it is finished every legacy row
must be wrapped and the sampled keys must still authenticate; and the run
must leave nothing behind (database, vhost, working directory). No timing is
checked; a quick run's figures mean nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_benchmarks import (
    CLEANUP_SECS,
    assert_spread,
    database_exists,
    run_quick_with_figures,
    vhosts,
)

BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"
# A quick run takes about 30 s on the 2-core machine; the rest is headroom
# for a loaded one.
RUN_LIMIT_SECS = 180
FIGURES = {
    *(
        f"{name}_{mode}_{quantile}_ms"
        for name in ("latency", "register", "register_at_once")
        for mode in ("without", "with")
        for quantile in ("p50", "p99")
    ),
    "server_cpu_without",
    "server_cpu_with",
    "postgres_cpu_without",
    "postgres_cpu_with",
    "update_items_per_sec",
    "update_batch_size",
    "update_batch_items_per_sec",
    "finish_items_per_sec",
}


@pytest.fixture(scope="module")
def script() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import background_updates

        yield background_updates
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.timeout(RUN_LIMIT_SECS + CLEANUP_SECS + 30)
def test_quick_mode_measures_both_modes_wraps_every_key_and_removes_its_world(database_url):
    results = run_quick_with_figures(
        "background_updates.py", database_url, FIGURES, limit_secs=RUN_LIMIT_SECS
    )
    config = results["config"]

    # The rounds took turns, each read every notice once, and the update ran
    # in each "with" window (started before it, not done after it) and in no
    # "without" one.
    rounds = results["rounds"]
    assert [each["mode"] for each in rounds] == ["without", "with"] * config["rounds"]
    for each in rounds:
        label = (each["round"], each["mode"])
        deliveries = each["deliveries"]
        assert deliveries["notices"] > 0, label
        assert deliveries["reads"] == deliveries["reads_expected"], label
        assert deliveries["reads"] == deliveries["notices"] * config["recipients"], label
        assert (deliveries["missing"], deliveries["extra"]) == (0, 0), label
        assert deliveries["registers_one_at_a_time"] > 0, label
        assert deliveries["registers_at_once"] > 0, label
        if each["mode"] == "with":
            assert each["status_before"]["state"] == "running", label
            assert each["status_after"]["state"] == "running", label
            assert not each["finished_in_window"], label
            assert each["batches_in_window"] > 0, label
            assert each["items_in_window"] > 0, label
            assert each["settle"]["first_batch_secs"] > 0, label
        else:
            assert each["status_after"]["batches"] == each["status_at_start"]["batches"], label
            assert each["items_in_window"] == 0, label
    assert results["clients"] == {
        "error_responses": 0,
        "connections_lost": 0,
        "re_registered": 0,
        "duplicate_event_ids": 0,
        "event_id_gaps": 0,
        "other_events": 0,
    }

    # Each mode pooled over its rounds.
    for mode, summary in results["modes"].items():
        assert summary["rounds"] == config["rounds"], mode
        assert_spread(summary["latency_ms"])
        assert_spread(summary["register_ms"])
        assert_spread(summary["register_at_once_ms"])
        for process in ("server", "postgres", "publishers", "generator"):
            assert summary["cpu_shares"][process] >= 0, (mode, process)

    # The bars: with over without, met or MISSED by that ratio.
    bars = results["bars"]
    assert len(bars) == 3
    for bar in bars:
        assert bar["ratio"] == pytest.approx(bar["with_ms"] / bar["without_ms"], rel=1e-2)
        assert bar["met"] == (bar["ratio"] <= bar["limit"] == 1.5), bar
        assert bar["text"].startswith("bar: ")
        assert bar["text"].endswith(": met" if bar["met"] else ": MISSED"), bar

    # Finished: every legacy row wrapped (scheme 3), the count right, the
    # sampled keys authenticate (and are rewritten as keyed hashes), a wrong
    # key does not, and the clients' keys were not touched.
    assert results["finish"]["done"]
    keys = results["keys"]
    assert keys["update_done"]
    assert keys["schemes"] == {"3": config["rows"]}
    assert keys["items_done"] == config["rows"]
    assert keys["sampled"] == keys["authenticated"] == config["check_keys"]
    assert keys["rewritten_as_scheme_2"] == config["check_keys"]
    assert keys["wrong_key_status"] == 401
    assert keys["clients_realm_schemes"] == {"2": config["users"]}

    assert not database_exists(database_url, config["database"])
    assert config["vhost"] not in vhosts()
    assert not Path(config["workdir"]).exists()


def test_a_bar_is_met_up_to_one_and_a_half_times_the_figure_without(script):
    figures = {
        "latency_without_p99_ms": 10.0,
        "latency_with_p99_ms": 15.0,
        "register_without_p99_ms": 40.0,
        "register_with_p99_ms": 61.0,
        "register_at_once_without_p99_ms": None,
        "register_at_once_with_p99_ms": 50.0,
    }
    assert [bar["text"] for bar in script.bars_of(figures)] == [
        "bar: send->delivery p99 with the update 15.00 ms, without 10.00 ms: 1.50x <= 1.5x: met",
        "bar: register p99, one at a time with the update 61.00 ms, without 40.00 ms:"
        " 1.52x <= 1.5x: MISSED",
        "bar: register p99, several at once: not measured",
    ]


def test_each_legacy_row_stores_the_plain_sha256_of_its_regenerated_key(script, database_url):
    import hashlib
    import uuid

    import psycopg

    with psycopg.connect(database_url) as conn, conn.transaction(force_rollback=True):
        realm = conn.execute(
            "INSERT INTO realms (subdomain, name) VALUES (%s, 'Legacy') RETURNING id",
            (f"legacy-{uuid.uuid4().hex[:8]}",),
        ).fetchone()
        assert realm is not None
        conn.execute(script.LEGACY_SQL, {"realm": realm[0], "rows": 3, "seed": "seed", "scheme": 1})
        rows = conn.execute(
            "SELECT email, api_key_id, api_key_hash, api_key_hash_scheme FROM users"
            " WHERE realm_id = %s ORDER BY email",
            (realm[0],),
        ).fetchall()
    assert len(rows) == 3
    for number, (email, key_id, key_hash, scheme) in enumerate(rows, start=1):
        key = script.legacy_key("seed", number)
        assert email == script.legacy_email(number)
        assert len(key) == 32
        assert key_id == key[:8]
        assert bytes(key_hash) == hashlib.sha256(key.encode()).digest()
        assert scheme == 1
