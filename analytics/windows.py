"""The report's time windows: the last 24 hours by hour, the last 30 days by
day, all of history by week.

A chart of every stored hour on one axis stops being readable after a few
days (a month is 720 labels). Each window has its own slots and its own
axis instead, and the series shown on them (deliveries by shard,
notifications by path, delivery latency) are summed from the stored hourly
tables into the window's slots. Percentiles of a day or a week come from
the merged histograms of its hours, as every percentile of the job does
(tables.distributions).

The windows end at the last hour of the log the tables hold, not at the time
of the run: the same tables give the same report.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from analytics import histogram, tables

Row = dict[str, Any]
HOURS_SHOWN = 24
DAYS_SHOWN = 30


@dataclass(frozen=True)
class Window:
    """Consecutive slots (hours, days or weeks) ending with the log's last hour."""

    name: str  # "hour", "day", "week": file names and the HTML's ids
    title: str
    # One label per slot, in time order, and each slot's start -> its index.
    labels: list[str]
    starts: dict[dt.datetime, int]

    def slot_of(self, date: str, hour: int) -> int | None:
        """The slot of the hour `date` `hour`, or None outside the window."""
        moment = dt.datetime.fromisoformat(date).replace(hour=hour)
        if self.name == "hour":
            start = moment
        elif self.name == "day":
            start = moment.replace(hour=0)
        else:
            day = moment.replace(hour=0)
            start = day - dt.timedelta(days=day.weekday())
        return self.starts.get(start)


def _window(name: str, title: str, starts: list[dt.datetime], label: str) -> Window:
    return Window(
        name=name,
        title=title,
        labels=[start.strftime(label) for start in starts],
        starts={start: index for index, start in enumerate(starts)},
    )


def windows(hours: Iterable[tuple[str, int]], weeks: Iterable[str] = ()) -> list[Window]:
    """The three windows over the hours of the hourly tables (none if no
    hour) and the weeks (their Mondays, or any date of theirs) of the weekly
    ones: the hourly tables hold the newest hour, the weekly ones go back
    furthest."""
    moments = sorted(dt.datetime.fromisoformat(d).replace(hour=h) for d, h in hours)
    if not moments:
        return []
    first = min([moments[0], *(dt.datetime.fromisoformat(monday) for monday in weeks)])
    last = moments[-1]
    last_day = last.replace(hour=0)
    first_week = first.replace(hour=0) - dt.timedelta(days=first.weekday())
    last_week = last_day - dt.timedelta(days=last_day.weekday())
    week_count = (last_week - first_week).days // 7 + 1
    return [
        _window(
            "hour",
            f"Last {HOURS_SHOWN} hours, by hour",
            [last - dt.timedelta(hours=n) for n in reversed(range(HOURS_SHOWN))],
            "%m-%d %Hh",
        ),
        _window(
            "day",
            f"Last {DAYS_SHOWN} days, by day",
            [last_day - dt.timedelta(days=n) for n in reversed(range(DAYS_SHOWN))],
            "%m-%d",
        ),
        _window(
            "week",
            "All of history, by week (weeks from Monday)",
            [first_week + dt.timedelta(weeks=n) for n in range(week_count)],
            "%Y-%m-%d",
        ),
    ]


def dates_shown(last_date: str | None) -> tuple[list[str], list[str]]:
    """The dates of the hourly partitions and of the daily ones the windows
    can show, when the newest hourly partition is of `last_date` (None: no
    hour stored). The report reads only those: a site keeps 14 days of
    hourly files (about 4,000 in all), and reading every one of them took
    most of an hourly run's report."""
    if last_date is None:
        return [], []
    last = dt.date.fromisoformat(last_date)

    def back(days: int) -> list[str]:
        return [(last - dt.timedelta(days=n)).isoformat() for n in reversed(range(days))]

    # The last 24 hours end in the last date's hours: they span two dates.
    return back(HOURS_SHOWN // 24 + 1), back(DAYS_SHOWN)


def sums(
    window: Window, rows: Sequence[Row], series: str, columns: Sequence[str]
) -> list[tuple[str, list[float]]]:
    """Per value of `series` (a column of `rows`; "" to use `columns` as the
    series), each column summed into the window's slots.

    `rows` are hourly, daily or weekly rows (`date`, `hour` if hourly, ...). With `series` "", one
    series per column; otherwise one per distinct value of `series`, of the
    single column in `columns`.
    """
    names = list(columns) if not series else sorted({str(r[series]) for r in rows})
    heights = {name: [0.0] * len(window.labels) for name in names}
    for row in rows:
        slot = window.slot_of(row["date"], row.get("hour", 0))
        if slot is None:
            continue
        if series:
            heights[str(row[series])][slot] += float(row[columns[0]] or 0)
        else:
            for column in columns:
                heights[column][slot] += float(row[column] or 0)
    return [(name, heights[name]) for name in names]


def percentiles(window: Window, histograms: pa.Table, bound: histogram.Bound) -> list[Row]:
    """p50, p95, p99 (and count) per slot of `window`, from hourly, daily or
    weekly histogram rows of one measure, dimension and key (`date`, `hour`
    if hourly, `measure`,
    `dimension`, `key`, `bucket`, `count`, `sum_micro`, `max_value`): one
    row per slot that has a value, `slot` its index."""
    dates = histograms.column("date").to_pylist()
    scope = [c for c in ("date", "hour") if c in histograms.column_names]
    hours = histograms.column("hour").to_pylist() if "hour" in scope else [0] * len(dates)
    slots = [window.slot_of(d, h) for d, h in zip(dates, hours, strict=True)]
    inside = pa.array([s is not None for s in slots], pa.bool_())
    labelled = histograms.drop_columns(scope).append_column(
        "date", pa.array([f"{s:06d}" if s is not None else "" for s in slots], pa.string())
    )
    per_slot = tables.distributions(labelled.filter(inside), bound)
    return [row | {"slot": int(row["date"])} for row in per_slot.to_pylist()]
