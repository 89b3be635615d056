"""analytics/history.py: dated reports, the index, how many are kept (no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from analytics import history

START = dt.datetime(2026, 11, 28, 10, 0, 5, tzinfo=dt.UTC)


def test_each_run_is_kept_dated_and_the_oldest_beyond_keep_go(tmp_path):
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    made = []
    for run in range(4):
        (out / "report" / "report.html").write_text(f"report {run}")
        (out / "report" / "chart.png").write_bytes(b"png %d" % run)
        when = START + dt.timedelta(hours=run // 2)  # two runs in the same second
        figures = {"hours": run + 1, "records": 10 * run, "deliveries": run, "over": run == 3}
        made.append(history.record(out, figures, when, keep=3))
    reports = out / "reports"
    assert [p.name for p in made] == [
        "2026-11-28T10-00-05Z", "2026-11-28T10-00-05Z-002", "2026-11-28T11-00-05Z",
        "2026-11-28T11-00-05Z-002"]  # fmt: skip
    kept = sorted(p.name for p in reports.iterdir() if p.is_dir())
    assert kept == [p.name for p in made[1:]]
    last = made[-1]
    assert (last / "report.html").read_text() == "report 3"
    assert (last / "chart.png").read_bytes() == b"png 3"
    assert json.loads((last / "run.json").read_text()) == {
        "run_at": "2026-11-28T11:00:05+00:00", "hours": 4, "records": 30, "deliveries": 3,
        "over": True}  # fmt: skip

    index = (reports / "index.html").read_text()
    links = re.findall(r"href='([^']+)/report.html'", index)
    assert links == [p.name for p in reversed(made[1:])]
    assert f"src='{last.name}/report.html'" in index
    assert index.count("over a limit") == 1
    assert (out / "report" / "report.html").read_text() == "report 3"  # the latest stays


def test_a_crashed_copy_is_not_listed_and_is_cleared(tmp_path):
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.html").write_text("r")
    left = out / "reports" / ".2026-11-28T09-00-00Z-deadbeef"
    left.mkdir(parents=True)
    (left / "run.json").write_text("{}")
    history.record(out, {}, START, keep=5)
    assert not left.exists()
    names = sorted(p.name for p in (out / "reports").iterdir())
    assert names == ["2026-11-28T10-00-05Z", "index.html"]


def test_keep_from_the_environment():
    assert history.keep_from_environment({}) == history.KEEP_REPORTS
    assert history.keep_from_environment({history.ENV_KEEP: "7"}) == 7
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError, match=history.ENV_KEEP):
            history.keep_from_environment({history.ENV_KEEP: bad})


def test_many_runs_in_one_second_keep_the_newest(tmp_path):
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.html").write_text("r")
    made = [history.record(out, {"hours": n}, START, keep=3) for n in range(12)]
    kept = sorted(p.name for p in (out / "reports").iterdir() if p.is_dir())
    assert kept == [p.name for p in made[-3:]]
    assert made[-1].name == "2026-11-28T10-00-05Z-012"
    index = (out / "reports" / "index.html").read_text()
    assert f"src='{made[-1].name}/report.html'" in index
    # a naive time is taken as UTC; an unreadable run.json does not stop the index
    (made[-1] / "run.json").write_text("{")
    naive = history.record(out, {}, dt.datetime(2026, 11, 28, 12), keep=3)
    assert naive.name == "2026-11-28T12-00-00Z"
    assert (
        "href='2026-11-28T10-00-05Z-012/report.html'"
        in (out / "reports" / "index.html").read_text()
    )
