"""Daily and weekly tables from the hourly ones, and hourly tables rolled up.

After the hourly tables of a run are in place:

1. each day the run touched (or that has hourly tables but no daily ones:
   an output of an earlier version) gets its daily tables, the merge of its
   hourly ones, unless the run wrote them from its hours in memory (job.py:
   days older than the kept hours, and in a full run every day); each week
   of such a day gets its weekly tables, the merge of its daily ones
   (`date` = the week's Monday);
2. the overall tables are the merge of the weekly ones;
3. hourly tables of days before the last KEEP_HOURLY_DAYS days of the
   stored hours are removed: their days are in the daily tables.

Merges are exact (integer sums and maxima, histograms), so a day's tables
are the same whether merged from hours or found in one pass, and a full run
and incremental ones give the same tables. An incremental run that meets a
changed hour of a rolled-up day processes the whole day again from the log
(job.Plan), so that the day's daily tables are rebuilt from all its hours.
Derived tables (latency, busiest_*, shard_imbalance) are stored per day and
per week too.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from analytics import environment, histogram, load, tables

KEEP_HOURLY_DAYS = 14
# The report's last 24 hours span two days.
MIN_KEEP_HOURLY_DAYS = 2
ENV_KEEP_HOURLY_DAYS = "EVENTQ_ANALYTICS_KEEP_HOURLY_DAYS"


def keep_from_environment(environ: Mapping[str, str] = os.environ) -> int:
    """EVENTQ_ANALYTICS_KEEP_HOURLY_DAYS, else KEEP_HOURLY_DAYS; ValueError
    naming the variable for anything but a whole number of at least 2."""
    keep = environment.number(environ, ENV_KEEP_HOURLY_DAYS, int, MIN_KEEP_HOURLY_DAYS)
    return KEEP_HOURLY_DAYS if keep is None else keep


def first_kept_day(newest_day: str, keep_days: int) -> str:
    """The first day whose hourly tables are kept when the newest stored hour
    is of `newest_day`."""
    newest = dt.date.fromisoformat(newest_day)
    return (newest - dt.timedelta(days=keep_days - 1)).isoformat()


def week_of(day: str) -> str:
    """The Monday of `day`'s week."""
    date = dt.date.fromisoformat(day)
    return (date - dt.timedelta(days=date.weekday())).isoformat()


def write_tier(
    out: Path,
    tier: str,
    day: str,
    parts: Mapping[str, Iterable[tables.Table]],
    top: int,
    bound: histogram.Bound,
    stage: load.DayStage | None = None,
) -> None:
    """`tier`'s tables of `day`: the merge of each base table's `parts`
    (without `date`, `hour`), and the derived tables of the merges; put in
    place together, or staged into `stage` if given."""
    merged = {name: tables.merge_parts(name, parts.get(name, ())) for name in tables.BASE}
    derived = {
        name: table.derive(merged[table.source], top, bound)
        for name, table in tables.DERIVED.items()
    }
    into = load.DayStage(out) if stage is None else stage
    for name, table in {**merged, **derived}.items():
        into.write(table, tier, name, day)
    if stage is None:
        into.commit()


def _from(out: Path, source: str, days: Iterable[str]) -> dict[str, Iterable[tables.Table]]:
    listed = list(days)
    return {name: load.day_parts(out, source, name, listed) for name in tables.BASE}


def roll_up(
    out: Path,
    touched: Iterable[str] | None,
    top: int,
    bound: histogram.Bound,
    keep_days: int,
    written: Iterable[str] = (),
) -> None:
    """Daily, weekly and overall tables after a run whose hourly tables are
    in place; `touched`: the days whose hours it (re)wrote, None for a full
    run (every tier is then rebuilt, and days and weeks no longer in the
    hourly tables removed); `written`: days whose daily tables the run wrote
    itself, from its hours in memory (job.py), which are not read back.
    Then the old hourly tables go."""
    names = [*tables.BASE, *tables.DERIVED]
    direct = set(written)
    hourly_days = load.stored_days(out, load.HOURLY, tables.BASE)
    daily_before = load.stored_days(out, load.DAILY, tables.BASE)
    if touched is None:
        days = set(hourly_days) - direct
        load.drop_days(out, load.DAILY, names, daily_before - hourly_days - direct)
    else:
        days = ((set(touched) | (hourly_days - daily_before)) & hourly_days) - direct
    for day in sorted(days):
        write_tier(out, load.DAILY, day, _from(out, load.HOURLY, [day]), top, bound)
    days |= direct

    daily_days = load.stored_days(out, load.DAILY, tables.BASE)
    weeks = {week_of(day) for day in (daily_days if touched is None else days)}
    # and weeks of daily tables without weekly ones (a run that stopped between)
    weeks |= {week_of(day) for day in daily_days} - load.stored_days(out, load.WEEKLY, tables.BASE)
    if touched is None:
        stale = load.stored_days(out, load.WEEKLY, tables.BASE) - weeks
        load.drop_days(out, load.WEEKLY, names, stale)
    for week in sorted(weeks):
        in_week = [day for day in daily_days if week_of(day) == week]
        write_tier(out, load.WEEKLY, week, _from(out, load.DAILY, in_week), top, bound)

    all_weeks = load.stored_days(out, load.WEEKLY, tables.BASE)
    merged = {
        name: tables.merge_parts(name, load.day_parts(out, load.WEEKLY, name, all_weeks))
        for name in tables.BASE
    }
    for name in tables.OVERALL_BASE:
        load.write_overall(merged[name], out, name)
    for name, derived in tables.DERIVED.items():
        load.write_overall(derived.derive(merged[derived.source], top, bound), out, name)

    if hourly_days:
        first = first_kept_day(max(hourly_days), keep_days)
        old = {day for day in hourly_days if day < first}
        load.drop_days(out, load.HOURLY, names, old)
