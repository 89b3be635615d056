"""One analytics run: extract the selected hours, pre-aggregate, build the
tables, load, report.

Order of work (daily, weekly and overall tables are merges of hourly ones,
stored or, for the days a run holds whole, in memory: merges are exact, so
a full run and an incremental one agree byte for byte):

1. the hours to process, in chunks of whole hours (at most CHUNK_BYTES of
   Parquet each, and at least OVERLAP_CHUNKS of them in a large run): per
   chunk, one Spark query reads the chunk's records once and folds them
   into the pre-aggregate (transforms.py); the driver collects it (Arrow)
   and builds the chunk's hourly tables, base and derived (tables.py),
   staged under `--out/.tmp`, while Spark reads the next chunk; the daily
   tables of days the run holds whole in memory are written then (those
   whose hourly tables go at the end, and in a full run every day);
2. the staged hours moved into place;
3. the daily tables of the other days touched, the weekly tables of their weeks,
   the overall tables from the weekly ones, and hourly tables older than
   EVENTQ_ANALYTICS_KEEP_HOURLY_DAYS removed (rollup.py);
4. the state file, the report (and a dated copy, history.py) and the
   console summary.

Spark runs one query per chunk and nothing else: every table is written
from the driver (load.py). Each Spark job costs a start-up of its own (in a
new JVM, its generated code compiled and warmed up), which is what made a
run over a few records take 30 s when every table was a Spark job.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
from pyspark.sql import SparkSession

from analytics import (
    extract,
    histogram,
    history,
    load,
    report,
    rollup,
    state,
    tables,
    thresholds,
    transforms,
)
from analytics.errors import NoDeliveryLogs
from analytics.painter import Painter
from analytics.progress import Progress

# Parquet bytes per chunk of hours (at least one hour per chunk). A chunk is
# one Spark query; the driver holds the pre-aggregates of two chunks (the one
# it builds tables from, the next one arriving), whose size follows the
# queues and keys of their hours, not their records, and the base tables of
# the days it writes from memory until each is whole (folded past
# tables.FOLD_ROWS rows).
CHUNK_BYTES = 64 * 2**20
# A run of more than OVERLAP_CHUNKS x OVERLAP_MIN_BYTES (16 MiB) is cut into
# at least OVERLAP_CHUNKS chunks, so that Spark pre-aggregates the next one while the driver builds
# and writes the tables of this one (one core each on a 2-core machine):
# a month of two shards (20 MB in 1,440 files) went from 30.7 to 28.0 s,
# a million records (22 MB) from 17.2 to 15.4 s (tests/benchmarks/README.md).
# Below it, a query more costs more than the overlap brings.
OVERLAP_CHUNKS = 4
OVERLAP_MIN_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Options:
    """What `python -m analytics run` was asked to do (see __main__.py)."""

    logs: Path
    out: Path
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    incremental: bool = False
    top: int = 20
    # Parquet bytes per chunk of hours (tests set it low to run in chunks).
    chunk_bytes: int = CHUNK_BYTES
    # checked over the last 24 hours, on the report and in the summary (None: none)
    limits: thresholds.Limits | None = None
    # dated reports kept under <out>/reports (history.py)
    keep_reports: int = history.KEEP_REPORTS
    # days of hourly tables kept before they are rolled up (rollup.py)
    keep_hourly_days: int = rollup.KEEP_HOURLY_DAYS


@dataclass(frozen=True)
class Result:
    """What a run did: the hours it (re)processed and the hours in its window."""

    processed: list[extract.Hour]
    selected: list[extract.Hour]
    summary: report.Summary
    # step ("read and pre-aggregate": what the driver waited for Spark,
    # "hourly tables" (with the daily tables written from memory), "overall
    # tables", "report") -> wall seconds
    timings: dict[str, float]


@dataclass(frozen=True)
class Plan:
    """What a run will read: every hour of the log with its files, the hours
    in the window, and (with --incremental) what earlier runs processed."""

    partitions: dict[extract.Hour, extract.FileSizes]
    selected: list[extract.Hour]
    done: dict[str, extract.FileSizes]
    keep_hourly_days: int = rollup.KEEP_HOURLY_DAYS

    def _changed(self) -> list[extract.Hour]:
        return [h for h in self.selected if self.done.get(h.key) != self.partitions[h]]

    def _rolled_up(self, changed: list[extract.Hour]) -> dict[str, list[extract.Hour]]:
        """Days of `changed` whose hourly tables are gone (rollup.py) -> the
        hours earlier runs stored for them."""
        stored = [extract.Hour.from_key(key) for key in self.done]
        newest = max([*stored, *changed], default=None)
        if newest is None:
            return {}
        first = rollup.first_kept_day(newest.date, self.keep_hourly_days)
        days: dict[str, list[extract.Hour]] = {h.date: [] for h in changed if h.date < first}
        for hour in stored:
            if hour.date in days:
                days[hour.date].append(hour)
        return days

    def todo(self) -> list[extract.Hour]:
        """The selected hours to (re)process: new ones, or ones whose files
        changed; for a changed hour of a day whose hourly tables are rolled
        up, every hour of that day, so that its daily tables are rebuilt
        whole. A day some of whose stored hours are gone from the log cannot
        be: its changed hours are left out (`left_out`)."""
        changed = self._changed()
        hours = set(changed)
        for day, stored in self._rolled_up(changed).items():
            if all(hour in self.partitions for hour in stored):
                hours |= {h for h in self.partitions if h.date == day}
            else:
                hours -= {h for h in changed if h.date == day}
        return sorted(hours)

    def first_kept_day(self) -> str | None:
        """The first day whose hours keep hourly tables once the run is over
        (rollup.py); None for a run of no hour."""
        stored = [extract.Hour.from_key(key) for key in self.done]
        newest = max([*stored, *self.todo()], default=None)
        return None if newest is None else rollup.first_kept_day(newest.date, self.keep_hourly_days)

    def left_out(self) -> list[extract.Hour]:
        """Changed hours not processed (see `todo`)."""
        todo = set(self.todo())
        return [h for h in self._changed() if h not in todo]

    def input_bytes(self) -> int:
        """The Parquet bytes the run will read."""
        return sum(sum(self.partitions[h].values()) for h in self.todo())


def plan(options: Options) -> Plan:
    """List the log and read the state, without Spark: the CLI calls it before
    paying for a JVM, so that a wrong --logs fails at once.

    Raises NoDeliveryLogs when the window holds no hour of the log, BadState
    when --incremental's state file is unreadable.
    """
    partitions = extract.list_partitions(options.logs)
    since = extract.Hour.of(options.since) if options.since else None
    until = extract.Hour.ceiling(options.until) if options.until else None
    selected = extract.in_window(partitions, since, until)
    if not selected:
        raise NoDeliveryLogs(
            f"no delivery-log partitions under {options.logs / extract.DELIVERIES}"
            + (" in the selected hours" if since or until else "")
        )
    done = state.load_state(options.out) if options.incremental else {}
    return Plan(partitions, selected, done, options.keep_hourly_days)


def chunks(
    hours: Sequence[extract.Hour],
    files: Mapping[extract.Hour, extract.FileSizes],
    limit: int = CHUNK_BYTES,
) -> list[list[extract.Hour]]:
    """`hours` in order, cut into runs of consecutive hours whose files add
    up to at most `limit` bytes (an hour larger than that is a chunk alone),
    cut near even shares of the bytes: as many as `limit` needs, and at
    least OVERLAP_CHUNKS when a share would be more than OVERLAP_MIN_BYTES."""
    sizes = [sum(files[hour].values()) for hour in hours]
    total = sum(sizes)
    parts = max(1, -(-total // limit))
    if total > OVERLAP_MIN_BYTES * OVERLAP_CHUNKS:
        parts = max(parts, OVERLAP_CHUNKS)
    cut: list[list[extract.Hour]] = []
    size = before = 0
    for hour, hour_size in zip(hours, sizes, strict=True):
        # A new chunk where this one would pass the limit, or where the
        # bytes before this hour reach the next of `parts` even shares.
        share_done = len(cut) < parts and before * parts >= len(cut) * total
        if not cut or size + hour_size > limit or share_done:
            cut.append([])
            size = 0
        cut[-1].append(hour)
        size += hour_size
        before += hour_size
    return cut


def _by_date(table: tables.Table) -> list[tuple[str, tables.Table]]:
    """The rows of an hourly `table` date by date (a date's rows are one run
    where the table is sorted by `date`, as tables.py sorts them; several
    otherwise), without `date` and `hour`."""
    dates = table.column("date")
    rows = table.drop_columns(tables.HOUR)
    found = pc.run_end_encode(dates.combine_chunks())
    ends = found.run_ends.to_pylist()
    starts = [0, *ends][:-1]
    return [
        (day, rows.slice(start, end - start))
        for day, start, end in zip(found.values.to_pylist(), starts, ends, strict=True)
    ]


def _hold(held: list[tables.Table], name: str, rows: tables.Table) -> None:
    """Add `rows` of base table `name` to a day's `held` parts, folded
    (tables.merge_parts, exact) once they pass tables.FOLD_ROWS: a day
    larger than a chunk is held as its merge so far, not as every chunk's
    rows (which its slices would keep alive)."""
    held.append(rows)
    if sum(part.num_rows for part in held) >= tables.FOLD_ROWS:
        held[:] = [tables.merge_parts(name, held)]


def run(
    spark: SparkSession,
    options: Options,
    planned: Plan | None = None,
    progress: Progress | None = None,
    painter: Painter | None = None,
    release: Callable[[], None] | None = None,
) -> Result:
    """Run the job in `spark` (`planned`: `plan(options)` if already made);
    the caller owns the session. `progress`, if given, hears of each chunk;
    `painter` draws the report's charts (by default in this process);
    `release`, if given, is called as soon as the run needs `spark` no more,
    while the charts are drawn (the CLI stops its JVM then).
    Raises what `plan` raises."""
    out = options.out
    planned = planned or plan(options)
    partitions, selected, done = planned.partitions, planned.selected, planned.done
    load.clear_scratch(out)
    todo = planned.todo()
    scope = todo if options.incremental else None
    bound = histogram.upper_bounds(spark)
    timings = dict.fromkeys(("read and pre-aggregate", "hourly tables"), 0.0)
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[step] = timings.get(step, 0.0) + now - clock
        clock = now

    hourly = [*tables.BASE, *tables.DERIVED]
    stages = {name: load.HourlyStage(out, name) for name in hourly} if todo else {}
    pending = chunks(todo, partitions, options.chunk_bytes)
    first_kept = planned.first_kept_day()
    # Days whose daily tables the run writes from its hours in memory: those
    # older than first_kept (their hourly tables go at the end) and, in a
    # full run, every day (its hourly tables then hold only this run's
    # hours, so the daily ones are the same as if read back from them: a
    # month's full run read 2,400 files less) -> base tables of their hours
    # read so far.
    direct_days: dict[str, dict[str, list[tables.Table]]] = {}
    # Their daily tables, put in place after the hourly ones.
    days_stage = load.DayStage(out)
    written: set[str] = set()
    if progress is not None:
        progress.started(len(todo), len(pending))

    def preaggregate(chunk: list[extract.Hour]) -> tables.Table:
        records = extract.read_records(spark, options.logs, chunk)
        return transforms.preaggregate(records).toArrow()

    # Spark pre-aggregates the next chunk while the driver builds the tables
    # of this one (the driver's thread only waits on Spark's socket).
    with ThreadPoolExecutor(1, thread_name_prefix="analytics-preaggregate") as spark_side:
        try:
            ahead = spark_side.submit(preaggregate, pending[0]) if pending else None
            for index, chunk in enumerate(pending):
                assert ahead is not None
                pieces = ahead.result()
                ahead = (
                    spark_side.submit(preaggregate, pending[index + 1])
                    if index + 1 < len(pending)
                    else None
                )
                lap("read and pre-aggregate")
                base = {name: build(pieces) for name, build in tables.BASE.items()}
                if first_kept is not None:
                    for name, table in base.items():
                        old = pc.less(table.column("date"), first_kept)
                        direct = table if scope is None else table.filter(old)
                        for day, rows in _by_date(direct):
                            held = direct_days.setdefault(day, {}).setdefault(name, [])
                            _hold(held, name, rows)
                        base[name] = table.filter(pc.invert(old))
                    following = pending[index + 1][0].date if index + 1 < len(pending) else None
                    complete = [d for d in direct_days if following is None or d < following]
                    for day in sorted(complete):
                        rollup.write_tier(out, load.DAILY, day, direct_days.pop(day), options.top,
                                          bound, days_stage)  # fmt: skip
                        written.add(day)
                derived = {
                    name: table.derive(base[table.source], options.top, bound)
                    for name, table in tables.DERIVED.items()
                }
                for name, table in {**base, **derived}.items():
                    stages[name].add(table)
                lap("hourly tables")
                if progress is not None:
                    progress.chunk_done(len(chunk), tables.records(pieces))
        except BaseException:
            # A failure here, or ^C: do not wait for the next chunk's query
            # to finish before saying so (the executor's exit waits for it).
            spark.sparkContext.cancelAllJobs()
            raise
    for stage in stages.values():
        stage.commit(scope)
    days_stage.commit()

    touched = None if scope is None else {h.date for h in todo}
    rollup.roll_up(out, touched, options.top, bound, options.keep_hourly_days, written)
    lap("overall tables")

    processed = dict(done)
    processed.update(extract.partition_files({h: partitions[h] for h in todo}))
    state.save_state(out, processed)
    summary = report.write_report(out, bound, options.limits, painter, release)
    figures = {"hours": summary.hours, "records": summary.records,
               "deliveries": summary.deliveries, "over": summary.over}  # fmt: skip
    history.record(out, figures, dt.datetime.now(dt.UTC), options.keep_reports)
    lap("report")
    return Result(processed=todo, selected=selected, summary=summary, timings=timings)
