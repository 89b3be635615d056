"""Synthetic delivery logs in the server's format, for the analytics benchmark.

The columns and types are the server's own (`server.observability.logfiles.schema()`), and
the files are laid out as the server's compaction leaves them:
`<dir>/deliveries/date=YYYY-MM-DD/hour=HH/<shard>-<n>.parquet`, zstd, rows in
time order, one file per shard and roll interval (`EVENTQ_LOG_ROLL_SECS`: an
hour by default, `--roll-secs` to match another setting), or more where the
interval's records would pass the server's spool file limit
(`server.observability.logfiles.MAX_FILE_BYTES`, checked against the spool lines of a
sample of them).

The mix follows what a chat deployment logs: about three deliveries per
long-poll (most polls end on a heartbeat, as in Zulip), a register and a
queue end per ~70 records, rare dead letters; latencies log-normal around a
few milliseconds with a tail. Everything is drawn from a seeded generator,
so the same arguments give the same rows.

spark_job.py imports it. Run as a script, from the repository root, it
generates a log, reads it back and reports (`--quick`: 20,000 records over
2 hours, in seconds; a test runs it):

    .venv/bin/python tests/benchmarks/logsynth.py [--records 1000000]
        [--hours 24] [--shards 2] [--roll-secs 3600] [--data DIR] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from quickmode import parse_with_quick

from server.observability.logfiles import (
    FORMAT_VERSION,
    MAX_FILE_BYTES,
    ROLL_SECS,
    encode_records,
    schema,
)

KINDS = ("delivery", "poll", "register", "end", "dead_letter")
KIND_WEIGHTS = (0.745, 0.225, 0.015, 0.014, 0.001)
EVENT_TYPES = (
    "message", "typing", "presence", "update_message_flags", "reaction",
    "update_message", "delete_message", "subscription", "realm_user",
    "stream", "user_settings", "custom_event",
)  # fmt: skip
EVENT_WEIGHTS = (0.35, 0.2, 0.2, 0.1, 0.05, 0.03, 0.01, 0.02, 0.01, 0.01, 0.01, 0.01)
OUTCOMES = ("heartbeat", "events", "displaced", "error", "empty", "deleted")
OUTCOME_WEIGHTS = (0.75, 0.2, 0.02, 0.02, 0.005, 0.005)
REASONS = ("expired", "deleted", "overflow", "evicted", "deactivated", "role_changed")
REASON_WEIGHTS = (0.8, 0.15, 0.03, 0.01, 0.01)
CLIENTS = ("website", "ZulipMobile", "ZulipElectron", "ZulipPython", "ZulipTerminal")
CLIENT_WEIGHTS = (0.45, 0.3, 0.15, 0.07, 0.03)
# Records whose spool lines are measured to tell how many spool files (of at
# most MAX_FILE_BYTES) the server would have made of a roll interval.
SPOOL_SAMPLE = 2_000


@dataclass(frozen=True)
class Shape:
    """What to generate: `records` spread evenly over `hours` starting at
    `start` (UTC), across `shards`, for `users` users in `realms` realms with
    two queues each; a file per shard and `roll_secs` (a divisor of an
    hour), as the server rolls its spool files."""

    records: int
    hours: int = 24
    shards: int = 2
    roll_secs: int = int(ROLL_SECS)
    users: int = 10_000
    realms: int = 50
    start: dt.datetime = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    seed: int = 1


def _pick(rng: np.random.Generator, n: int, weights: tuple[float, ...]) -> np.ndarray:
    p = np.asarray(weights, dtype=np.float64)
    return rng.choice(len(p), size=n, p=p / p.sum()).astype(np.int32)


def _strings(names: tuple[str, ...] | list[str], index: np.ndarray, valid: np.ndarray) -> pa.Array:
    """Names by index, null where not `valid`; built in Arrow, not in Python."""
    dictionary = pa.array(list(names), pa.string())
    indices = pa.array(index.astype(np.int32), mask=~valid)
    return pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.string())


@functools.cache
def _queue_names(users: int, shard: str) -> list[str]:
    """Two queue ids per user, as `<user>:<n>-<shard>`."""
    return [f"{q // 2 + 1}:{q % 2:04x}-{shard}" for q in range(users * 2)]


@functools.cache
def _queue_clients(shape: Shape) -> np.ndarray:
    """The client (index into CLIENTS) of each of the 2 * users queues."""
    return _pick(np.random.default_rng(shape.seed + 1), shape.users * 2, CLIENT_WEIGHTS)


def _masked(values: np.ndarray, valid: np.ndarray, kind: pa.DataType) -> pa.Array:
    return pa.array(values, type=kind, mask=~valid)


def table(rng: np.random.Generator, shape: Shape, shard: str, begin: float, n: int) -> pa.Table:
    """`n` records of one shard with times in [begin, begin + roll_secs)."""
    time = np.sort(begin + rng.random(n) * shape.roll_secs)
    kind = _pick(rng, n, KIND_WEIGHTS)
    is_delivery, is_poll = kind == 0, kind == 1
    is_register, is_end, is_dead = kind == 2, kind == 3, kind == 4
    about_queue = ~is_dead
    user = rng.zipf(1.3, n) % shape.users
    realm = user % shape.realms + 1
    queue_index = user * 2 + rng.integers(0, 2, n)
    queue_names = _queue_names(shape.users, shard)
    latency = rng.lognormal(np.log(0.003), 1.2, n)
    enqueued_at = time - latency
    published_at = enqueued_at - rng.lognormal(np.log(0.0005), 0.8, n)
    stamped = is_delivery & (rng.random(n) > 0.05)  # 5 %: restored or collapsed events
    batch = np.where(is_delivery, rng.integers(1, 4, n), 0)
    outcome = _pick(rng, n, OUTCOME_WEIGHTS)
    poll_error = is_poll & (outcome == OUTCOMES.index("error"))
    columns = {
        "v": pa.array(np.full(n, FORMAT_VERSION, np.int32)),
        "kind": _strings(KINDS, kind, np.ones(n, bool)),
        "time": pa.array(time),
        "shard": _strings([shard], np.zeros(n, np.int32), np.ones(n, bool)),
        # A dead letter's realm is the one its notice named.
        "realm_id": pa.array(realm, pa.int64()),
        "user_id": _masked(user + 1, about_queue, pa.int64()),
        "queue_id": _strings(queue_names, queue_index, about_queue & ~poll_error),
        # A queue's client is fixed when it registers.
        "client": _strings(CLIENTS, _queue_clients(shape)[queue_index], about_queue),
        "event_id": _masked(rng.integers(0, 5000, n), is_delivery, pa.int64()),
        "event_type": _strings(EVENT_TYPES, _pick(rng, n, EVENT_WEIGHTS), is_delivery),
        "enqueued_at": _masked(enqueued_at, stamped, pa.float64()),
        "published_at": _masked(published_at, stamped & (rng.random(n) > 0.1), pa.float64()),
        "response_bytes": _masked(
            200 + batch * 600 + rng.integers(0, 100, n), is_delivery | is_poll, pa.int64()
        ),
        "batch_events": _masked(batch, is_delivery | is_poll, pa.int32()),
        "queue_depth": _masked(
            rng.geometric(0.6, n) - 1, is_delivery | is_poll | is_end, pa.int32()
        ),
        "outcome": _strings(OUTCOMES, outcome, is_poll),
        "code": _strings(["BAD_EVENT_QUEUE_ID"], np.zeros(n, np.int32), poll_error),
        "waited_secs": _masked(rng.random(n) * 55, is_poll, pa.float64()),
        "reason": _strings(REASONS, _pick(rng, n, REASON_WEIGHTS), is_end),
        "lifetime_secs": _masked(rng.lognormal(np.log(900), 1.5, n), is_end, pa.float64()),
        "latency_secs": _masked(rng.lognormal(np.log(0.05), 0.7, n), is_register, pa.float64()),
        "options": _strings(['{"event_types":null}'], np.zeros(n, np.int32), is_register),
        "notice_id": _strings(["n-1"], np.zeros(n, np.int32), is_dead),
        "failures": _masked(np.full(n, 4), is_dead, pa.int32()),
        "error": _strings(["ValueError: bad notice"], np.zeros(n, np.int32), is_dead),
    }
    return pa.Table.from_pydict(columns, schema=schema())


def rolls(shape: Shape) -> int:
    """The roll intervals of `shape`: files per shard, size rolls apart."""
    return shape.hours * 3600 // shape.roll_secs


def spool_bytes_per_record(records: pa.Table) -> float:
    """What the server's spool lines of (a sample of) `records` take a record."""
    sample = records.slice(0, SPOOL_SAMPLE)
    rows = list(zip(*(column.to_pylist() for column in sample.columns), strict=True))
    return len(encode_records(rows)) / max(1, len(rows))


def generate(directory: Path, shape: Shape) -> int:
    """Write the logs of `shape` under `directory`; returns the files written."""
    if 3600 % shape.roll_secs:
        raise ValueError(f"roll_secs must divide an hour, not {shape.roll_secs}")
    rng = np.random.default_rng(shape.seed)
    per_roll = shape.records // (rolls(shape) * shape.shards)
    extra = shape.records - per_roll * rolls(shape) * shape.shards
    written = 0
    origin = shape.start.timestamp()
    line_bytes = 0.0
    for roll in range(rolls(shape)):
        begin = origin + roll * shape.roll_secs
        moment = dt.datetime.fromtimestamp(begin, dt.UTC)
        folder = directory / "deliveries" / moment.strftime("date=%Y-%m-%d/hour=%H")
        folder.mkdir(parents=True, exist_ok=True)
        for s in range(shape.shards):
            n = per_roll + (extra if roll == 0 and s == 0 else 0)
            shard = f"s{s + 1}"
            records = table(rng, shape, shard, begin, n)
            line_bytes = line_bytes or spool_bytes_per_record(records)
            # The server closes a spool file at MAX_FILE_BYTES: a file each.
            files = max(1, math.ceil(n * line_bytes / MAX_FILE_BYTES))
            step = math.ceil(n / files)
            for part in range(files):
                pq.write_table(
                    records.slice(part * step, step),
                    folder / f"{shard}-{roll:05d}-{part}.parquet",
                    compression="zstd",
                )
                written += 1
    return written


# --quick: a small log, to check the generator (a test runs it); options
# given beside --quick still win.
QUICK = {"records": 20_000, "hours": 2}


def read_back(directory: Path, shape: Shape) -> dict[str, Any]:
    """What the files under `directory` hold: rows, files and bytes, whether
    every file has the server's schema, the share of each kind, and whether
    every record's time falls in the shape's hours."""
    files = sorted((directory / "deliveries").rglob("*.parquet"))
    kinds: dict[str, int] = dict.fromkeys(KINDS, 0)
    rows = 0
    same_schema = True
    begin = shape.start.timestamp()
    end = begin + shape.hours * 3600
    in_hours = True
    for path in files:
        handle = pq.ParquetFile(path)
        same_schema = same_schema and handle.schema_arrow.equals(schema())
        columns = handle.read(columns=["kind", "time"])
        rows += columns.num_rows
        for entry in pc.value_counts(columns["kind"]).to_pylist():
            kinds[entry["values"]] += entry["counts"]
        bounds = pc.min_max(columns["time"]).as_py()
        if columns.num_rows:
            in_hours = in_hours and begin <= bounds["min"] and bounds["max"] < end
    return {
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "rows": rows,
        "schema_is_the_servers": same_schema,
        "times_in_hours": in_hours,
        "kind_share": {kind: round(count / max(1, rows), 4) for kind, count in kinds.items()},
        "kind_weight": dict(zip(KINDS, KIND_WEIGHTS, strict=True)),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Generate a synthetic delivery log, read it back and report."
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument(
        "--roll-secs",
        type=int,
        default=int(ROLL_SECS),
        help="the server's EVENTQ_LOG_ROLL_SECS, a divisor of 3600 (default: %(default)s)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="write the log here and keep it (default: a temporary directory, removed)",
    )
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = parse_with_quick(parser, argv, QUICK)
    if not 1 <= args.hours <= 24 * 366 or args.shards < 1:
        parser.error("--hours must be 1..8784 and --shards positive")
    if not 1 <= args.roll_secs <= 3600 or 3600 % args.roll_secs:
        parser.error("--roll-secs must divide an hour (600, 900, 3600, ...)")
    if args.records < args.hours * 3600 // args.roll_secs * args.shards:
        parser.error("--records must give every file at least one record")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    shape = Shape(args.records, args.hours, args.shards, roll_secs=args.roll_secs)
    with tempfile.TemporaryDirectory(prefix="eventq-logsynth-") as scratch:
        directory = args.data or Path(scratch)
        started = time.perf_counter()
        written = generate(directory, shape)
        seconds = time.perf_counter() - started
        found = read_back(directory, shape)
    report = {
        "config": {
            "records": args.records,
            "hours": args.hours,
            "shards": args.shards,
            "roll_secs": args.roll_secs,
        },
        "files_written": written,
        "generate_secs": round(seconds, 3),
        "records_per_sec": round(args.records / seconds),
        "bytes_per_record": round(found["bytes"] / max(1, found["rows"]), 2),
        **found,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['rows']:,} records in {report['files']} files over {args.hours} hours and"
        f" {args.shards} shards, {report['bytes'] / 1e6:.1f} MB ({report['bytes_per_record']}"
        f" bytes per record), generated in {seconds:.2f} s ({report['records_per_sec']:,}/s)"
    )
    print(
        "kinds: " + ", ".join(f"{kind} {share:.1%}" for kind, share in report["kind_share"].items())
    )
    print(
        f"the server's schema in every file: {'yes' if found['schema_is_the_servers'] else 'NO'};"
        f" every time in the hours generated: {'yes' if found['times_in_hours'] else 'NO'}"
    )
    if args.data:
        print(f"kept in {args.data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
