"""Log-bucketed histograms: exact, mergeable, deterministic percentiles.

A value x > 0 falls in bucket b = ceil(BUCKETS_PER_DECADE * log10(x)), that
is 10^((b-1)/50) < x <= 10^(b/50); values <= 0 (clock skew between hosts,
an empty queue) fall in ZERO_BUCKET. A percentile is read from the bucket
counts by nearest rank and reported as its bucket's upper bound, so it is
never below the true percentile and at most 4.7 % (10^(1/50)) above it
(tables.distributions).

Why not `percentile_approx`: its sketch depends on how rows are split into
partitions, so two runs, or an incremental run and a full one, could differ.
Bucket counts are integers: summing them per hour, then over hours, in any
order, gives the same histogram and so the same percentiles.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

# 50 buckets per power of ten: relative resolution 10^(1/50) - 1 = 4.7 %.
BUCKETS_PER_DECADE = 50
# Bucket of the values <= 0, reported as 0; below every positive double's
# bucket (5e-324 -> -16162).
ZERO_BUCKET = -100_000
# Percentiles reported, in thousandths (integer arithmetic for the ranks).
QUANTILES_PERMILLE = {"p50": 500, "p95": 950, "p99": 990}
# Fixed-point unit of the histogram's `sum_micro`: sums of integers are exact
# whatever the order Spark adds them in, sums of doubles are not.
MICRO = 1_000_000


def bucket_sql(value: str) -> str:
    """Spark SQL: the bucket (int) of the double expression `value`; null
    stays null."""
    return (
        f"CAST(CASE WHEN {value} <= 0 THEN {ZERO_BUCKET}"
        f" ELSE CEIL(LOG10({value}) * {BUCKETS_PER_DECADE}) END AS INT)"
    )


def micros_sql(value: str) -> str:
    """Spark SQL: the double expression `value` in millionths, rounded (half
    to even) to a long, for exact sums. rint, not round: Spark's round() goes
    through BigDecimal, which cost 1.5 s per measure over 7.5 million
    deliveries."""
    return f"CAST(RINT({value} * {MICRO}) AS BIGINT)"


Bound = Callable[[int], float]


def upper_bounds(spark: SparkSession) -> Bound:
    """bucket -> the value reported for it: its upper bound 10^(bucket/50)
    (0.0 for ZERO_BUCKET).

    Computed by the driver JVM's StrictMath.pow, which is what Spark's pow()
    computes: the same doubles on every platform, where Python's `**` (the C
    library's pow) differs in the last bit for about 9 % of the buckets.
    One call to the JVM per distinct bucket (a few hundred in a run).
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "a classic (not Connect) session has a JVM"
    strict_math = jvm.java.lang.StrictMath
    known: dict[int, float] = {ZERO_BUCKET: 0.0}

    def bound(bucket: int) -> float:
        if bucket not in known:
            known[bucket] = float(strict_math.pow(10.0, bucket / float(BUCKETS_PER_DECADE)))
        return known[bucket]

    return bound
