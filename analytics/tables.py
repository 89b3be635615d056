"""The tables, built on the driver: pyarrow Table -> pyarrow Table, no I/O.

Two layers (this is what makes `--incremental` exact):

- hourly base tables, split out of the pre-aggregate (transforms.py) of
  some hours: *mergeable* aggregates (integer counts and sums, maxima,
  histogram bucket counts), each with `date`, `hour` first;
- merges, which fold stored hourly tables over all their hours, and derived
  tables (percentiles, rankings, shares, imbalance), computed alike from an
  hourly table (per hour) or a merged one (overall).

The daily, weekly and overall tables are merges of hourly ones (read back
from storage by rollup.py, or still in memory in job.py): a full run and an
incremental one agree byte for byte. Sums are of integers, so
they do not depend on the order rows come in; doubles are only divided,
once, the way Spark divides them (IEEE double division, as Python's `/`).

The tables are small (per hour and key, not per record), so plain pyarrow
and Python on the driver build them in a fraction of the time one Spark
job takes to start. A dimension's key that is null in a record (an
unnamed client, event type, shard) is grouped under "(none)"
(transforms.NONE_KEY), as is a queue's client; realm, user and shard
columns keep their nulls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analytics import histogram, percentiles, realms, schema
from analytics.transforms import (
    ACTIVITY,
    COUNT,
    HISTOGRAM,
    LIFETIME,
    MEASURES,
    NONE_KEY,
    REALM_LATENCY,
)

Table = Any  # pyarrow.Table (pyarrow ships no type information)
Bound = histogram.Bound

HOUR = ["date", "hour"]
HOUR_FIELDS = [pa.field("date", pa.string()), pa.field("hour", pa.int32())]

# Spark's names of the column types the tables use.
TYPES = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64()}

POLL_COUNTS = ["polls", *schema.OUTCOMES, "bad_event_queue_id"]
POLL_SHARES = [*(f"{o}_share" for o in schema.OUTCOMES), "bad_event_queue_id_rate"]
LIFECYCLE_COUNTS = ["registers", "ended", *schema.END_REASONS, "events_unacked", "dead_letters"]
NOTIFICATION_COUNTS = ["enqueued", *schema.NOTIFICATION_PATHS, *schema.NOTIFICATION_KINDS]
SHARD_COUNTS = ["records", "deliveries", "polls", "response_bytes", "registers"]
USER_KEYS = ["realm_id", "user_id"]
# What identifies a row of queue activity: the queue, with its owner and
# client (the same in every record of a real queue).
QUEUE_KEYS = ["queue_id", "realm_id", "user_id", "client"]


@dataclass(frozen=True)
class Shape:
    """A stored table: its columns (`date`, `hour` aside: an hourly table
    has them first, taken from its directory names) and the keys its rows
    are sorted by within a file."""

    fields: list[pa.Field]
    order: list[str]

    @classmethod
    def of(cls, columns: str, order: Sequence[str] = ()) -> Shape:
        """From "name type, ..." (Spark's type names, as in TYPES)."""
        pairs = (column.split() for column in columns.split(","))
        return cls([pa.field(name, TYPES[kind]) for name, kind in pairs], list(order))

    def schema(self, scope: Sequence[str]) -> pa.Schema:
        """The columns with the scope's (`HOUR` or none) first."""
        return pa.schema([*(f for f in HOUR_FIELDS if f.name in scope), *self.fields])


def _typed(names: Sequence[str], kind: str) -> str:
    return ", ".join(f"{name} {kind}" for name in names)


ACTIVITY_COUNTS = "deliveries long, polls long"
SHAPES = {
    "histograms": Shape.of(
        "measure string, dimension string, key string, bucket int, count long, sum_micro long, "
        "max_value double",
        ["measure", "dimension", "key", "bucket"],
    ),
    "volumes": Shape.of("dimension string, key string, deliveries long", ["dimension", "key"]),
    "user_activity": Shape.of(
        f"realm_id long, user_id long, {ACTIVITY_COUNTS}, registers long", USER_KEYS
    ),
    "queue_activity": Shape.of(
        f"queue_id string, realm_id long, user_id long, client string, {ACTIVITY_COUNTS}, "
        "max_depth int",
        QUEUE_KEYS,
    ),
    "poll_outcomes": Shape.of(f"{_typed(POLL_COUNTS, 'long')}, {_typed(POLL_SHARES, 'double')}"),
    "queue_lifecycle": Shape.of(_typed(LIFECYCLE_COUNTS, "long")),
    "notifications": Shape.of(_typed(NOTIFICATION_COUNTS, "long")),
    "shard_load": Shape.of(f"shard string, {_typed(SHARD_COUNTS, 'long')}", ["shard"]),
    "coverage": Shape.of("hours long"),
    "realm_load": Shape.of(f"realm_id long, {_typed(realms.REALM_COUNTS, 'long')}", ["realm_id"]),
    "latency": Shape.of(
        "measure string, dimension string, key string, count long, mean double, max double, "
        "p50 double, p95 double, p99 double",
        ["measure", "dimension", "key"],
    ),
    "busiest_users": Shape.of(
        f"rank int, realm_id long, user_id long, {ACTIVITY_COUNTS}, registers long", ["rank"]
    ),
    "busiest_queues": Shape.of(
        f"rank int, queue_id string, realm_id long, user_id long, client string, "
        f"{ACTIVITY_COUNTS}, max_depth int",
        ["rank"],
    ),
    "top_realms": Shape.of(
        f"rank int, realm_id long, {_typed(realms.REALM_COUNTS, 'long')}", ["rank"]
    ),
    "shard_imbalance": Shape.of(
        "shards int, deliveries long, max_deliveries long, mean_deliveries double, "
        "imbalance double, busiest_shard string"
    ),
}


def _scope(table: Table) -> list[str]:
    return [c for c in HOUR if c in table.column_names]


def _shaped(table: Table, name: str, scope: Sequence[str]) -> Table:
    """`table`'s columns of stored table `name`, in order and type, rows
    sorted by the scope and the table's keys (nulls first, as Spark sorts)."""
    target = SHAPES[name].schema(scope)
    selected = table.select(target.names).cast(target)
    return sort(selected, [*scope, *SHAPES[name].order])


def sort(table: Table, keys: Sequence[str], descending: Sequence[str] = ()) -> Table:
    """Rows sorted by `keys`, ascending with nulls first (Spark's default
    order), except those in `descending` (nulls last). Stable."""
    if not keys or table.num_rows == 0:
        return table
    columns: dict[str, Any] = {}
    sort_keys = []
    for index, key in enumerate(keys):
        column = table.column(key)
        if key in descending:
            columns[f"v{index}"] = column
            sort_keys.append((f"v{index}", "descending"))
        else:
            # The default null placement is at the end: a validity key
            # (false before true) first puts nulls first.
            columns[f"n{index}"] = pc.is_valid(column)
            columns[f"v{index}"] = column
            sort_keys += [(f"n{index}", "ascending"), (f"v{index}", "ascending")]
    return table.take(pc.sort_indices(pa.table(columns), sort_keys=sort_keys))


def _group(table: Table, keys: Sequence[str], aggregates: dict[str, tuple[str, str]]) -> Table:
    """One row per distinct `keys` (null is a key like any other):
    `aggregates` maps each output column to (input column, "sum" or "max").
    A sum over nulls only is null."""
    result = table.group_by(list(keys), use_threads=False).aggregate(
        [(column, how) for column, how in aggregates.values()]
    )
    return result.select(
        [*keys, *(f"{column}_{how}" for column, how in aggregates.values())]
    ).rename_columns([*keys, *aggregates])


def _total(column: Any) -> int:
    """The sum of an integer column; 0 for no rows or nulls only."""
    value = pc.sum(column).as_py()
    return int(value) if value is not None else 0


def records(pieces: Table) -> int:
    """How many log records a pre-aggregate was made of."""
    return _total(_piece(pieces, COUNT).column("records"))


# What the pre-aggregate's generic key columns hold, per piece (transforms.py).
NAMES = {
    HISTOGRAM: {"s1": "event_type", "s2": "client", "s3": "shard"},
    ACTIVITY: {"s1": "queue_id", "s2": "client", "l1": "realm_id", "l2": "user_id"},
    COUNT: {"s1": "kind", "s2": "shard", "s3": "detail", "s4": "client_or_code", "l1": "realm_id"},
    REALM_LATENCY: {"l1": "realm_id"},
}


def _piece(pieces: Table, piece: int) -> Table:
    """The rows of one piece, its key columns named (NAMES)."""
    rows = pieces.filter(pc.equal(pieces.column("piece"), piece))
    return rows.rename_columns([NAMES[piece].get(c, c) for c in rows.column_names])


def _key(column: Any) -> Any:
    return pc.fill_null(column.cast(pa.string()), NONE_KEY)


def _fan_out(table: Table, dimensions: dict[str, str | None], keep: Sequence[str]) -> Table:
    """`table`'s rows once per dimension, with columns `keep`, `dimension` and
    `key`: the dimension's column as text (null as "(none)"), or "all" for a
    dimension mapped to None."""
    parts = []
    for dimension, column in dimensions.items():
        key = (
            pa.array(["all"] * table.num_rows, pa.string())
            if column is None
            else _key(table.column(column))
        )
        part = table.select(list(keep))
        part = part.append_column("dimension", pa.array([dimension] * table.num_rows, pa.string()))
        parts.append(part.append_column("key", key))
    return pa.concat_tables(parts)


# Dimensions a measure is broken down by, and the pre-aggregate's column of each.
DELIVERY_DIMENSIONS: dict[str, str | None] = {
    "all": None, "event_type": "event_type", "client": "client", "shard": "shard"
}  # fmt: skip
END_DIMENSIONS: dict[str, str | None] = {"all": None, "reason": "reason", "client": "client"}


def _measures(rows: Table) -> Table:
    """`rows` with `measure` as its name (MEASURES) instead of its index."""
    code = rows.column("measure")
    index = rows.column_names.index("measure")
    return rows.set_column(index, "measure", pc.take(pa.array(MEASURES), code))


def histograms(pieces: Table) -> Table:
    """Per hour, bucket counts of each measure by dimension and key: the
    delivery measures by all / event_type / client / shard, the queue
    lifetime by all / reason / client, and `enqueued_latency` by realm too
    (realm_id as text)."""
    rows = _piece(pieces, HISTOGRAM)
    code = rows.column("measure")
    rows = _measures(rows)
    keep = [*HOUR, "measure", "bucket", "records", "sum_micro", "max_value"]
    lifetime = pc.equal(code, MEASURES.index(LIFETIME))
    # The lifetime rows' first key is the end reason.
    ends = rows.filter(lifetime).rename_columns(
        ["reason" if c == "event_type" else c for c in rows.column_names]
    )
    fanned = pa.concat_tables(
        [
            _fan_out(rows.filter(pc.invert(lifetime)), DELIVERY_DIMENSIONS, keep),
            _fan_out(ends, END_DIMENSIONS, keep),
            _fan_out(_measures(_piece(pieces, REALM_LATENCY)), {"realm": "realm_id"}, keep),
        ]
    )
    folded = _group(
        fanned,
        [*HOUR, "measure", "dimension", "key", "bucket"],
        {
            "count": ("records", "sum"),
            "sum_micro": ("sum_micro", "sum"),
            "max_value": ("max_value", "max"),
        },
    )
    return _shaped(folded, "histograms", HOUR)


def _counts(pieces: Table, *kinds: str) -> Table:
    rows = _piece(pieces, COUNT)
    return rows.filter(pc.is_in(rows.column("kind"), pa.array(kinds, pa.string())))


def volumes(pieces: Table) -> Table:
    """Per hour, deliveries by event_type, realm (realm_id as text) and client."""
    deliveries = _counts(pieces, schema.DELIVERY)
    fanned = _fan_out(
        deliveries,
        {"event_type": "detail", "realm": "realm_id", "client": "client_or_code"},
        [*HOUR, "records"],
    )
    folded = _group(fanned, [*HOUR, "dimension", "key"], {"deliveries": ("records", "sum")})
    return _shaped(folded, "volumes", HOUR)


def user_activity(pieces: Table) -> Table:
    """Per hour and user: deliveries, polls and registers."""
    activity = _group(
        _piece(pieces, ACTIVITY),
        [*HOUR, *USER_KEYS],
        {c: (c, "sum") for c in ("deliveries", "polls", "registers")},
    )
    busy = pc.greater(
        pc.add(pc.add(activity.column("deliveries"), activity.column("polls")),
               activity.column("registers")),
        0,
    )  # fmt: skip
    return _shaped(activity.filter(busy), "user_activity", HOUR)


def queue_activity(pieces: Table) -> Table:
    """Per hour and queue: its owner and client, deliveries, polls, deepest backlog.

    `max_depth` is the most events the queue held when a response went out or
    when it ended. A refused poll does not count: its queue id is whatever
    the client sent, often a queue that no longer exists.
    """
    activity = _piece(pieces, ACTIVITY)
    own = activity.filter(
        pc.and_(pc.is_valid(activity.column("queue_id")),
                pc.greater(activity.column("queue_records"), 0))
    )  # fmt: skip
    # The pre-aggregate has one activity row per (hour, QUEUE_KEYS) already;
    # a queue's polls are its answered ones.
    columns = [*HOUR, *QUEUE_KEYS, "deliveries", "answered", "max_depth"]
    renamed = own.select(columns).rename_columns(
        ["polls" if c == "answered" else c for c in columns]
    )
    return _shaped(renamed, "queue_activity", HOUR)


def _per_hour(rows: Table) -> Iterator[tuple[tuple[str, int], list[dict[str, Any]]]]:
    """The rows of each hour, hours in order."""
    by_hour: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        by_hour.setdefault((row["date"], row["hour"]), []).append(row)
    yield from sorted(by_hour.items())


def _with_poll_shares(counts: dict[str, int | None]) -> dict[str, Any]:
    polls = counts["polls"]
    shares = {
        f"{o}_share": None if not polls else _ratio(counts[o], polls) for o in schema.OUTCOMES
    }
    rate = None if not polls else _ratio(counts["bad_event_queue_id"], polls)
    return {**counts, **shares, "bad_event_queue_id_rate": rate}


def _ratio(part: int | None, whole: int) -> float | None:
    return None if part is None else part / whole


def _rows(rows: list[dict[str, Any]], name: str, scope: Sequence[str]) -> Table:
    return _shaped(pa.Table.from_pylist(rows, schema=SHAPES[name].schema(scope)), name, scope)


def poll_outcomes(pieces: Table) -> Table:
    """Per hour with polls: long polls by outcome and BAD_EVENT_QUEUE_ID
    errors, with shares of the hour's polls."""
    rows = []
    for (date, hour), polls in _per_hour(_counts(pieces, schema.POLL)):
        counts = dict.fromkeys(POLL_COUNTS, 0)
        for row in polls:
            n = row["records"]
            counts["polls"] += n
            outcome = row["detail"]
            if outcome in schema.OUTCOMES:
                counts[outcome] += n
            if outcome == "error" and row["client_or_code"] == schema.BAD_EVENT_QUEUE_ID:
                counts["bad_event_queue_id"] += n
        rows.append({"date": date, "hour": hour, **_with_poll_shares(dict(counts))})
    return _rows(rows, "poll_outcomes", HOUR)


def queue_lifecycle(pieces: Table) -> Table:
    """Per hour with any: queues registered, ended (by reason), their
    unacknowledged events, dead letters.

    `events_unacked` sums the depth of queues when they ended: events the
    client never acknowledged, whether never sent or sent in a response whose
    next GET did not come (and for an overflow, the event that overflowed
    it). An unknown end reason counts in `ended` only.
    """
    rows = []
    lifecycle = _counts(pieces, schema.REGISTER, schema.END, schema.DEAD_LETTER)
    for (date, hour), records in _per_hour(lifecycle):
        counts = dict.fromkeys(LIFECYCLE_COUNTS, 0)
        for row in records:
            n, kind = row["records"], row["kind"]
            if kind == schema.REGISTER:
                counts["registers"] += n
            elif kind == schema.DEAD_LETTER:
                counts["dead_letters"] += n
            else:
                counts["ended"] += n
                counts["events_unacked"] += row["amount"] or 0
                if row["detail"] in schema.END_REASONS:
                    counts[row["detail"]] += n
        rows.append({"date": date, "hour": hour, **counts})
    return _rows(rows, "queue_lifecycle", HOUR)


def notifications(pieces: Table) -> Table:
    """Per hour with any: notifications the servers enqueued for users found
    away, by the path that found them (`delivery`: away when the message
    arrived; `gc`: their last queue expired holding it) and by kind (one
    asking for both counts in `email` and in `push`). An unknown path or
    kind counts in `enqueued` only."""
    rows = []
    for (date, hour), records in _per_hour(_counts(pieces, schema.NOTIFICATION)):
        counts = dict.fromkeys(NOTIFICATION_COUNTS, 0)
        for row in records:
            n = row["records"]
            counts["enqueued"] += n
            if row["detail"] in schema.NOTIFICATION_PATHS:
                counts[row["detail"]] += n
            for kind in set((row["client_or_code"] or "").split(",")):
                if kind in schema.NOTIFICATION_KINDS:
                    counts[kind] += n
        rows.append({"date": date, "hour": hour, **counts})
    return _rows(rows, "notifications", HOUR)


def shard_load(pieces: Table) -> Table:
    """Per hour and shard: records, deliveries, polls, response bytes, registers.

    `response_bytes` sums poll records only: each HTTP response has one poll
    record, while its size is repeated on each delivery it carried.
    """
    load: dict[tuple[str, int, str | None], dict[str, int]] = {}
    for row in _piece(pieces, COUNT).to_pylist():
        counts = load.setdefault(
            (row["date"], row["hour"], row["shard"]), dict.fromkeys(SHARD_COUNTS, 0)
        )
        n, kind = row["records"], row["kind"]
        counts["records"] += n
        if kind == schema.DELIVERY:
            counts["deliveries"] += n
        elif kind == schema.POLL:
            counts["polls"] += n
            counts["response_bytes"] += row["amount"] or 0
        elif kind == schema.REGISTER:
            counts["registers"] += n
    rows = [
        {"date": date, "hour": hour, "shard": shard, **counts}
        for (date, hour, shard), counts in load.items()
    ]
    return _rows(rows, "shard_load", HOUR)


# The hourly base tables, each built from the pre-aggregate of some hours.
def coverage(pieces: Table) -> Table:
    """Per hour with any record read: `hours` 1. Summed, the hours a day, a
    week or the whole log covers, once their hourly tables are rolled up."""
    counts = _piece(pieces, COUNT)
    hours = sorted({(r["date"], r["hour"]) for r in counts.select(HOUR).to_pylist()})
    return _rows([{"date": d, "hour": h, "hours": 1} for d, h in hours], "coverage", HOUR)


def realm_load(pieces: Table) -> Table:
    """Per hour and realm: deliveries, dead letters, queues ended by reason,
    the events they held (realms.load)."""
    counts = _counts(pieces, schema.DELIVERY, schema.END, schema.DEAD_LETTER)
    return _shaped(realms.load(counts), "realm_load", HOUR)


BASE = {
    "histograms": histograms,
    "volumes": volumes,
    "user_activity": user_activity,
    "queue_activity": queue_activity,
    "poll_outcomes": poll_outcomes,
    "queue_lifecycle": queue_lifecycle,
    "notifications": notifications,
    "shard_load": shard_load,
    "coverage": coverage,
    "realm_load": realm_load,
}


# Base tables whose merge is one row of totals (and shares), not a row per
# key: their counts.
ONE_ROW = {
    "poll_outcomes": POLL_COUNTS,
    "queue_lifecycle": LIFECYCLE_COUNTS,
    "notifications": NOTIFICATION_COUNTS,
    "coverage": ["hours"],
}


def merge(name: str, hourly: Table) -> Table:
    """Base table `name`'s hourly rows (of any hours) summed over their hours.

    For the ONE_ROW tables, one row of totals (of nulls when `hourly` has no
    row, as Spark's global aggregation gives).
    """
    if name in ONE_ROW:
        totals = {c: pc.sum(hourly.column(c)).as_py() for c in ONE_ROW[name]}
        row = _with_poll_shares(totals) if name == "poll_outcomes" else totals
        return _rows([row], name, [])
    # A keyed base table is stored sorted by its keys: they are its order.
    keys = SHAPES[name].order
    maxima = ("max_value", "max_depth")
    aggregates = {
        f.name: (f.name, "max" if f.name in maxima else "sum")
        for f in SHAPES[name].fields
        if f.name not in keys
    }
    return _shaped(_group(hourly, keys, aggregates), name, [])


# Unmerged rows the driver gathers before folding them into the running
# merge (merge_parts): memory follows the merged keys, not the hours stored.
FOLD_ROWS = 1_000_000


def merge_parts(name: str, parts: Iterable[Table], fold_rows: int = FOLD_ROWS) -> Table:
    """`merge(name, ...)` of base table `name`'s parts (hourly tables, of any
    hours, without `date` and `hour`), folded every `fold_rows` rows: sums
    and maxima of integers fold in any grouping to the same result."""
    merged: Table | None = None
    pending: list[Table] = []
    size = 0
    for part in parts:
        pending.append(part)
        size += part.num_rows
        if size >= fold_rows and name not in ONE_ROW:
            merged = merge(
                name, pa.concat_tables([m for m in (merged,) if m is not None] + pending)
            )
            pending, size = [], 0
    rest = [m for m in (merged,) if m is not None] + pending
    return merge(name, pa.concat_tables(rest) if rest else SHAPES[name].schema([]).empty_table())


def distributions(histograms: Table, bound: Bound) -> Table:
    """Count, mean, max, p50/p95/p99 per (scope, measure, dimension, key) of
    an hourly or merged histogram table (scope `date`, `hour` or none).

    A percentile is the upper bound (`bound(bucket)`, see
    histogram.upper_bounds) of the first bucket whose running count reaches
    its nearest rank, ceil(q * count) (percentiles.py).
    """
    scope = _scope(histograms)
    group = [*scope, "measure", "dimension", "key"]
    rows = sort(histograms, [*group, "bucket"])
    if rows.num_rows == 0:
        return _rows([], "latency", scope)
    return _shaped(percentiles.of_runs(rows, group, bound), "latency", scope)


def busiest(
    activity: Table,
    keys: Sequence[str],
    top: int,
    name: str,
    by: Sequence[str] = ("deliveries", "polls"),
) -> Table:
    """The `top` rows of user, queue or realm activity by the counts `by`,
    each descending (per hour if `activity` is hourly), as stored table `name`.

    Ties are broken by `keys` ascending, so the ranking is total; `rank` 1 is
    the busiest.
    """
    scope = _scope(activity)
    ordered = sort(activity, [*scope, *by, *keys], by)
    if not scope:  # overall: the first `top` rows
        top_rows = ordered.slice(0, top)
        first = pa.array(range(1, top_rows.num_rows + 1), pa.int32())
        return _shaped(top_rows.append_column("rank", first), name, scope)
    # Rows come hour by hour: a rank restarts at 1 where the hour changes.
    scopes = ordered.select(scope).to_pylist()
    ranks: list[int] = []
    for index, row in enumerate(scopes):
        ranks.append(ranks[-1] + 1 if index and scopes[index - 1] == row else 1)
    ranked = ordered.append_column("rank", pa.array(ranks, pa.int32()))
    return _shaped(ranked.filter(pc.less_equal(ranked.column("rank"), top)), name, scope)


def shard_imbalance(load: Table) -> Table:
    """Imbalance of deliveries between shards (per hour if `load` is hourly).

    `imbalance` = busiest shard's deliveries / mean per shard: 1.0 is even,
    N with N shards means one shard did everything. `busiest_shard` breaks
    ties by name.
    """
    scope = _scope(load)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in load.to_pylist():
        groups.setdefault(tuple(row[c] for c in scope), []).append(row)
    rows = []
    for key, shards in groups.items():
        deliveries = sum(r["deliveries"] for r in shards)
        # The most deliveries, then the first name (null first, as Spark orders).
        top = min(
            shards, key=lambda r: (-r["deliveries"], r["shard"] is not None, r["shard"] or "")
        )
        mean = deliveries / len(shards)
        rows.append(
            dict(zip(scope, key, strict=True))
            | {
                "shards": len(shards),
                "deliveries": deliveries,
                "max_deliveries": top["deliveries"],
                "mean_deliveries": mean,
                "imbalance": top["deliveries"] / mean if deliveries > 0 else None,
                "busiest_shard": top["shard"],
            }
        )
    if not scope and not rows:
        # As Spark's global aggregation over no rows: one row, of no shards.
        rows.append(dict.fromkeys(f.name for f in SHAPES["shard_imbalance"].fields) | {"shards": 0})
    return _rows(rows, "shard_imbalance", scope)


@dataclass(frozen=True)
class Derived:
    """A table computed from one base table, hourly and overall alike."""

    source: str
    derive: Callable[[Table, int, Bound], Table]


DERIVED = {
    "latency": Derived("histograms", lambda table, _top, bound: distributions(table, bound)),
    "busiest_users": Derived(
        "user_activity", lambda table, top, _bound: busiest(table, USER_KEYS, top, "busiest_users")
    ),
    "busiest_queues": Derived(
        "queue_activity",
        lambda table, top, _bound: busiest(table, QUEUE_KEYS, top, "busiest_queues"),
    ),
    "shard_imbalance": Derived("shard_load", lambda table, _top, _bound: shard_imbalance(table)),
    "top_realms": Derived(
        "realm_load",
        lambda table, top, _bound: busiest(table, ["realm_id"], top, "top_realms", realms.RANK_BY),
    ),
}

# The merged base tables stored under overall/ too; the histograms and
# activity tables are stored per hour only, their overall form is what the
# derived tables (latency, busiest_*) show.
OVERALL_BASE = (
    "volumes", "poll_outcomes", "queue_lifecycle", "notifications", "shard_load", "coverage",
    "realm_load",
)  # fmt: skip
