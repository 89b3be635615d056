"""The SparkSession the jobs run in.

Without a master URL (and outside spark-submit) the jobs run embedded
(`local[*]`) with settings for a short job on a small machine:
on 2 cores, 4 shuffle partitions, no UI and a 4 GiB driver took the five
reference queries from 18.3 s to 15.0 s, and LOCAL_CONFIG's further settings
(with ANSI mode off then, since left on: off, a sum overflows silently)
took them (warm, 10 million records) from 5.3 s to 4.9 s and the operator's
run from 40 s to 36 s (tests/benchmarks/README.md). With `--master`, or under
spark-submit, the cluster's own defaults apply, except the settings the
output's determinism depends on.
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

APP_NAME = "eventq-analytics"

# Applied everywhere: they make the output independent of the cluster.
COMMON_CONFIG = {
    "spark.sql.session.timeZone": "UTC",
    # The hourly aggregates are small; the job's shuffles are few and narrow.
    "spark.sql.shuffle.partitions": "4",
    # Partition directories (date=..., hour=...) are never typed by guess
    # (a date=... directory would become a DateType): the log is read with
    # its own schema (extract.py), and anything else as strings.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # Adaptive execution re-plans after each shuffle stage: worth it for big
    # skewed joins, which this job has none of. Off, a small aggregate query
    # took 1.2 s instead of 2.5 s here, and the plan no longer depends on
    # runtime statistics.
    "spark.sql.adaptive.enabled": "false",
}

# Embedded only: one JVM on the operator's machine.
LOCAL_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Room for the aggregations over tens of millions of records without
    # spilling; a 2-core machine of the CI kind has 24 GiB.
    "spark.driver.memory": "4g",
    # The throughput collector, with a young generation large enough for a
    # query's short-lived rows: a short batch job has no pause target to meet.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -Xmn1536m",
    # One shuffle partition per core: the shuffles are of small aggregates.
    "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
    # The logs are many files (one per shard and hour, or per shard and
    # EVENTQ_LOG_ROLL_SECS): pack them into one task per core instead of a
    # task per few files.
    "spark.sql.files.openCostInBytes": str(2**20),
    "spark.sql.files.maxPartitionBytes": str(256 * 2**20),
    # Every task runs in this JVM: nothing to wait for a better place for.
    "spark.locality.wait": "0",
    # The job hands Spark the directories of the hours it reads (up to a
    # month's 720 in one query): list them here rather than in a Spark job of
    # their own, which local files do not need.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
}

# A run reading at most this much Parquet (one chunk, job.CHUNK_BYTES) is a
# short job: its JVM compiles with the first JIT tier only (C1). The
# optimizing compiler's work does not pay off before such a run ends; over
# 5,000 records the read went from 5.4 to 4.4 s, over 1 million from 10.0 to
# 9.1 s (tests/benchmarks/README.md).
SHORT_JOB_BYTES = 64 * 2**20
SHORT_JOB_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def under_spark_submit() -> bool:
    """Whether spark-submit started this process (it then owns the master,
    the driver's memory and the UI; it hands the driver its JVM's port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_config(embedded: bool, input_bytes: int | None = None) -> dict[str, str]:
    """The settings of a session: COMMON_CONFIG, and for an `embedded` one
    (local[*], not under spark-submit) LOCAL_CONFIG, with the short job's JVM
    options when `input_bytes` is at most SHORT_JOB_BYTES."""
    config = dict(COMMON_CONFIG)
    if embedded:
        config.update(LOCAL_CONFIG)
        if input_bytes is not None and input_bytes <= SHORT_JOB_BYTES:
            java_options = config["spark.driver.extraJavaOptions"]
            config["spark.driver.extraJavaOptions"] = f"{java_options} {SHORT_JOB_JAVA_OPTIONS}"
    return config


def build_session(
    master: str | None = None, *, log_level: str = "ERROR", input_bytes: int | None = None
) -> SparkSession:
    """Start (or reuse) the process's SparkSession.

    `master` None means spark-submit's master when spark-submit started this
    process (deploy/spark-submit-analytics.sh), else embedded `local[*]`. The
    caller owns the session and stops it (`spark.stop()`) when the run is
    over. Spark's own log is cut to `log_level` once the JVM is up (its
    start-up banner still goes to stderr). `input_bytes`, the Parquet the run
    will read if known, makes an embedded session of a short job (at most
    SHORT_JOB_BYTES) a short job's JVM.
    """
    embedded = master is None and not under_spark_submit()
    builder = SparkSession.builder.appName(APP_NAME)
    if master is not None:
        builder = builder.master(master)
    elif embedded:
        builder = builder.master("local[*]")
    config = session_config(embedded, input_bytes)
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
