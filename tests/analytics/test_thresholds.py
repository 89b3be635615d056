"""analytics/thresholds.py: the limits from the environment, and what an
unset limit or a log of no hour checks (no Spark)."""

from __future__ import annotations

import re

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
