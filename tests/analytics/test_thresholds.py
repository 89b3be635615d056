"""analytics/thresholds.py: the limits from the environment, and what an
unset limit or a log of no hour checks (no Spark)."""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pytest

from analytics import tables, thresholds, windows


def test_limits_from_the_environment():
    limits = thresholds.Limits.from_environment(
        {thresholds.ENV_P99_MS: "250.5", thresholds.ENV_DEAD_LETTERS: " 3 "}
    )
    assert limits == thresholds.Limits(p99_ms=250.5, dead_letters_per_hour=3)
    assert thresholds.Limits.from_environment({}) == thresholds.Limits()
    refused = re.escape(f"{thresholds.ENV_OVERFLOWED}='1.5' is not a number")
    with pytest.raises(ValueError, match=refused):
        thresholds.Limits.from_environment({thresholds.ENV_OVERFLOWED: "1.5"})
    with pytest.raises(ValueError, match="is below 0"):
        thresholds.Limits.from_environment({thresholds.ENV_P99_MS: "-2"})


def test_only_the_limits_set_are_checked_over_the_last_24_hours():
    empty = tables.SHAPES["histograms"].schema(tables.HOUR).empty_table()
    lifecycle = [
        {"date": "2026-11-25", "hour": 13, "overflow": 2, "dead_letters": 0},
        {"date": "2026-11-24", "hour": 13, "overflow": 9, "dead_letters": 0},  # 25 hours back
    ]
    hours, _, _ = windows.windows([("2026-11-25", 13), ("2026-11-24", 13)])
    limits = thresholds.Limits(overflowed_per_hour=1)
    [check] = thresholds.check(limits, hours, empty, lifecycle, float)
    assert (check.worst, check.over) == (2.0, ["11-25 13h"])
    assert thresholds.check(thresholds.Limits(), hours, empty, lifecycle, float) == []
    assert thresholds.check(limits, None, empty, [], float) == []
    # a p99 limit over hours without deliveries: nothing over, no worst hour
    [latency] = thresholds.check(thresholds.Limits(p99_ms=1), hours, empty, [], float)
    assert latency.line() == "delivery latency p99 <= 1 ms: worst hour - ms, ok"


def test_an_hour_is_over_the_p99_limit_only_when_surely_above_it():
    # Every delivery of the hour took 490 ms: its bucket's upper bound (what
    # is reported) is 501.2 ms, its lower bound 478.6 ms.
    bucket = math.ceil(50 * math.log10(0.49))
    hour = tables.sort(
        pa.Table.from_pylist(
            [{"date": "2026-11-25", "hour": 13, "measure": "enqueued_latency",
              "dimension": "all", "key": "all", "bucket": bucket, "count": 100,
              "sum_micro": 49_000_000, "max_value": 0.49}],
            schema=tables.SHAPES["histograms"].schema(tables.HOUR),
        ),
        tables.HOUR,
    )  # fmt: skip
    hours, _, _ = windows.windows([("2026-11-25", 13)])

    def bound(b: int) -> float:
        return 10 ** (b / 50)

    [at_500] = thresholds.check(thresholds.Limits(p99_ms=500), hours, hour, [], bound)
    assert at_500.over == []
    assert at_500.line() == "delivery latency p99 <= 500 ms: worst hour 501.187 ms, ok"
    [at_470] = thresholds.check(thresholds.Limits(p99_ms=470), hours, hour, [], bound)
    assert at_470.over == ["11-25 13h"]
    for bad in ("nan", "inf"):
        with pytest.raises(ValueError, match="is not a finite number"):
            thresholds.Limits.from_environment({thresholds.ENV_P99_MS: bad})
