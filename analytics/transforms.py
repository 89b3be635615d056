"""The one pass over the log: records -> the pre-aggregate every table is built from.

This is the only transform that reads records, so a run reads each hour of
the log once. Every record becomes up to six rows, each of one *piece*, and
one aggregation folds them all, per hour and piece and the piece's keys:

- HISTOGRAM, one row per measure of a delivery (`enqueued_latency` = time -
  enqueued_at and `published_latency` = time - published_at, in seconds;
  `queue_depth`, in events) and per ended queue's lifetime
  (`queue_lifetime`, seconds); a null value gives no row. Keys: `measure`
  (its index in MEASURES), `bucket` (histogram.py), s1 the event type (the
  end reason for a lifetime), s2 the client, s3 the shard (deliveries).
  Sums: `records`, `sum_micro` (exact fixed-point sum), `max_value`.
- ACTIVITY, one row per delivery, poll, register or end. Keys: s1 queue_id,
  s2 client (null as "(none)"), l1 realm_id, l2 user_id. Sums:
  `deliveries`, `polls`, `answered` (polls not refused), `registers`,
  `queue_records` (what counts for the queue itself: deliveries, answered
  polls, ends) and `max_depth`, the deepest backlog among those.
- COUNT, one row per record. Keys: s1 kind, s2 shard, s3 the event type (a
  delivery's), outcome (a poll's), reason (an end's) or path (a
  notification's `reason`), s4 the client (a delivery's), error code (a
  poll's) or kinds (a notification's `outcome`), l1 realm_id (a
  delivery's, an end's, a dead letter's). Sums: `records`, and `amount`:
  the response bytes of polls, the backlog of ended queues.
- REALM_LATENCY, one row per delivery with an `enqueued_latency`: the
  histogram of that measure per realm (l1 realm_id), kept apart from the
  HISTOGRAM rows so that those are not multiplied by the realms (its rows
  follow realms x buckets).

Keys are generic columns (s1..s4 strings, l1, l2 longs) shared by the
pieces rather than one column per name: a narrower grouping key is a
faster aggregation (over 2.9 million records, 14 s cold instead of 17 s).
A key a piece does not use is null; tables.py names them again.

Every row keeps `date`, `hour`. The result's size follows the queues, keys
and buckets of the hours read, not their records (about 60,000 rows an
hour for the benchmark's 400,000 records), so the driver collects it and
builds the tables (tables.py). No Python UDFs: everything runs in the JVM.

The query is one Spark SQL text, written here and handed to the JVM in one
call. Built with PySpark's Column API it took about 1,400 calls from Python
to the JVM, near 1 ms each on a cold JVM: 1.2-1.7 s of an hourly run, where
the text, parsed and analysed by the JVM, takes 0.9-1.0 s
(tests/benchmarks/README.md). The text names only the columns of
schema.USED_COLUMNS and constants written here; string constants go
through `_literal`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from analytics import histogram, schema

HOUR = ["date", "hour"]

# Pieces (column `piece`).
HISTOGRAM, ACTIVITY, COUNT, REALM_LATENCY = 0, 1, 2, 3

# Measures (column `measure` of histogram rows is the index here).
DELIVERY_MEASURES = ("enqueued_latency", "published_latency", "queue_depth")
LIFETIME = "queue_lifetime"
MEASURES = (*DELIVERY_MEASURES, LIFETIME)

# A key that is null in a record (a client the server could not name, ...)
# is grouped under this name in the tables.
NONE_KEY = "(none)"

KEYS = ("measure", "bucket", "s1", "s2", "s3", "s4", "l1", "l2")
SUMS = ("deliveries", "polls", "answered", "registers", "queue_records")

# A row of a piece before the aggregation: the keys (bucket aside: it is
# computed from `value`) and the per-record inputs of the sums and maxima.
_ROW = {
    "piece": "int", "measure": "int", "value": "double", "s1": "string", "s2": "string",
    "s3": "string", "s4": "string", "l1": "bigint", "l2": "bigint", "deliveries": "int",
    "polls": "int", "answered": "int", "registers": "int", "queue_records": "int",
    "depth": "int", "amount": "bigint",
}  # fmt: skip

# The result's columns and their types, in order.
RESULT = {
    "date": "string", "hour": "int", "piece": "int", "measure": "int", "bucket": "int",
    "s1": "string", "s2": "string", "s3": "string", "s4": "string", "l1": "bigint",
    "l2": "bigint", "records": "bigint", "sum_micro": "bigint", "max_value": "double",
    **dict.fromkeys(SUMS, "bigint"), "max_depth": "int", "amount": "bigint",
}  # fmt: skip


def _literal(text: str) -> str:
    """`text` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _flag(condition: str) -> str:
    return f"CASE WHEN {condition} THEN 1 ELSE 0 END"


def _inputs() -> list[str]:
    """Per record, once, every value the pieces' rows refer to (select items)."""

    def kind_is(*kinds: str) -> str:
        return f"(kind IN ({', '.join(_literal(k) for k in kinds)}))"

    is_delivery, is_poll, is_end = (kind_is(k) for k in (schema.DELIVERY, schema.POLL, schema.END))
    is_notification = kind_is(schema.NOTIFICATION)
    per_realm = kind_is(schema.DELIVERY, schema.END, schema.DEAD_LETTER)
    # A refused poll names whatever queue id the client sent, often one that
    # no longer exists: it counts for its user, never for a queue.
    answered = f"({is_poll} AND NOT coalesce(outcome = {_literal('error')}, false))"
    for_queue = f"({is_delivery} OR {answered} OR {is_end})"
    return [
        *(f"`{name}`" for name in HOUR),
        *("kind", "shard", "event_type", "client", "reason", "queue_id", "realm_id", "user_id"),
        "lifetime_secs",
        f"{is_delivery} AS is_delivery",
        f"{is_end} AS is_end",
        "`time` - enqueued_at AS enqueued_latency",
        "`time` - published_at AS published_latency",
        "CAST(queue_depth AS DOUBLE) AS depth_value",
        f"{kind_is(schema.DELIVERY, schema.POLL, schema.REGISTER, schema.END)} AS is_queue",
        f"coalesce(client, {_literal(NONE_KEY)}) AS queue_client",
        f"{_flag(is_delivery)} AS deliveries",
        f"{_flag(is_poll)} AS polls",
        f"{_flag(answered)} AS answered",
        f"{_flag(kind_is(schema.REGISTER))} AS registers",
        f"{_flag(for_queue)} AS queue_records",
        f"CASE WHEN {for_queue} THEN queue_depth END AS depth",
        # The count piece keeps only the keys its kind's tables group by, so
        # that it stays small.
        f"CASE WHEN {is_delivery} THEN event_type WHEN {is_poll} THEN outcome"
        f" WHEN {is_end} OR {is_notification} THEN reason END AS count_s3",
        f"CASE WHEN {is_delivery} THEN client WHEN {is_poll} THEN code"
        f" WHEN {is_notification} THEN outcome END AS count_s4",
        f"CASE WHEN {per_realm} THEN realm_id END AS count_l1",
        f"CASE WHEN {is_poll} THEN response_bytes WHEN {is_end} THEN queue_depth END AS amount",
    ]


def _row(piece: str, **fields: str) -> list[str]:
    """The stack() arguments of one row: `piece` (null: no row), `fields`,
    null elsewhere, each in _ROW's type."""
    assert set(fields) <= set(_ROW) - {"piece"}, set(fields) - set(_ROW)
    values = {"piece": piece, **fields}
    return [f"CAST({values.get(name, 'NULL')} AS {kind})" for name, kind in _ROW.items()]


def _when(condition: str, piece: int) -> str:
    return f"CASE WHEN {condition} THEN {piece} END"


def _rows() -> list[list[str]]:
    deliveries = [
        _row(
            _when(f"is_delivery AND {name} IS NOT NULL", HISTOGRAM),
            measure=str(MEASURES.index(measure)),
            value=name,
            s1="event_type",
            s2="client",
            s3="shard",
        )
        for measure, name in zip(
            DELIVERY_MEASURES, ("enqueued_latency", "published_latency", "depth_value"), strict=True
        )
    ]
    realm_latency = _row(
        _when("is_delivery AND enqueued_latency IS NOT NULL", REALM_LATENCY),
        measure=str(MEASURES.index("enqueued_latency")),
        value="enqueued_latency",
        l1="realm_id",
    )
    lifetime = _row(
        _when("is_end AND lifetime_secs IS NOT NULL", HISTOGRAM),
        measure=str(MEASURES.index(LIFETIME)),
        value="lifetime_secs",
        s1="reason",
        s2="client",
    )
    # Owner and client are the queue's own, the same in each of its records:
    # keys, not aggregates (a max() of a string makes Spark sort every record
    # instead of hashing them: 10 s instead of 2 s over 10 million).
    activity = _row(
        _when("is_queue", ACTIVITY),
        s1="queue_id",
        s2="queue_client",
        l1="realm_id",
        l2="user_id",
        **{name: name for name in (*SUMS, "depth")},
    )
    count = _row(
        str(COUNT),
        s1="kind",
        s2="shard",
        s3="count_s3",
        s4="count_s4",
        l1="count_l1",
        amount="amount",
    )
    return [*deliveries, realm_latency, lifetime, activity, count]


def query(source: str) -> str:
    """The pre-aggregate of the records of `source` (a table name, or a
    placeholder of SparkSession.sql) as Spark SQL."""
    rows = _rows()
    hour = ", ".join(f"`{name}`" for name in HOUR)
    # stack() over columns computed once per record: an array of structs
    # (inline) built per record cost 2.5 s more per 2.9 million records.
    stacked = ", ".join(item for row in rows for item in row)
    generated = (
        f"SELECT {hour}, stack({len(rows)}, {stacked}) AS ({', '.join(_ROW)})"  # noqa: S608 (constants only)
        f" FROM (SELECT {', '.join(_inputs())} FROM {source})"
    )
    bucket = histogram.bucket_sql("value")
    keys = f"{hour}, piece, measure, {bucket}, s1, s2, s3, s4, l1, l2"
    sums = ", ".join(f"sum({name}) AS {name}" for name in SUMS)
    grouped = (
        f"SELECT {hour}, piece, measure, {bucket} AS bucket, s1, s2, s3, s4, l1, l2,"  # noqa: S608 (constants only)
        f" count(1) AS records, sum({histogram.micros_sql('value')}) AS sum_micro,"
        f" max(value) AS max_value, {sums}, max(depth) AS max_depth, sum(amount) AS amount"
        f" FROM ({generated}) WHERE piece IS NOT NULL GROUP BY {keys}"
    )
    result = ", ".join(f"CAST(`{name}` AS {kind}) AS `{name}`" for name, kind in RESULT.items())
    return f"SELECT {result} FROM ({grouped})"  # noqa: S608 (constants only)


def preaggregate(records: DataFrame) -> DataFrame:
    """Every piece of every record of `records` (extract.read_records), folded
    per (hour, piece, keys): RESULT's columns, `date`, `hour`, `piece`, KEYS,
    `records`, `sum_micro`, `max_value`, SUMS, `max_depth`, `amount`.

    Sums over no value (an `amount` of records without one) are null; counts
    are never null.
    """
    return records.sparkSession.sql(query("{records}"), records=records)
