"""The tables as the job computed them until the one-pass rewrite: one Spark
aggregation per table, straight from the records.

Kept as an executable specification, not used by the job: test_transforms
checks each of these against rows computed by hand, and test_tables checks
that the tables the job now builds on the driver from its one pre-aggregate
(analytics.transforms, analytics.tables) are these, row for row and bit for
bit, over varied records.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analytics import histogram, schema

HOUR = ["date", "hour"]
NONE_KEY = "(none)"

# Delivery measures: seconds from enqueue / publish to delivery, and the
# queue's depth in events when the response went out.
DELIVERY_MEASURES = ("enqueued_latency", "published_latency", "queue_depth")


def _bucket_of(value: Column) -> Column:
    """The histogram's bucket of a double (analytics/histogram.py), in Spark's
    Column API: the job writes the same formula as SQL text."""
    return (
        F.when(value <= 0, F.lit(histogram.ZERO_BUCKET))
        .otherwise(F.ceil(F.log10(value) * histogram.BUCKETS_PER_DECADE))
        .cast("int")
    )


def _micros(value: Column) -> Column:
    return F.rint(value * histogram.MICRO).cast("long")


def _delivery_measure(name: str) -> Column:
    if name == "enqueued_latency":
        return F.col("time") - F.col("enqueued_at")
    if name == "published_latency":
        return F.col("time") - F.col("published_at")
    assert name == "queue_depth", name
    return F.col("queue_depth").cast("double")


# Dimensions a delivery measure is broken down by ("all": one key, "all").
DELIVERY_DIMENSIONS = ("all", "event_type", "client", "shard")
END_DIMENSIONS = ("all", "reason", "client")

HISTOGRAM_COLUMNS = ["measure", "dimension", "key", "bucket", "count", "sum_micro", "max_value"]


def _key(column: str) -> Column:
    if column == "all":
        return F.lit("all")
    return F.coalesce(F.col(column).cast("string"), F.lit(NONE_KEY))


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _by_dimension(frame: DataFrame, dimensions: tuple[str, ...], keep: list[str]) -> DataFrame:
    """One row per input row and dimension: `keep` columns, `dimension`, `key`."""
    pairs = F.array(
        *(F.struct(F.lit(d).alias("dimension"), _key(d).alias("key")) for d in dimensions)
    )
    return frame.select(*keep, F.explode(pairs).alias("d")).select(
        *keep, F.col("d.dimension").alias("dimension"), F.col("d.key").alias("key")
    )


def histograms(records: DataFrame) -> DataFrame:
    """Per hour, bucket counts of each measure by dimension and key.

    Measures: `enqueued_latency` (time - enqueued_at) and `published_latency`
    (time - published_at) in seconds and `queue_depth` in events, of delivery
    records, by all / event_type / client / shard, and `enqueued_latency` by
    realm too; `queue_lifetime` in seconds of end records, by all / reason /
    client. Null values are not counted.
    """
    observations = F.array(
        *(F.struct(F.lit(name).alias("measure"), _delivery_measure(name).alias("value"))
          for name in DELIVERY_MEASURES)
    )  # fmt: skip
    deliveries = (
        records.where(F.col("kind") == schema.DELIVERY)
        .select(*HOUR, "event_type", "client", "shard", F.explode(observations).alias("o"))
        .where(F.col("o.value").isNotNull())
    )
    # First fold rows per (hour, event_type, client, shard, measure, bucket):
    # the dimension fan-out below then works on thousands of rows, not
    # millions. One aggregation over the three measures, not one per measure:
    # in a job that runs each query once, every distinct query pays for its
    # generated code to warm up in the JVM, and that costs more than the
    # explode (over 10 million records, cold: 22-25 s against 30-34 s).
    fine = deliveries.groupBy(
        *HOUR,
        "event_type",
        "client",
        "shard",
        F.col("o.measure").alias("measure"),
        _bucket_of(F.col("o.value")).alias("bucket"),
    ).agg(
        F.count(F.lit(1)).alias("count"),
        F.sum(_micros(F.col("o.value"))).alias("sum_micro"),
        F.max("o.value").alias("max_value"),
    )
    stats = ["measure", "bucket", "count", "sum_micro", "max_value"]
    delivery_rows = _by_dimension(fine, DELIVERY_DIMENSIONS, [*HOUR, *stats])
    ends = records.where((F.col("kind") == schema.END) & F.col("lifetime_secs").isNotNull()).select(
        *HOUR,
        "reason",
        "client",
        F.lit("queue_lifetime").alias("measure"),
        _bucket_of(F.col("lifetime_secs")).alias("bucket"),
        F.lit(1).cast("long").alias("count"),
        _micros(F.col("lifetime_secs")).alias("sum_micro"),
        F.col("lifetime_secs").alias("max_value"),
    )
    end_rows = _by_dimension(ends, END_DIMENSIONS, [*HOUR, *stats])
    latency = _delivery_measure("enqueued_latency")
    realm_rows = _by_dimension(
        records.where((F.col("kind") == schema.DELIVERY) & latency.isNotNull()).select(
            *HOUR,
            F.col("realm_id").alias("realm"),
            F.lit("enqueued_latency").alias("measure"),
            _bucket_of(latency).alias("bucket"),
            F.lit(1).cast("long").alias("count"),
            _micros(latency).alias("sum_micro"),
            latency.alias("max_value"),
        ),
        ("realm",),
        [*HOUR, *stats],
    )
    return _fold_histogram(delivery_rows.unionByName(end_rows).unionByName(realm_rows), HOUR)


def _fold_histogram(rows: DataFrame, scope: list[str]) -> DataFrame:
    folded = rows.groupBy(*scope, "measure", "dimension", "key", "bucket").agg(
        F.sum("count").alias("count"),
        F.sum("sum_micro").alias("sum_micro"),
        F.max("max_value").alias("max_value"),
    )
    return folded.select(
        *scope,
        F.col("measure").cast("string"),
        F.col("dimension").cast("string"),
        F.col("key").cast("string"),
        F.col("bucket").cast("int"),
        F.col("count").cast("long"),
        F.col("sum_micro").cast("long"),
        F.col("max_value").cast("double"),
    )


def merge_histograms(hourly: DataFrame) -> DataFrame:
    """The hourly histograms summed over all their hours."""
    return _fold_histogram(hourly.select(*HISTOGRAM_COLUMNS), [])


def distributions(histograms: DataFrame) -> DataFrame:
    """Count, mean, max, p50/p95/p99 per (scope, measure, dimension, key).

    The scope is `date`, `hour` for hourly histograms and nothing for merged
    ones. Percentiles are bucket upper bounds (histogram.py: at most 4.7 %
    above the exact value).
    """
    scope = [c for c in HOUR if c in histograms.columns]
    return percentiles(
        histograms.select(*scope, *HISTOGRAM_COLUMNS),
        [*scope, "measure", "dimension", "key"],
    )


def volumes(records: DataFrame) -> DataFrame:
    """Per hour, deliveries by event_type, realm (realm_id as text) and client."""
    deliveries = records.where(F.col("kind") == schema.DELIVERY).select(
        *HOUR, "event_type", F.col("realm_id").alias("realm"), "client"
    )
    rows = _by_dimension(deliveries, ("event_type", "realm", "client"), HOUR)
    return (
        rows.groupBy(*HOUR, "dimension", "key")
        .agg(F.count(F.lit(1)).alias("deliveries"))
        .select(*HOUR, "dimension", "key", F.col("deliveries").cast("long"))
    )


def merge_volumes(hourly: DataFrame) -> DataFrame:
    """Deliveries by dimension and key over all hours."""
    return (
        hourly.groupBy("dimension", "key")
        .agg(F.sum("deliveries").alias("deliveries"))
        .select("dimension", "key", F.col("deliveries").cast("long"))
    )


def user_activity(records: DataFrame) -> DataFrame:
    """Per hour and user: deliveries, polls and registers."""
    kind = F.col("kind")
    return (
        records.where(kind.isin(schema.DELIVERY, schema.POLL, schema.REGISTER))
        .groupBy(*HOUR, "realm_id", "user_id")
        .agg(
            _count_if(kind == schema.DELIVERY).alias("deliveries"),
            _count_if(kind == schema.POLL).alias("polls"),
            _count_if(kind == schema.REGISTER).alias("registers"),
        )
        .select(*HOUR, "realm_id", "user_id", "deliveries", "polls", "registers")
    )


def merge_user_activity(hourly: DataFrame) -> DataFrame:
    """Deliveries, polls and registers per user over all hours."""
    return (
        hourly.groupBy("realm_id", "user_id")
        .agg(*(F.sum(c).cast("long").alias(c) for c in ("deliveries", "polls", "registers")))
        .select("realm_id", "user_id", "deliveries", "polls", "registers")
    )


# What identifies a row of queue activity: the queue, with its owner and
# client (the same in every record of a real queue).
QUEUE_KEYS = ["queue_id", "realm_id", "user_id", "client"]


def queue_activity(records: DataFrame) -> DataFrame:
    """Per hour and queue: its owner and client, deliveries, polls, deepest backlog.

    `max_depth` is the most events the queue held when a response went out or
    when it ended: a queue whose client reads slowly keeps a deep backlog. A
    refused poll does not count: its queue id is whatever the client sent,
    often a queue that no longer exists.
    """
    kind = F.col("kind")
    answered = (kind == schema.POLL) & ~F.coalesce(F.col("outcome") == "error", F.lit(False))
    return (
        records.where(
            ((kind == schema.DELIVERY) | answered | (kind == schema.END))
            & F.col("queue_id").isNotNull()
        )
        # Owner and client are the queue's own, the same in each of its
        # records: keys, not aggregates. (A max() of the client string would
        # make Spark sort all records instead of hashing them: 10 s instead
        # of 2 s over 10 million.)
        .groupBy(*HOUR, "queue_id", "realm_id", "user_id", _key("client").alias("client"))
        .agg(
            _count_if(kind == schema.DELIVERY).alias("deliveries"),
            _count_if(kind == schema.POLL).alias("polls"),
            F.max("queue_depth").alias("max_depth"),
        )
        .select(
            *HOUR,
            "queue_id",
            "realm_id",
            "user_id",
            "client",
            "deliveries",
            "polls",
            F.col("max_depth").cast("int"),
        )
    )


def merge_queue_activity(hourly: DataFrame) -> DataFrame:
    """Per queue over all hours."""
    return (
        hourly.groupBy(*QUEUE_KEYS)
        .agg(
            F.sum("deliveries").cast("long").alias("deliveries"),
            F.sum("polls").cast("long").alias("polls"),
            F.max("max_depth").cast("int").alias("max_depth"),
        )
        .select("queue_id", "realm_id", "user_id", "client", "deliveries", "polls", "max_depth")
    )


def busiest(
    activity: DataFrame, keys: list[str], top: int, by: tuple[str, ...] = ("deliveries", "polls")
) -> DataFrame:
    """The `top` rows by the counts `by`, each descending (per hour if
    `activity` is hourly).

    Ties are broken by `keys` ascending, so the ranking is total. Output: the
    scope, `rank` (1 = busiest), then `activity`'s other columns.
    """
    scope = [c for c in HOUR if c in activity.columns]
    others = [c for c in activity.columns if c not in scope]
    order = [*(F.col(c).desc() for c in by), *(F.col(k).asc() for k in keys)]
    window = (
        Window.partitionBy(*scope)
        .orderBy(*order)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    ranked = activity.select(*scope, F.row_number().over(window).alias("rank"), *others)
    return ranked.where(F.col("rank") <= top).select(*scope, F.col("rank").cast("int"), *others)


POLL_COUNTS = ["polls", *schema.OUTCOMES, "bad_event_queue_id"]


def poll_outcomes(records: DataFrame) -> DataFrame:
    """Per hour, long polls by outcome and BAD_EVENT_QUEUE_ID errors, with shares."""
    outcome = F.col("outcome")
    counts = (
        records.where(F.col("kind") == schema.POLL)
        .groupBy(*HOUR)
        .agg(
            F.count(F.lit(1)).cast("long").alias("polls"),
            *(_count_if(outcome == o).alias(o) for o in schema.OUTCOMES),
            _count_if((outcome == "error") & (F.col("code") == schema.BAD_EVENT_QUEUE_ID)).alias(
                "bad_event_queue_id"
            ),
        )
    )
    return _with_poll_shares(counts, HOUR)


def merge_poll_outcomes(hourly: DataFrame) -> DataFrame:
    """Long-poll outcomes over all hours."""
    counts = hourly.agg(*(F.sum(c).cast("long").alias(c) for c in POLL_COUNTS))
    return _with_poll_shares(counts, [])


def _with_poll_shares(counts: DataFrame, scope: list[str]) -> DataFrame:
    polls = F.col("polls")
    return counts.select(
        *scope,
        *POLL_COUNTS,
        *((F.col(o) / polls).alias(f"{o}_share") for o in schema.OUTCOMES),
        (F.col("bad_event_queue_id") / polls).alias("bad_event_queue_id_rate"),
    )


LIFECYCLE_COUNTS = ["registers", "ended", *schema.END_REASONS, "events_unacked", "dead_letters"]


def queue_lifecycle(records: DataFrame) -> DataFrame:
    """Per hour: queues registered, ended (by reason), their unacknowledged
    events, dead letters.

    `events_unacked` sums the depth of queues when they ended: events the
    client never acknowledged, whether never sent or sent in a response whose
    next GET did not come (and for an overflow, the event that overflowed
    it). An unknown end reason counts in `ended` only.
    """
    kind, reason = F.col("kind"), F.col("reason")
    is_end = kind == schema.END
    return (
        records.where(kind.isin(schema.REGISTER, schema.END, schema.DEAD_LETTER))
        .groupBy(*HOUR)
        .agg(
            _count_if(kind == schema.REGISTER).alias("registers"),
            _count_if(is_end).alias("ended"),
            *(_count_if(is_end & (reason == r)).alias(r) for r in schema.END_REASONS),
            F.coalesce(F.sum(F.when(is_end, F.col("queue_depth"))), F.lit(0))
            .cast("long")
            .alias("events_unacked"),
            _count_if(kind == schema.DEAD_LETTER).alias("dead_letters"),
        )
        .select(*HOUR, *LIFECYCLE_COUNTS)
    )


def merge_queue_lifecycle(hourly: DataFrame) -> DataFrame:
    """Queue lifecycle counts over all hours."""
    return hourly.agg(*(F.sum(c).cast("long").alias(c) for c in LIFECYCLE_COUNTS)).select(
        *LIFECYCLE_COUNTS
    )


NOTIFICATION_COUNTS = ["enqueued", *schema.NOTIFICATION_PATHS, *schema.NOTIFICATION_KINDS]


def notifications(records: DataFrame) -> DataFrame:
    """Per hour: notifications enqueued, by path (`reason`) and by kind (the
    comma-separated `outcome`; one asking for both counts in each)."""
    kinds = F.split(F.coalesce(F.col("outcome"), F.lit("")), ",")
    return (
        records.where(F.col("kind") == schema.NOTIFICATION)
        .groupBy(*HOUR)
        .agg(
            F.count(F.lit(1)).cast("long").alias("enqueued"),
            *(_count_if(F.col("reason") == p).alias(p) for p in schema.NOTIFICATION_PATHS),
            *(_count_if(F.array_contains(kinds, k)).alias(k) for k in schema.NOTIFICATION_KINDS),
        )
        .select(*HOUR, *NOTIFICATION_COUNTS)
    )


def merge_notifications(hourly: DataFrame) -> DataFrame:
    """Notifications enqueued over all hours."""
    return hourly.agg(*(F.sum(c).cast("long").alias(c) for c in NOTIFICATION_COUNTS)).select(
        *NOTIFICATION_COUNTS
    )


def coverage(records: DataFrame) -> DataFrame:
    """Per hour with any record: 1."""
    return records.groupBy(*HOUR).agg(F.lit(1).cast("long").alias("hours"))


def merge_coverage(hourly: DataFrame) -> DataFrame:
    """The hours covered."""
    return hourly.agg(F.sum("hours").cast("long").alias("hours"))


SHARD_COUNTS = ["records", "deliveries", "polls", "response_bytes", "registers"]


def shard_load(records: DataFrame) -> DataFrame:
    """Per hour and shard: records, deliveries, polls, response bytes, registers.

    `response_bytes` sums poll records only: each HTTP response has one poll
    record, while its size is repeated on each delivery it carried.
    """
    kind = F.col("kind")
    return (
        records.groupBy(*HOUR, "shard")
        .agg(
            F.count(F.lit(1)).cast("long").alias("records"),
            _count_if(kind == schema.DELIVERY).alias("deliveries"),
            _count_if(kind == schema.POLL).alias("polls"),
            F.coalesce(F.sum(F.when(kind == schema.POLL, F.col("response_bytes"))), F.lit(0))
            .cast("long")
            .alias("response_bytes"),
            _count_if(kind == schema.REGISTER).alias("registers"),
        )
        .select(*HOUR, "shard", *SHARD_COUNTS)
    )


def merge_shard_load(hourly: DataFrame) -> DataFrame:
    """Load per shard over all hours."""
    return (
        hourly.groupBy("shard")
        .agg(*(F.sum(c).cast("long").alias(c) for c in SHARD_COUNTS))
        .select("shard", *SHARD_COUNTS)
    )


def shard_imbalance(load: DataFrame) -> DataFrame:
    """Imbalance of deliveries between shards (per hour if `load` is hourly).

    `imbalance` = busiest shard's deliveries / mean per shard: 1.0 is even,
    N with N shards means one shard did everything. `busiest_shard` breaks
    ties by name.
    """
    scope = [c for c in HOUR if c in load.columns]
    summary = load.groupBy(*scope).agg(
        F.count(F.lit(1)).alias("shards"),
        F.sum("deliveries").alias("deliveries"),
        F.max("deliveries").alias("max_deliveries"),
        F.min(F.struct((-F.col("deliveries")).alias("minus"), F.col("shard").alias("shard"))).alias(
            "top"
        ),
    )
    mean = F.col("deliveries") / F.col("shards")
    return summary.select(
        *scope,
        F.col("shards").cast("int"),
        F.col("deliveries").cast("long"),
        F.col("max_deliveries").cast("long"),
        mean.alias("mean_deliveries"),
        F.when(F.col("deliveries") > 0, F.col("max_deliveries") / mean).alias("imbalance"),
        F.col("top.shard").alias("busiest_shard"),
    )


REALM_COUNTS = ["deliveries", "dead_letters", "ended", *schema.END_REASONS, "events_unacked"]


def realm_load(records: DataFrame) -> DataFrame:
    """Per hour and realm: deliveries, dead letters, queues ended (by reason)
    and the events they held; realms with none of these have no row. An
    unknown end reason counts in `ended` only."""
    kind, reason = F.col("kind"), F.col("reason")
    is_end = kind == schema.END
    return (
        records.where(kind.isin(schema.DELIVERY, schema.END, schema.DEAD_LETTER))
        .groupBy(*HOUR, "realm_id")
        .agg(
            _count_if(kind == schema.DELIVERY).alias("deliveries"),
            _count_if(kind == schema.DEAD_LETTER).alias("dead_letters"),
            _count_if(is_end).alias("ended"),
            *(_count_if(is_end & (reason == r)).alias(r) for r in schema.END_REASONS),
            F.coalesce(F.sum(F.when(is_end, F.col("queue_depth"))), F.lit(0))
            .cast("long")
            .alias("events_unacked"),
        )
        .select(*HOUR, F.col("realm_id").cast("long"), *REALM_COUNTS)
    )


def merge_realm_load(hourly: DataFrame) -> DataFrame:
    """Per realm over all hours."""
    return (
        hourly.groupBy("realm_id")
        .agg(*(F.sum(c).cast("long").alias(c) for c in REALM_COUNTS))
        .select("realm_id", *REALM_COUNTS)
    )


# The percentiles, as analytics/histogram.py computed them in Spark.


def upper_bound(bucket: Column) -> Column:
    """The value reported for a bucket: its upper bound (0.0 for ZERO_BUCKET)."""
    return (
        F.when(bucket == histogram.ZERO_BUCKET, F.lit(0.0))
        .otherwise(F.pow(F.lit(10.0), bucket / F.lit(float(histogram.BUCKETS_PER_DECADE))))
        .cast("double")
    )


def percentiles(buckets: DataFrame, group: list[str]) -> DataFrame:
    """Count, mean, max and p50/p95/p99 per `group` from bucket rows.

    Input: `group` columns, `bucket` int, `count` long, `sum_micro` long,
    `max_value` double, one row per (group, bucket). Output: `group` columns,
    `count`, `mean`, `max`, `p50`, `p95`, `p99` (doubles), one row per group.
    The q-th percentile is the upper bound of the first bucket whose running
    count reaches ceil(q * count) (nearest rank).
    """
    ordered = Window.partitionBy(*group).orderBy("bucket")
    running = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    cumulated = buckets.select(
        *group,
        "bucket",
        "count",
        "sum_micro",
        "max_value",
        F.sum("count").over(running).alias("running"),
        F.sum("count").over(whole).alias("total"),
    )
    ranks = {
        name: F.floor((F.col("total") * permille + 999) / 1000)
        for name, permille in histogram.QUANTILES_PERMILLE.items()
    }
    aggregated = cumulated.groupBy(*group).agg(
        F.sum("count").alias("count"),
        F.sum("sum_micro").alias("sum_micro"),
        F.max("max_value").alias("max"),
        *(
            F.min(F.when(F.col("running") >= rank, F.col("bucket"))).alias(name)
            for name, rank in ranks.items()
        ),
    )
    return aggregated.select(
        *group,
        F.col("count").cast("long").alias("count"),
        (F.col("sum_micro") / F.lit(float(histogram.MICRO)) / F.col("count")).alias("mean"),
        F.col("max").cast("double").alias("max"),
        *(upper_bound(F.col(name)).alias(name) for name in histogram.QUANTILES_PERMILLE),
    )
