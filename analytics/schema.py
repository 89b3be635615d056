"""The delivery-log format as Spark reads it (v1: the column table of docs/delivery-log.md).

The server writes these columns, in this order, into
`<logs>/deliveries/date=YYYY-MM-DD/hour=HH/*.parquet`; `date` and `hour` come
from the directory names (partition discovery), not from the files.
"""

from __future__ import annotations

from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

# The newest format version this reader understands. A reader accepts the
# previous version too (docs/architecture.md, "Contracts"); v1 is the first, so the jobs
# keep rows with 1 <= v <= MAX_VERSION. Raise it here, and only here, when the
# server's writer moves to v2 and the transforms have learned its columns.
MIN_VERSION = 1
MAX_VERSION = 1

# Record kinds (column `kind`).
DELIVERY = "delivery"
POLL = "poll"
REGISTER = "register"
END = "end"
DEAD_LETTER = "dead_letter"
NOTIFICATION = "notification"

# Poll outcomes (column `outcome` of poll records), in report order.
OUTCOMES = ("events", "heartbeat", "displaced", "empty", "deleted", "error")
BAD_EVENT_QUEUE_ID = "BAD_EVENT_QUEUE_ID"

# Why a queue ended (column `reason` of end records); "expired" is the idle GC.
END_REASONS = ("expired", "deleted", "overflow", "evicted", "deactivated", "role_changed")

# A notification record (one per notification a server enqueued for a user
# found away) fills columns of the other kinds: `reason` is the path that
# found the user away, `outcome` its kinds, comma-separated ("email,push"),
# `event_id` the message's id.
NOTIFICATION_PATHS = ("delivery", "gc")
NOTIFICATION_KINDS = ("email", "push")

RECORD_COLUMNS = StructType(
    [
        StructField("v", IntegerType()),
        StructField("kind", StringType()),
        StructField("time", DoubleType()),
        StructField("shard", StringType()),
        StructField("realm_id", LongType()),
        StructField("user_id", LongType()),
        StructField("queue_id", StringType()),
        StructField("client", StringType()),
        StructField("event_id", LongType()),
        StructField("event_type", StringType()),
        StructField("enqueued_at", DoubleType()),
        StructField("published_at", DoubleType()),
        StructField("response_bytes", LongType()),
        StructField("batch_events", IntegerType()),
        StructField("queue_depth", IntegerType()),
        StructField("outcome", StringType()),
        StructField("code", StringType()),
        StructField("waited_secs", DoubleType()),
        StructField("reason", StringType()),
        StructField("lifetime_secs", DoubleType()),
        StructField("latency_secs", DoubleType()),
        StructField("options", StringType()),
        StructField("notice_id", StringType()),
        StructField("failures", IntegerType()),
        StructField("error", StringType()),
    ]
)

# Partition columns: `date` stays the string 'YYYY-MM-DD' of the directory
# name (not a DateType), `hour` is 0-23.
PARTITION_COLUMNS = StructType(
    [StructField("date", StringType()), StructField("hour", IntegerType())]
)

# What Spark is told it reads: the file columns, then the partition columns.
LOG_SCHEMA = StructType(RECORD_COLUMNS.fields + PARTITION_COLUMNS.fields)

# The columns the transforms use; extract reads only these (Parquet is
# columnar: the options JSON and the dead-letter texts are never loaded).
USED_COLUMNS = (
    "v",
    "kind",
    "time",
    "shard",
    "realm_id",
    "user_id",
    "queue_id",
    "client",
    "event_type",
    "enqueued_at",
    "published_at",
    "response_bytes",
    "queue_depth",
    "outcome",
    "code",
    "reason",
    "lifetime_secs",
    "date",
    "hour",
)
