"""The HTML report with PNG charts, and the console summary.

Everything here is read back from the stored overall and hourly tables, so
the report of an incremental run is the report of the equivalent full run.
Output: `<out>/report/report.html`, its charts `<out>/report/*.png` and the
console summary again in `<out>/report/summary.txt`; the directory is
rendered aside and renamed into place. Nothing in it depends on the time of
the run, so the same tables give the same bytes.
"""

from __future__ import annotations

import html
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analytics import load, schema

REPORT_DIR = "report"
ENQUEUED = "enqueued_latency"
PUBLISHED = "published_latency"
# The notifications table's counts (tables.NOTIFICATION_COUNTS).
NOTIFICATION_COLUMNS = ["enqueued", *schema.NOTIFICATION_PATHS, *schema.NOTIFICATION_KINDS]
Row = dict[str, Any]


@dataclass(frozen=True)
class Summary:
    """The headline numbers of a run (the console summary)."""

    hours: int
    records: int
    deliveries: int
    polls: int
    outcome_shares: dict[str, float]
    bad_event_queue_id: int
    bad_event_queue_id_rate: float
    registers: int
    ends: dict[str, int]
    events_unacked: int
    # measure -> (p50, p95, p99) in seconds, over all deliveries
    latency: dict[str, tuple[float, float, float]]
    shards: int
    imbalance: float | None
    busiest_shard: str | None
    # "enqueued", then by path (delivery, gc) and by kind (email, push)
    notifications: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def _one(rows: list[Row]) -> Row:
    return rows[0] if rows else {}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f} %"


def _sorted(rows: list[Row], *keys: str, descending: Sequence[str] = ()) -> list[Row]:
    """`rows` ordered as Spark's orderBy orders them: ascending with nulls
    first, except `descending` keys (numbers, never null here)."""

    def key(row: Row) -> tuple[Any, ...]:
        parts: list[Any] = []
        for name in keys:
            value = row[name]
            if name in descending:
                parts.append(-value)
            else:
                parts += [value is not None, value]
        return tuple(parts)

    return sorted(rows, key=key)


def collect(out: Path) -> dict[str, list[Row]]:
    """The rows the report shows, sorted (they are small: per key or per hour)."""

    def overall(table: str) -> list[Row]:
        rows: list[Row] = load.read_overall(out, table).to_pylist()
        return rows

    def hourly(table: str) -> list[Row]:
        rows: list[Row] = load.read_hourly(out, table).to_pylist()
        return rows

    wanted = (ENQUEUED, PUBLISHED, "queue_depth", "queue_lifetime")
    latency = [r for r in overall("latency") if r["measure"] in wanted]
    overall_enqueued = (pc.field("dimension") == "all") & (pc.field("measure") == ENQUEUED)
    hourly_latency = [
        {"date": r["date"], "hour": r["hour"], "p50": r["p50"], "p95": r["p95"], "p99": r["p99"]}
        for r in load.read_hourly(out, "latency", overall_enqueued).to_pylist()
    ]
    return {
        "polls": overall("poll_outcomes"),
        "lifecycle": overall("queue_lifecycle"),
        "notifications": overall("notifications"),
        "imbalance": overall("shard_imbalance"),
        "shards": _sorted(overall("shard_load"), "shard"),
        "latency": _sorted(latency, "measure", "dimension", "key"),
        "volumes": _sorted(
            overall("volumes"), "dimension", "deliveries", "key", descending=["deliveries"]
        ),
        "users": _sorted(overall("busiest_users"), "rank"),
        "queues": _sorted(overall("busiest_queues"), "rank"),
        "hourly_shards": _sorted(hourly("shard_load"), "date", "hour", "shard"),
        "hourly_latency": _sorted(hourly_latency, "date", "hour"),
        "hourly_notifications": _sorted(hourly("notifications"), "date", "hour"),
    }


def summarize(data: dict[str, list[Row]]) -> Summary:
    """The headline numbers, and the console lines that state them."""
    polls, lifecycle, imbalance, notifications = (
        _one(data["polls"]),
        _one(data["lifecycle"]),
        _one(data["imbalance"]),
        _one(data["notifications"]),
    )
    latency = {
        r["measure"]: (r["p50"], r["p95"], r["p99"])
        for r in data["latency"]
        if r["dimension"] == "all" and r["measure"] in (ENQUEUED, PUBLISHED)
    }
    hours = {(r["date"], r["hour"]) for r in data["hourly_shards"]}
    summary = Summary(
        hours=len(hours),
        records=sum(r["records"] for r in data["shards"]),
        deliveries=sum(r["deliveries"] for r in data["shards"]),
        polls=int(polls.get("polls") or 0),
        outcome_shares={o: polls.get(f"{o}_share") or 0.0 for o in schema.OUTCOMES},
        bad_event_queue_id=int(polls.get("bad_event_queue_id") or 0),
        bad_event_queue_id_rate=polls.get("bad_event_queue_id_rate") or 0.0,
        registers=int(lifecycle.get("registers") or 0),
        ends={r: int(lifecycle.get(r) or 0) for r in schema.END_REASONS},
        events_unacked=int(lifecycle.get("events_unacked") or 0),
        latency=latency,
        shards=len(data["shards"]),
        imbalance=imbalance.get("imbalance"),
        busiest_shard=imbalance.get("busiest_shard"),
        notifications={c: int(notifications.get(c) or 0) for c in NOTIFICATION_COLUMNS},
    )
    shares = ", ".join(f"{o} {_pct(s)}" for o, s in summary.outcome_shares.items())
    ends = ", ".join(f"{r} {n}" for r, n in summary.ends.items())
    summary.lines.extend(
        [
            f"hours: {summary.hours}  records: {summary.records}  "
            f"deliveries: {summary.deliveries}  polls: {summary.polls}",
            f"poll outcomes: {shares}",
            f"BAD_EVENT_QUEUE_ID: {summary.bad_event_queue_id} "
            f"({_pct(summary.bad_event_queue_id_rate)} of polls)  registers: {summary.registers}",
            f"queue ends: {ends}  unacknowledged events: {summary.events_unacked}",
            "notifications enqueued: {enqueued} (delivery {delivery}, gc {gc}; email {email},"
            " push {push})".format(**summary.notifications),
        ]
    )
    for measure, (p50, p95, p99) in sorted(latency.items()):
        summary.lines.append(f"{measure}: p50 {_ms(p50)}  p95 {_ms(p95)}  p99 {_ms(p99)}")
    ratio = "-" if summary.imbalance is None else f"{summary.imbalance:.2f}"
    summary.lines.append(
        f"shards: {summary.shards}  imbalance (max/mean deliveries): {ratio}  "
        f"busiest: {summary.busiest_shard}"
    )
    return summary


def _figure(width: float) -> tuple[Figure, Axes]:
    """A figure on the Agg canvas (files only, no display, no pyplot state)."""
    figure = Figure(figsize=(width, 4))
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _save(figure: Figure, path: Path) -> None:
    figure.tight_layout()
    # No "Software" key: the bytes do not depend on the matplotlib release.
    figure.savefig(path, format="png", dpi=80, metadata={"Software": None})


def _legend(axes: Axes) -> None:
    """A legend, if the chart has anything labelled (a log of no shard has not)."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7)


def _bar(path: Path, title: str, labels: Sequence[str], values: Sequence[float], unit: str) -> None:
    figure, axes = _figure(8)
    axes.bar(list(labels), list(values), color="#4878a8")
    axes.set_title(title)
    axes.set_ylabel(unit)
    axes.tick_params(axis="x", labelrotation=30)
    _save(figure, path)


def _stacked_per_hour(
    path: Path, title: str, labels: Sequence[str], series: Sequence[tuple[str, list[float]]]
) -> None:
    """Bars per hour (`labels`), each stacking the series' heights in order."""
    figure, axes = _figure(10)
    bottom = [0.0] * len(labels)
    for label, heights in series:
        axes.bar(range(len(labels)), heights, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes.set_xticks(range(len(labels)), labels, rotation=60, fontsize=7)
    axes.set_title(title)
    _legend(axes)
    _save(figure, path)


def charts(data: dict[str, list[Row]], directory: Path) -> list[tuple[str, str]]:
    """Render the PNG charts into `directory`; returns (file name, caption)."""
    made: list[tuple[str, str]] = []

    hours = sorted({(r["date"], r["hour"]) for r in data["hourly_shards"]})
    labels = [f"{d[5:]} {h:02d}h" for d, h in hours]
    shards = sorted({r["shard"] for r in data["hourly_shards"]})
    index = {hour: i for i, hour in enumerate(hours)}
    by_shard: list[tuple[str, list[float]]] = []
    for shard in shards:
        heights = [0.0] * len(hours)
        for r in data["hourly_shards"]:
            if r["shard"] == shard:
                heights[index[(r["date"], r["hour"])]] = float(r["deliveries"])
        by_shard.append((shard, heights))
    _stacked_per_hour(
        directory / "deliveries_per_hour.png", "Deliveries per hour, by shard", labels, by_shard
    )
    made.append(("deliveries_per_hour.png", "Deliveries per hour, by shard"))

    rows = data["hourly_latency"]
    figure, axes = _figure(10)
    for name in ("p50", "p95", "p99"):
        axes.plot(range(len(rows)), [r[name] * 1000 for r in rows], marker=".", label=name)
    axes.set_xticks(
        range(len(rows)),
        [f"{r['date'][5:]} {r['hour']:02d}h" for r in rows],
        rotation=60,
        fontsize=7,
    )
    axes.set_yscale("log")
    axes.set_ylabel("ms")
    axes.set_title("Delivery latency (enqueued to delivered) per hour")
    _legend(axes)
    _save(figure, directory / "latency_per_hour.png")
    made.append(("latency_per_hour.png", "Delivery latency per hour, p50/p95/p99"))

    by_type = [
        r for r in data["latency"] if r["measure"] == ENQUEUED and r["dimension"] == "event_type"
    ]
    figure, axes = _figure(10)
    width = 0.27
    for offset, name in enumerate(("p50", "p95", "p99")):
        axes.bar(
            [i + (offset - 1) * width for i in range(len(by_type))],
            [r[name] * 1000 for r in by_type],
            width=width,
            label=name,
        )
    axes.set_xticks(range(len(by_type)), [r["key"] for r in by_type], rotation=30, fontsize=8)
    axes.set_yscale("log")
    axes.set_ylabel("ms")
    axes.set_title("Delivery latency by event type")
    _legend(axes)
    _save(figure, directory / "latency_by_event_type.png")
    made.append(("latency_by_event_type.png", "Delivery latency by event type, p50/p95/p99"))

    polls = _one(data["polls"])
    _bar(
        directory / "poll_outcomes.png",
        "Long-poll outcomes",
        schema.OUTCOMES,
        [100 * (polls.get(f"{o}_share") or 0.0) for o in schema.OUTCOMES],
        "% of polls",
    )
    made.append(("poll_outcomes.png", "Long-poll outcomes, share of polls"))

    lifecycle = _one(data["lifecycle"])
    _bar(
        directory / "queue_ends.png",
        "Queue ends by reason",
        schema.END_REASONS,
        [float(lifecycle.get(r) or 0) for r in schema.END_REASONS],
        "queues",
    )
    made.append(("queue_ends.png", "Queue ends by reason"))

    rows = data["hourly_notifications"]
    by_path: list[tuple[str, list[float]]] = []
    for path in schema.NOTIFICATION_PATHS:
        heights = [0.0] * len(hours)
        for r in rows:
            if (r["date"], r["hour"]) in index:
                heights[index[(r["date"], r["hour"])]] = float(r[path])
        by_path.append((path, heights))
    _stacked_per_hour(
        directory / "notifications_per_hour.png",
        "Notifications enqueued per hour, by path",
        labels,
        by_path,
    )
    made.append(("notifications_per_hour.png", "Notifications enqueued per hour, by path"))

    _bar(
        directory / "shard_load.png",
        "Deliveries per shard",
        [r["shard"] for r in data["shards"]],
        [float(r["deliveries"]) for r in data["shards"]],
        "deliveries",
    )
    made.append(("shard_load.png", "Deliveries per shard"))
    return made


def _table(rows: list[Row], columns: Sequence[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.6g}"
        return html.escape("" if value is None else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


QUEUE_COLUMNS = [
    "rank", "queue_id", "realm_id", "user_id", "client", "deliveries", "polls", "max_depth"
]  # fmt: skip


def render(data: dict[str, list[Row]], summary: Summary, images: list[tuple[str, str]]) -> str:
    """The report as one HTML document referring to the PNGs beside it."""
    latency_columns = ["measure", "dimension", "key", "count", "mean", "p50", "p95", "p99", "max"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>eventq delivery report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style>",
        "</head><body><h1>eventq delivery report</h1>",
        "<h2>Summary</h2><pre id='summary'>",
        html.escape("\n".join(summary.lines)),
        "</pre>",
        "<p>Percentiles come from log-bucketed histograms: each is the upper bound of "
        "its bucket, at most 4.7 % above the exact value. Latency and lifetime in "
        "seconds, queue depth in events.</p>",
    ]
    parts += [f"<h3>{html.escape(caption)}</h3><img src='{name}' alt='{html.escape(caption)}'>"
              for name, caption in images]  # fmt: skip
    parts += [
        "<h2>Latency and distributions</h2>",
        _table(data["latency"], latency_columns),
        "<h2>Long-poll outcomes</h2>",
        _table(data["polls"], list(data["polls"][0]) if data["polls"] else []),
        "<h2>Queue lifecycle</h2>",
        _table(data["lifecycle"], list(data["lifecycle"][0]) if data["lifecycle"] else []),
        "<h2>Notifications enqueued</h2>",
        "<p>By the servers, for users found away: at delivery, or when their last queue"
        " expired holding the message (gc); by kind, one asking for both counts twice.</p>",
        _table(data["hourly_notifications"], ["date", "hour", *NOTIFICATION_COLUMNS]),
        _table(data["notifications"], NOTIFICATION_COLUMNS),
        "<h2>Load per shard</h2>",
        _table(data["shards"], list(data["shards"][0]) if data["shards"] else []),
        _table(data["imbalance"], list(data["imbalance"][0]) if data["imbalance"] else []),
        "<h2>Volumes</h2>",
        _table(data["volumes"], ["dimension", "key", "deliveries"]),
        "<h2>Busiest users</h2>",
        _table(data["users"], ["rank", "realm_id", "user_id", "deliveries", "polls", "registers"]),
        "<h2>Busiest queues</h2>",
        _table(data["queues"], QUEUE_COLUMNS),
        "</body></html>\n",
    ]
    return "".join(parts)


def write_report(out: Path) -> Summary:
    """Render `<out>/report/` from the stored tables; returns the summary."""
    data = collect(out)
    summary = summarize(data)
    scratch = out / load.TMP / f"report-{uuid.uuid4().hex}"
    scratch.mkdir(parents=True)
    images = charts(data, scratch)
    (scratch / "report.html").write_text(render(data, summary, images))
    (scratch / "summary.txt").write_text("\n".join(summary.lines) + "\n")
    target = out / REPORT_DIR
    trash = out / f".{REPORT_DIR}.old-{uuid.uuid4().hex}"
    if target.exists():
        target.rename(trash)
    scratch.rename(target)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(out / load.TMP, ignore_errors=True)
    return summary
