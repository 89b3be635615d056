"""Per realm: what each realm's users got, what failed for them, how their
queues ended.

The hourly base table `realm_load` counts, per hour and realm, deliveries,
dead letters (a dead letter counts under the realm its notice named, null
when it named none or could not be read: docs/delivery-log.md), queues ended
(by reason) and the events those queues still held. It merges like every
keyed base table (summed over hours, tables.merge) and ranks into
`top_realms` (tables.DERIVED). The latency per realm is the histogram
table's `realm` dimension of `enqueued_latency` (transforms.REALM_LATENCY),
whose percentiles the `latency` table holds like any other.

This module builds the base table's rows and the report's section; the
tables' shapes and registries are tables.py's.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analytics import schema

Table = Any  # pyarrow.Table
Row = dict[str, Any]

REALM_COUNTS = ["deliveries", "dead_letters", "ended", *schema.END_REASONS, "events_unacked"]
# What a realm is ranked by in `top_realms`: deliveries, then dead letters,
# then realm_id ascending (nulls first, as everywhere).
RANK_BY = ("deliveries", "dead_letters")
# The latency measure kept per realm (transforms.REALM_LATENCY).
MEASURE = "enqueued_latency"
DIMENSION = "realm"


def load(counts: Table) -> Table:
    """Per hour and realm, from the pre-aggregate's count rows of
    deliveries, ends and dead letters (named as tables.NAMES[COUNT] names
    them): columns `date`, `hour`, `realm_id`, REALM_COUNTS. An unknown end
    reason counts in `ended` only."""
    kind, records = counts.column("kind"), counts.column("records")
    is_end = pc.equal(kind, schema.END)

    def of(mask: Any, values: Any = records) -> Any:
        return pc.if_else(pc.fill_null(mask, False), values, 0)

    detail = counts.column("detail")
    parts = {
        "deliveries": of(pc.equal(kind, schema.DELIVERY)),
        "dead_letters": of(pc.equal(kind, schema.DEAD_LETTER)),
        "ended": of(is_end),
        **{r: of(pc.and_(is_end, pc.equal(detail, r))) for r in schema.END_REASONS},
        "events_unacked": of(is_end, pc.fill_null(counts.column("amount"), 0)),
    }
    keys = ["date", "hour", "realm_id"]
    table = pa.table({**{k: counts.column(k) for k in keys}, **parts})
    summed = table.group_by(keys, use_threads=False).aggregate(
        [(name, "sum") for name in REALM_COUNTS]
    )
    ordered = summed.select([*keys, *(f"{name}_sum" for name in REALM_COUNTS)])
    return ordered.rename_columns([*keys, *REALM_COUNTS])


def key(realm_id: int | None) -> str:
    """A realm's key in the histogram and latency tables (tables._key)."""
    return "(none)" if realm_id is None else str(realm_id)


def report_rows(top: Sequence[Row], latency: Sequence[Row]) -> list[Row]:
    """The top realms (`top_realms` rows, by rank) with the p50/p95/p99 of
    their delivery latency from the overall `latency` rows."""
    percentiles = {
        r["key"]: r for r in latency if r["measure"] == MEASURE and r["dimension"] == DIMENSION
    }
    rows = []
    for realm in sorted(top, key=lambda r: r["rank"]):
        found = percentiles.get(key(realm["realm_id"]), {})
        rows.append({**realm, **{q: found.get(q) for q in ("p50", "p95", "p99")}})
    return rows


def most_dead_letters(load: Sequence[Row], top: int) -> list[Row]:
    """The `top` realms (null among them) with the most dead letters, from
    the overall `realm_load`: those a ranking by deliveries leaves out (a
    realm all of whose notices fail delivers nothing)."""
    rows = [r for r in load if r["dead_letters"] > 0]
    rows.sort(key=lambda r: (-r["dead_letters"], r["realm_id"] is not None, r["realm_id"] or 0))
    return [{"rank": rank, **row} for rank, row in enumerate(rows[:top], 1)]


COLUMNS = ["rank", "realm_id", "deliveries", "p50", "p95", "p99", "dead_letters", "ended",
           *schema.END_REASONS, "events_unacked"]  # fmt: skip


def section(rows: Sequence[Row], dead: Sequence[Row] = ()) -> str:
    """The report's per-realm section: the top realms, latency in ms, then
    the realms with the most dead letters."""

    def cell(row: Row, column: str) -> str:
        value = row.get(column)
        if value is None:
            return "-" if column in ("p50", "p95", "p99") else "(none)"
        if column in ("p50", "p95", "p99"):
            return f"{value * 1000:.1f}"
        return html.escape(str(value))

    head = "".join(
        f"<th>{html.escape(c + (' ms' if c in ('p50', 'p95', 'p99') else ''))}</th>"
        for c in COLUMNS
    )

    def table_rows(shown: Sequence[Row]) -> str:
        return "".join(
            "<tr>" + "".join(f"<td>{cell(r, c)}</td>" for c in COLUMNS) + "</tr>" for r in shown
        )

    body = table_rows(rows)
    dead_body = table_rows(dead)
    return (
        "<section id='realms'><h2>Top realms</h2>"
        "<p>The realms with the most deliveries over the whole log (then the most dead "
        "letters): the delivery latency (enqueued to delivered) of their users' events, "
        "notices of theirs dead-lettered, their queues ended by reason and the events those "
        "still held. A dead letter whose notice named no realm, or could not be read, counts "
        "under (none).</p>"
        f"<table id='top-realms'><tr>{head}</tr>{body}</table>"
        "<h3>Most dead letters</h3><p>The realms whose notices were dead-lettered most "
        "often, whatever their deliveries.</p>"
        f"<table id='dead-letter-realms'><tr>{head}</tr>{dead_body}</table></section>"
    )
