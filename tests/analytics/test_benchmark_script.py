"""tests/benchmarks/spark_job.py, as the README and tests/benchmarks/README.md
run it: its --quick mode goes through every step (the operator's run in a new
process, the warm job, an incremental hour, the plain queries in Spark and
DuckDB), and its bars say "met" or "MISSED" from the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
    queries = set(spark_job.REFERENCE_QUERIES)
    assert set(size["spark_reference"]) == queries
    assert set(size["duckdb_reference"]) == queries
    assert figures["bars"] == []  # no bar is set for a log this small


def test_bars_are_met_or_missed_by_the_figures(spark_job):
    def size(records: int, cold: float, spark: float, duck: float) -> dict[str, Any]:
        return {
            "records": records,
            "operator_run_secs": cold,
            "spark_reference": {"q": spark},
            "duckdb_reference": {"q": duck},
        }

    assert spark_job.bars([size(1_000_000, 29.5, 3.0, 0.3), size(10_000_000, 45.5, 4.4, 1.1)]) == [
        "bar: operator's run over 1,000,000 records 29.5 s <= 30 s: met",
        "bar: operator's run over 10,000,000 records 45.5 s <= 45 s: MISSED",
        "bar: plain queries over 10,000,000 records, Spark/DuckDB 4.0x <= 4x: met",
    ]
    assert spark_job.bars([size(10_000_000, 40.0, 4.5, 1.1)])[1].endswith("4.1x <= 4x: MISSED")
