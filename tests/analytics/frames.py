"""Tiny record frames for the transform tests."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from analytics import schema

DATE = "2026-11-20"
USED = StructType([schema.LOG_SCHEMA[name] for name in schema.USED_COLUMNS])


def records(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """A frame as extract.read_records returns it; unset columns are null, v is 1,
    date/hour default to DATE 03h."""
    defaults = {"v": 1, "date": DATE, "hour": 3, "shard": "s1", "realm_id": 1, "user_id": 10}
    full = [tuple((defaults | row).get(c) for c in USED.fieldNames()) for row in rows]
    return spark.createDataFrame(full, USED)
