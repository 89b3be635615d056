"""The analytics report read in Chromium at three ages of a site: a day, 30
days and a year of stored hourly tables. Every chart is on the page, loaded,
and shown at its own size; each window's chart has its own axis, whatever
the age. Screenshots of the whole pages are kept as artifacts
(var/test-artifacts/browser/analytics-report-*.png).

The tables are written as a run of the job stores them (load.HourlyStage,
then rollup.py's daily, weekly and overall ones), from hourly rows made here: a year of a
real log would take Spark minutes to read, and the report reads only the
stored tables.

The dated reports a run keeps are read the way an operator reaches them:
from the operator page of a running server.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from analytics import histogram, history, load, realms, report, rollup, tables
from tests.browser.conftest import ARTIFACTS
from tests.support import ServerProcess

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


def test_the_dated_reports_open_from_the_operator_page(
    browser: Callable[[], WebDriver], start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    out = tmp_path / "analytics"
    write_site(out, 1)
    first = history.record(out, {"hours": 24}, dt.datetime(2026, 11, 26, 0, 5, tzinfo=dt.UTC), 5)
    page = out / "report" / "report.html"
    page.write_text(page.read_text().replace("<h1>eventq delivery report", "<h1>second run"))
    latest = history.record(out, {"hours": 25}, dt.datetime(2026, 11, 26, 1, 5, tzinfo=dt.UTC), 5)
    (first / "weird.html").mkdir()
    server = start_server(EVENTQ_ANALYTICS_DIR=str(out))

    driver = browser()
    driver.get(f"{server.url}/operator")
    link = driver.find_element(By.ID, "reports-link")
    WebDriverWait(driver, 20).until(lambda d: link.is_displayed())
    link.click()
    WebDriverWait(driver, 20).until(
        lambda d: d.current_url.endswith("/operator/reports/index.html")
    )
    runs = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "td a")]
    assert runs == [
        f"{server.url}/operator/reports/{name}/report.html" for name in (latest.name, first.name)
    ]
    # The latest, shown in the index's frame with its charts.
    driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
    assert driver.find_element(By.TAG_NAME, "h1").text == "second run"
    loaded = driver.execute_script(
        "return [...document.images].map((img) => img.complete && img.naturalWidth > 0)"
    )
    assert loaded
    assert all(loaded)
    driver.switch_to.default_content()
    # An earlier one, by its link.
    driver.find_elements(By.CSS_SELECTOR, "td a")[1].click()
    WebDriverWait(driver, 20).until(lambda d: d.current_url == runs[1])
    assert driver.find_element(By.TAG_NAME, "h1").text == "eventq delivery report"
    # No resource refused (by the policy, or missing); the browser's own
    # favicon.ico request aside.
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert [e for e in errors if "/favicon.ico " not in e["message"]] == []

    # Nothing outside the dated reports' directories, and a clear answer.
    for path in (
        "..%2Freport%2Freport.html",
        f"{first.name}%2F..%2F..%2Freport%2Freport.html",
        f"{first.name}/weird.html",  # a directory
        f"{first.name}/run.py",
        f"{first.name}/nothing.html",
    ):
        refused = requests.get(f"{server.url}/operator/reports/{path}", timeout=10)
        assert refused.status_code == 404, path
        assert refused.json()["code"] == "NOT_FOUND", path
    joined = requests.get(f"{server.url}/operator/reportsindex.html", timeout=10)
    assert joined.status_code == 404
    dated = requests.get(runs[0], timeout=10).headers
    assert "frame-ancestors 'self'" in dated["Content-Security-Policy"]
    assert "script-src" not in dated["Content-Security-Policy"]
    assert dated["X-Frame-Options"] == "SAMEORIGIN"
    # The latest report alone (/operator/report/) is framed by nothing.
    latest_alone = requests.get(f"{server.url}/operator/report/report.html", timeout=10).headers
    assert "frame-ancestors 'none'" in latest_alone["Content-Security-Policy"]
    assert latest_alone["X-Frame-Options"] == "DENY"
