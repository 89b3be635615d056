"""deploy/spark-submit-analytics.sh against a real Spark standalone cluster:
a master and two one-core workers of the pyspark package on loopback
(tests/benchmarks/sparkcluster.py), the job submitted to it as
docs/analytics.md's "Running on a cluster" says, and the embedded run
(`python -m analytics run`, local[*]) over the same log beside it.

What an operator could look at says that the executors did the work: the
master lists the finished application, each worker an executor of it (or
more, should the master replace one), and the executors' own logs (their
stderr in the workers' work directories) name every Parquet file of the
log, each opened by its path in the directory both sides see; none was
shipped to them. Both runs write the same
tables (every Parquet table of the output, hourly, overall and the others,
rows sorted) and the same summary.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tests.analytics.jvm import JVM_ENV
from tests.analytics.logdata import at, notification, write_partition
from tests.benchmarks.sparkcluster import HOST, START_SECS, STOP_SECS, StandaloneCluster, Worker
from tests.deploy.test_spark_submit import REPO, WRAPPER, environment

LOGSYNTH = REPO / "tests" / "benchmarks" / "logsynth.py"
# A few thousand records over three hours of two shards: every table gets
# rows, and the job's time is Spark's start and planning, not the records.
RECORDS, HOURS = 6_000, 3
APP_NAME = "eventq-analytics"  # analytics/session.py's
# The cluster's run (its JVMs' start and the job) took 20 s on the 2-core
# machine, the whole test 35 s there and 50 s pinned to one core; the CI's
# slow run has half of that core.
RUN_SECS = 300
# After spark-submit is done, the master and workers learn that the
# application ended: seconds at most.
SETTLE_SECS = 120
# Executors' log lines naming a file a task read: FileScanRDD's, at the
# INFO level executors log at by default.
READING = re.compile(r"Reading File path: file://(\S+), range: ")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """Two workers of one core: two executors (the job is submitted with
    --total-executor-cores 2). Their JVMs are the first JIT tier only, as
    every JVM of the analytics tests (tests/analytics/jvm.py)."""
    with StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g",
                           env=JVM_ENV) as started:  # fmt: skip
        yield started


def write_log(logs: Path) -> list[Path]:
    """logsynth.py's log of RECORDS records (two shards, a file per shard and
    hour) and two notifications an hour, which logsynth does not make, in a
    file of their own; returns every Parquet file of the log."""
    subprocess.run(
        [sys.executable, str(LOGSYNTH), "--records", str(RECORDS), "--hours", str(HOURS),
         "--shards", "2", "--data", str(logs)],
        cwd=REPO, capture_output=True, check=True, timeout=RUN_SECS,
    )  # fmt: skip
    for directory in sorted((logs / "deliveries").glob("date=*/hour=*")):
        date = directory.parent.name.removeprefix("date=")
        hour = int(directory.name.removeprefix("hour="))
        rows = [
            notification(at(date, hour, 60), "delivery", "email,push", shard="s1"),
            notification(at(date, hour, 120), "gc", "push", shard="s2", user_id=11),
        ]
        write_partition(logs, date, hour, rows, name="notifications")
    return sorted((logs / "deliveries").rglob("*.parquet"))


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` from the repository to its end, in a process group of its
    own that is killed after it (spark-submit's JVM and the driver's Python
    too, should the test give up on the wrapper)."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=RUN_SECS)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def executor_logs(cluster: StandaloneCluster, worker: Worker, app_id: str) -> list[Path]:
    """The stderr of each executor of `app_id` that `worker` lists as
    finished, once it lists one (it hears of the end after the driver)."""

    def finished() -> list[str]:
        status = cluster.worker_status(worker) or {"finishedexecutors": []}
        return [str(e["id"]) for e in status["finishedexecutors"] if e["appid"] == app_id]

    ids = cluster.wait_for(finished, SETTLE_SECS, f"{worker.name}'s executor of {app_id}")
    return [worker.work_dir / app_id / executor / "stderr" for executor in ids]


def tables(out: Path) -> dict[str, pa.Table]:
    """Every Parquet table under `out`, by its directory ("hourly/latency",
    "overall/latency", ...; `date` and `hour` from the directories below),
    rows sorted by all their columns."""
    directories = {p.relative_to(out).parts[:2] for p in out.rglob("*.parquet")}
    found = {}
    for kind, name in sorted(directories):
        table = ds.dataset(out / kind / name, format="parquet", partitioning="hive").to_table()
        order = [(column, "ascending") for column in table.column_names]
        found[f"{kind}/{name}"] = table.sort_by(order)
    return found


# Every wait of the test at its longest: the cluster's start, the log, two
# runs, the three waits for the application's end, the cluster's stop.
@pytest.mark.timeout(START_SECS + 3 * RUN_SECS + 3 * SETTLE_SECS + STOP_SECS)
def test_a_standalone_cluster_writes_what_the_embedded_run_writes(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    logs, on_cluster, embedded = tmp_path / "logs", tmp_path / "cluster-out", tmp_path / "local-out"
    files = write_log(logs)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # The driver on loopback too (else it binds the host's first address).
    env = {**environment(scratch), **JVM_ENV, "SPARK_LOCAL_IP": HOST}

    submitted = run(
        [
            str(WRAPPER),
            "--master", cluster.url,
            "--total-executor-cores", "2",
            "--executor-memory", "512m",
            "--conf", "spark.ui.enabled=false",
            # No task before both executors are up, so that each reads some
            # of the files (a slow machine may start one long after the other).
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
            "--conf", f"spark.scheduler.maxRegisteredResourcesWaitingTime={RUN_SECS}s",
            "--",
            "run", "--logs", str(logs), "--out", str(on_cluster),
        ],
        env,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-3000:]

    # The master ran the application on the two workers, an executor or more each.
    def finished_apps() -> list[dict[str, Any]]:
        status = cluster.status()
        if status is None or status["activeapps"]:
            return []
        return [app for app in status["completedapps"] if app["name"] == APP_NAME]

    [app] = cluster.wait_for(finished_apps, SETTLE_SECS, f"{APP_NAME} to finish, alone")
    assert (app["state"], app["cores"]) == ("FINISHED", 2), app
    read: list[set[Path]] = []
    for worker in cluster.workers:
        # Usually one executor a worker; a second when the master replaced
        # one that exited (on a slow machine, one that did not register in
        # time): what the worker's executors read, together.
        paths: set[Path] = set()
        for stderr in executor_logs(cluster, worker, app["id"]):
            paths |= {Path(p) for p in READING.findall(stderr.read_text(errors="replace"))}
            # What the driver shipped to the executor: the package, no log.
            assert not list(stderr.parent.rglob("*.parquet"))
        read.append(paths)
    # The executors opened every file of the log by its path, each some of them.
    assert all(read), read
    assert set.union(*read) == set(files)

    local = run([sys.executable, "-m", "analytics", "run", "--logs", str(logs),
                 "--out", str(embedded)], env)  # fmt: skip
    assert local.returncode == 0, local.stderr[-3000:]

    # The same console summary, and the same summary.txt (processing times aside).
    summary = (embedded / "report" / "summary.txt").read_text()
    assert (on_cluster / "report" / "summary.txt").read_text() == summary
    assert f"hours: {HOURS}  records: {RECORDS + 2 * HOURS}  " in summary
    for result in (submitted, local):
        first, *lines = result.stdout.splitlines()
        assert first.startswith(f"processed {HOURS} of {HOURS} hours in "), first
        assert lines == summary.splitlines()

    # Every table (hourly, daily, weekly, overall), row for row.
    expected, found = tables(embedded), tables(on_cluster)
    assert list(found) == list(expected)
    assert {"hourly", "overall"} <= {name.split("/")[0] for name in expected}, list(expected)
    for name, table in expected.items():
        assert table.num_rows > 0, f"{name} is empty: comparing it proves nothing"
        assert found[name].schema == table.schema, name
        rows, wanted = found[name].to_pylist(), table.to_pylist()
        differ = [(a, b) for a, b in zip(rows, wanted, strict=False) if a != b]
        assert len(rows) == len(wanted), f"{name}: {len(rows)} rows, {len(wanted)} embedded"
        assert not differ, f"{name}: first differences (cluster, embedded): {differ[:3]}"
