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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analytics import histogram, load, realms, schema, thresholds, windows
from analytics.painter import Drawing, Painter

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
    # the limits set, checked over the last 24 hours (thresholds.py)
    checks: list[thresholds.Check] = field(default_factory=list)

    @property
    def over(self) -> bool:
        """Whether an hour was over a limit."""
        return any(check.over for check in self.checks)


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


# The Volumes table shows each dimension's keys with the most deliveries,
# this many: a site has a row per realm and per client in overall/volumes.
VOLUME_ROWS = 20


def largest_per(rows: list[Row], column: str, count: int) -> list[Row]:
    """The first `count` rows of each value of `column`, in `rows`' order."""
    seen: dict[Any, int] = {}
    kept = []
    for row in rows:
        seen[row[column]] = seen.get(row[column], 0) + 1
        if seen[row[column]] <= count:
            kept.append(row)
    return kept


# The daily and weekly tables the report reads: key, table, sort keys.
BY_DAY: tuple[tuple[str, str, list[str]], ...] = (
    ("shards", "shard_load", ["shard"]),
    ("notifications", "notifications", []),
)


def collect(out: Path, dates: Dates) -> dict[str, list[Row]]:
    """The rows the report shows, sorted (they are small: per key or per hour)."""

    def overall(table: str) -> list[Row]:
        rows: list[Row] = load.read_overall(out, table).to_pylist()
        return rows

    def hourly(table: str) -> list[Row]:
        rows: list[Row] = load.read_hourly(out, table, dates=dates.hourly).to_pylist()
        return rows

    def by_day(tier: str, table: str) -> list[Row]:
        shown = dates.daily if tier == load.DAILY else None
        rows: list[Row] = load.read_days(out, tier, table, dates=shown).to_pylist()
        return rows

    wanted = (ENQUEUED, PUBLISHED, "queue_depth", "queue_lifetime")
    latency = [r for r in overall("latency") if r["measure"] in wanted]
    # Per realm, the top realms' only: a site may have thousands.
    per_realm = [r for r in latency if r["dimension"] == realms.DIMENSION]
    top_realms = overall("top_realms")
    return {
        "polls": overall("poll_outcomes"),
        "lifecycle": overall("queue_lifecycle"),
        "notifications": overall("notifications"),
        "imbalance": overall("shard_imbalance"),
        "shards": _sorted(overall("shard_load"), "shard"),
        "latency": _sorted(
            [r for r in latency if r["dimension"] != realms.DIMENSION],
            "measure",
            "dimension",
            "key",
        ),
        "realms": realms.report_rows(top_realms, per_realm),
        "dead_realms": realms.report_rows(
            realms.most_dead_letters(overall("realm_load"), max(1, len(top_realms))), per_realm
        ),
        "volumes": largest_per(
            _sorted(
                overall("volumes"), "dimension", "deliveries", "key", descending=["deliveries"]
            ),
            "dimension",
            VOLUME_ROWS,
        ),
        "users": _sorted(overall("busiest_users"), "rank"),
        "queues": _sorted(overall("busiest_queues"), "rank"),
        "hourly_shards": _sorted(hourly("shard_load"), "date", "hour", "shard"),
        "hourly_notifications": _sorted(hourly("notifications"), "date", "hour"),
        "hourly_lifecycle": _sorted(hourly("queue_lifecycle"), "date", "hour"),
        **{
            f"{tier}_{key}": _sorted(by_day(tier, table), "date", *order)
            for tier in (load.DAILY, load.WEEKLY)
            for key, table, order in BY_DAY
        },
        "coverage": overall("coverage"),
    }


@dataclass(frozen=True)
class Dates:
    """The dates of the hourly and of the daily partitions the windows can
    show (windows.dates_shown), and the oldest hourly one (where history
    starts, with the weeks')."""

    hourly: list[str]
    daily: list[str]
    oldest: list[str]  # none or one

    @classmethod
    def of(cls, out: Path) -> Dates:
        """By the hourly partitions of shard_load (every hour with a record
        has rows in it)."""
        stored = load.stored_dates(out, load.HOURLY, "shard_load")
        hourly, daily = windows.dates_shown(stored[-1] if stored else None)
        return cls(hourly, daily, stored[:1])


def latency_histograms(out: Path, tier: str, dates: Dates) -> pa.Table:
    """The stored histograms of `tier` (load.HOURLY, DAILY, WEEKLY) of the
    delivery latency over all deliveries, of the dates the windows can show."""
    overall_enqueued = (pc.field("dimension") == "all") & (pc.field("measure") == ENQUEUED)
    if tier == load.HOURLY:
        return load.read_hourly(out, "histograms", overall_enqueued, dates.hourly)
    return load.read_days(
        out, tier, "histograms", overall_enqueued, dates.daily if tier == load.DAILY else None
    )


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
    summary = Summary(
        hours=int(_one(data["coverage"]).get("hours") or 0),
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


# The tables a window's slots are summed from.
TIER_OF = {"hour": load.HOURLY, "day": load.DAILY, "week": load.WEEKLY}


def window_charts(
    data: dict[str, list[Row]],
    shown: Sequence[windows.Window],
    latency: dict[str, pa.Table],
    bound: histogram.Bound,
) -> list[tuple[windows.Window, list[Drawing]]]:
    """Per window, its charts: deliveries by shard, delivery latency,
    notifications by path; from the hourly, daily or weekly tables
    (`latency`: each tier's latency histograms)."""
    made: list[tuple[windows.Window, list[Drawing]]] = []
    for window in shown:
        unit, labels = window.name, window.labels
        tier = TIER_OF[unit]
        by_shard = windows.sums(window, data[f"{tier}_shards"], "shard", ["deliveries"])
        rows = windows.percentiles(window, latency[tier], bound)
        paths = windows.sums(window, data[f"{tier}_notifications"], "", schema.NOTIFICATION_PATHS)
        drawings = [
            ("stacked", f"deliveries_by_{unit}.png", f"Deliveries per {unit}, by shard", by_shard),
            (
                "latency",
                f"latency_by_{unit}.png",
                f"Delivery latency (enqueued to delivered) per {unit}, p50/p95/p99",
                rows,
            ),
            ("stacked", f"notifications_by_{unit}.png",
             f"Notifications enqueued per {unit}, by path", paths),
        ]  # fmt: skip
        made.append(
            (
                window,
                [
                    Drawing(kind, name, caption, (caption, labels, values))
                    for kind, name, caption, values in drawings
                ],
            )
        )
    return made


def charts(data: dict[str, list[Row]]) -> list[Drawing]:
    """The charts of the whole log."""
    by_type = [
        r for r in data["latency"] if r["measure"] == ENQUEUED and r["dimension"] == "event_type"
    ]
    polls = _one(data["polls"])
    lifecycle = _one(data["lifecycle"])

    def bar(name: str, caption: str, title: str, labels: Sequence[str],
            values: list[float], unit: str) -> Drawing:  # fmt: skip
        return Drawing("bar", name, caption, (title, list(labels), values, unit))

    return [
        Drawing(
            "latency_by_type",
            "latency_by_event_type.png",
            "Delivery latency by event type, p50/p95/p99",
            (by_type,),
        ),
        bar(
            "poll_outcomes.png",
            "Long-poll outcomes, share of polls",
            "Long-poll outcomes",
            schema.OUTCOMES,
            [100 * (polls.get(f"{o}_share") or 0.0) for o in schema.OUTCOMES],
            "% of polls",
        ),
        bar(
            "queue_ends.png",
            "Queue ends by reason",
            "Queue ends by reason",
            schema.END_REASONS,
            [float(lifecycle.get(r) or 0) for r in schema.END_REASONS],
            "queues",
        ),
        bar(
            "shard_load.png",
            "Deliveries per shard",
            "Deliveries per shard",
            [r["shard"] for r in data["shards"]],
            [float(r["deliveries"]) for r in data["shards"]],
            "deliveries",
        ),
    ]


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


def _png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height, from its header (IHDR)."""
    header = path.read_bytes()[:24]
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def _images(charts_made: Sequence[Drawing], directory: Path) -> list[str]:
    """The charts as <figure>s shown at their own size."""
    parts = []
    for name, caption in ((d.name, d.caption) for d in charts_made):
        width, height = _png_size(directory / name)
        parts.append(
            f"<figure><img src='{name}' alt='{html.escape(caption)}' width='{width}' "
            f"height='{height}'><figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    return parts


def _columns(rows: list[Row]) -> list[str]:
    return list(rows[0]) if rows else []


def render(
    data: dict[str, list[Row]],
    summary: Summary,
    windowed: Sequence[tuple[windows.Window, Sequence[Drawing]]],
    images: Sequence[Drawing],
    directory: Path,
) -> str:
    """The report as one HTML document referring to the PNGs in `directory`."""
    latency_columns = ["measure", "dimension", "key", "count", "mean", "p50", "p95", "p99", "max"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>eventq delivery report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "figure{margin:1em 0}img{max-width:none}li.over{color:#b00;font-weight:bold}</style>",
        "</head><body><h1>eventq delivery report</h1>",
        "<h2>Summary</h2><pre id='summary'>",
        html.escape("\n".join(summary.lines)),
        "</pre>",
        "<p>Percentiles come from log-bucketed histograms: each is the upper bound of "
        "its bucket, at most 4.7 % above the exact value. Latency and lifetime in "
        "seconds, queue depth in events. The time windows end with the last hour of "
        "the log.</p>",
    ]
    if summary.checks:
        parts.append("<section id='limits'><h2>Limits, over the last 24 hours</h2><ul>")
        for check in summary.checks:
            hours = f": {', '.join(check.over)}" if check.over else ""
            state = "over" if check.over else "ok"
            parts.append(f"<li class='{state}'>{html.escape(check.line() + hours)}</li>")
        parts.append("</ul></section>")
    for window, charts_made in windowed:
        parts.append(f"<section id='window-{window.name}'><h2>{html.escape(window.title)}</h2>")
        parts += _images(charts_made, directory)
        parts.append("</section>")
    parts.append("<section id='whole-log'><h2>The whole log</h2>")
    parts += _images(images, directory)
    parts.append("</section>")
    days = next((w for w, _ in windowed if w.name == "day"), None)
    per_day: list[Row] = []
    if days is not None:
        counts = dict(windows.sums(days, data["daily_notifications"], "", NOTIFICATION_COLUMNS))
        per_day = [
            {"day": label, **{c: int(counts[c][slot]) for c in NOTIFICATION_COLUMNS}}
            for slot, label in enumerate(days.labels)
        ]
    parts += [
        "<h2>Latency and distributions</h2>",
        _table(data["latency"], latency_columns),
        "<h2>Long-poll outcomes</h2>",
        _table(data["polls"], _columns(data["polls"])),
        "<h2>Queue lifecycle</h2>",
        _table(data["lifecycle"], _columns(data["lifecycle"])),
        "<h2>Notifications enqueued</h2>",
        "<p>By the servers, for users found away: at delivery, or when their last queue"
        " expired holding the message (gc); by kind, one asking for both counts twice."
        " Per day over the last 30 days, then over the whole log.</p>",
        _table(per_day, ["day", *NOTIFICATION_COLUMNS]),
        _table(data["notifications"], NOTIFICATION_COLUMNS),
        "<h2>Load per shard</h2>",
        _table(data["shards"], _columns(data["shards"])),
        _table(data["imbalance"], _columns(data["imbalance"])),
        "<h2>Volumes</h2>",
        f"<p>Deliveries by event type, client and realm: each one's {VOLUME_ROWS} keys with"
        " the most (the table overall/volumes holds every key).</p>",
        _table(data["volumes"], ["dimension", "key", "deliveries"]),
        realms.section(data["realms"], data["dead_realms"]),
        "<h2>Busiest users</h2>",
        _table(data["users"], ["rank", "realm_id", "user_id", "deliveries", "polls", "registers"]),
        "<h2>Busiest queues</h2>",
        _table(data["queues"], QUEUE_COLUMNS),
        "</body></html>\n",
    ]
    return "".join(parts)


def write_report(
    out: Path,
    bound: histogram.Bound,
    limits: thresholds.Limits | None = None,
    painter: Painter | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> Summary:
    """Render `<out>/report/` from the stored tables; returns the summary.
    `bound`: a histogram bucket's value (histogram.upper_bounds); `limits`:
    those to check over the last 24 hours; `painter` draws the charts (by
    default here, one after the other) while `meanwhile` runs: called once
    `bound` is needed no more."""
    dates = Dates.of(out)
    data = collect(out, dates)
    summary = summarize(data)
    # The hourly rows read are the last two dates' (Dates); the oldest
    # stored hour counts for where history starts, as the weeks do.
    shown = windows.windows(
        {(r["date"], r["hour"]) for r in data["hourly_shards"]},
        {r["date"] for r in data["weekly_shards"]} | set(dates.oldest),
    )
    latency = {tier: latency_histograms(out, tier, dates) for tier in TIER_OF.values()}
    if limits is not None:
        last_day = next((w for w in shown if w.name == "hour"), None)
        summary.checks.extend(
            thresholds.check(
                limits, last_day, latency[load.HOURLY], data["hourly_lifecycle"], bound
            )
        )
        summary.lines.extend(check.line() for check in summary.checks)
    scratch = out / load.TMP / f"report-{uuid.uuid4().hex}"
    scratch.mkdir(parents=True)
    windowed = window_charts(data, shown, latency, bound)
    images = charts(data)
    # The slowest chart (latency by event type) first: two workers then end
    # closer together.
    (painter or Painter()).draw_all(
        [*images, *(d for _, drawings in windowed for d in drawings)], scratch, meanwhile
    )
    (scratch / "report.html").write_text(render(data, summary, windowed, images, scratch))
    (scratch / "summary.txt").write_text("\n".join(summary.lines) + "\n")
    target = out / REPORT_DIR
    trash = out / f".{REPORT_DIR}.old-{uuid.uuid4().hex}"
    if target.exists():
        target.rename(trash)
    scratch.rename(target)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(out / load.TMP, ignore_errors=True)
    return summary
