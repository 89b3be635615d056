"""The reports of earlier runs: each run's report is kept under
`<out>/reports/<time of the run>/`, and `<out>/reports/index.html` lists
them, newest first, and shows the latest.

`<out>/report/` stays the latest report alone (the operator page links to
it). A dated copy is that directory as the run wrote it, with `run.json`
beside it: the run's time and headline figures, which the index shows. The
oldest beyond `keep` (EVENTQ_ANALYTICS_KEEP_REPORTS, default
KEEP_REPORTS) are removed.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analytics import environment

REPORTS_DIR = "reports"
INDEX = "index.html"
RUN_FILE = "run.json"
KEEP_REPORTS = 48  # two days of the hourly timer's runs
ENV_KEEP = "EVENTQ_ANALYTICS_KEEP_REPORTS"
STAMP = "%Y-%m-%dT%H-%M-%SZ"


def keep_from_environment(environ: Mapping[str, str] = os.environ) -> int:
    """EVENTQ_ANALYTICS_KEEP_REPORTS, else KEEP_REPORTS; ValueError naming the
    variable for anything but a whole number of 1 or more."""
    keep = environment.number(environ, ENV_KEEP, int, 1)
    return KEEP_REPORTS if keep is None else keep


def _dated(reports: Path) -> list[Path]:
    """The dated reports, oldest first (their names sort as their times)."""
    if not reports.is_dir():
        return []
    return sorted(
        p
        for p in reports.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / RUN_FILE).is_file()
    )


def record(out: Path, run: Mapping[str, Any], when: dt.datetime, keep: int) -> Path:
    """Keep `<out>/report/` as the report of the run of `when` (UTC), with
    `run` (its headline figures, JSON) beside it; drop the oldest beyond
    `keep`; rewrite the index. Returns the dated directory."""
    reports = out / REPORTS_DIR
    reports.mkdir(parents=True, exist_ok=True)
    for left in reports.glob(".*"):  # what a crashed run left
        if left.is_dir():
            shutil.rmtree(left)
        else:
            left.unlink()
    moment = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    name = moment.astimezone(dt.UTC).strftime(STAMP)
    # Runs of the same second: -002, -003, ... after the highest taken (a
    # name freed by pruning is not taken again: it would sort as the oldest).
    same = [p.name.removeprefix(name) for p in reports.iterdir() if p.name.startswith(name)]
    if same:
        suffixes = [int(rest[1:]) for rest in same if rest[1:].isdecimal()]
        name = f"{name}-{max([1, *suffixes]) + 1:03d}"
    target = reports / name
    # Copied aside, then renamed: a crash leaves no half report in the list.
    scratch = reports / f".{target.name}-{uuid.uuid4().hex}"
    shutil.copytree(out / "report", scratch)
    (scratch / RUN_FILE).write_text(json.dumps({"run_at": when.isoformat(), **run}, indent=1))
    scratch.rename(target)
    dated = _dated(reports)
    for old in dated[: max(0, len(dated) - keep)]:
        shutil.rmtree(old)
    write_index(reports)
    return target


def write_index(reports: Path) -> None:
    """`index.html`: the dated reports, newest first, the latest shown below."""
    dated = list(reversed(_dated(reports)))
    rows = []
    for directory in dated:
        try:
            run = json.loads((directory / RUN_FILE).read_text())
        except (OSError, ValueError):
            run = {}
        if not isinstance(run, dict):
            run = {}
        state = "over a limit" if run.get("over") else ""
        rows.append(
            "<tr>"
            f"<td><a href='{html.escape(directory.name)}/report.html'>"
            f"{html.escape(str(run.get('run_at', directory.name)))}</a></td>"
            + "".join(
                f"<td>{html.escape(str(run.get(key, '')))}</td>"
                for key in ("hours", "records", "deliveries")
            )
            + f"<td class='{'over' if state else 'ok'}'>{state}</td></tr>"
        )
    latest = (
        f"<h2>Latest</h2><iframe title='latest report' src='{html.escape(dated[0].name)}/"
        "report.html'></iframe>"
        if dated
        else ""
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>eventq reports</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px}td.over{color:#b00;font-weight:bold}"
        "iframe{width:100%;height:80vh;border:1px solid #ccc}</style></head><body>"
        "<h1>eventq reports</h1><table><tr><th>run (UTC)</th><th>hours</th><th>records</th>"
        f"<th>deliveries</th><th>limits</th></tr>{''.join(rows)}</table>{latest}</body></html>\n"
    )
    scratch = reports / f".{INDEX}-{uuid.uuid4().hex}"
    scratch.write_text(page)
    scratch.rename(reports / INDEX)
