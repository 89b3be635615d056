"""Reading the log: versions, hour windows, partition pruning, hidden files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.testing import assertDataFrameEqual

from analytics import extract
from analytics.extract import Hour
from tests.analytics import logdata
from tests.analytics.frames import DATE, records


def test_only_accepted_versions_are_read(spark):
    frame = records(spark, [{"v": 0, "kind": "a"}, {"v": 1, "kind": "b"}, {"v": 2, "kind": "c"}])
    assertDataFrameEqual(
        extract.accepted_versions(frame).select("kind"),
        spark.createDataFrame([("b",)], "kind string"),
    )


def test_window_rounds_to_whole_hours():
    hours = [Hour(DATE, h) for h in range(2, 7)]
    since = Hour.of(dt.datetime(2026, 11, 20, 3, 30, tzinfo=dt.UTC))
    assert extract.in_window(hours, since, Hour.ceiling(dt.datetime(2026, 11, 20, 5))) == [
        Hour(DATE, 3),
        Hour(DATE, 4),
    ]
    assert extract.in_window(hours, None, Hour.ceiling(dt.datetime(2026, 11, 20, 5, 10))) == [
        Hour(DATE, 2),
        Hour(DATE, 3),
        Hour(DATE, 4),
        Hour(DATE, 5),
    ]
    # an offset is converted to UTC: 06:30+02:00 is 04:30Z
    east = dt.timezone(dt.timedelta(hours=2))
    assert Hour.of(dt.datetime(2026, 11, 20, 6, 30, tzinfo=east)) == Hour(DATE, 4)


def test_listing_skips_hidden_files_and_empty_hours(tmp_path):
    logdata.write_partition(tmp_path, DATE, 3, [logdata.poll(logdata.at(DATE, 3), "heartbeat")])
    hidden = tmp_path / "deliveries" / f"date={DATE}" / "hour=04"
    hidden.mkdir(parents=True)
    (hidden / ".s1-1.parquet.tmp").write_bytes(b"half")
    (hidden / "_SUCCESS").write_bytes(b"")
    partitions = extract.list_partitions(tmp_path)
    assert list(partitions) == [Hour(DATE, 3)]
    assert list(partitions[Hour(DATE, 3)]) == ["default-0.parquet"]
    assert extract.list_partitions(tmp_path / "missing") == {}


def test_read_records_from_a_directory_whose_name_needs_quoting(spark, tmp_path):
    logs = tmp_path / "logs of a=b %20 #1"
    for hour in (3, 4):
        t = logdata.at(DATE, hour, 60)
        logdata.write_partition(logs, DATE, hour, [logdata.delivery(t, 0.1, event_id=hour)])
    frame = extract.read_records(spark, logs, [Hour(DATE, 3), Hour(DATE, 4)])
    assert sorted(row["hour"] for row in frame.collect()) == [3, 4]


def test_read_records_prunes_other_hours_and_versions(spark, tmp_path, capsys):
    for hour in (3, 4, 5):
        t = logdata.at(DATE, hour, 60)
        logdata.write_partition(
            tmp_path,
            DATE,
            hour,
            [logdata.delivery(t, 0.1, event_id=hour), logdata.delivery(t, 0.1, v=2)],
        )
    frame = extract.read_records(spark, tmp_path, [Hour(DATE, 4)])
    assertDataFrameEqual(
        frame.select("date", "hour", "v", "kind"),
        spark.createDataFrame(
            [(DATE, 4, 1, "delivery")], "date string, hour int, v int, kind string"
        ),
    )
    frame.explain()
    plan = capsys.readouterr().out
    # the hour condition is a partition filter: the other directories are not read
    assert "PartitionFilters: [" in plan
    assert "hour" in plan.split("PartitionFilters: [", 1)[1].split("]", 1)[0]


def test_only_the_servers_hour_names_are_listed(tmp_path):
    for name in ("hour=00", "hour=23", "hour=24", "hour=29", "hour=7", "hour=x"):
        directory = tmp_path / "deliveries" / f"date={DATE}" / name
        directory.mkdir(parents=True)
        (directory / "s1.parquet").write_bytes(b"x")
    assert sorted(extract.list_partitions(tmp_path)) == [Hour(DATE, 0), Hour(DATE, 23)]


def test_spark_reads_the_hours_asked_and_an_hour_gone_is_empty(spark, tmp_path):
    for hour in (3, 4, 5):
        t = logdata.at(DATE, hour, 60)
        logdata.write_partition(tmp_path, DATE, hour, [logdata.delivery(t, 0.1, event_id=hour)])
    frame = extract.read_records(spark, tmp_path, [Hour(DATE, 4), Hour(DATE, 5)])
    # the files of hours 04 and 05 only are listed, not the whole log
    read = sorted(Path(f.removeprefix("file://")).parent.name for f in frame.inputFiles())
    assert read == ["hour=04", "hour=05"]
    gone = tmp_path / "deliveries" / f"date={DATE}" / "hour=05"
    for file in gone.iterdir():
        file.unlink()
    gone.rmdir()  # the server's log retention, between the plan and the read
    frame = extract.read_records(spark, tmp_path, [Hour(DATE, 4), Hour(DATE, 5)])
    assert [row["hour"] for row in frame.collect()] == [4]
    assert extract.read_records(spark, tmp_path, [Hour(DATE, 5)]).count() == 0
