"""analytics/report.py's own rules (no Spark): what its tables keep."""

from __future__ import annotations

from analytics import report


def test_the_volumes_table_keeps_each_dimensions_largest_keys_only():
    rows = [{"dimension": "client", "key": "web", "deliveries": 9}] + [
        {"dimension": "realm", "key": str(n), "deliveries": 1000 - n} for n in range(50)
    ]
    kept = report.largest_per(rows, "dimension", report.VOLUME_ROWS)
    assert kept[0] == rows[0]
    assert [r["key"] for r in kept[1:]] == [str(n) for n in range(report.VOLUME_ROWS)]
    assert report.largest_per(rows, "dimension", 1) == rows[:2]
    assert report.largest_per([], "dimension", 3) == []
