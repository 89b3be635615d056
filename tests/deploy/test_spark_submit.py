"""deploy/spark-submit-analytics.sh: the analytics jobs through a real spark-submit.

The run test submits to `local[2]` with the repository's own spark-submit (pip's
pyspark, on PATH first) and checks what an operator sees: the exit status, the
console summary, the output files, the master the job's session really used (from
Spark's event log) and that the wrapper's temporary directory is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.logdata import at, delivery, end, poll, register, write_partition

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "deploy" / "spark-submit-analytics.sh"
DAY = "2024-05-01"
# Names that would make the wrapper pick another Spark or Python than the test's.
SPARK_VARIABLES = ("SPARK_HOME", "SPARK_CONF_DIR", "SPARK_REMOTE", "PYSPARK_PYTHON",
                   "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")  # fmt: skip


def environment(tmp: Path, path: str | None = None) -> dict[str, str]:
    """The caller's environment without Spark settings; TMPDIR in `tmp`."""
    env = {k: v for k, v in os.environ.items() if k not in SPARK_VARIABLES}
    env["PATH"] = path or f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp)
    return env


def wrapper(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WRAPPER), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def write_logs(logs: Path) -> dict[int, list[dict[str, Any]]]:
    """Two hours of one shard's log; returns the rows written per hour."""
    hours = {
        10: [
            register(at(DAY, 10, 1)),
            delivery(at(DAY, 10, 2), 0.010, event_id=0),
            delivery(at(DAY, 10, 3), 0.020, event_id=1),
            delivery(at(DAY, 10, 4), 0.030, event_id=2, user_id=11, queue_id="q2"),
            poll(at(DAY, 10, 5), "events", batch_events=2),
            poll(at(DAY, 10, 6), "heartbeat"),
        ],
        11: [
            delivery(at(DAY, 11, 1), 0.040, event_id=3),
            delivery(at(DAY, 11, 2), 0.050, event_id=4, event_type="typing"),
            poll(at(DAY, 11, 3), "events"),
            end(at(DAY, 11, 4), "expired", 3600.0),
        ],
    }
    for hour, rows in hours.items():
        write_partition(logs, DAY, hour, rows)
    return hours


def session_master(event_logs: Path) -> str:
    """spark.master of the one application logged in `event_logs` (Spark's event log)."""
    for log in sorted(event_logs.rglob("events_*")):  # eventlog_v2_<app>/events_<n>_<app>
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerEnvironmentUpdate":
                return dict(event["Spark Properties"])["spark.master"]
    raise AssertionError(f"no environment update in {sorted(event_logs.rglob('*'))}")


def test_the_job_runs_through_spark_submit(tmp_path: Path) -> None:
    hours = write_logs(tmp_path / "logs")
    rows = [row for hour_rows in hours.values() for row in hour_rows]
    out, events, scratch = tmp_path / "out", tmp_path / "events", tmp_path / "scratch"
    events.mkdir()
    scratch.mkdir()

    result = wrapper(
        "--master", "local[2]",
        "--conf", "spark.ui.enabled=false",
        # The first JIT tier only: seconds less for a short run (and a value starting "-").
        "--driver-java-options", "-XX:TieredStopAtLevel=1",
        "--conf", "spark.log.level=WARN",
        "--conf", "spark.eventLog.enabled=true",
        "--conf", f"spark.eventLog.dir={events.as_uri()}",
        "--conf", "spark.eventLog.compress=false",
        "--",
        "run", "--logs", str(tmp_path / "logs"), "--out", str(out),
        env=environment(scratch),
        timeout=150,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"processed {len(hours)} of {len(hours)} hours in "), lines
    deliveries = sum(row["kind"] == "delivery" for row in rows)
    polls = sum(row["kind"] == "poll" for row in rows)
    assert (
        f"hours: {len(hours)}  records: {len(rows)}  deliveries: {deliveries}  polls: {polls}"
        in lines
    ), lines
    assert (deliveries, polls, len(rows)) == (5, 3, 10)  # the rows above, counted by hand
    assert (out / "report" / "report.html").is_file()
    assert (out / "overall" / "volumes").is_dir()
    # The job was given no master: its session ran on spark-submit's, not local[*].
    assert session_master(events) == "local[2]"
    # The zip and the driver went away with the temporary directory.
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("eventq-analytics.")]


def test_a_master_given_to_the_job_is_refused(tmp_path: Path) -> None:
    result = wrapper(
        "--", "run", "--logs", str(tmp_path), "--out", str(tmp_path / "out"),
        "--master", "local[2]",
        env=environment(tmp_path),
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--master goes among the spark-submit options, before --" in result.stderr
    assert result.stdout == ""


def test_without_arguments_it_prints_its_usage(tmp_path: Path) -> None:
    result = wrapper(env=environment(tmp_path), timeout=30)
    assert result.returncode == 2
    assert "error: no arguments" in result.stderr
    assert "-- run --logs DIR --out DIR" in result.stderr


def test_a_logs_directory_without_a_delivery_log_is_refused_before_submitting(
    tmp_path: Path,
) -> None:
    # No spark-submit option at all: spark-submit's defaults would choose the master.
    result = wrapper(
        "--",
        "run", "--logs", str(tmp_path), "--out", str(tmp_path / "out"),
        env=environment(tmp_path),
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    (message,) = result.stderr.splitlines()  # the JVM was not started
    assert message.startswith(f"spark-submit-analytics: error: --logs {tmp_path}: no delivery log")
    assert not (tmp_path / "out").exists()


def test_without_spark_submit_it_says_where_it_looked(tmp_path: Path) -> None:
    # A copy of the wrapper outside the repository: no .venv/bin/spark-submit next to it.
    copy = tmp_path / "repo" / "deploy" / WRAPPER.name
    copy.parent.mkdir(parents=True)
    shutil.copy2(WRAPPER, copy)
    path = os.pathsep.join(["/usr/bin", "/bin"])
    if shutil.which("spark-submit", path=path):
        pytest.skip("this machine has a spark-submit in /usr/bin or /bin")
    result = subprocess.run(
        [str(copy), "--master", "local[2]", "--", "run", "--logs", "L", "--out", "O"],
        capture_output=True,
        text=True,
        env=environment(tmp_path, path=path),
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "error: spark-submit not found: set SPARK_HOME" in result.stderr


def test_a_driver_python_without_the_package_is_refused_before_submitting(
    tmp_path: Path,
) -> None:
    # The machine's own Python, outside any virtual environment: no eventq there.
    bare = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys._base_executable)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    env = environment(tmp_path)
    env["PYSPARK_DRIVER_PYTHON"] = bare
    result = wrapper(
        "--master", "local[1]", "--", "run", "--logs", str(tmp_path), "--out", str(tmp_path / "o"),
        env=env,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"spark-submit-analytics: error: the driver's Python '{bare}' cannot import the analytics"
        " package; install eventq with its analytics extra into it (pip install"
        " 'eventq[analytics]')"
    )
