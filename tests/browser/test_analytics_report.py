"""The analytics report read in Chromium at three ages of a site: a day, 30
days and a year of stored hourly tables. Every chart is on the page, loaded,
and shown at its own size; each window's chart has its own axis, whatever
the age. Screenshots of the whole pages are kept as artifacts
(var/test-artifacts/browser/analytics-report-*.png).

The tables are written as a run of the job stores them (load.HourlyStage,
then rollup.py's daily, weekly and overall ones), from hourly rows made here: a year of a
real log would take Spark minutes to read, and the report reads only the
stored tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from analytics import histogram, load, realms, report, rollup, tables
from tests.browser.conftest import ARTIFACTS

LAST = dt.datetime(2026, 11, 25, 23)
SHARDS = ("s1", "s2")
REALMS = (1, 2, 3)
TIME_CHARTS = ("deliveries", "latency", "notifications")
WHOLE_LOG_CHARTS = ("latency_by_event_type", "poll_outcomes", "queue_ends", "shard_load")


def bound(bucket: int) -> float:
    return 0.0 if bucket == histogram.ZERO_BUCKET else 10 ** (bucket / 50)


def site_hours(days: int) -> list[dt.datetime]:
    """The last day's 24 hours, and two hours of each day before it."""
    last_day = [LAST - dt.timedelta(hours=n) for n in range(24)]
    earlier = [
        LAST.replace(hour=hour) - dt.timedelta(days=n) for n in range(1, days) for hour in (9, 15)
    ]
    return sorted(last_day + earlier)


def write_site(out: Path, days: int) -> int:
    """Stored tables of a site `days` old; returns the hours written."""
    hours = site_hours(days)
    rows: dict[str, list[dict[str, Any]]] = {"shard_load": [], "notifications": [],
                                             "histograms": [], "coverage": [],
                                             "realm_load": []}  # fmt: skip
    for index, moment in enumerate(hours):
        at = {"date": moment.date().isoformat(), "hour": moment.hour}
        busy = 100 + 40 * (index % 7)
        rows["coverage"].append(at | {"hours": 1})
        for number, shard in enumerate(SHARDS):
            rows["shard_load"].append(
                at | {"shard": shard, "records": busy * 2, "deliveries": busy + number * 10,
                      "polls": busy, "response_bytes": busy * 900, "registers": 3}
            )  # fmt: skip
        rows["notifications"].append(
            at | {"enqueued": index % 3, "delivery": index % 2, "gc": index % 3 - index % 2,
                  "email": index % 3, "push": 0}
        )  # fmt: skip
        for bucket, count in ((-100, busy), (-50, busy // 10), (-30, 1 + index % 4)):
            rows["histograms"].append(
                at | {"measure": "enqueued_latency", "dimension": "all", "key": "all",
                      "bucket": bucket, "count": count, "sum_micro": count * 12_000,
                      "max_value": bound(bucket)}
            )  # fmt: skip
        for realm in REALMS:
            rows["realm_load"].append(
                at | dict.fromkeys(realms.REALM_COUNTS, 0) | {"realm_id": realm,
                     "deliveries": busy // realm, "dead_letters": index % realm, "ended": 1,
                     "expired": 1}
            )  # fmt: skip
            rows["histograms"].append(
                at | {"measure": "enqueued_latency", "dimension": "realm", "key": str(realm),
                      "bucket": -50 + realm, "count": busy // realm,
                      "sum_micro": busy // realm * 12_000, "max_value": bound(-50 + realm)}
            )  # fmt: skip
    for name in tables.BASE:
        shape = tables.SHAPES[name]
        table = pa.Table.from_pylist(rows.get(name, []), schema=shape.schema(tables.HOUR))
        stage = load.HourlyStage(out, name)
        stage.add(tables.sort(table, [*tables.HOUR, *shape.order]))
        stage.commit(None)
    rollup.roll_up(out, None, 20, bound, rollup.KEEP_HOURLY_DAYS)
    report.write_report(out, bound)
    return len(hours)


def page_figures(driver: WebDriver) -> list[dict[str, Any]]:
    """Every chart of the page: its section, file, natural and shown size."""
    figures: list[dict[str, Any]] = driver.execute_script(
        """return [...document.querySelectorAll('img')].map((img) => {
            const box = img.getBoundingClientRect();
            return {section: img.closest('section').id, src: img.getAttribute('src'),
                    complete: img.complete, naturalWidth: img.naturalWidth,
                    naturalHeight: img.naturalHeight, width: box.width, height: box.height};
        });"""
    )
    return figures


@pytest.mark.parametrize("days", [1, 30, 365])
def test_the_report_reads_at_any_age(
    browser: Callable[[], WebDriver], tmp_path: Path, days: int
) -> None:
    out = tmp_path / "analytics"
    hours = write_site(out, days)
    summary = (out / "report" / "summary.txt").read_text()
    assert summary.startswith(f"hours: {hours}  ")

    driver = browser()
    driver.get((out / "report" / "report.html").as_uri())
    figures = page_figures(driver)
    expected = [
        (f"window-{unit}", f"{chart}_by_{unit}.png")
        for unit in ("hour", "day", "week")
        for chart in TIME_CHARTS
    ] + [("whole-log", f"{chart}.png") for chart in WHOLE_LOG_CHARTS]
    assert [(f["section"], f["src"]) for f in figures] == expected
    for figure in figures:
        assert figure["complete"], figure
        assert figure["naturalWidth"] >= 640, figure
        # shown at its size: not squeezed into the page, not scaled up
        assert (figure["width"], figure["height"]) == (
            figure["naturalWidth"],
            figure["naturalHeight"],
        ), figure
    headings = driver.execute_script(
        "return [...document.querySelectorAll('section h2')].map((h) => h.textContent)"
    )
    assert headings == [
        "Last 24 hours, by hour",
        "Last 30 days, by day",
        "All of history, by week (weeks from Monday)",
        "The whole log",
        "Top realms",
    ]
    # The realms by deliveries, each with its latency in ms.
    top = driver.execute_script(
        "return [...document.querySelectorAll('#top-realms tr')].slice(1)"
        ".map((tr) => [...tr.children].slice(0, 4).map((td) => td.textContent))"
    )
    p50 = [f"{bound(-50 + realm) * 1000:.1f}" for realm in REALMS]
    assert [row[:2] for row in top] == [["1", "1"], ["2", "2"], ["3", "3"]]
    assert [row[3] for row in top] == p50

    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, height)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"analytics-report-{days}-days.png"
    assert driver.save_screenshot(str(shot))
    print(f"screenshot of the report of a site {days} day(s) old: {shot}")
