"""The JVM options of the Spark sessions the analytics tests start."""

from __future__ import annotations

# The JVM's first JIT tier only (C1), for every JVM the tests start: their
# frames are tiny, so a query's time is Spark planning and compiling it, and
# the optimizing compiler's threads only compete with that for the cores.
# tests/analytics/test_tables.py and test_contract.py took 39 s instead of
# 70 s on a loaded 2-core machine. It changes no result.
C1_ONLY = "-XX:TieredStopAtLevel=1"
# For the tests that run the job in a new process (`python -m analytics run`,
# `eventq analytics run`, tests/benchmarks/spark_job.py): its session sets
# spark.driver.extraJavaOptions of its own, and every JVM reads this
# variable too (it says so on stderr).
JVM_ENV = {"JAVA_TOOL_OPTIONS": C1_ONLY}
