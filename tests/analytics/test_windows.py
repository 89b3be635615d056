"""analytics/windows.py: the report's windows of hours, days and weeks, what
they sum and the percentiles of a day or a week (no Spark)."""

from __future__ import annotations

import pyarrow as pa

from analytics import histogram, tables, windows


def bound(bucket: int) -> float:
    return 0.0 if bucket == histogram.ZERO_BUCKET else 10 ** (bucket / 50)


def test_windows_end_with_the_last_hour_of_the_log():
    # Wednesday 2026-11-25 13h is the last hour; the first is a Sunday.
    hourly, daily, weekly = windows.windows([("2026-11-25", 13), ("2026-10-04", 7)])
    assert hourly.labels[0] == "11-24 14h"
    assert hourly.labels[-1] == "11-25 13h"
    assert len(hourly.labels) == 24
    assert daily.labels[0] == "10-27"
    assert daily.labels[-1] == "11-25"
    assert len(daily.labels) == 30
    # weeks from the Monday before the first hour to the last hour's week
    assert weekly.labels[0] == "2026-09-28"
    assert weekly.labels[-1] == "2026-11-23"
    assert len(weekly.labels) == 9

    assert hourly.slot_of("2026-11-25", 13) == 23
    assert hourly.slot_of("2026-11-24", 14) == 0
    assert hourly.slot_of("2026-11-24", 13) is None
    assert daily.slot_of("2026-11-25", 0) == 29
    assert daily.slot_of("2026-10-27", 23) == 0
    assert daily.slot_of("2026-10-26", 23) is None
    assert weekly.slot_of("2026-10-04", 7) == 0  # Sunday: the week of Monday 09-28
    assert weekly.slot_of("2026-10-05", 0) == 1
    assert weekly.slot_of("2026-11-29", 23) == 8  # a Sunday of the last week
    assert windows.windows([]) == []


def test_sums_per_series_and_per_column():
    rows = [
        {"date": "2026-11-25", "hour": 13, "shard": "s1", "deliveries": 5, "gc": 1, "delivery": 2},
        {"date": "2026-11-25", "hour": 12, "shard": "s2", "deliveries": 7, "gc": 0, "delivery": 1},
        {"date": "2026-11-24", "hour": 9, "shard": "s1", "deliveries": 11, "gc": 3, "delivery": 0},
        {"date": "2026-11-02", "hour": 9, "shard": "s1", "deliveries": 13, "gc": 0, "delivery": 4},
    ]
    hourly, daily, weekly = windows.windows((r["date"], r["hour"]) for r in rows)
    by_shard = dict(windows.sums(hourly, rows, "shard", ["deliveries"]))
    assert list(by_shard) == ["s1", "s2"]
    assert (by_shard["s1"][-1], by_shard["s2"][-2]) == (5.0, 7.0)
    assert sum(by_shard["s1"]) == 5.0  # 11-24 09h is older than 24 hours
    per_day = dict(windows.sums(daily, rows, "shard", ["deliveries"]))
    assert (per_day["s1"][-1], per_day["s1"][-2], per_day["s2"][-1]) == (5.0, 11.0, 7.0)
    assert sum(per_day["s1"]) == 29.0  # 11-02 is within the 30 days
    paths = dict(windows.sums(weekly, rows, "", ["delivery", "gc"]))
    # from the week of the first hour (11-02, a Monday) to the last hour's
    assert weekly.labels == ["2026-11-02", "2026-11-09", "2026-11-16", "2026-11-23"]
    assert paths["delivery"] == [4.0, 0.0, 0.0, 3.0]
    assert paths["gc"] == [0.0, 0.0, 0.0, 4.0]


def test_a_days_percentiles_are_those_of_its_merged_hours():
    # Two hours of one day: 90 fast deliveries in one, 10 slow in the other.
    fast, slow = 50, 150  # buckets of 10 s and 1,000 s (10^(b/50))
    rows = [
        ("2026-11-25", 3, fast, 90),
        ("2026-11-25", 4, slow, 10),
        ("2026-11-24", 4, slow, 1),
    ]
    table = pa.Table.from_pylist(
        [
            {"date": d, "hour": h, "measure": "enqueued_latency", "dimension": "all",
             "key": "all", "bucket": b, "count": n, "sum_micro": n * 1000, "max_value": 1.0}
            for d, h, b, n in rows
        ],
        schema=tables.SHAPES["histograms"].schema(tables.HOUR),
    )  # fmt: skip
    _, daily, _ = windows.windows((d, h) for d, h, _, _ in rows)
    got = windows.percentiles(daily, table, bound)
    assert [(r["slot"], r["count"]) for r in got] == [(28, 1), (29, 100)]
    day = got[1]
    assert day["p50"] == bound(fast)
    assert day["p95"] == bound(slow)  # the 95th of 100 is among the 10 slow ones
    assert day["p99"] == bound(slow)
    # Merged hours give what the job's own percentiles give for the merge.
    merged = tables.distributions(table.filter(pa.compute.equal(table["date"], "2026-11-25"))
                                  .drop_columns(["date", "hour"]), bound).to_pylist()  # fmt: skip
    assert [merged[0][q] for q in ("p50", "p95", "p99")] == [day[q] for q in ("p50", "p95", "p99")]


def test_the_dates_shown_are_the_last_two_for_hours_and_thirty_for_days():
    assert windows.dates_shown(None) == ([], [])
    hours, days = windows.dates_shown("2026-03-01")
    assert hours == ["2026-02-28", "2026-03-01"]
    assert len(days) == windows.DAYS_SHOWN == 30
    assert (days[0], days[-1]) == ("2026-01-31", "2026-03-01")
    # each of the 24 hours ending in the last date's last hour is in them
    shown = windows.windows([("2026-03-01", 0)])
    assert {label[:5] for label in shown[0].labels} == {"02-28", "03-01"}
