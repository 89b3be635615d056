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
import subprocess
import sys
from pathlib import Path

from pyspark.core.context import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import SparkSession

from analytics import classdata

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

# A run reading at most this much Parquet (job.CHUNK_BYTES) is a
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


# How long a JVM ending after its session may take: a JVM making the
# class-data archive writes it as it exits (20 s on the 2-core machine).
JVM_EXIT_TIMEOUT_SECS = 300


def session_config(
    embedded: bool,
    input_bytes: int | None = None,
    class_data: classdata.ClassData | None = None,
) -> dict[str, str]:
    """The settings of a session: COMMON_CONFIG, and for an `embedded` one
    (local[*], not under spark-submit) LOCAL_CONFIG, with the short job's JVM
    options when `input_bytes` is at most SHORT_JOB_BYTES and the options of
    `class_data` (classdata.py) if given."""
    config = dict(COMMON_CONFIG)
    if embedded:
        config.update(LOCAL_CONFIG)
        java_options = [config["spark.driver.extraJavaOptions"]]
        if input_bytes is not None and input_bytes <= SHORT_JOB_BYTES:
            java_options.append(SHORT_JOB_JAVA_OPTIONS)
        if class_data is not None:
            java_options.append(class_data.java_options())
        config["spark.driver.extraJavaOptions"] = " ".join(java_options)
    return config


def is_embedded(master: str | None) -> bool:
    """Whether a session of `master` (None: the default) runs in a JVM this
    process starts: local[*], not a cluster's nor spark-submit's."""
    return master is None and not under_spark_submit()


def find_class_data(out: Path) -> classdata.ClassData | None:
    """The class-data archive for an embedded run writing to `out` (to map,
    or to make: classdata.find), before the JVM starts."""
    return classdata.find(out, Path(_find_spark_home()))


def build_session(
    master: str | None = None,
    *,
    log_level: str = "ERROR",
    input_bytes: int | None = None,
    class_data: classdata.ClassData | None = None,
) -> SparkSession:
    """Start (or reuse) the process's SparkSession.

    `master` None means spark-submit's master when spark-submit started this
    process (deploy/spark-submit-analytics.sh), else embedded `local[*]`. The
    caller owns the session and ends it (`stop_session`, or `spark.stop()`)
    when the run is over. Spark's own log is cut to `log_level` once the JVM
    is up (its start-up banner still goes to stderr). `input_bytes`, the
    Parquet the run will read if known, makes an embedded session of a short
    job (at most SHORT_JOB_BYTES) a short job's JVM. An embedded session's
    JVM maps or makes `class_data`'s archive; one that cannot start with the
    archive starts without it, and the archive is removed.
    """
    embedded = is_embedded(master)
    builder = SparkSession.builder.appName(APP_NAME)
    if master is not None:
        builder = builder.master(master)
    elif embedded:
        builder = builder.master("local[*]")
    config = session_config(embedded, input_bytes, class_data)
    for key, value in config.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if not embedded or class_data is None or exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        without = session_config(embedded, input_bytes)["spark.driver.extraJavaOptions"]
        spark = builder.config("spark.driver.extraJavaOptions", without).getOrCreate()
        if not class_data.dumping:
            class_data.discard()
            print(
                f"analytics: the JVM did not start with {class_data.archive}; started"
                " without it, and removed it (the next run makes another)",
                file=sys.stderr,
            )
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_session(spark: SparkSession, class_data: classdata.ClassData | None = None) -> None:
    """Stop `spark` and, when this process started its JVM (embedded), end
    the JVM and wait for it to exit: a run leaves no JVM behind. A JVM
    making `class_data`'s archive writes it as it exits; it is then checked
    and put in place (classdata.ClassData.publish), with a line on stderr,
    since the run waits for it.

    The process can start no session after this one."""
    gateway = SparkContext._gateway
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    making = class_data if class_data is not None and class_data.dumping else None
    made_by: tuple[Path, str] | None = None
    if process is not None and making is not None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None, "a classic (not Connect) session has a JVM"
        system = jvm.java.lang.System
        java = Path(system.getProperty("java.home")) / "bin" / "java"
        made_by = (java, str(system.getProperty("java.class.path")))
    spark.stop()
    if gateway is None or process is None:
        return  # spark-submit's JVM: it ends when this process does
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if making is not None:
        print(
            "analytics: saving the JVM's classes for the next runs (once per Java and Spark"
            f" install) in {making.directory}",
            file=sys.stderr,
        )
    # The JVM exits at the end of its input (pyspark's gateway server reads stdin).
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(JVM_EXIT_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return
    if making is not None and made_by is not None and process.returncode == 0:
        making.publish(*made_by)
