"""tests/benchmarks/spark_job.py, as docs/benchmarks.md and tests/benchmarks/README.md
run it: its --quick mode goes through every step (the operator's run in a new
process, the warm job, an incremental hour, the plain queries in Spark and
DuckDB), and its bars say "met" or "MISSED" from the figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.jvm import JVM_ENV

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "benchmarks" / "spark_job.py"


@pytest.fixture(scope="module")
def spark_job() -> Any:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import spark_job

        yield spark_job
    finally:
        sys.path.remove(str(SCRIPT.parent))


@pytest.mark.timeout(300)
def test_quick_mode_runs_every_step_and_prints_figures(spark_job):
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        cwd=REPO,
        env={**os.environ, **JVM_ENV},
        capture_output=True,
        text=True,
        check=False,
        timeout=280,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    figures = json.loads(completed.stdout)
    [size] = figures["sizes"]
    records, hours = spark_job.QUICK
    assert (size["records"], size["hours"]) == (records, hours)
    assert size["operator_run_secs"] > 0
    assert size["job_full"]["hours_processed"] == hours
    assert f"records: {records}" in size["job_full"]["summary"][0]
    assert size["job_incremental_one_hour"]["hours_processed"] == 1
    # The server's default layout: a file per shard and hour.
    assert (size["roll_secs"], size["parquet_files"]) == (3600, hours * 2)
    queries = set(spark_job.REFERENCE_QUERIES)
    assert set(size["spark_reference"]) == queries
    assert set(size["duckdb_reference"]) == queries
    assert size["spark_latency_percentile_approx"] > 0
    assert size["differences"] == []  # both engines gave the same answers
    assert figures["bars"] == []  # no bar is set for a log this small


def test_answers_that_differ_between_the_engines_are_reported(spark_job):
    import duckdb  # in the test extra

    connection = duckdb.connect()
    # 100 deliveries of one type with latencies 0.01 .. 1.00 s.
    connection.execute(
        "CREATE VIEW logs AS SELECT 'delivery' AS kind, 'message' AS event_type,"
        " 1000.0 + i / 100 AS time, 1000.0 AS enqueued_at FROM range(1, 101) AS r(i)"
    )
    exact = [("message", 100, [0.5, 0.95, 0.99])]
    others = {name: [(1, 2)] for name in spark_job.REFERENCE_QUERIES}
    duck = {**others, "latency by event type": exact}
    close = {**others, "latency by event type": [("message", 100, [0.5, 0.955, 0.99])]}
    assert spark_job.compare(connection, close, duck) == []
    wrong = {**others, "latency by event type": [("message", 100, [0.5, 0.9, 0.99])]}
    assert spark_job.compare(connection, wrong, duck) == [
        "latency by event type: message's p95 from Spark is at ranks 0.9000-0.9000 of 100 values"
    ]
    # Equal latencies: any value of the run is each of their percentiles.
    connection.execute(
        "CREATE OR REPLACE VIEW logs AS SELECT 'delivery' AS kind, 'message' AS event_type,"
        " 1000.5 AS time, 1000.0 AS enqueued_at FROM range(100)"
    )
    tied = [("message", 100, [0.5, 0.5, 0.5])]
    assert spark_job.compare(connection, {**others, "latency by event type": tied}, duck) == []
    miscounted = {**others, "deliveries by realm": [(1, 3)], "latency by event type": tied}
    [difference] = spark_job.compare(connection, miscounted, duck)
    assert difference.startswith("deliveries by realm: Spark [(1, 3)]")


def test_bars_are_met_or_missed_by_the_figures(spark_job):
    def size(records: int, cold: float, spark: float, duck: float) -> dict[str, Any]:
        return {
            "records": records,
            "operator_run_secs": cold,
            "spark_reference": {"q": spark},
            "duckdb_reference": {"q": duck},
        }

    sizes = [size(5_000, 12.5, 1, 1), size(1_000_000, 19.5, 3.0, 0.3),
             size(10_000_000, 45.5, 4.4, 1.1)]  # fmt: skip
    assert spark_job.bars(sizes) == [
        "bar: operator's run over 5,000 records 12.5 s <= 12 s: MISSED",
        "bar: operator's run over 1,000,000 records 19.5 s <= 20 s: met",
        "bar: operator's run over 10,000,000 records 45.5 s <= 45 s: MISSED",
        "bar: plain queries over 10,000,000 records, Spark/DuckDB 4.0x <= 4x: met",
    ]
    assert spark_job.bars([size(10_000_000, 40.0, 4.5, 1.1)])[1].endswith("4.1x <= 4x: MISSED")


def _statements(sql: str) -> list[str]:
    """The statements of an SQL text, comments dropped, white space folded."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [" ".join(part.split()) for part in "\n".join(lines).split(";") if part.strip()]


def test_the_readme_queries_the_log_as_the_benchmark_does(spark_job):
    # docs/delivery-log.md's "Querying the log by hand" is what the benchmark runs (in
    # both engines, checking their answers agree, in the quick mode above).
    page = (REPO / "docs" / "delivery-log.md").read_text()
    section = page.split("\n## Querying the log by hand\n", 1)[1].split("\n## ", 1)[0]
    sql = section.split("```sql\n", 1)[1].split("```", 1)[0]
    expected = [
        query.format(quantiles=spark_job.SPARK_QUANTILES)
        for query in spark_job.REFERENCE_QUERIES.values()
    ]
    assert _statements(sql) == [" ".join(query.split()) for query in expected]


def test_a_cluster_run_is_printed_beside_the_local_one_with_the_ratio(spark_job):
    # --cluster's figures as cluster_runs() adds them to a size (the run itself
    # starts a cluster: tests/deploy/test_spark_cluster.py runs one).
    progress = "analytics: 3/3 hours, 20,000 records in 9.1 s (2,198 records/s)"
    size: dict[str, Any] = {"cluster_run_secs": 21.31, "cluster_over_local": 1.77}
    size["cluster_run_progress"] = [progress]
    assert spark_job.cluster_lines(size) == [
        "operator's run on the cluster (2 executors of one core, spark-submit-analytics.sh):"
        "   21.31 s  (1.77x the local[*] run)",
        f"  {progress}",
    ]
    assert spark_job.cluster_lines({"operator_run_secs": 12.0}) == []


def test_an_operators_run_under_spark_submit_is_read_from_its_mixed_output(spark_job, tmp_path):
    # Under spark-submit the driver's stderr comes out on stdout, with
    # whatever else was said there: only the lines after "processed ..." are
    # the summary, and progress lines are told by their form.
    printed = "\n".join(
        [
            "analytics: saving the JVM's classes for the next runs",
            "analytics: 6/24 hours, 250,012 records in 5.1 s (49,376 records/s)",
            "a warning of some library",
            "processed 24 of 24 hours in 9.0 s; tables and report in out",
            "hours: 24  records: 1000",
            "shards: 2",
        ]
    )
    command = [sys.executable, "-c", f"print({printed!r})"]
    seconds, progress, summary = spark_job.operator_run(command, tmp_path / "out")
    assert seconds > 0
    assert progress == ["analytics: 6/24 hours, 250,012 records in 5.1 s (49,376 records/s)"]
    assert summary == ["hours: 24  records: 1000", "shards: 2"]
    with pytest.raises(RuntimeError, match="printed no summary"):
        spark_job.operator_run([sys.executable, "-c", "print('hours: 1')"], tmp_path / "out")
