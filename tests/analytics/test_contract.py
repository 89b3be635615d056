"""The delivery-log contract: what the server's writer puts on disk is what the
jobs' reader gets back, column for column, value for value, type for type.

The format crosses the server/analytics boundary here and nowhere else: the
analytics package never imports the server (tests/test_layout.py), so this
test is the only place where both sides' statements of the v1 format
(`server.observability.logfiles.COLUMNS`, `analytics.schema.RECORD_COLUMNS`) meet. Records
of every kind are written through the observer hooks of
`server.observability.deliverylog.DeliveryLog`, compacted into Parquet by its `stop()`,
listed with `analytics.extract.list_partitions` and read with
`analytics.extract.read_records` (one Spark read).
"""

from __future__ import annotations

import asyncio
import calendar
import datetime as dt
import json
import typing
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DataType, DoubleType, IntegerType, LongType, StringType

from analytics import extract, schema
from analytics.extract import Hour
from queues.registry import EndReason
from server.errors import bad_queue_id
from server.notifications.away import KIND_BITS
from server.observability import logfiles
from server.observability.deliverylog import DeliveryLog
from server.observability.observe import make_origin
from tests.logrecords import payload, push, queue_client

SHARD = "contract-1"
# Three hours across a date change: 2026-11-23 22h and 23h, 2026-11-24 00h (UTC).
H22 = calendar.timegm((2026, 11, 23, 22, 59, 59)) + 0.25
H23 = calendar.timegm((2026, 11, 23, 23, 30, 0)) + 0.125
H00 = calendar.timegm((2026, 11, 24, 0, 0, 1)) + 0.5

# The Parquet (Arrow) type of the server's table -> the Spark type the jobs declare.
SPARK_TYPE = {
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    pa.float64(): DoubleType(),
    pa.string(): StringType(),
}
# The Python value a collected Spark row holds for each Spark type.
PYTHON_TYPE: dict[DataType, type] = {
    IntegerType(): int, LongType(): int, DoubleType(): float, StringType(): str
}  # fmt: skip


def test_the_jobs_declare_the_servers_columns():
    server = logfiles.schema()
    jobs = schema.RECORD_COLUMNS
    assert [field.name for field in jobs.fields] == server.names
    assert [field.name for field in jobs.fields] == list(logfiles.NAMES)
    for arrow_field, spark_field in zip(server, jobs.fields, strict=True):
        assert SPARK_TYPE[arrow_field.type] == spark_field.dataType, arrow_field.name
        assert spark_field.nullable == arrow_field.nullable, arrow_field.name
    # What Spark is told it reads: the record columns, then the partition columns.
    assert schema.LOG_SCHEMA.fieldNames() == [*server.names, "date", "hour"]
    assert schema.LOG_SCHEMA["date"].dataType == StringType()
    assert schema.LOG_SCHEMA["hour"].dataType == IntegerType()
    # The version the server writes is one the jobs accept.
    assert schema.MIN_VERSION <= logfiles.FORMAT_VERSION <= schema.MAX_VERSION
    # The values the jobs group by are the server's.
    assert set(schema.END_REASONS) == set(typing.get_args(EndReason))
    assert bad_queue_id("q").code == schema.BAD_EVENT_QUEUE_ID
    assert tuple(KIND_BITS) == schema.NOTIFICATION_KINDS


def write_every_kind(log_dir: Path) -> list[dict[str, Any]]:
    """Drive the server's writer through every hook; returns the rows the jobs
    must read back (every column, partition columns included), in time order."""
    log = DeliveryLog(log_dir, SHARD, flush_secs=0.01, retention_days=0)
    log.start()
    mobile = queue_client(
        "q-mobile", 7, 3,
        event_types=frozenset({"message", "typing"}),
        narrow=(("stream", "Verona"),),
        apply_markdown=True,
        client_gravatar=True,
        capabilities=frozenset({"bulk_message_deletion"}),
        lifespan_secs=300.0,
        client_name="ZulipMobile",
    )  # fmt: skip
    web = queue_client("q-web", 8, 3, all_public_streams=True, client_name="website")
    reasons: tuple[EndReason, ...] = typing.get_args(EndReason)
    ended = {
        reason: queue_client(f"q-{reason}", 9, 4, client_name="ZulipPython") for reason in reasons
    }
    expected: list[dict[str, Any]] = []

    def row(kind: str, when: float, **fields: Any) -> None:
        moment = dt.datetime.fromtimestamp(when, dt.UTC)
        expected.append(
            dict.fromkeys(schema.LOG_SCHEMA.fieldNames())
            | {"v": 1, "kind": kind, "time": when, "shard": SHARD}
            | fields
            | {"date": moment.strftime("%Y-%m-%d"), "hour": moment.hour}
        )

    mobile_q = {"realm_id": 3, "user_id": 7, "queue_id": "q-mobile", "client": "ZulipMobile"}
    web_q = {"realm_id": 3, "user_id": 8, "queue_id": "q-web", "client": "website"}

    # Registers, with their options (22h).
    log.registered(mobile, 0.25, H22)
    row("register", H22, **mobile_q, latency_secs=0.25, options=mobile.options.to_dict())
    log.registered(web, 0.0625, H22 + 0.5)
    row("register", H22 + 0.5, **web_q, latency_secs=0.0625, options=web.options.to_dict())

    # A response of three events and a heartbeat: deliveries with both stamps,
    # with the enqueue stamp only, with none (a restored event); the heartbeat
    # is no delivery and does not count in batch_events.
    items = push(
        mobile,
        payload("message", make_origin(H23 - 0.5, H23 - 0.75)),
        payload("typing", make_origin(H23 - 0.25)),
        payload("message"),
        payload("heartbeat"),
    )
    log.responded(mobile, items, 321, "events", 1.5, H23)
    for event_id, event_type, enqueued, published in (
        (0, "message", H23 - 0.5, H23 - 0.75),
        (1, "typing", H23 - 0.25, None),
        (2, "message", None, None),
    ):
        row(
            "delivery", H23, **mobile_q, event_id=event_id, event_type=event_type,
            enqueued_at=enqueued, published_at=published, response_bytes=321,
            batch_events=3, queue_depth=4,
        )  # fmt: skip
    row(
        "poll", H23, **mobile_q, response_bytes=321, batch_events=3, queue_depth=4,
        outcome="events", waited_secs=1.5,
    )  # fmt: skip

    # A heartbeat alone: a poll outcome, not a delivery.
    mobile.event_queue.prune(3)
    items = push(mobile, payload("heartbeat"))
    log.responded(mobile, items, 40, "heartbeat", 45.25, H23 + 1)
    row(
        "poll", H23 + 1, **mobile_q, response_bytes=40, batch_events=0, queue_depth=1,
        outcome="heartbeat", waited_secs=45.25,
    )  # fmt: skip
    mobile.event_queue.prune(4)

    # The other outcomes without events.
    for offset, outcome, size, waited in (
        (2, "displaced", 70, 3.5),
        (3, "empty", 52, 0.0),
        (4, "deleted", 52, 7.75),
    ):
        log.responded(web, [], size, outcome, waited, H23 + offset)
        row(
            "poll", H23 + offset, **web_q, response_bytes=size, batch_events=0, queue_depth=0,
            outcome=outcome, waited_secs=waited,
        )  # fmt: skip

    # Refused polls: an unknown queue, and a GET that named none.
    log.poll_failed(8, 3, "no-such-queue", "BAD_EVENT_QUEUE_ID", H23 + 5)
    log.poll_failed(8, 3, None, "BAD_REQUEST", H23 + 6)
    for offset, queue_id, code in ((5, "no-such-queue", "BAD_EVENT_QUEUE_ID"),
                                   (6, None, "BAD_REQUEST")):  # fmt: skip
        row(
            "poll", H23 + offset, realm_id=3, user_id=8, queue_id=queue_id, batch_events=0,
            outcome="error", code=code, waited_secs=0.0,
        )  # fmt: skip

    # A queue end of each reason, the last ones in the next day's first hour.
    for index, (reason, queue) in enumerate(ended.items()):
        depth = index * 3
        push(queue, *(payload("message") for _ in range(depth)))
        when = (H23 + 10 + index) if index < 3 else (H00 + index)
        lifetime = 100.5 + index
        log.queue_ended(queue, reason, lifetime, when)
        row(
            "end", when, realm_id=4, user_id=9, queue_id=f"q-{reason}", client="ZulipPython",
            queue_depth=depth, reason=reason, lifetime_secs=lifetime,
        )  # fmt: skip

    # Dead letters, with and without a notice id.
    log.notice_dead_lettered("notice-1", 4, "BadNotice: users is not a list", H00 + 10, 3)
    log.notice_dead_lettered(None, 4, 'KeyError: "é\n"', H00 + 11, None)
    row("dead_letter", H00 + 10, realm_id=3, notice_id="notice-1", failures=4,
        error="BadNotice: users is not a list")  # fmt: skip
    row("dead_letter", H00 + 11, failures=4, error='KeyError: "é\n"')

    # Notifications enqueued for users found away, by each path, of each kind.
    for offset, (user, realm, message, kinds, via) in enumerate(
        (
            (7, 3, 4001, ["email", "push"], "delivery"),
            (9, 4, 4002, ["push"], "gc"),
            (8, 3, 4003, ["email"], "delivery"),
        )
    ):
        log.notification_enqueued(user, realm, message, kinds, via, H00 + 12 + offset)
        row(
            "notification", H00 + 12 + offset, realm_id=realm, user_id=user, event_id=message,
            outcome=",".join(kinds), reason=via,
        )  # fmt: skip

    asyncio.run(log.stop())
    assert (log.written, log.dropped, log.pending) == (len(expected), 0, 0)
    assert list((log_dir / "spool").glob("date=*/hour=*/*")) == []  # all compacted
    return expected


def test_what_the_server_writes_the_jobs_read(spark, tmp_path):
    logs = tmp_path / "logs"
    expected = write_every_kind(logs)

    partitions = extract.list_partitions(logs)
    assert list(partitions) == [
        Hour("2026-11-23", 22),
        Hour("2026-11-23", 23),
        Hour("2026-11-24", 0),
    ]
    for files in partitions.values():
        [(name, size)] = files.items()  # one compacted file per shard and hour
        assert name.startswith(f"{SHARD}-")
        assert name.endswith(".parquet")
        assert size > 0

    # The jobs' projection keeps USED_COLUMNS, each with the declared type.
    projected = extract.read_records(spark, logs, partitions)
    assert projected.columns == list(schema.USED_COLUMNS)
    for field in projected.schema.fields:
        assert field.dataType == schema.LOG_SCHEMA[field.name].dataType, field.name

    # The same read with every column kept: each value the server wrote, back.
    frame = extract.read_records(spark, logs, partitions, schema.LOG_SCHEMA.fieldNames())
    assert frame.schema.fieldNames() == schema.LOG_SCHEMA.fieldNames()
    for field in frame.schema.fields:
        assert field.dataType == schema.LOG_SCHEMA[field.name].dataType, field.name
    got = [row.asDict() for row in frame.collect()]
    got.sort(key=lambda r: (r["time"], r["kind"] == "poll", r["event_id"] or 0))

    for row in got:
        for field in frame.schema.fields:
            value = row[field.name]
            if value is not None:
                assert type(value) is PYTHON_TYPE[field.dataType], (field.name, value)
        if row["options"] is not None:  # compact JSON, compared as what it encodes
            decoded = json.loads(row["options"])
            assert row["options"] == json.dumps(decoded, separators=(",", ":"))
            row["options"] = decoded
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        assert row == want, row
    # Every kind, outcome, end reason, notification path and kind written is
    # one the jobs know.
    assert {row["kind"] for row in got} == {
        schema.DELIVERY, schema.POLL, schema.REGISTER, schema.END, schema.DEAD_LETTER,
        schema.NOTIFICATION,
    }  # fmt: skip
    of = {kind: [row for row in got if row["kind"] == kind] for kind in {r["kind"] for r in got}}
    assert {row["outcome"] for row in of[schema.POLL]} == set(schema.OUTCOMES)
    assert {row["reason"] for row in of[schema.END]} == set(schema.END_REASONS)
    assert {row["reason"] for row in of[schema.NOTIFICATION]} == set(schema.NOTIFICATION_PATHS)
    assert {kind for row in of[schema.NOTIFICATION] for kind in row["outcome"].split(",")} == set(
        schema.NOTIFICATION_KINDS
    )
    assert {row["outcome"] for row in got} - {None} == {
        *schema.OUTCOMES, "email,push", "push", "email"
    }  # fmt: skip
    assert {row["reason"] for row in got} - {None} == {
        *schema.END_REASONS,
        *schema.NOTIFICATION_PATHS,
    }
    # Every column is filled by some record: none is silently lost on the way.
    for name in schema.LOG_SCHEMA.fieldNames():
        assert any(row[name] is not None for row in got), name
