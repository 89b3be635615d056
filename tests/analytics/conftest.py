"""One SparkSession for all analytics tests: starting a JVM costs about 10 s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from analytics import session
from tests.analytics.jvm import C1_ONLY


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("eventq-analytics-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # The first JIT tier only (tests/analytics/jvm.py says why).
        .config("spark.driver.extraJavaOptions", C1_ONLY)
    )
    # The job's own settings (UTC, no partition type inference, ...), with
    # tiny frames needing only 2 shuffle partitions.
    for key, value in {**session.COMMON_CONFIG, "spark.sql.shuffle.partitions": "2"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()
