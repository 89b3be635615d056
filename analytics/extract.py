"""Reading the delivery log: which hours exist, and the records of some hours.

The job works in whole UTC hours, the log's partition unit: `--since` selects
from the start of its hour, `--until` (exclusive) up to the end of the hour it
falls in unless it is on the hour. Selection is by the `date`/`hour`
partition columns, so Spark lists and opens only the selected directories.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics import schema

DELIVERIES = "deliveries"


class Hour(NamedTuple):
    """One partition of the log: `date` 'YYYY-MM-DD' (UTC) and `hour` 0-23."""

    date: str
    hour: int

    @property
    def key(self) -> str:
        """The partition's directory under `<logs>/deliveries`, as the server names it."""
        return f"date={self.date}/hour={self.hour:02d}"

    @classmethod
    def from_key(cls, key: str) -> Hour:
        """The hour of a `key` (`date=YYYY-MM-DD/hour=HH`)."""
        date, hour = key.split("/")
        return cls(date.removeprefix("date="), int(hour.removeprefix("hour=")))

    @classmethod
    def of(cls, moment: dt.datetime) -> Hour:
        """The hour `moment` (aware, or naive meaning UTC) falls in."""
        utc = moment.astimezone(dt.UTC) if moment.tzinfo else moment
        return cls(utc.strftime("%Y-%m-%d"), utc.hour)

    @classmethod
    def ceiling(cls, moment: dt.datetime) -> Hour:
        """The first hour that starts at or after `moment` (for an exclusive end)."""
        utc = moment.astimezone(dt.UTC) if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
        start = utc.replace(minute=0, second=0, microsecond=0)
        if start < utc:
            start += dt.timedelta(hours=1)
        return cls.of(start)


# A partition's content as the state file records it: file name -> size in bytes.
FileSizes = dict[str, int]


_HOUR_NAME = re.compile(r"hour=(?:[01][0-9]|2[0-3])")


def list_partitions(logs_dir: Path) -> dict[Hour, FileSizes]:
    """The hours present under `<logs_dir>/deliveries` with their visible Parquet files.

    Hidden names (`.` or `_`: files being written, Spark's markers) are
    skipped, as Spark skips them; an hour directory with no visible file is
    left out. Needs `logs_dir` on a filesystem this process can list (a shared
    mount when the job runs on a cluster).
    """
    found: dict[Hour, FileSizes] = {}
    base = logs_dir / DELIVERIES
    if not base.is_dir():
        return found
    for date_dir in sorted(base.glob("date=*")):
        # The server's names only (logfiles.py: hour=00..23), as read_records
        # names them again.
        for hour_dir in sorted(date_dir.glob("hour=*")):
            if not _HOUR_NAME.fullmatch(hour_dir.name):
                continue
            files = {
                entry.name: entry.stat().st_size
                for entry in os.scandir(hour_dir)
                if entry.is_file()
                and entry.name.endswith(".parquet")
                and not entry.name.startswith((".", "_"))
            }
            if files:
                date = date_dir.name.removeprefix("date=")
                found[Hour(date, int(hour_dir.name.removeprefix("hour=")))] = files
    return found


def in_window(hours: Iterable[Hour], since: Hour | None, until: Hour | None) -> list[Hour]:
    """The hours h with since <= h < until (None: unbounded), sorted."""
    return sorted(
        h for h in hours if (since is None or h >= since) and (until is None or h < until)
    )


def select_hours(records: DataFrame, hours: Iterable[Hour]) -> DataFrame:
    """Keep the rows of the given hours, by partition columns only (pruned by Spark)."""
    by_date: dict[str, list[int]] = {}
    for h in sorted(set(hours)):
        by_date.setdefault(h.date, []).append(h.hour)
    terms: list[Column] = [
        (F.col("date") == date) & F.col("hour").isin(hour_list)
        for date, hour_list in by_date.items()
    ]
    condition = functools.reduce(operator.or_, terms) if terms else F.lit(False)
    return records.where(condition)


def accepted_versions(records: DataFrame) -> DataFrame:
    """Keep the records whose format version this reader understands (schema.py)."""
    return records.where(F.col("v").between(schema.MIN_VERSION, schema.MAX_VERSION))


def uri(path: Path) -> str:
    """`path` as a file:// URI for Spark. The job lists, renames and deletes
    files itself, so its directories are local (or a shared mount at the same
    path on every host); a plain path would be resolved against the cluster's
    default filesystem, HDFS on most YARN clusters.

    Not percent-encoded: Hadoop's Path takes the string as it is and encodes
    it itself, so `%3D` would name a directory other than `date=...`, and
    `%20` one other than a space."""
    return f"file://{path.absolute()}"


def read_records(
    spark: SparkSession,
    logs_dir: Path,
    hours: Iterable[Hour],
    columns: Sequence[str] = schema.USED_COLUMNS,
) -> DataFrame:
    """The records of `hours`, accepted versions only, with `columns` (by
    default the ones the jobs use).

    Files are read with the declared v1 schema (never inferred), `date` as a
    string and `hour` as an int from the directory names. Spark lists only
    the directories of `hours`: an hourly run over a log of months does not
    list the months.
    """
    hours = sorted(set(hours))
    base = uri(logs_dir / DELIVERIES)
    # An hour the server's log retention removed since the run was planned
    # is read as an hour without records.
    present = [h for h in hours if (logs_dir / DELIVERIES / h.key).is_dir()]
    directories = [uri(logs_dir / DELIVERIES / h.key) for h in present]
    reader = spark.read.schema(schema.LOG_SCHEMA).option("basePath", base)
    if directories:
        records = reader.parquet(*directories)
    else:
        records = spark.createDataFrame([], schema.LOG_SCHEMA)
    return accepted_versions(select_hours(records, hours)).select(*columns)


def partition_files(partitions: Mapping[Hour, FileSizes]) -> dict[str, FileSizes]:
    """`partitions` keyed by directory name, as the state file stores them."""
    return {h.key: dict(sorted(files.items())) for h, files in sorted(partitions.items())}
