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
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

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
    "s3": "string", "s4": "string", "l1": "long", "l2": "long", "deliveries": "int",
    "polls": "int", "answered": "int", "registers": "int", "queue_records": "int",
    "depth": "int", "amount": "long",
}  # fmt: skip


def _inputs(records: DataFrame) -> DataFrame:
    """Per record, once, every value the pieces' rows refer to."""
    kind = F.col("kind")
    is_delivery, is_poll, is_end = (kind == k for k in (schema.DELIVERY, schema.POLL, schema.END))
    is_notification = kind == schema.NOTIFICATION
    per_realm = is_delivery | is_end | (kind == schema.DEAD_LETTER)
    # A refused poll names whatever queue id the client sent, often one that
    # no longer exists: it counts for its user, never for a queue.
    answered = is_poll & ~F.coalesce(F.col("outcome") == "error", F.lit(False))
    for_queue = is_delivery | answered | is_end

    def flag(condition: Column) -> Column:
        return F.when(condition, 1).otherwise(0)

    return records.select(
        *HOUR,
        "kind",
        "shard",
        "event_type",
        "client",
        "reason",
        "queue_id",
        "realm_id",
        "user_id",
        "lifetime_secs",
        is_delivery.alias("is_delivery"),
        is_end.alias("is_end"),
        (F.col("time") - F.col("enqueued_at")).alias("enqueued_latency"),
        (F.col("time") - F.col("published_at")).alias("published_latency"),
        F.col("queue_depth").cast("double").alias("depth_value"),
        kind.isin(schema.DELIVERY, schema.POLL, schema.REGISTER, schema.END).alias("is_queue"),
        F.coalesce(F.col("client"), F.lit(NONE_KEY)).alias("queue_client"),
        flag(is_delivery).alias("deliveries"),
        flag(is_poll).alias("polls"),
        flag(answered).alias("answered"),
        flag(kind == schema.REGISTER).alias("registers"),
        flag(for_queue).alias("queue_records"),
        F.when(for_queue, F.col("queue_depth")).alias("depth"),
        # The count piece keeps only the keys its kind's tables group by, so
        # that it stays small.
        F.when(is_delivery, F.col("event_type"))
        .when(is_poll, F.col("outcome"))
        .when(is_end | is_notification, F.col("reason"))
        .alias("count_s3"),
        F.when(is_delivery, F.col("client"))
        .when(is_poll, F.col("code"))
        .when(is_notification, F.col("outcome"))
        .alias("count_s4"),
        F.when(per_realm, F.col("realm_id")).alias("count_l1"),
        F.when(is_poll, F.col("response_bytes")).when(is_end, F.col("queue_depth")).alias("amount"),
    )


def _row(piece: Column, **fields: Column) -> list[Column]:
    """The stack() arguments of one row: `piece` (null: no row), `fields`,
    null elsewhere, each in _ROW's type."""
    assert set(fields) <= set(_ROW) - {"piece"}, set(fields) - set(_ROW)
    values = {"piece": piece, **fields}
    return [values.get(name, F.lit(None)).cast(kind) for name, kind in _ROW.items()]


def _rows() -> list[list[Column]]:
    col = F.col
    deliveries = [
        _row(
            F.when(col("is_delivery") & col(name).isNotNull(), HISTOGRAM),
            measure=F.lit(MEASURES.index(measure)),
            value=col(name),
            s1=col("event_type"),
            s2=col("client"),
            s3=col("shard"),
        )
        for measure, name in zip(
            DELIVERY_MEASURES, ("enqueued_latency", "published_latency", "depth_value"), strict=True
        )
    ]
    realm_latency = _row(
        F.when(col("is_delivery") & col("enqueued_latency").isNotNull(), REALM_LATENCY),
        measure=F.lit(MEASURES.index("enqueued_latency")),
        value=col("enqueued_latency"),
        l1=col("realm_id"),
    )
    lifetime = _row(
        F.when(col("is_end") & col("lifetime_secs").isNotNull(), HISTOGRAM),
        measure=F.lit(MEASURES.index(LIFETIME)),
        value=col("lifetime_secs"),
        s1=col("reason"),
        s2=col("client"),
    )
    # Owner and client are the queue's own, the same in each of its records:
    # keys, not aggregates (a max() of a string makes Spark sort every record
    # instead of hashing them: 10 s instead of 2 s over 10 million).
    activity = _row(
        F.when(col("is_queue"), ACTIVITY),
        s1=col("queue_id"),
        s2=col("queue_client"),
        l1=col("realm_id"),
        l2=col("user_id"),
        **{name: col(name) for name in (*SUMS, "depth")},
    )
    count = _row(
        F.lit(COUNT),
        s1=col("kind"),
        s2=col("shard"),
        s3=col("count_s3"),
        s4=col("count_s4"),
        l1=col("count_l1"),
        amount=col("amount"),
    )
    return [*deliveries, realm_latency, lifetime, activity, count]


def preaggregate(records: DataFrame) -> DataFrame:
    """Every piece of every record of `records` (extract.read_records), folded
    per (hour, piece, keys): columns `date`, `hour`, `piece`, KEYS,
    `records`, `sum_micro`, `max_value`, SUMS, `max_depth`, `amount`.

    Sums over no value (an `amount` of records without one) are null; counts
    are never null.
    """
    rows = _rows()
    # stack() over columns computed once per record: an array of structs
    # (inline) built per record cost 2.5 s more per 2.9 million records.
    generated = _inputs(records).select(
        *HOUR, F.stack(F.lit(len(rows)), *(c for row in rows for c in row)).alias(*_ROW)
    )
    value = F.col("value")
    grouped = (
        generated.where(F.col("piece").isNotNull())
        .groupBy(
            *HOUR,
            "piece",
            "measure",
            histogram.bucket_of(value).alias("bucket"),
            *(key for key in KEYS if key not in ("measure", "bucket")),
        )
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum(histogram.micros(value)).alias("sum_micro"),
            F.max(value).alias("max_value"),
            *(F.sum(name).alias(name) for name in SUMS),
            F.max("depth").alias("max_depth"),
            F.sum("amount").alias("amount"),
        )
    )
    return grouped.select(
        F.col("date").cast("string"),
        F.col("hour").cast("int"),
        *(F.col(c).cast("int") for c in ("piece", "measure", "bucket")),
        *(F.col(c).cast("string") for c in ("s1", "s2", "s3", "s4")),
        *(F.col(c).cast("long") for c in ("l1", "l2", "records", "sum_micro")),
        F.col("max_value").cast("double"),
        *(F.col(c).cast("long") for c in SUMS),
        F.col("max_depth").cast("int"),
        F.col("amount").cast("long"),
    )
