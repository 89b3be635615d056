"""One analytics run: extract the selected hours, transform, load, report.

Order of work (every step reads the previous step's stored output, so a
full run and an incremental one compute the overall tables the same way):

1. base hourly tables from the log records of the hours to process;
2. derived hourly tables (percentiles, rankings, imbalance) from the stored
   base tables of those hours;
3. overall tables from all stored base hourly tables (merge, then derive);
4. the state file, the report and the console summary.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from analytics import extract, load, report, state, transforms
from analytics.errors import NoDeliveryLogs

Transform = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class BaseTable:
    """An hourly table computed from log records, and how it merges over hours."""

    name: str
    hourly: Transform
    merge: Transform
    order: list[str]
    # Whether the merged table is stored under overall/ too; the histograms
    # and activity tables are stored per hour only, their overall form is
    # what the derived tables (latency, busiest_*) show.
    overall: bool = True


BASE_TABLES = (
    BaseTable(
        "histograms",
        transforms.histograms,
        transforms.merge_histograms,
        ["measure", "dimension", "key", "bucket"],
        overall=False,
    ),
    BaseTable("volumes", transforms.volumes, transforms.merge_volumes, ["dimension", "key"]),
    BaseTable(
        "user_activity",
        transforms.user_activity,
        transforms.merge_user_activity,
        ["realm_id", "user_id"],
        overall=False,
    ),
    BaseTable(
        "queue_activity",
        transforms.queue_activity,
        transforms.merge_queue_activity,
        transforms.QUEUE_KEYS,
        overall=False,
    ),
    BaseTable("poll_outcomes", transforms.poll_outcomes, transforms.merge_poll_outcomes, []),
    BaseTable("queue_lifecycle", transforms.queue_lifecycle, transforms.merge_queue_lifecycle, []),
    BaseTable("shard_load", transforms.shard_load, transforms.merge_shard_load, ["shard"]),
)


@dataclass(frozen=True)
class DerivedTable:
    """A table computed from one base table, hourly and overall alike."""

    name: str
    source: str
    derive: Callable[[DataFrame, int], DataFrame]
    order: list[str]


DERIVED_TABLES = (
    DerivedTable(
        "latency",
        "histograms",
        lambda frame, _top: transforms.distributions(frame),
        ["measure", "dimension", "key"],
    ),
    DerivedTable(
        "busiest_users",
        "user_activity",
        lambda frame, top: transforms.busiest(frame, ["realm_id", "user_id"], top),
        ["rank"],
    ),
    DerivedTable(
        "busiest_queues",
        "queue_activity",
        lambda frame, top: transforms.busiest(frame, transforms.QUEUE_KEYS, top),
        ["rank"],
    ),
    DerivedTable(
        "shard_imbalance",
        "shard_load",
        lambda frame, _top: transforms.shard_imbalance(frame),
        [],
    ),
)


@dataclass(frozen=True)
class Options:
    """What `python -m analytics run` was asked to do (see __main__.py)."""

    logs: Path
    out: Path
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    incremental: bool = False
    top: int = 20


@dataclass(frozen=True)
class Result:
    """What a run did: the hours it (re)processed and the hours in its window."""

    processed: list[extract.Hour]
    selected: list[extract.Hour]
    summary: report.Summary
    # step ("hourly histograms", "overall latency", "report", ...) -> wall seconds
    timings: dict[str, float]


@dataclass(frozen=True)
class Plan:
    """What a run will read: every hour of the log with its files, the hours
    in the window, and (with --incremental) what earlier runs processed."""

    partitions: dict[extract.Hour, extract.FileSizes]
    selected: list[extract.Hour]
    done: dict[str, extract.FileSizes]


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
    return Plan(partitions, selected, done)


def run(spark: SparkSession, options: Options, planned: Plan | None = None) -> Result:
    """Run the job in `spark` (`planned`: `plan(options)` if already made);
    the caller owns the session. Raises what `plan` raises."""
    out = options.out
    planned = planned or plan(options)
    partitions, selected, done = planned.partitions, planned.selected, planned.done
    load.clear_scratch(out)
    todo = [h for h in selected if done.get(h.key) != partitions[h]]
    scope = todo if options.incremental else None

    records = extract.read_records(spark, options.logs, todo)
    schemas = {t.name: t.hourly(records).schema for t in BASE_TABLES}
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[step] = now - clock
        clock = now

    if todo:
        # Each base table scans the Parquet files itself, reading only its
        # columns. Caching the records for all of them cost more than it
        # saved: over 10 million records, 18 s to fill the cache, and an
        # aggregation over the cache took as long as over the files.
        for table in BASE_TABLES:
            load.write_hourly(table.hourly(records), out, table.name, table.order, scope)
            lap(f"hourly {table.name}")
        for derived in DERIVED_TABLES:
            source = load.read_hourly(spark, out, derived.source, schemas[derived.source], scope)
            frame = derived.derive(source, options.top)
            load.write_hourly(frame, out, derived.name, derived.order, scope)
            lap(f"hourly {derived.name}")

    merged = {
        t.name: t.merge(load.read_hourly(spark, out, t.name, schemas[t.name], None))
        for t in BASE_TABLES
    }
    for table in BASE_TABLES:
        if table.overall:
            load.write_overall(merged[table.name], out, table.name, table.order)
            lap(f"overall {table.name}")
    for derived in DERIVED_TABLES:
        frame = derived.derive(merged[derived.source], options.top)
        load.write_overall(frame, out, derived.name, derived.order)
        lap(f"overall {derived.name}")

    processed = dict(done)
    processed.update(extract.partition_files({h: partitions[h] for h in todo}))
    state.save_state(out, processed)
    summary = report.write_report(spark, out)
    lap("report")
    return Result(processed=todo, selected=selected, summary=summary, timings=timings)
