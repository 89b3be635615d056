"""Writing and reading back the output tables under --out, from the driver.

Layout: `<out>/hourly/<table>/date=YYYY-MM-DD/hour=H/part-00000.parquet`,
`<out>/daily/<table>/date=YYYY-MM-DD/part-00000.parquet`,
`<out>/weekly/<table>/date=YYYY-MM-DD/part-00000.parquet` (the week's Monday)
and `<out>/overall/<table>/part-00000.parquet` (zstd), the hourly and overall
ones as Spark's partitioned writes left them before the tables were written
from the driver.
Each file's rows are sorted by the table's keys (tables.SHAPES) and files
have fixed names, so the same input gives the same bytes. Tables are written
under `<out>/.tmp/` first; only complete output is moved into place by
renames, so a crashed run leaves the previous table (or, at worst between
two renames, no table), never half of one.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from analytics.extract import Hour
from analytics.tables import HOUR, HOUR_FIELDS, SHAPES, Table

HOURLY = "hourly"
DAILY = "daily"
WEEKLY = "weekly"
OVERALL = "overall"
TMP = ".tmp"
PART = "part-00000.parquet"
# The codec of the files Spark wrote before the tables were written from the driver.
COMPRESSION = "zstd"
# Threads writing an hourly table's files (one per hour): a month's full run
# writes some 5,000.
WRITERS = min(4, max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2))


def _scratch(out: Path, name: str) -> Path:
    return out / TMP / f"{name}-{uuid.uuid4().hex}"


def _replace(target: Path, replacement: Path | None) -> None:
    """Put `replacement` (None: nothing) where `target` was, by renames."""
    trash = target.with_name(f".{target.name}.old-{uuid.uuid4().hex}")
    if target.exists():
        target.rename(trash)
    if replacement is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        replacement.rename(target)
    shutil.rmtree(trash, ignore_errors=True)


def _write(table: Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression=COMPRESSION)


def _write_all(files: Sequence[tuple[Table, Path]]) -> None:
    """`_write` each (table, path) of `files`, on WRITERS threads when there
    are several: pyarrow encodes, compresses and writes a file without the
    interpreter lock. Raises the first error."""
    if len(files) < 2:
        for table, path in files:
            _write(table, path)
        return
    with ThreadPoolExecutor(WRITERS, thread_name_prefix="analytics-write") as pool:
        try:
            for _ in pool.map(lambda file: _write(*file), files):
                pass
        except BaseException:
            # A full disk, or ^C: not every other file tried first.
            pool.shutdown(cancel_futures=True)
            raise


def _partition(hour: Hour) -> Path:
    return Path(f"date={hour.date}") / f"hour={hour.hour}"


def write_overall(table: Table, out: Path, name: str) -> None:
    """Replace `<out>/overall/<name>` with `table` (tables.SHAPES[name]'s
    columns, rows in order), one file."""
    scratch = _scratch(out, name)
    _write(table, scratch / PART)
    _replace(out / OVERALL / name, scratch)
    _clean(out)


class HourlyStage:
    """An hourly table being written: hours are added chunk by chunk under
    `<out>/.tmp/`, then `commit` moves them into place at once."""

    def __init__(self, out: Path, name: str):
        self.out = out
        self.name = name
        # Holds only complete hour files; moved away (emptied) by commit.
        self.directory = _scratch(out, name)
        self.directory.mkdir(parents=True)

    def add(self, table: Table) -> None:
        """Write `table`'s rows (`date`, `hour` first, sorted by hour then
        key, as tables.py builds them) as one file per hour, without the
        `date` and `hour` columns: those are the directory names. An hour
        without rows gets no directory."""
        if table.num_rows == 0:
            return
        hours = list(zip(table.column("date").to_pylist(), table.column("hour").to_pylist(),
                         strict=True))  # fmt: skip
        rows = table.drop_columns(HOUR)
        assert hours == sorted(hours), "rows come hour by hour"
        files = []
        start = 0
        for index in range(1, len(hours) + 1):
            if index == len(hours) or hours[index] != hours[start]:
                path = self.directory / _partition(Hour(*hours[start])) / PART
                files.append((rows.slice(start, index - start), path))
                start = index
        _write_all(files)

    def commit(self, hours: Iterable[Hour] | None) -> None:
        """`hours` None: the table becomes what was added. Otherwise only those
        hours' partitions are replaced (an hour added without rows is removed)
        and the others are left as they are."""
        target = self.out / HOURLY / self.name
        if hours is None:
            _replace(target, self.directory)
        else:
            for hour in sorted(set(hours)):
                written = self.directory / _partition(hour)
                _replace(target / _partition(hour), written if written.is_dir() else None)
            shutil.rmtree(self.directory)
        _clean(self.out)


class DayStage:
    """Daily or weekly tables staged under `<out>/.tmp/`; `commit` puts them
    in place. A run stages the daily tables of the days it holds whole in
    memory (job.py) until its hourly tables are in place, so that a run
    that fails before leaves the earlier daily tables, as it leaves the
    earlier hourly ones."""

    def __init__(self, out: Path):
        self.out = out
        self.directory = _scratch(out, "days")
        self.staged: list[Path] = []

    def write(self, table: Table | None, tier: str, name: str, day: str) -> None:
        """Stage `table` (no `date` column) as the partition of `day` of
        table `name` in `tier` (DAILY or WEEKLY); None or no row: the
        partition is removed on commit."""
        partition = Path(tier) / name / f"date={day}"
        if table is not None and table.num_rows > 0:
            _write(table, self.directory / partition / PART)
        self.staged.append(partition)

    def commit(self) -> None:
        for partition in self.staged:
            staged = self.directory / partition
            _replace(self.out / partition, staged if staged.is_dir() else None)
        self.staged = []
        shutil.rmtree(self.directory, ignore_errors=True)
        _clean(self.out)


def _clean(out: Path) -> None:
    scratch = out / TMP
    if scratch.is_dir() and not any(scratch.iterdir()):
        scratch.rmdir()


def _files(path: Path, tier: str, dates: Iterable[str] | None = None) -> list[Path]:
    """The data files of a table's partitions under `path` in `tier` (all
    dates, or `dates`): never a directory `_replace` set aside (`.date=...`,
    `.hour=...`) nor a hidden or `_` file, as a dataset of the directory
    would skip them."""
    layout = "hour=*/*.parquet" if tier == HOURLY else "*.parquet"
    partitions = ["date=*"] if dates is None else [f"date={day}" for day in sorted(set(dates))]
    return sorted(
        f
        for partition in partitions
        for f in path.glob(f"{partition}/{layout}")
        if not f.name.startswith((".", "_"))
    )


def stored_dates(out: Path, tier: str, name: str) -> list[str]:
    """The dates (`YYYY-MM-DD`) with a data file of table `name` in `tier`, sorted."""
    path = out / tier / name
    return sorted({f.relative_to(path).parts[0].removeprefix("date=") for f in _files(path, tier)})


def _read(
    path: Path, tier: str, fields: list[pa.Field], name: str, where: Any,
    dates: Iterable[str] | None,
) -> Table:  # fmt: skip
    """The partitions under `path` in `tier` (all, or those of `dates`) of
    table `name`: `fields` from the directory names, then its columns."""
    full = pa.schema([*fields, *SHAPES[name].schema([])])
    files = _files(path, tier, dates)
    if not files:
        return full.empty_table()
    dataset = ds.dataset(
        [str(f) for f in files],
        schema=full,
        format="parquet",
        partitioning=ds.partitioning(pa.schema(fields), flavor="hive"),
        partition_base_dir=str(path),
    )
    return dataset.to_table(columns=full.names, filter=where)


def read_hourly(
    out: Path, name: str, where: Any = None, dates: Iterable[str] | None = None
) -> Table:
    """Every stored hour of hourly table `name`, or those of `dates` only
    (`where`: only rows matching this pyarrow.compute expression): `date`,
    `hour` (from the directory names), then its columns; rows in no
    particular order."""
    return _read(out / HOURLY / name, HOURLY, list(HOUR_FIELDS), name, where, dates)


def hourly_parts(out: Path, name: str) -> Iterator[Table]:
    """The stored hours of hourly table `name`, one table per hour, in its
    columns (without `date` and `hour`): for merging them a few at a time."""
    target = SHAPES[name].schema([])
    for part in sorted((out / HOURLY / name).glob(f"date=*/hour=*/{PART}")):
        # cast: files an earlier (Spark) version of the job wrote declare
        # some columns not null.
        yield pq.read_table(part, columns=target.names).cast(target)


def stored_days(out: Path, tier: str, names: Iterable[str]) -> set[str]:
    """The days (`YYYY-MM-DD`) with a partition in `tier` of any table of `names`."""
    return {
        path.name.removeprefix("date=")
        for name in names
        for path in (out / tier / name).glob("date=*")
        if path.is_dir()
    }


def day_parts(out: Path, tier: str, name: str, days: Iterable[str]) -> Iterator[Table]:
    """The stored parts of table `name` in `tier` (HOURLY, DAILY, WEEKLY) of
    `days`, one table per part, in its columns (without `date`, `hour`)."""
    target = SHAPES[name].schema([])
    pattern = f"hour=*/{PART}" if tier == HOURLY else PART
    for day in sorted(set(days)):
        for part in sorted((out / tier / name / f"date={day}").glob(pattern)):
            yield pq.read_table(part, columns=target.names).cast(target)


def write_day(table: Table | None, out: Path, tier: str, name: str, day: str) -> None:
    """Replace the partition of `day` of table `name` in `tier` (DAILY or
    WEEKLY) with `table` (no `date` column); None or no row: remove it."""
    stage = DayStage(out)
    stage.write(table, tier, name, day)
    stage.commit()


def drop_days(out: Path, tier: str, names: Iterable[str], days: Iterable[str]) -> None:
    """Remove the partitions of `days` of the tables `names` in `tier`."""
    for day in days:
        for name in names:
            _replace(out / tier / name / f"date={day}", None)


def read_days(
    out: Path, tier: str, name: str, where: Any = None, dates: Iterable[str] | None = None
) -> Table:
    """Every stored partition of table `name` in `tier` (DAILY or WEEKLY),
    or those of `dates` only: `date`, then its columns; rows in no
    particular order."""
    return _read(out / tier / name, tier, [HOUR_FIELDS[0]], name, where, dates)


def read_overall(out: Path, name: str) -> Table:
    """An overall table as written."""
    return pq.read_table(out / OVERALL / name / PART)


def clear_scratch(out: Path) -> None:
    """Remove what a crashed run left in `<out>/.tmp`."""
    shutil.rmtree(out / TMP, ignore_errors=True)
