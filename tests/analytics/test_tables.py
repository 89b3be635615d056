"""The tables the job builds on the driver (analytics.tables) from its one
pre-aggregate (analytics.transforms.preaggregate): hand-computed cases, and
the same tables as the per-table Spark transforms of tests/analytics/reference.py
(the job before its one-pass rewrite), row for row and bit for bit, over
varied records."""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from analytics import histogram, schema, tables, transforms
from tests.analytics import reference
from tests.analytics.frames import DATE, records

NEXT_DATE = "2026-11-21"


def varied_rows(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """Records of every kind over four hours across a date change, with the
    corner cases the tables must agree on: null keys, a client literally
    named "(none)", unknown kinds, outcomes and reasons, refused polls with
    and without a queue id, negative and zero values (the zero bucket),
    missing stamps and depths, notifications of unknown or missing paths and
    kinds."""
    rng = random.Random(seed)
    hours = [(DATE, 3), (DATE, 4), (DATE, 23), (NEXT_DATE, 0)]
    rows = []
    for _ in range(count):
        date, hour = rng.choice(hours)
        kind = rng.choices(
            ["delivery", "poll", "register", "end", "dead_letter", "notification", "mystery"],
            [60, 25, 5, 5, 3, 4, 2],
        )[0]
        user = rng.randint(10, 15)
        t = 1_000_000.0 + rng.random() * 3600
        row: dict[str, Any] = {
            "date": date,
            "hour": hour,
            "kind": kind,
            "time": t,
            "shard": rng.choice(["s1", "s2", "s2", None]),
            "realm_id": rng.choice([1, 2, 3, 3, None]),
            "user_id": user,
            "queue_id": f"q{user}-{rng.randint(0, 1)}",
            "client": rng.choice(["website", "website", "ZulipMobile", None, "(none)"]),
        }
        if kind == "delivery":
            latency = rng.choice([rng.lognormvariate(-5, 1.5), 0.0, -0.002, None])
            row |= {
                "event_type": rng.choice(["message", "message", "typing", None]),
                "enqueued_at": None if latency is None else t - latency,
                "published_at": rng.choice([None, t - abs(latency or 0.0) - 0.001]),
                "response_bytes": rng.choice([200, 800, None]),
                "queue_depth": rng.choice([0, 1, 2, 5, 40, None]),
            }
        elif kind == "poll":
            outcome = rng.choice([*schema.OUTCOMES, "error", "weird", None])
            refused = outcome == "error"
            row |= {
                "outcome": outcome,
                "code": rng.choice([schema.BAD_EVENT_QUEUE_ID, "BAD_REQUEST", None])
                if refused
                else None,
                "queue_id": rng.choice([row["queue_id"], "gone", None])
                if refused
                else row["queue_id"],
                "client": None if refused else row["client"],
                "response_bytes": None if refused else rng.randint(40, 900),
                "queue_depth": None if refused else rng.randint(0, 3),
            }
        elif kind == "end":
            row |= {
                "reason": rng.choice([*schema.END_REASONS, "unheard-of", None]),
                "lifetime_secs": rng.choice([rng.lognormvariate(6, 2), 0.0, None]),
                "queue_depth": rng.choice([0, 3, 7, None]),
            }
        elif kind == "dead_letter":
            # The realm its notice named, if it could be read.
            row |= {"realm_id": rng.choice([2, None]), "user_id": None, "queue_id": None}
            row |= {"client": None}
        elif kind == "notification":
            row |= {
                "queue_id": None,
                "client": None,
                "reason": rng.choice(["delivery", "delivery", "gc", "elsewhere", None]),
                "outcome": rng.choice(
                    ["email,push", "email", "push", "email,email", "fax,push", "", None]
                ),
            }
        rows.append(row)
    return rows


def ordered(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """Rows sorted as Spark sorts ascending: nulls first."""
    return sorted(rows, key=lambda r: [(r[k] is not None, r[k]) for k in keys])


def spark_rows(frame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def same_rows(built: Any, expected: list[dict[str, Any]]) -> None:
    """`built` (a pyarrow table) holds exactly `expected`, in the stored
    order, every double bit for bit (== on floats, NaN aside: there is none)."""
    got = built.to_pylist()
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        assert mine == theirs, (mine, theirs)
        for name, value in mine.items():
            if isinstance(value, float):
                assert math.copysign(1.0, value) == math.copysign(1.0, theirs[name]), name


HOURLY_REFERENCE = {
    "histograms": reference.histograms,
    "volumes": reference.volumes,
    "user_activity": reference.user_activity,
    "queue_activity": reference.queue_activity,
    "poll_outcomes": reference.poll_outcomes,
    "queue_lifecycle": reference.queue_lifecycle,
    "notifications": reference.notifications,
    "shard_load": reference.shard_load,
    "coverage": reference.coverage,
    "realm_load": reference.realm_load,
}
MERGE_REFERENCE = {
    "histograms": reference.merge_histograms,
    "volumes": reference.merge_volumes,
    "user_activity": reference.merge_user_activity,
    "queue_activity": reference.merge_queue_activity,
    "poll_outcomes": reference.merge_poll_outcomes,
    "queue_lifecycle": reference.merge_queue_lifecycle,
    "notifications": reference.merge_notifications,
    "shard_load": reference.merge_shard_load,
    "coverage": reference.merge_coverage,
    "realm_load": reference.merge_realm_load,
}
TOP = 3
DERIVED_REFERENCE = {
    "latency": reference.distributions,
    "busiest_users": lambda frame: reference.busiest(frame, ["realm_id", "user_id"], TOP),
    "busiest_queues": lambda frame: reference.busiest(frame, reference.QUEUE_KEYS, TOP),
    "shard_imbalance": reference.shard_imbalance,
    "top_realms": lambda frame: reference.busiest(
        frame, ["realm_id"], TOP, ("deliveries", "dead_letters")
    ),
}


def test_driver_tables_are_the_per_table_spark_ones(spark):
    frame = records(spark, varied_rows(3000)).cache()
    pieces = transforms.preaggregate(frame).toArrow()
    bound = histogram.upper_bounds(spark)
    hour = list(tables.HOUR)
    for name, hourly in HOURLY_REFERENCE.items():
        expected_hourly = spark_rows(hourly(frame))
        built = tables.BASE[name](pieces)
        assert built.num_rows >= 4, name  # every hour has some
        same_rows(built, ordered(expected_hourly, [*hour, *tables.SHAPES[name].order]))

        merged_expected = spark_rows(MERGE_REFERENCE[name](hourly(frame)))
        merged = tables.merge(name, built)
        same_rows(merged, ordered(merged_expected, tables.SHAPES[name].order))

        for derived_name, derived in tables.DERIVED.items():
            if derived.source != name:
                continue
            build = DERIVED_REFERENCE[derived_name]
            order = tables.SHAPES[derived_name].order
            same_rows(
                derived.derive(built, TOP, bound),
                ordered(spark_rows(build(hourly(frame))), [*hour, *order]),
            )
            same_rows(
                derived.derive(merged, TOP, bound),
                ordered(spark_rows(build(MERGE_REFERENCE[name](hourly(frame)))), order),
            )
    frame.unpersist()


def test_upper_bounds_are_sparks_pow_bit_for_bit(spark):
    # Python's ** differs from the JVM's StrictMath.pow in the last bit for
    # some of these (-850: 1e-17 against 9.999999999999999e-18).
    buckets = [histogram.ZERO_BUCKET, -16162, -850, -996, *range(-400, 400), 15413]
    frame = spark.createDataFrame([(b,) for b in buckets], "bucket int")
    expected = [r[0] for r in frame.select(reference.upper_bound(F.col("bucket"))).collect()]
    bound = histogram.upper_bounds(spark)
    assert [bound(b) for b in buckets] == expected


def test_the_pre_aggregates_string_literals_read_back_as_written(spark):
    texts = ["(none)", "it's", "back\\slash", "\\'", "naïve ✓", ""]
    query = " UNION ALL ".join(f"SELECT {transforms._literal(t)} AS t" for t in texts)
    assert [row.t for row in spark.sql(query).collect()] == texts


def test_the_pre_aggregate_has_the_declared_columns_of_an_empty_log(spark):
    empty = spark.createDataFrame([], schema.LOG_SCHEMA).select(*schema.USED_COLUMNS)
    pieces = transforms.preaggregate(empty).toArrow()
    assert pieces.num_rows == 0
    assert pieces.column_names == list(transforms.RESULT)


def pieces_of(spark, rows: list[dict[str, Any]]) -> Any:
    return transforms.preaggregate(records(spark, rows)).toArrow()


def test_histograms_fan_each_measure_out_by_its_dimensions(spark):
    # 0.2 s -> bucket -34, depth 3 -> 24, depth 0 -> the zero bucket,
    # lifetime 600 s -> 139 (test_transforms works them out).
    built = tables.histograms(
        pieces_of(
            spark,
            [
                {
                    "kind": "delivery",
                    "time": 100.0,
                    "enqueued_at": 99.8,
                    "queue_depth": 3,
                    "event_type": "message",
                    "client": None,
                },
                {
                    "kind": "end",
                    "time": 100.0,
                    "reason": "expired",
                    "lifetime_secs": 600.0,
                    "client": "website",
                },
                {
                    "kind": "delivery",
                    "time": 100.0,
                    "queue_depth": 0,
                    "event_type": "typing",
                    "client": "website",
                    "hour": 4,
                },
            ],
        )
    )  # fmt: skip
    zero = histogram.ZERO_BUCKET
    fast = (-34, 1, 200_000, 100.0 - 99.8)
    expected = [
        (3, "enqueued_latency", "all", "all", *fast),
        (3, "enqueued_latency", "client", "(none)", *fast),
        (3, "enqueued_latency", "event_type", "message", *fast),
        (3, "enqueued_latency", "realm", "1", *fast),  # of enqueued_latency only
        (3, "enqueued_latency", "shard", "s1", *fast),
        *((3, "queue_depth", d, k, 24, 1, 3_000_000, 3.0)
          for d, k in (("all", "all"), ("client", "(none)"), ("event_type", "message"),
                       ("shard", "s1"))),
        *((3, "queue_lifetime", d, k, 139, 1, 600_000_000, 600.0)
          for d, k in (("all", "all"), ("client", "website"), ("reason", "expired"))),
        *((4, "queue_depth", d, k, zero, 1, 0, 0.0)
          for d, k in (("all", "all"), ("client", "website"), ("event_type", "typing"),
                       ("shard", "s1"))),
    ]  # fmt: skip
    columns = ["hour", "measure", "dimension", "key", "bucket", "count", "sum_micro", "max_value"]
    assert [tuple(r[c] for c in columns) for r in built.to_pylist()] == expected
    assert built.schema == tables.SHAPES["histograms"].schema(tables.HOUR)


def test_busiest_ranks_restart_each_hour_and_keep_the_top(spark):
    activity = pa.Table.from_pylist(
        [
            {"date": DATE, "hour": 3, "realm_id": 1, "user_id": 10, "deliveries": 1, "polls": 0,
             "registers": 0},
            {"date": DATE, "hour": 3, "realm_id": 1, "user_id": 11, "deliveries": 5, "polls": 0,
             "registers": 1},
            {"date": DATE, "hour": 3, "realm_id": 1, "user_id": 12, "deliveries": 5, "polls": 2,
             "registers": 0},
            {"date": DATE, "hour": 4, "realm_id": 1, "user_id": 10, "deliveries": 9, "polls": 0,
             "registers": 0},
        ],
        schema=tables.SHAPES["user_activity"].schema(tables.HOUR),
    )  # fmt: skip
    top = tables.busiest(activity, tables.USER_KEYS, 2, "busiest_users")
    assert [(r["hour"], r["rank"], r["user_id"]) for r in top.to_pylist()] == [
        (3, 1, 12),
        (3, 2, 11),
        (4, 1, 10),
    ]
    overall = tables.busiest(tables.merge("user_activity", activity), tables.USER_KEYS, 5,
                             "busiest_users")  # fmt: skip
    assert [(r["rank"], r["user_id"], r["deliveries"]) for r in overall.to_pylist()] == [
        (1, 10, 10),
        (2, 12, 5),
        (3, 11, 5),
    ]


@pytest.mark.parametrize("name", ["poll_outcomes", "queue_lifecycle", "notifications"])
def test_a_merge_of_no_hours_is_one_row_of_nulls(name):
    # As Spark's global aggregation over no rows: the report shows "-".
    empty = tables.SHAPES[name].schema(tables.HOUR).empty_table()
    [row] = tables.merge(name, empty).to_pylist()
    assert set(row.values()) == {None}
    assert list(row) == [f.name for f in tables.SHAPES[name].fields]


def test_records_counts_every_record_once(spark):
    kinds = ("delivery", "poll", "register", "end", "dead_letter", "notification", "x")
    assert tables.records(pieces_of(spark, [{"kind": k} for k in kinds])) == 7


@pytest.mark.parametrize("fold_rows", [1, 50, 10**9])
def test_merging_stored_hours_a_few_at_a_time_gives_the_one_merge(spark, fold_rows):
    pieces = pieces_of(spark, varied_rows(800, seed=11))
    for name, build in tables.BASE.items():
        built = build(pieces)
        hours = sorted({(r["date"], r["hour"]) for r in built.select(tables.HOUR).to_pylist()})
        parts = [
            built.filter(
                pc.and_(pc.equal(built.column("date"), date), pc.equal(built.column("hour"), hour))
            ).drop_columns(tables.HOUR)
            for date, hour in hours
        ]
        assert len(parts) == 4, name
        expected = tables.merge(name, built).to_pylist()
        assert tables.merge_parts(name, parts, fold_rows).to_pylist() == expected, name
    for name in tables.BASE:
        assert (
            tables.merge_parts(name, []).to_pylist()
            == tables.merge(name, tables.SHAPES[name].schema(tables.HOUR).empty_table()).to_pylist()
        )


def test_notifications_count_per_hour_by_path_and_kind(spark):
    built = tables.notifications(
        pieces_of(
            spark,
            [
                {"kind": "notification", "reason": "delivery", "outcome": "email,push"},
                {"kind": "notification", "reason": "delivery", "outcome": "email"},
                {"kind": "notification", "reason": "gc", "outcome": "push"},
                {"kind": "notification", "reason": "gc", "outcome": "email,push", "hour": 4},
                # A path and a kind of a later version: counted as enqueued only.
                {"kind": "notification", "reason": "elsewhere", "outcome": "fax", "hour": 4},
                {"kind": "delivery", "reason": "gc", "outcome": "email"},
            ],
        )
    )
    columns = ["hour", *tables.NOTIFICATION_COUNTS]
    assert tables.NOTIFICATION_COUNTS == ["enqueued", "delivery", "gc", "email", "push"]
    assert [tuple(r[c] for c in columns) for r in built.to_pylist()] == [
        (3, 3, 2, 1, 2, 2),
        (4, 2, 0, 1, 1, 1),
    ]
    assert built.schema == tables.SHAPES["notifications"].schema(tables.HOUR)
    assert tables.merge("notifications", built).to_pylist() == [
        {"enqueued": 5, "delivery": 2, "gc": 2, "email": 3, "push": 3}
    ]


def test_realms_are_counted_and_ranked_by_deliveries_then_dead_letters(spark):
    def of(kind: str, realm_id: int | None, **fields: Any) -> dict[str, Any]:
        return {"kind": kind, "realm_id": realm_id, "time": 100.0, **fields}

    pieces = pieces_of(
        spark,
        [
            of("delivery", 1, enqueued_at=99.8),
            of("delivery", 1, enqueued_at=99.8),
            of("end", 1, reason="overflow", queue_depth=4),
            of("delivery", 2),  # no latency: counted, not in the histogram
            of("dead_letter", 2),
            of("dead_letter", 2),
            of("end", 2, reason="unheard-of", queue_depth=None),
            of("delivery", 3),
            of("dead_letter", None),  # its notice named no realm
            of("poll", 4, outcome="events"),  # no row of its own
        ],
    )
    load = tables.realm_load(pieces)
    reasons = dict.fromkeys(schema.END_REASONS, 0)
    assert load.to_pylist() == [
        {"date": DATE, "hour": 3, "realm_id": None, "deliveries": 0, "dead_letters": 1,
         "ended": 0, **reasons, "events_unacked": 0},
        {"date": DATE, "hour": 3, "realm_id": 1, "deliveries": 2, "dead_letters": 0,
         "ended": 1, **reasons, "overflow": 1, "events_unacked": 4},
        {"date": DATE, "hour": 3, "realm_id": 2, "deliveries": 1, "dead_letters": 2,
         "ended": 1, **reasons, "events_unacked": 0},
        {"date": DATE, "hour": 3, "realm_id": 3, "deliveries": 1, "dead_letters": 0,
         "ended": 0, **reasons, "events_unacked": 0},
    ]  # fmt: skip
    top = tables.DERIVED["top_realms"].derive(tables.merge("realm_load", load), 3, None)
    assert [(r["rank"], r["realm_id"]) for r in top.to_pylist()] == [(1, 1), (2, 2), (3, 3)]
    latency = tables.distributions(tables.histograms(pieces), histogram.upper_bounds(spark))
    by_realm = [r for r in latency.to_pylist() if r["dimension"] == "realm"]
    assert [(r["measure"], r["key"], r["count"]) for r in by_realm] == [
        ("enqueued_latency", "1", 2)
    ]
