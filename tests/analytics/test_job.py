"""The whole job: CLI, tables, report, determinism, --incremental.

One scenario in steps, because every Spark run costs seconds: hours 03 and
04 processed incrementally, then hour 05 added and processed alone; a full
run in-process must give the same bytes as the incremental output, and one
through `python -m analytics` (another JVM) the same rows and report.
"""

from __future__ import annotations

import io
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analytics import job
from analytics.extract import Hour
from analytics.progress import Progress
from tests.analytics import logdata
from tests.analytics.jvm import JVM_ENV
from tests.analytics.logdata import at, delivery, end, notification, poll, register

REPO = Path(__file__).resolve().parents[2]
DATE = "2026-11-20"
ENQUEUED = {3: [0.013 * (i + 1) for i in range(10)], 4: [0.5] * 5, 5: [0.2] * 5}


def hour_rows(hour: int) -> list[dict]:
    rows: list[dict] = []
    shard = "s2" if hour == 4 else "default"
    for i, latency in enumerate(ENQUEUED[hour]):
        rows.append(
            delivery(at(DATE, hour, 60 + i), latency, shard=shard, event_id=i,
                     event_type=("message", "typing")[i % 2], user_id=10 + i % 3)
        )  # fmt: skip
    if hour == 3:
        rows += [poll(at(DATE, 3, 100 + i), "heartbeat") for i in range(8)]
        rows += [poll(at(DATE, 3, 120), "events")]
        rows += [poll(at(DATE, 3, 121), "error", code="BAD_EVENT_QUEUE_ID", queue_id="gone")]
        rows += [register(at(DATE, 3, 1)), register(at(DATE, 3, 2), queue_id="q2")]
        rows += [end(at(DATE, 3, 900), "expired", 600.0, queue_depth=3)]
        rows += [notification(at(DATE, 3, 200), "delivery", "email,push")]
        rows += [notification(at(DATE, 3, 950), "gc", "email", event_id=4001)]
        # a record of a future format version: ignored
        rows += [delivery(at(DATE, 3, 70), 9.0, v=2)]
    elif hour == 4:
        rows += [poll(at(DATE, 4, 100 + i), "heartbeat", shard="s2") for i in range(5)]
    else:
        rows += [poll(at(DATE, 5, 100 + i), "events") for i in range(5)]
        rows += [end(at(DATE, 5, 900), "overflow", 42.0, queue_depth=7)]
        rows += [notification(at(DATE, 5, 10), "delivery", "push", user_id=11)]
    return rows


def write_hour(logs: Path, hour: int) -> None:
    logdata.write_partition(logs, DATE, hour, hour_rows(hour), name=f"shard-{hour}")


def percentile_ms(values: list[float], permille: int) -> str:
    """The job's definition: nearest rank, reported as the log bucket's upper bound."""
    ordered = sorted(values)
    value = ordered[-(-len(ordered) * permille // 1000) - 1]
    return f"{10 ** (math.ceil(50 * math.log10(value)) / 50) * 1000:.1f} ms"


def files(out: Path) -> dict[str, bytes]:
    """Every table and report file under `out`, by relative path (not the
    state, nor the dated reports: their names are the times of the runs)."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "state.json" and p.relative_to(out).parts[0] != "reports"
    }


def contents(out: Path) -> dict[str, object]:
    """`files(out)` with each Parquet file as its schema and rows in file order.

    Two JVMs do not write the same Parquet bytes for the same rows: parquet-mr
    lists a column chunk's encodings from a hash set of enums, whose order
    follows identity hash codes, which differ from one JVM to the next.
    """
    return {
        name: (pq.read_table(out / name).schema, pq.read_table(out / name).to_pylist())
        if name.endswith(".parquet")
        else data
        for name, data in files(out).items()
    }


def test_incremental_full_and_cli_runs_agree_byte_for_byte(spark, tmp_path):
    logs, incremental, full, cli = (tmp_path / n for n in ("logs", "inc", "full", "cli"))
    write_hour(logs, 3)
    write_hour(logs, 4)
    first = job.run(spark, job.Options(logs=logs, out=incremental, incremental=True))
    assert first.processed == [Hour(DATE, 3), Hour(DATE, 4)]
    kept = incremental / "hourly" / "volumes" / f"date={DATE}" / "hour=3" / "part-00000.parquet"
    inode = kept.stat().st_ino

    write_hour(logs, 5)
    second = job.run(spark, job.Options(logs=logs, out=incremental, incremental=True))
    assert second.processed == [Hour(DATE, 5)]
    assert kept.stat().st_ino == inode  # hour 03 was not rewritten

    job.run(spark, job.Options(logs=logs, out=full))
    assert files(incremental) == files(full)
    # each run's report kept, dated, the index listing them newest first
    dated = sorted(p.name for p in (incremental / "reports").iterdir() if p.is_dir())
    assert len(dated) == 2
    assert (incremental / "reports" / dated[0] / "report.html").read_bytes() != (
        incremental / "report" / "report.html"
    ).read_bytes()  # the first run's, of two hours
    assert (incremental / "reports" / dated[1] / "report.html").read_bytes() == (
        incremental / "report" / "report.html"
    ).read_bytes()
    index = (incremental / "reports" / "index.html").read_text()
    assert index.index(f"href='{dated[1]}/report.html'") < index.index(f"href='{dated[0]}/")
    assert f"<iframe title='latest report' src='{dated[1]}/report.html'>" in index

    completed = subprocess.run(
        [sys.executable, "-m", "analytics", "run", "--logs", str(logs), "--out", str(cli)],
        cwd=REPO,
        env={**os.environ, **JVM_ENV},
        capture_output=True,
        text=True,
        check=False,
        timeout=170,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert contents(cli) == contents(full)

    # The console summary's numbers, computed by hand from hour_rows.
    out = completed.stdout
    assert "processed 3 of 3 hours" in out
    assert "hours: 3  records: 47  deliveries: 20  polls: 20" in out
    assert "events 30.0 %, heartbeat 65.0 %, displaced 0.0 %" in out
    assert "BAD_EVENT_QUEUE_ID: 1 (5.0 % of polls)  registers: 2" in out
    ends = "expired 1, deleted 0, overflow 1, evicted 0, deactivated 0, role_changed 0"
    assert f"queue ends: {ends}  unacknowledged events: 10" in out
    latencies = [v for values in ENQUEUED.values() for v in values]
    p50, p95, p99 = (percentile_ms(latencies, q) for q in (500, 950, 990))
    assert f"enqueued_latency: p50 {p50}  p95 {p95}  p99 {p99}" in out
    assert "shards: 2  imbalance (max/mean deliveries): 1.50  busiest: default" in out
    notified = "notifications enqueued: 3 (delivery 2, gc 1; email 2, push 2)"
    assert notified in out

    report = (cli / "report" / "report.html").read_text()
    assert "hours: 3  records: 47  deliveries: 20  polls: 20" in report
    assert notified in report
    for image in (*(f"{chart}_by_{unit}" for chart in ("deliveries", "latency", "notifications")
                    for unit in ("hour", "day", "week")),
                  "latency_by_event_type", "poll_outcomes", "queue_ends",
                  "shard_load"):  # fmt: skip
        assert f"src='{image}.png'" in report
        assert (cli / "report" / f"{image}.png").read_bytes().startswith(b"\x89PNG\r\n")

    shards = pq.read_table(cli / "overall" / "shard_load").to_pylist()
    assert [(r["shard"], r["deliveries"], r["polls"]) for r in shards] == [
        ("default", 15, 15),
        ("s2", 5, 5),
    ]
    volumes = pq.read_table(cli / "overall" / "volumes").to_pylist()
    assert {"dimension": "event_type", "key": "message", "deliveries": 11} in volumes
    hourly = pq.read_table(cli / "hourly" / "notifications").to_pylist()
    assert hourly == [
        {"date": DATE, "hour": 3, "enqueued": 2, "delivery": 1, "gc": 1, "email": 2, "push": 1},
        {"date": DATE, "hour": 5, "enqueued": 1, "delivery": 1, "gc": 0, "email": 0, "push": 1},
    ]
    assert pq.read_table(cli / "overall" / "notifications").to_pylist() == [
        {"enqueued": 3, "delivery": 2, "gc": 1, "email": 2, "push": 2}
    ]
    hourly = pq.read_table(cli / "hourly" / "poll_outcomes").to_pylist()
    assert [(r["hour"], r["polls"], r["heartbeat"]) for r in hourly] == [
        (3, 10, 8),
        (4, 5, 5),
        (5, 5, 0),
    ]
    users = pq.read_table(cli / "overall" / "busiest_users").to_pylist()
    # user_id 10 + i % 3 over the 20 deliveries; every poll and register is user 10's
    assert [(r["rank"], r["user_id"], r["deliveries"], r["polls"], r["registers"])
            for r in users] == [(1, 10, 8, 20, 2), (2, 11, 7, 0, 0), (3, 12, 5, 0, 0)]  # fmt: skip


def test_no_logs_is_an_error(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "analytics", "run", "--logs", str(tmp_path), "--out",
         str(tmp_path / "out"), "--since", "2026-11-20T05:00", "--until", "2026-11-20T04:00"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 1
    assert "--since must be before --until" in completed.stderr


def test_a_log_dir_without_logs_fails_before_spark_starts(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "analytics", "run", "--logs", str(tmp_path / "nowhere"),
         "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 1
    assert completed.stderr == (
        f"analytics: no delivery-log partitions under {tmp_path / 'nowhere' / 'deliveries'}\n"
    )  # one line: no JVM banner, the session was never started
    assert not (tmp_path / "out").exists()


def test_top_must_be_positive(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "analytics", "run", "--logs", str(tmp_path), "--out",
         str(tmp_path / "out"), "--top", "0"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 2
    assert "argument --top: must be 1 or more, got 0" in completed.stderr


def test_a_run_in_chunks_reports_progress_and_gives_the_same_tables(spark, tmp_path):
    logs, whole, chunked = tmp_path / "logs", tmp_path / "whole", tmp_path / "chunked"
    for hour in (3, 4, 5):
        write_hour(logs, hour)
    quiet = io.StringIO()
    job.run(spark, job.Options(logs=logs, out=whole), progress=Progress(quiet))
    assert quiet.getvalue() == ""  # one chunk: over soon after Spark started

    stream = io.StringIO()
    # Any hour is more than a byte: a chunk per hour.
    job.run(spark, job.Options(logs=logs, out=chunked, chunk_bytes=1), progress=Progress(stream))
    lines = stream.getvalue().splitlines()
    records = [len(hour_rows(h)) - (h == 3) for h in (3, 4, 5)]  # the v=2 record is skipped
    rate = r"in [0-9.]+ s \([0-9,]+ records/s\)"
    expected = [
        rf"analytics: {done}/3 hours, {sum(records[:done])} records {rate}" for done in (1, 2, 3)
    ]
    assert len(lines) == 3, lines
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    assert files(chunked) == files(whole)


def test_a_log_without_polls_or_readable_records_still_gives_tables_and_a_report(spark, tmp_path):
    logs = tmp_path / "logs"
    # Hour 03: deliveries only (no poll, register or end). Hour 04: only
    # records of a future format version, which the job does not read.
    logdata.write_partition(logs, DATE, 3, [delivery(at(DATE, 3, 60 + i), 0.01) for i in range(3)])
    logdata.write_partition(logs, DATE, 4, [delivery(at(DATE, 4, 60), 0.01, v=2)])
    result = job.run(spark, job.Options(logs=logs, out=tmp_path / "deliveries-only"))
    assert result.summary.polls == 0
    assert result.summary.registers == 0
    assert result.summary.deliveries == 3
    assert result.summary.lines[0] == "hours: 1  records: 3  deliveries: 3  polls: 0"

    unread = tmp_path / "unread"
    shutil.rmtree(logs / "deliveries" / f"date={DATE}" / "hour=03")
    result = job.run(spark, job.Options(logs=logs, out=unread))
    assert result.summary.records == 0
    assert result.summary.polls == 0
    [imbalance] = pq.read_table(
        unread / "overall" / "shard_imbalance" / "part-00000.parquet"
    ).to_pylist()
    assert imbalance == {
        "shards": 0, "deliveries": None, "max_deliveries": None, "mean_deliveries": None,
        "imbalance": None, "busiest_shard": None,
    }  # fmt: skip


def test_limits_flag_the_hours_over_them_and_fail_the_run(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    for hour in (3, 4, 5):
        write_hour(logs, hour)
    base = [sys.executable, "-m", "analytics", "run", "--logs", str(logs), "--out", str(out)]
    command = [*base, "--max-p99-ms", "300", "--max-dead-letters-per-hour", "0",
               "--fail-on-threshold"]  # fmt: skip
    completed = subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, **JVM_ENV, "EVENTQ_ANALYTICS_MAX_OVERFLOWED_PER_HOUR": "0"},
        capture_output=True,
        text=True,
        check=False,
        timeout=170,
    )
    assert completed.returncode == 3, completed.stderr[-3000:]
    assert "analytics: an hour is over a limit (--fail-on-threshold)" in completed.stderr
    # hour 04's deliveries took 0.5 s: its p99 is the bucket's upper bound
    worst = f"{10 ** (math.ceil(50 * math.log10(0.5)) / 50) * 1000:g}"
    expected = [
        f"delivery latency p99 <= 300 ms: worst hour {worst} ms, OVER in 1 of the last 24 hours",
        "dead-lettered notices per hour <= 0: worst hour 0, ok",
        "queues ended by overflow per hour <= 0: worst hour 1, OVER in 1 of the last 24 hours",
    ]
    assert completed.stdout.splitlines()[-3:] == expected
    page = (out / "report" / "report.html").read_text()
    assert f"<li class='over'>{expected[0].replace('<', '&lt;')}: 11-20 04h</li>" in page
    assert f"<li class='ok'>{expected[1].replace('<', '&lt;')}</li>" in page
    assert f"<li class='over'>{expected[2].replace('<', '&lt;')}: 11-20 05h</li>" in page

    bad = subprocess.run(
        [*base, "--max-p99-ms", "-1"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "--max-p99-ms: must be a number of 0 or more, got -1" in bad.stderr


@pytest.mark.timeout(600)
def test_the_first_run_makes_the_jvms_class_archive_the_next_maps_it_a_damaged_one_goes(
    tmp_path,
):
    logs, cache = tmp_path / "logs", tmp_path / "cache"
    for hour in (3, 4):
        write_hour(logs, hour)
    # cwd: a JVM that crashes leaves its report (hs_err_pid*.log) there
    env = {**os.environ, **JVM_ENV, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(REPO)}

    def cli(out: str) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [sys.executable, "-m", "analytics", "run", "--logs", str(logs), "--out",
             str(tmp_path / out)],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=280,
        )  # fmt: skip
        assert completed.returncode == 0, completed.stderr[-3000:]
        return completed

    def archives() -> list[Path]:
        return sorted((cache / "eventq" / "analytics").iterdir())

    first = cli("first")
    assert "analytics: saving the JVM's classes for the next runs" in first.stderr
    [archive] = archives()  # no staging file left
    assert re.fullmatch(r"spark-[0-9a-f]{20}\.jsa", archive.name)
    summary = first.stdout.splitlines()[1:]
    assert summary[0].startswith("hours: 2  records: ")

    mapped = cli("mapped")
    assert "saving the JVM's classes" not in mapped.stderr
    assert "[warning][cds" not in mapped.stderr  # the JVM took the archive
    assert mapped.stdout.splitlines()[1:] == summary
    assert archives() == [archive]

    # Cut short, as by a disk that filled up while copying it: the JVM
    # crashes mapping it (-Xshare:auto does not catch that).
    data = archive.read_bytes()
    archive.chmod(0o644)
    archive.write_bytes(data[: 2**20])
    damaged = cli("damaged")
    assert f"analytics: the JVM did not start with {archive}" in damaged.stderr
    assert damaged.stdout.splitlines()[-len(summary) :] == summary
    assert not archive.exists()


def test_a_large_run_is_cut_into_chunks_the_driver_works_on_while_spark_reads_the_next():
    hours = [Hour(DATE, h) for h in range(24)]
    mib = 2**20
    small = {h: {"s1.parquet": mib // 2} for h in hours}  # 12 MiB in all: one chunk
    assert job.chunks(hours, small) == [hours]
    large = {h: {"s1.parquet": mib, "s2.parquet": mib} for h in hours}  # 48 MiB: four of 12
    assert job.chunks(hours, large) == [hours[i : i + 6] for i in range(0, 24, 6)]
    # The configured limit still holds when it is the smaller.
    assert job.chunks(hours, large, limit=8 * mib) == [hours[i : i + 4] for i in range(0, 24, 4)]
    # Even shares, not a last chunk of one hour.
    day_and_one = [*hours, Hour("2026-11-21", 0)]
    sizes = {h: {"s1.parquet": 2 * mib} for h in day_and_one}
    assert [len(c) for c in job.chunks(day_and_one, sizes)] == [7, 6, 6, 6]
    # An hour larger than a chunk is a chunk alone.
    uneven = {**large, hours[0]: {"s1.parquet": 40 * mib}}
    assert job.chunks(hours, uneven)[0] == [hours[0]]
    # Hours without files: one chunk.
    assert job.chunks(hours, {h: {} for h in hours}) == [hours]
