"""Writing and reading back the output tables under --out.

Layout: `<out>/hourly/<table>/date=YYYY-MM-DD/hour=H/part-00000.parquet` and
`<out>/overall/<table>/part-00000.parquet`. Each file's rows are sorted by the
table's key and files get fixed names, so the same input gives the same
rows in the same files (and, within one JVM, the same bytes: parquet-mr
orders some footer lists by identity hash codes). Spark writes into
`<out>/.tmp/` first; only complete output is moved into place by renames,
so a crashed run leaves the previous table (or, at worst between two
renames, no table), never half of one.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from analytics.extract import Hour, select_hours, uri

HOURLY = "hourly"
OVERALL = "overall"
TMP = ".tmp"


def _scratch(out: Path, name: str) -> Path:
    return out / TMP / f"{name}-{uuid.uuid4().hex}"


def _tidy(directory: Path) -> None:
    """Drop Spark's markers and checksums; name part files part-00000.parquet, ... in order."""
    for marker in [*directory.rglob("_*"), *directory.rglob(".*.crc")]:
        if marker.is_file():
            marker.unlink()
    for folder in sorted({p.parent for p in directory.rglob("part-*")}):
        # Spark names them part-<task>-<job uuid>...: sorting keeps task order.
        for index, part in enumerate(sorted(folder.glob("part-*"))):
            part.rename(folder / f"part-{index:05d}.parquet")


def _replace(target: Path, replacement: Path | None) -> None:
    """Put `replacement` (None: nothing) where `target` was, by renames."""
    trash = target.with_name(f".{target.name}.old-{uuid.uuid4().hex}")
    if target.exists():
        target.rename(trash)
    if replacement is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        replacement.rename(target)
    shutil.rmtree(trash, ignore_errors=True)


def write_overall(frame: DataFrame, out: Path, table: str, order: list[str]) -> None:
    """Replace `<out>/overall/<table>` with `frame`, one file sorted by `order`."""
    scratch = _scratch(out, table)
    # repartition, not coalesce: coalesce(1) would run the aggregation that
    # feeds it in one task too (10 s instead of 1.5 s for busiest_queues over
    # 10 million records); the shuffle of a small result costs milliseconds.
    single = frame.repartition(1)
    (single.sortWithinPartitions(*order) if order else single).write.parquet(uri(scratch))
    _tidy(scratch)
    _replace(out / OVERALL / table, scratch)
    _clean(out)


def write_hourly(
    frame: DataFrame, out: Path, table: str, order: list[str], hours: Iterable[Hour] | None
) -> None:
    """Write `frame` (with `date`, `hour`) as one file per hour, sorted by `order`.

    `hours` None replaces the whole table; otherwise only those hours'
    partitions are replaced (an hour without rows in `frame` is removed) and
    the others are left as they are.
    """
    scratch = _scratch(out, table)
    # All rows of an hour to one task, hours spread over the tasks: one file
    # per hour, written in parallel (coalesce(1) ran the whole aggregation
    # in one task: queue_activity over 10 million records took 18 s).
    (
        frame.repartition("date", "hour")
        .sortWithinPartitions("date", "hour", *order)
        .write.partitionBy("date", "hour")
        .parquet(uri(scratch))
    )
    _tidy(scratch)
    target = out / HOURLY / table
    if hours is None:
        _replace(target, scratch)
    else:
        for h in sorted(set(hours)):
            relative = Path(f"date={h.date}") / f"hour={h.hour}"
            written = scratch / relative
            _replace(target / relative, written if written.is_dir() else None)
        shutil.rmtree(scratch)
    _clean(out)


def _clean(out: Path) -> None:
    scratch = out / TMP
    if scratch.is_dir() and not any(scratch.iterdir()):
        scratch.rmdir()


def read_hourly(
    spark: SparkSession, out: Path, table: str, schema: StructType, hours: Iterable[Hour] | None
) -> DataFrame:
    """An hourly table as written (all hours, or only `hours`), in `schema`'s columns."""
    path = out / HOURLY / table
    if not any(path.rglob("*.parquet")):
        return spark.createDataFrame([], schema)
    frame = spark.read.schema(schema).option("basePath", uri(path)).parquet(uri(path))
    if hours is not None:
        frame = select_hours(frame, hours)
    return frame.select(*schema.fieldNames())


def read_overall(spark: SparkSession, out: Path, table: str) -> DataFrame:
    """An overall table as written."""
    return spark.read.parquet(uri(out / OVERALL / table))


def clear_scratch(out: Path) -> None:
    """Remove what a crashed run left in `<out>/.tmp`."""
    shutil.rmtree(out / TMP, ignore_errors=True)
