"""Daily, weekly and overall tables rolled up from the hourly ones, and the
hourly tables of old days removed (analytics/rollup.py): the same tables
however the hours came, and a late change to a rolled-up day rebuilds it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analytics import histogram, job, report, rollup
from tests.analytics import logdata
from tests.analytics.logdata import at, delivery, end, poll

# Thursday 11-19 to Tuesday 11-24: two weeks (from Monday 11-16, 11-23).
HOURS = [("2026-11-19", 7), ("2026-11-20", 3), ("2026-11-20", 9), ("2026-11-22", 23),
         ("2026-11-23", 0), ("2026-11-24", 5)]  # fmt: skip


def rows(date: str, hour: int, extra: int = 0) -> list[dict]:
    made = [delivery(at(date, hour, 60 + i), 0.01 * (i + 1), user_id=10 + i % 2,
                     event_id=i, shard=("s1", "s2")[i % 2]) for i in range(3 + extra)]  # fmt: skip
    made += [poll(at(date, hour, 200), "events"), end(at(date, hour, 900), "overflow", 5.0)]
    return made


def write(logs: Path, date: str, hour: int, extra: int = 0, name: str = "s1-0") -> None:
    logdata.write_partition(logs, date, hour, rows(date, hour, extra), name=name)


def tables_of(out: Path) -> dict[str, list[dict]]:
    """Every stored table file under hourly/, daily/, weekly/, overall/, as rows."""
    return {
        p.relative_to(out).as_posix(): pq.read_table(p).to_pylist()
        for tier in ("hourly", "daily", "weekly", "overall")
        for p in sorted((out / tier).rglob("*.parquet"))
    }


def days(out: Path, tier: str) -> list[str]:
    return sorted({p.name.removeprefix("date=") for p in (out / tier).glob("*/date=*")})


def test_old_hours_roll_up_into_days_and_weeks(spark, tmp_path):
    logs = tmp_path / "logs"
    for date, hour in HOURS:
        write(logs, date, hour)
    kept = tmp_path / "kept"
    job.run(spark, job.Options(logs=logs, out=kept, keep_hourly_days=30))
    rolled = tmp_path / "rolled"
    result = job.run(spark, job.Options(logs=logs, out=rolled, keep_hourly_days=2))
    assert result.summary.lines[0].startswith("hours: 6  ")
    # A chunk per hour: days older than the kept hours are merged in memory
    # across chunks, and come out the same.
    chunked = tmp_path / "chunked"
    job.run(spark, job.Options(logs=logs, out=chunked, keep_hourly_days=2, chunk_bytes=1))
    assert tables_of(chunked) == tables_of(rolled)

    # hourly tables of the last two days only; every day and week kept
    assert days(rolled, "hourly") == ["2026-11-23", "2026-11-24"]
    assert days(kept, "hourly") == ["2026-11-19", "2026-11-20", "2026-11-22", "2026-11-23",
                                    "2026-11-24"]  # fmt: skip
    assert days(rolled, "daily") == days(kept, "hourly")
    assert days(rolled, "weekly") == ["2026-11-16", "2026-11-23"]
    # the rest is the same tables
    everything, recent = tables_of(kept), tables_of(rolled)
    assert {k: v for k, v in everything.items() if k in recent} == recent
    gone = {k for k in everything if k not in recent}
    assert gone
    assert all(re.match(r"hourly/\w+/date=2026-11-(19|20|22)/", k) for k in gone), gone
    # a day's tables are its hours' merge: 11-20 had two hours of 3 deliveries
    [day] = pq.read_table(rolled / "daily" / "coverage" / "date=2026-11-20").to_pylist()
    assert day == {"hours": 2}
    shards = pq.read_table(rolled / "daily" / "shard_load" / "date=2026-11-20").to_pylist()
    # (polls and ends are logged by shard "default" here)
    assert [(r["shard"], r["deliveries"]) for r in shards] == [("default", 0), ("s1", 4), ("s2", 2)]
    [week] = pq.read_table(rolled / "weekly" / "queue_lifecycle" / "date=2026-11-16").to_pylist()
    assert week["overflow"] == 4
    # the report's day and week windows read them
    page = (rolled / "report" / "report.html").read_text()
    assert "src='deliveries_by_week.png'" in page
    assert report_files(rolled) == report_files(kept)


def test_a_full_run_writes_the_days_it_holds_as_reading_them_back_would(spark, tmp_path):
    # A full run writes every day's daily tables from its hours in memory,
    # across chunks (here one per hour); an incremental run of the same
    # hours reads the kept days back from their hourly files. Same bytes.
    logs = tmp_path / "logs"
    for date, hour in [*HOURS, ("2026-11-24", 17)]:
        write(logs, date, hour)
    full, read_back = tmp_path / "full", tmp_path / "read-back"
    job.run(spark, job.Options(logs=logs, out=full, keep_hourly_days=2, chunk_bytes=1))
    job.run(spark, job.Options(logs=logs, out=read_back, keep_hourly_days=2, incremental=True))
    assert table_bytes(full) == table_bytes(read_back)
    assert (full / "daily" / "coverage" / "date=2026-11-24" / "part-00000.parquet").is_file()
    [day] = pq.read_table(full / "daily" / "coverage" / "date=2026-11-24").to_pylist()
    assert day == {"hours": 2}
    assert not (full / ".tmp").exists()


def table_bytes(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for tier in ("hourly", "daily", "weekly", "overall")
        for p in sorted((out / tier).rglob("*.parquet"))
    }


def test_a_full_run_that_fails_leaves_the_earlier_daily_tables(spark, tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    for date, hour in HOURS:
        write(logs, date, hour)
    out = tmp_path / "out"
    job.run(spark, job.Options(logs=logs, out=out, keep_hourly_days=2))
    before = table_bytes(out)
    write(logs, "2026-11-24", 5, extra=4)  # the day's hour changed

    def full_disk(self: object, hours: object) -> None:
        raise OSError(28, "No space left on device")

    # Every day's daily tables are made before the hourly ones are committed.
    monkeypatch.setattr(job.load.HourlyStage, "commit", full_disk)
    with pytest.raises(OSError, match="No space left"):
        job.run(spark, job.Options(logs=logs, out=out, keep_hourly_days=2, chunk_bytes=1))
    assert table_bytes(out) == before


def report_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "report").iterdir())}


def test_the_report_reads_no_hourly_table_older_than_its_last_24_hours(spark, tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    for date, hour in HOURS:
        write(logs, date, hour)
    job.run(spark, job.Options(logs=logs, out=out, keep_hourly_days=30))
    before = report_files(out)
    # Every hourly file before the last two dates made unreadable: a report
    # that opened one would fail.
    old = [p for p in (out / "hourly").rglob("*.parquet") if "date=2026-11-2" not in str(p)
           or "date=2026-11-20" in str(p) or "date=2026-11-22" in str(p)]  # fmt: skip
    assert {re.search(r"date=([\d-]+)", str(p))[1] for p in old} == {  # type: ignore[index]
        "2026-11-19",
        "2026-11-20",
        "2026-11-22",
    }
    for path in old:
        path.write_bytes(b"not parquet")
    shutil.rmtree(out / "report")
    report.write_report(out, histogram.upper_bounds(spark))
    assert report_files(out) == before


def test_incremental_runs_and_a_late_change_to_a_rolled_up_day(spark, tmp_path, capsys):
    logs, out, full = tmp_path / "logs", tmp_path / "out", tmp_path / "full"
    options = job.Options(logs=logs, out=out, incremental=True, keep_hourly_days=2)
    for date, hour in HOURS[:3]:
        write(logs, date, hour)
    job.run(spark, options)
    assert days(out, "hourly") == ["2026-11-19", "2026-11-20"]
    for date, hour in HOURS[3:]:
        write(logs, date, hour)
    second = job.run(spark, options)
    assert [h.key for h in second.processed] == [f"date={d}/hour={h:02d}" for d, h in HOURS[3:]]
    assert days(out, "hourly") == ["2026-11-23", "2026-11-24"]

    # A late shard's file for 11-20 09h: the whole of 11-20 is read again.
    write(logs, "2026-11-20", 9, extra=4, name="s2-0")
    planned = job.plan(options)
    assert [h.key for h in planned.todo()] == ["date=2026-11-20/hour=03", "date=2026-11-20/hour=09"]
    third = job.run(spark, options, planned)
    assert len(third.processed) == 2
    assert days(out, "hourly") == ["2026-11-23", "2026-11-24"]  # rolled up again

    job.run(spark, job.Options(logs=logs, out=full, keep_hourly_days=2))
    assert tables_of(out) == tables_of(full)
    shards = pq.read_table(out / "daily" / "shard_load" / "date=2026-11-20").to_pylist()
    assert sum(r["deliveries"] for r in shards) == 3 + 3 + 7

    # An hour of a rolled-up day changes while another hour of that day,
    # processed before, is gone from the log: the day cannot be rebuilt.
    (logs / "deliveries" / "date=2026-11-20" / "hour=03" / "s1-0.parquet").unlink()
    (logs / "deliveries" / "date=2026-11-20" / "hour=03").rmdir()
    write(logs, "2026-11-20", 9, extra=5, name="s3-0")
    planned = job.plan(options)
    assert [h.key for h in planned.left_out()] == ["date=2026-11-20/hour=09"]
    assert planned.todo() == []
    assert rollup.first_kept_day("2026-11-24", 2) == "2026-11-23"


def test_days_of_hourly_tables_kept_from_the_environment():
    assert rollup.keep_from_environment({}) == rollup.KEEP_HOURLY_DAYS
    assert rollup.keep_from_environment({rollup.ENV_KEEP_HOURLY_DAYS: " 30 "}) == 30
    for bad, why in (("1", "is below 2"), ("x", "is not a number"), ("2.5", "is not a number")):
        with pytest.raises(ValueError, match=f"{rollup.ENV_KEEP_HOURLY_DAYS}=.* {why}"):
            rollup.keep_from_environment({rollup.ENV_KEEP_HOURLY_DAYS: bad})
