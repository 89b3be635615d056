"""Each transform on a tiny hand-built frame, against rows computed by hand.

The transforms are the per-table Spark ones the job used until its one-pass
rewrite, kept in tests/analytics/reference.py as the specification the
driver-built tables are checked against (test_tables.py)."""

from __future__ import annotations

from pyspark.testing import assertDataFrameEqual

from analytics import histogram
from tests.analytics import reference as transforms
from tests.analytics.frames import DATE, records

HIST = (
    "date string, hour int, measure string, dimension string, key string, bucket int, "
    "count long, sum_micro long, max_value double"
)
ZERO = histogram.ZERO_BUCKET


def test_histograms_bucket_each_measure_by_each_dimension(spark):
    # Latencies: 0.2 s -> bucket ceil(50 * log10 0.2) = ceil(-34.9) = -34;
    # 1.0 s -> 0; 2.0 s -> ceil(15.05) = 16; depth 3 -> ceil(23.86) = 24;
    # depth 0 -> the zero bucket; lifetime 600 s -> ceil(138.9) = 139.
    frame = records(
        spark,
        [
            {"kind": "delivery", "time": 100.0, "enqueued_at": 99.8, "queue_depth": 0,
             "event_type": "message", "client": "website"},
            {"kind": "delivery", "time": 100.0, "enqueued_at": 99.0, "published_at": 98.0,
             "queue_depth": 3, "event_type": "typing", "client": "website"},
            {"kind": "end", "time": 100.0, "reason": "expired", "lifetime_secs": 600.0,
             "client": "website"},
            {"kind": "poll", "time": 100.0, "outcome": "heartbeat", "queue_depth": 9},
        ],
    )  # fmt: skip
    fast = (-34, 1, 200_000, 100.0 - 99.8)
    slow = (0, 1, 1_000_000, 1.0)
    empty = (ZERO, 1, 0, 0.0)
    deep = (24, 1, 3_000_000, 3.0)
    rows = []
    for dimension, first, second in (
        ("all", "all", "all"),
        ("event_type", "message", "typing"),
        ("client", "website", "website"),
        ("shard", "s1", "s1"),
    ):
        rows += [
            ("enqueued_latency", dimension, first, *fast),
            ("enqueued_latency", dimension, second, *slow),
            ("published_latency", dimension, second, 16, 1, 2_000_000, 2.0),
            ("queue_depth", dimension, first, *empty),
            ("queue_depth", dimension, second, *deep),
        ]
    # By realm: the enqueued latency only (both deliveries are realm 1's).
    rows += [("enqueued_latency", "realm", "1", *fast), ("enqueued_latency", "realm", "1", *slow)]
    rows += [
        ("queue_lifetime", dimension, key, 139, 1, 600_000_000, 600.0)
        for dimension, key in (("all", "all"), ("reason", "expired"), ("client", "website"))
    ]
    expected = spark.createDataFrame([(DATE, 3, *r) for r in rows], HIST)
    assertDataFrameEqual(transforms.histograms(frame), expected)


def test_distributions_take_nearest_rank_bucket_upper_bounds(spark):
    hist = spark.createDataFrame(
        [
            # 100 values: ranks 50, 95, 99 fall in buckets 0, 10, 20
            ("m", "all", "all", 0, 50, 100_000_000, 1.0),
            ("m", "all", "all", 10, 45, 45_000_000, 1.5),
            ("m", "all", "all", 20, 4, 4_000_000, 2.5),
            ("m", "all", "all", 30, 1, 1_000_000, 20.0),
            # 4 values, 3 of them <= 0: p50 is 0, p95 and p99 the 4th
            ("m", "client", "b", ZERO, 3, 0, 0.0),
            ("m", "client", "b", 50, 1, 10_000_000, 10.0),
        ],
        "measure string, dimension string, key string, bucket int, count long, "
        "sum_micro long, max_value double",
    )
    expected = spark.createDataFrame(
        [
            ("m", "all", "all", 100, 1.5, 20.0, 1.0, 10**0.2, 10**0.4),
            ("m", "client", "b", 4, 2.5, 10.0, 0.0, 10.0, 10.0),
        ],
        "measure string, dimension string, key string, count long, mean double, max double, "
        "p50 double, p95 double, p99 double",
    )
    assertDataFrameEqual(transforms.distributions(hist), expected)


def test_merge_histograms_adds_counts_over_hours(spark):
    hourly = spark.createDataFrame(
        [
            (DATE, 3, "m", "all", "all", 5, 2, 7, 3.0),
            (DATE, 4, "m", "all", "all", 5, 1, 4, 3.5),
            (DATE, 4, "m", "all", "all", 6, 1, 4, 3.9),
        ],
        HIST,
    )
    expected = spark.createDataFrame(
        [("m", "all", "all", 5, 3, 11, 3.5), ("m", "all", "all", 6, 1, 4, 3.9)],
        "measure string, dimension string, key string, bucket int, count long, "
        "sum_micro long, max_value double",
    )
    assertDataFrameEqual(transforms.merge_histograms(hourly), expected)


def test_volumes_count_deliveries_by_type_realm_and_client(spark):
    frame = records(
        spark,
        [
            {"kind": "delivery", "realm_id": 1, "event_type": "message", "client": "website"},
            {"kind": "delivery", "realm_id": 1, "event_type": "typing", "client": "website"},
            {"kind": "delivery", "realm_id": 2, "event_type": "message", "client": "ios"},
            {"kind": "poll", "realm_id": 3, "client": "ios", "outcome": "heartbeat"},
        ],
    )
    rows = [
        ("event_type", "message", 2),
        ("event_type", "typing", 1),
        ("realm", "1", 2),
        ("realm", "2", 1),
        ("client", "website", 2),
        ("client", "ios", 1),
    ]
    expected = spark.createDataFrame(
        [(DATE, 3, *r) for r in rows],
        "date string, hour int, dimension string, key string, deliveries long",
    )
    result = transforms.volumes(frame)
    assertDataFrameEqual(result, expected)
    merged = transforms.merge_volumes(
        result.unionByName(result.withColumn("hour", result.hour + 1))
    )
    assertDataFrameEqual(
        merged,
        spark.createDataFrame(
            [(d, k, 2 * n) for d, k, n in rows], "dimension string, key string, deliveries long"
        ),
    )


def test_user_activity_counts_per_user_and_hour(spark):
    frame = records(
        spark,
        [
            {"kind": "delivery", "user_id": 10},
            {"kind": "delivery", "user_id": 10},
            {"kind": "poll", "user_id": 10, "outcome": "events"},
            {"kind": "register", "user_id": 11},
            {"kind": "end", "user_id": 10, "reason": "expired"},
        ],
    )
    expected = spark.createDataFrame(
        [(DATE, 3, 1, 10, 2, 1, 0), (DATE, 3, 1, 11, 0, 0, 1)],
        "date string, hour int, realm_id long, user_id long, deliveries long, polls long, "
        "registers long",
    )
    assertDataFrameEqual(transforms.user_activity(frame), expected)


def test_queue_activity_keeps_the_deepest_backlog(spark):
    frame = records(
        spark,
        [
            {"kind": "delivery", "queue_id": "q1", "client": "website", "queue_depth": 2},
            {"kind": "delivery", "queue_id": "q1", "client": "website", "queue_depth": 5},
            {"kind": "poll", "queue_id": "q1", "client": "website", "queue_depth": 0},
            {"kind": "poll", "queue_id": None, "outcome": "error", "queue_depth": 50},
            # a refused poll names any id: no queue of its own, no poll counted
            {"kind": "poll", "queue_id": "q1", "outcome": "error", "code": "BAD_REQUEST"},
            {"kind": "poll", "queue_id": "gone", "outcome": "error", "code": "BAD_EVENT_QUEUE_ID"},
            {"kind": "delivery", "queue_id": "q2", "user_id": 11, "queue_depth": 1},
            # the backlog a queue ended with counts (an overflow: the client stopped reading)
            {"kind": "end", "queue_id": "q3", "client": "ZulipMobile", "queue_depth": 7},
        ],
    )
    expected = spark.createDataFrame(
        [
            (DATE, 3, "q1", 1, 10, "website", 2, 1, 5),
            (DATE, 3, "q2", 1, 11, "(none)", 1, 0, 1),
            (DATE, 3, "q3", 1, 10, "ZulipMobile", 0, 0, 7),
        ],
        "date string, hour int, queue_id string, realm_id long, user_id long, client string, "
        "deliveries long, polls long, max_depth int",
    )
    assertDataFrameEqual(transforms.queue_activity(frame), expected)


def test_busiest_ranks_by_deliveries_then_polls_then_key(spark):
    activity = spark.createDataFrame(
        [(1, 10, 5, 1, 0), (1, 11, 5, 2, 0), (2, 20, 9, 0, 0), (1, 12, 5, 2, 0)],
        "realm_id long, user_id long, deliveries long, polls long, registers long",
    )
    expected = spark.createDataFrame(
        [(1, 2, 20, 9, 0, 0), (2, 1, 11, 5, 2, 0), (3, 1, 12, 5, 2, 0)],
        "rank int, realm_id long, user_id long, deliveries long, polls long, registers long",
    )
    assertDataFrameEqual(transforms.busiest(activity, ["realm_id", "user_id"], 3), expected)


def test_busiest_ranks_within_each_hour(spark):
    activity = spark.createDataFrame(
        [(DATE, 3, "a", 1, 0), (DATE, 3, "b", 2, 0), (DATE, 4, "a", 7, 0)],
        "date string, hour int, queue_id string, deliveries long, polls long",
    )
    expected = spark.createDataFrame(
        [(DATE, 3, 1, "b", 2, 0), (DATE, 4, 1, "a", 7, 0)],
        "date string, hour int, rank int, queue_id string, deliveries long, polls long",
    )
    assertDataFrameEqual(transforms.busiest(activity, ["queue_id"], 1), expected)


POLLS = (
    "polls long, events long, heartbeat long, displaced long, empty long, deleted long, "
    "error long, bad_event_queue_id long, events_share double, heartbeat_share double, "
    "displaced_share double, empty_share double, deleted_share double, error_share double, "
    "bad_event_queue_id_rate double"
)


def test_poll_outcomes_shares_and_bad_queue_id_rate(spark):
    frame = records(
        spark,
        [
            *({"kind": "poll", "outcome": "heartbeat"} for _ in range(3)),
            {"kind": "poll", "outcome": "events"},
            {"kind": "poll", "outcome": "error", "code": "BAD_EVENT_QUEUE_ID"},
            {"kind": "poll", "outcome": "error", "code": "BAD_REQUEST"},
            {"kind": "delivery", "outcome": None},
        ],
    )
    row = (6, 1, 3, 0, 0, 0, 2, 1, 1 / 6, 3 / 6, 0.0, 0.0, 0.0, 2 / 6, 1 / 6)
    expected = spark.createDataFrame([(DATE, 3, *row)], f"date string, hour int, {POLLS}")
    hourly = transforms.poll_outcomes(frame)
    assertDataFrameEqual(hourly, expected)
    two_hours = hourly.unionByName(hourly.withColumn("hour", hourly.hour + 1))
    doubled = (12, 2, 6, 0, 0, 0, 4, 2, *row[8:])
    assertDataFrameEqual(
        transforms.merge_poll_outcomes(two_hours), spark.createDataFrame([doubled], POLLS)
    )


def test_queue_lifecycle_counts_ends_by_reason_and_lost_events(spark):
    frame = records(
        spark,
        [
            {"kind": "register"},
            {"kind": "register"},
            {"kind": "end", "reason": "expired", "queue_depth": 3, "lifetime_secs": 600.0},
            {"kind": "end", "reason": "overflow", "queue_depth": 10, "lifetime_secs": 5.0},
            {"kind": "end", "reason": "unheard-of", "queue_depth": 1, "lifetime_secs": 1.0},
            {"kind": "dead_letter"},
        ],
    )
    expected = spark.createDataFrame(
        [(DATE, 3, 2, 3, 1, 0, 1, 0, 0, 0, 14, 1)],
        "date string, hour int, registers long, ended long, expired long, deleted long, "
        "overflow long, evicted long, deactivated long, role_changed long, events_unacked long, "
        "dead_letters long",
    )
    hourly = transforms.queue_lifecycle(frame)
    assertDataFrameEqual(hourly, expected)
    assertDataFrameEqual(
        transforms.merge_queue_lifecycle(hourly.unionByName(hourly)),
        spark.createDataFrame(
            [(4, 6, 2, 0, 2, 0, 0, 0, 28, 2)],
            "registers long, ended long, expired long, deleted long, overflow long, "
            "evicted long, deactivated long, role_changed long, events_unacked long, "
            "dead_letters long",
        ),
    )


def test_notifications_count_by_path_and_kind(spark):
    frame = records(
        spark,
        [
            {"kind": "notification", "reason": "delivery", "outcome": "email,push"},
            {"kind": "notification", "reason": "delivery", "outcome": "push"},
            {"kind": "notification", "reason": "gc", "outcome": "email"},
            {"kind": "notification", "reason": None, "outcome": None},
            {"kind": "end", "reason": "expired"},
        ],
    )
    columns = "enqueued long, delivery long, gc long, email long, push long"
    hourly = transforms.notifications(frame)
    assertDataFrameEqual(
        hourly,
        spark.createDataFrame([(DATE, 3, 4, 2, 1, 2, 2)], f"date string, hour int, {columns}"),
    )
    assertDataFrameEqual(
        transforms.merge_notifications(hourly.unionByName(hourly)),
        spark.createDataFrame([(8, 4, 2, 4, 4)], columns),
    )


def test_shard_load_counts_response_bytes_once_per_poll(spark):
    frame = records(
        spark,
        [
            {"kind": "delivery", "shard": "s1", "response_bytes": 500},
            {"kind": "poll", "shard": "s1", "outcome": "events", "response_bytes": 100},
            {"kind": "poll", "shard": "s1", "outcome": "heartbeat", "response_bytes": 50},
            {"kind": "register", "shard": "s1"},
            {"kind": "delivery", "shard": "s2", "response_bytes": 80},
            {"kind": "delivery", "shard": "s2", "response_bytes": 80},
            {"kind": "dead_letter", "shard": "s2"},
        ],
    )
    expected = spark.createDataFrame(
        [(DATE, 3, "s1", 4, 1, 2, 150, 1), (DATE, 3, "s2", 3, 2, 0, 0, 0)],
        "date string, hour int, shard string, records long, deliveries long, polls long, "
        "response_bytes long, registers long",
    )
    load = transforms.shard_load(frame)
    assertDataFrameEqual(load, expected)
    assertDataFrameEqual(
        transforms.shard_imbalance(load),
        spark.createDataFrame(
            [(DATE, 3, 2, 3, 2, 1.5, 2 / 1.5, "s2")],
            "date string, hour int, shards int, deliveries long, max_deliveries long, "
            "mean_deliveries double, imbalance double, busiest_shard string",
        ),
    )


def test_shard_imbalance_breaks_ties_by_shard_name(spark):
    load = spark.createDataFrame(
        [("s2", 4, 2, 2, 0, 0), ("s1", 4, 2, 2, 0, 0), ("s3", 0, 0, 0, 0, 0)],
        "shard string, records long, deliveries long, polls long, response_bytes long, "
        "registers long",
    )
    expected = spark.createDataFrame(
        [(3, 4, 2, 4 / 3, 1.5, "s1")],
        "shards int, deliveries long, max_deliveries long, mean_deliveries double, "
        "imbalance double, busiest_shard string",
    )
    assertDataFrameEqual(transforms.shard_imbalance(load), expected)


def test_realm_load_counts_deliveries_dead_letters_and_ends_per_realm(spark):
    frame = records(
        spark,
        [
            {"kind": "delivery", "realm_id": 1},
            {"kind": "end", "realm_id": 1, "reason": "expired", "queue_depth": 2},
            {"kind": "end", "realm_id": 1, "reason": "unheard-of", "queue_depth": 1},
            {"kind": "dead_letter", "realm_id": 2},
            {"kind": "dead_letter", "realm_id": None},
            {"kind": "register", "realm_id": 3},
        ],
    )
    columns = ", ".join(f"{c} long" for c in transforms.REALM_COUNTS)
    zeros = (0,) * 6  # the six end reasons
    expected = spark.createDataFrame(
        [
            (DATE, 3, None, 0, 1, 0, *zeros, 0),
            (DATE, 3, 1, 1, 0, 2, 1, *zeros[1:], 3),
            (DATE, 3, 2, 0, 1, 0, *zeros, 0),
        ],
        f"date string, hour int, realm_id long, {columns}",
    )
    assertDataFrameEqual(transforms.realm_load(frame), expected)
