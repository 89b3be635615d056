"""Tables written from the driver: one file per hour, staged then moved into
place, read back with their hour; the same rows give the same bytes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from analytics import load, tables
from analytics.extract import Hour
from tests.analytics.frames import DATE

SHAPE = tables.SHAPES["shard_load"]


def load_rows(*hours_and_shards: tuple[int, str]) -> pa.Table:
    rows = [
        {"date": DATE, "hour": hour, "shard": shard, "records": hour, "deliveries": 1,
         "polls": 2, "response_bytes": 3, "registers": 4}
        for hour, shard in hours_and_shards
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SHAPE.schema(tables.HOUR))


def part(out, hour: int):
    return out / "hourly" / "shard_load" / f"date={DATE}" / f"hour={hour}" / load.PART


def test_an_hour_is_one_file_without_its_hour_columns(tmp_path):
    stage = load.HourlyStage(tmp_path, "shard_load")
    stage.add(load_rows((3, "s1"), (3, "s2")))
    stage.add(load_rows((4, "s1")))  # a later chunk
    stage.commit(None)
    assert pq.read_table(part(tmp_path, 3)).to_pylist() == [
        {"shard": s, "records": 3, "deliveries": 1, "polls": 2, "response_bytes": 3,
         "registers": 4}
        for s in ("s1", "s2")
    ]  # fmt: skip
    assert pq.read_table(part(tmp_path, 4)).schema == SHAPE.schema([])
    back = load.read_hourly(tmp_path, "shard_load")
    assert sorted((r["hour"], r["shard"]) for r in back.to_pylist()) == [
        (3, "s1"),
        (3, "s2"),
        (4, "s1"),
    ]
    assert back.schema == SHAPE.schema(tables.HOUR)
    assert not (tmp_path / load.TMP).exists()


def test_an_incremental_commit_replaces_only_its_hours(tmp_path):
    first = load.HourlyStage(tmp_path, "shard_load")
    first.add(load_rows((3, "s1"), (4, "s1"), (5, "s1")))
    first.commit(None)
    kept = part(tmp_path, 3).stat().st_ino
    again = load.HourlyStage(tmp_path, "shard_load")
    again.add(load_rows((4, "s9")))  # hour 5 processed again, without rows now
    again.commit([Hour(DATE, 4), Hour(DATE, 5)])
    assert part(tmp_path, 3).stat().st_ino == kept
    assert [r["shard"] for r in pq.read_table(part(tmp_path, 4)).to_pylist()] == ["s9"]
    assert not part(tmp_path, 5).parent.exists()


def test_the_same_rows_give_the_same_bytes(tmp_path):
    for name in ("a", "b"):
        load.write_overall(load_rows((3, "s1")).drop_columns(tables.HOUR), tmp_path / name,
                           "shard_load")  # fmt: skip
    first, second = (tmp_path / n / "overall" / "shard_load" / load.PART for n in ("a", "b"))
    assert first.read_bytes() == second.read_bytes()


def test_reading_a_table_never_written_gives_no_rows(tmp_path):
    empty = load.read_hourly(tmp_path, "volumes")
    assert empty.num_rows == 0
    assert empty.schema == tables.SHAPES["volumes"].schema(tables.HOUR)


def test_reads_skip_what_a_killed_run_set_aside_and_empty_days(tmp_path):
    stage = load.HourlyStage(tmp_path, "shard_load")
    stage.add(load_rows((3, "s1")))
    stage.commit(None)
    # What _replace renames a partition to before removing it, left by a
    # run killed in between; and a day whose hours were all removed.
    table = tmp_path / "hourly" / "shard_load"
    aside = table / f"date={DATE}" / ".hour=3.old-0123"
    aside.mkdir()
    (aside / load.PART).write_bytes(part(tmp_path, 3).read_bytes())
    (table / ".date=2026-01-01.old-0123" / "hour=1").mkdir(parents=True)
    (table / ".date=2026-01-01.old-0123" / "hour=1" / load.PART).write_bytes(
        aside.joinpath(load.PART).read_bytes()
    )
    (table / "date=2099-01-01").mkdir()
    load.write_day(load_rows((0, "s1")).drop_columns(tables.HOUR), tmp_path, load.WEEKLY,
                   "shard_load", DATE)  # fmt: skip
    weekly = tmp_path / "weekly" / "shard_load"
    (weekly / ".date=2026-01-05.old-0123").mkdir()
    (weekly / ".date=2026-01-05.old-0123" / load.PART).write_bytes(
        (weekly / f"date={DATE}" / load.PART).read_bytes()
    )

    for dates in (None, [DATE], [DATE, "2099-01-01"]):
        rows = load.read_hourly(tmp_path, "shard_load", dates=dates).to_pylist()
        assert [(r["date"], r["hour"], r["shard"]) for r in rows] == [(DATE, 3, "s1")], dates
    assert load.stored_dates(tmp_path, load.HOURLY, "shard_load") == [DATE]
    assert [r["date"] for r in load.read_days(tmp_path, load.WEEKLY, "shard_load").to_pylist()] == [
        DATE
    ]
    assert load.stored_dates(tmp_path, load.WEEKLY, "shard_load") == [DATE]
