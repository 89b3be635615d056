"""Delivery logs in the v1 format of docs/delivery-log.md's column table, written with pyarrow.

Independent of both the server's writer and analytics.schema on purpose: the
columns and Parquet types below are copied from that table, so a test
that reads these files with the jobs checks the jobs against the documented format.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SPEC_COLUMNS = pa.schema(
    [
        ("v", pa.int32()),
        ("kind", pa.string()),
        ("time", pa.float64()),
        ("shard", pa.string()),
        ("realm_id", pa.int64()),
        ("user_id", pa.int64()),
        ("queue_id", pa.string()),
        ("client", pa.string()),
        ("event_id", pa.int64()),
        ("event_type", pa.string()),
        ("enqueued_at", pa.float64()),
        ("published_at", pa.float64()),
        ("response_bytes", pa.int64()),
        ("batch_events", pa.int32()),
        ("queue_depth", pa.int32()),
        ("outcome", pa.string()),
        ("code", pa.string()),
        ("waited_secs", pa.float64()),
        ("reason", pa.string()),
        ("lifetime_secs", pa.float64()),
        ("latency_secs", pa.float64()),
        ("options", pa.string()),
        ("notice_id", pa.string()),
        ("failures", pa.int32()),
        ("error", pa.string()),
    ]
)


def at(date: str, hour: int, seconds: float = 0.0) -> float:
    """Epoch seconds of `date` (YYYY-MM-DD) `hour`:00 UTC plus `seconds`."""
    start = dt.datetime.fromisoformat(date).replace(hour=hour, tzinfo=dt.UTC)
    return start.timestamp() + seconds


def write_partition(
    logs: Path, date: str, hour: int, rows: list[dict[str, Any]], name: str = "default-0"
) -> Path:
    """Write `rows` (missing columns null, v defaults to 1) as one compacted file."""
    directory = logs / "deliveries" / f"date={date}" / f"hour={hour:02d}"
    directory.mkdir(parents=True, exist_ok=True)
    full = [{"v": 1} | row for row in rows]
    table = pa.Table.from_pylist(
        [{c: row.get(c) for c in SPEC_COLUMNS.names} for row in full], schema=SPEC_COLUMNS
    )
    path = directory / f"{name}.parquet"
    pq.write_table(table, path, compression="zstd")
    return path


def delivery(t: float, latency: float, **fields: Any) -> dict[str, Any]:
    """A delivery record at `t`, enqueued `latency` s before (published 1 ms before that)."""
    return {
        "kind": "delivery",
        "time": t,
        "shard": "default",
        "realm_id": 1,
        "user_id": 10,
        "queue_id": "q1",
        "client": "website",
        "event_id": 0,
        "event_type": "message",
        "enqueued_at": t - latency,
        "published_at": t - latency - 0.001,
        "response_bytes": 200,
        "batch_events": 1,
        "queue_depth": 1,
    } | fields


def poll(t: float, outcome: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "poll",
        "time": t,
        "shard": "default",
        "realm_id": 1,
        "user_id": 10,
        "queue_id": "q1",
        "client": "website",
        "response_bytes": 100,
        "batch_events": 0,
        "queue_depth": 0,
        "outcome": outcome,
        "waited_secs": 1.0,
    } | fields


def register(t: float, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "register",
        "time": t,
        "shard": "default",
        "realm_id": 1,
        "user_id": 10,
        "queue_id": "q1",
        "client": "website",
        "latency_secs": 0.05,
        "options": "{}",
    } | fields


def end(t: float, reason: str, lifetime: float, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "end",
        "time": t,
        "shard": "default",
        "realm_id": 1,
        "user_id": 10,
        "queue_id": "q1",
        "client": "website",
        "queue_depth": 0,
        "reason": reason,
        "lifetime_secs": lifetime,
    } | fields


def notification(t: float, via: str, kinds: str, **fields: Any) -> dict[str, Any]:
    """A notification enqueued for user 10, found away by `via` ("delivery",
    "gc"), of `kinds` ("email,push", ...): the table's columns of a
    notification record."""
    return {
        "kind": "notification",
        "time": t,
        "shard": "default",
        "realm_id": 1,
        "user_id": 10,
        "event_id": 4000,
        "outcome": kinds,
        "reason": via,
    } | fields
