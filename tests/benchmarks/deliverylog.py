"""Delivery-log benchmark: what the log costs the IO loop, and how fast its
writer thread gets records to disk and into Parquet.

Run from the repository root:

    .venv/bin/python tests/benchmarks/deliverylog.py [--records 500000]
        [--clients 1000] [--rounds 200] [--json]

Everything runs in this process on a temporary directory (no server, no
database): the server's own objects (QueueRegistry, Payload, events_body,
DeliveryLog) are driven as the server drives them.

Phases:

1. loop cost: the delivery log's responder (what the server calls for each
   answer) with realistic items (message events of about 600 bytes,
   stamped with an Origin as the server does), for
   responses of 1, 10 and 100 events and for a heartbeat; microseconds per
   call and per delivery record, minus the cost of calling an observer that
   does nothing. The writer is not running, so only the loop's work counts.
2. writer: --records records already buffered; the writer thread is started
   and timed until `written` reaches them all (encoding with orjson, appends,
   fsync once per flush); then `stop()`, which rolls the file and compacts it
   into Parquet (pyarrow), timed on its own; file sizes.
3. fan-out: --clients queues, each with a parked request; one event to all of
   them, then each response built (`events_body`) and reported to the
   observers, as `EventsHandler._respond` does; --rounds rounds, with and
   without the delivery log: CPU microseconds per recipient on the loop
   (the HTTP write and the client's re-poll are not included: the real
   server's full cost per recipient is in fanout.py's report); and with the
   writer thread's encoding of those records added, in the same thread: it
   runs off the loop but holds the GIL.

`--quick` runs the three phases at a hundredth of their size or less, in
seconds, to check the script (a test runs it). The temporary directory is
removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from quickmode import parse_with_quick

from generation.events import CLIENT_RULES
from queues.client import ClientDescriptor, QueueOptions
from queues.event_queue import EventQueue, Item
from queues.payload import Payload
from queues.registry import QueueRegistry
from server.http.responses import encode, events_body
from server.observability.deliverylog import ENCODE_CHUNK, DeliveryLog
from server.observability.logfiles import encode_records
from server.observability.observe import Observer, make_origin

# --quick: every phase, small, to check the script (a test runs it); options
# given beside --quick still win.
QUICK = {"loop_records": 5_000, "records": 5_000, "clients": 50, "rounds": 10}
# How long the writer may take to write the records of the writer phase
# before the run gives up (it writes 65,000-123,000 records/s here).
WRITER_LIMIT_SECS = 300.0

MESSAGE = {
    "type": "message",
    "flags": [],
    "message": {
        "id": 123456,
        "sender_id": 42,
        "sender_full_name": "King Hamlet",
        "sender_email": "hamlet@zulip.example.com",
        "recipient_id": 17,
        "stream_id": 5,
        "display_recipient": "Denmark",
        "subject": "castle",
        "content": "<p>To be, or not to be, that is the question.</p>" * 4,
        "timestamp": 1_700_000_000,
        "client": "website",
        "type": "stream",
        "reactions": [],
        "submessages": [],
        "topic_links": [],
    },
}


def message_payload(n: int) -> Payload:
    payload = Payload.build(MESSAGE | {"n": n}, encode)
    payload.origin = make_origin(time.time(), time.time() - 0.001)
    return payload


def client_with(items: int, user: int = 1234) -> tuple[ClientDescriptor, list[Item]]:
    client = ClientDescriptor(
        str(uuid.UUID(int=user)),
        user,
        56 + user % 7,
        QueueOptions(client_name=("ZulipElectron", "ZulipMobile", "website")[user % 3]),
        0.0,
        EventQueue(encode),
    )
    for n in range(items):
        client.event_queue.push(message_payload(n))
    return client, client.event_queue.contents()


def per_call_us(
    observer: Observer, client: ClientDescriptor, items: list[Item], calls: int
) -> float:
    """Best of 5 runs of `calls` calls of the observer's responder (what the
    server calls for each answer), microseconds per call."""
    best = float("inf")
    outcome = "events" if items and items[0][1].type != "heartbeat" else "heartbeat"
    respond = observer.responder()
    for _ in range(5):
        now = time.time()
        started = time.perf_counter()
        for _ in range(calls):
            respond(client, items, 4321, outcome, 0.5, now)
        best = min(best, time.perf_counter() - started)
        if isinstance(observer, DeliveryLog):
            observer._buffer.records.clear()  # not timed: the writer's job
    return best / calls * 1e6


def loop_cost(directory: Path, budget: int) -> list[dict[str, Any]]:
    """`budget` records' worth of calls per response size (at least a
    hundredth of it in calls for the largest)."""
    log = DeliveryLog(directory, "bench", max_pending=10**9)
    nothing = Observer()
    results = []
    heartbeat = Payload.build({"type": "heartbeat"}, encode)
    cases: list[tuple[str, ClientDescriptor, list[Item]]] = []
    for size in (1, 10, 100):
        client, items = client_with(size)
        cases.append((f"{size} events", client, items))
    client, _ = client_with(0)
    cases.append(("heartbeat", client, [(0, heartbeat)]))
    for name, client, items in cases:
        calls = max(budget // 100, budget // max(len(items), 1))
        base = per_call_us(nothing, client, items, calls)
        cost = per_call_us(log, client, items, calls) - base
        deliveries = sum(1 for _, p in items if p.type != "heartbeat")
        results.append(
            {
                "response": name,
                "records": deliveries + 1,
                "us_per_call": round(cost, 3),
                "us_per_delivery_record": round(cost / deliveries, 3) if deliveries else None,
            }
        )
    return results


def fill(log: DeliveryLog, records: int) -> None:
    """Buffer `records` records: responses of 10 events to 1,000 queues, a
    millisecond apart (varied data, for Parquet's sake)."""
    clients = [client_with(10, user) for user in range(1000)]
    now = time.time()
    while log.pending < records:
        now += 0.001
        client, items = clients[int(now * 1000) % len(clients)]
        log.responded(client, items, 7000, "events", now % 1, now)


def writer_throughput(directory: Path, records: int) -> dict[str, Any]:
    log = DeliveryLog(directory, "bench", flush_secs=0.001, max_pending=records + 100)
    fill(log, records)
    total = log.pending
    started = time.perf_counter()
    # The writer's CPU: the process's, this thread only polls.
    process_started = time.process_time()
    log.start()
    while log.written + log.dropped < total:
        if time.perf_counter() - started > WRITER_LIMIT_SECS:
            asyncio.run(log.stop())
            raise RuntimeError(
                f"the writer wrote {log.written} of {total} records in {WRITER_LIMIT_SECS:.0f} s"
            )
        time.sleep(0.005)  # a benchmark waits for the thread; tests never sleep-wait
    written = time.perf_counter() - started
    write_cpu = time.process_time() - process_started
    spool_bytes = sum(p.stat().st_size for p in (directory / "spool").glob("date=*/hour=*/*"))
    started = time.perf_counter()
    asyncio.run(log.stop())
    compacted = time.perf_counter() - started
    parquet = list((directory / "deliveries").rglob("*.parquet"))
    parquet_bytes = sum(path.stat().st_size for path in parquet)
    return {
        "records": total,
        "written": log.written,
        "dropped": log.dropped,
        "parquet_rows": sum(pq.ParquetFile(path).metadata.num_rows for path in parquet),
        "write_secs": round(written, 3),
        "write_records_per_sec": round(total / written),
        "write_cpu_us_per_record": round(write_cpu / total * 1e6, 3),
        "spool_bytes_per_record": round(spool_bytes / total, 1),
        "compact_secs": round(compacted, 3),
        "compact_records_per_sec": round(total / compacted),
        "parquet_bytes_per_record": round(parquet_bytes / total, 1),
    }


class Waiter:
    def wake(self, reason: str) -> None:
        pass


def fanout(directory: Path, clients: int, rounds: int) -> dict[str, Any]:
    def run(log: DeliveryLog | None, with_encoding: bool = False) -> float:
        """Median CPU µs per recipient of a round; `with_encoding`: plus the
        writer's encoding of the round's records, in this thread."""
        registry = QueueRegistry(encode, rules=CLIENT_RULES)
        queues = [
            registry.allocate(user, 1, QueueOptions(client_name="ZulipMobile"), 0.0)
            for user in range(clients)
        ]
        users = list(range(clients))
        responders = [] if log is None else [log.responder()]
        samples = []
        for n in range(rounds):
            for client in queues:
                registry.park(client, Waiter(), 0.0)
            started = time.process_time()
            registry.deliver(MESSAGE | {"n": n}, users, 1, 0.0, make_origin(time.time()))
            wall = time.time()
            for client in queues:
                items = client.event_queue.contents()
                body = events_body(items)
                for respond in responders:
                    respond(client, items, len(body), "events", 0.1, wall)
                client.event_queue.prune(items[-1][0])
            if log is not None and with_encoding:
                pending = log._buffer.records
                for start in range(0, len(pending), ENCODE_CHUNK):
                    encode_records(pending[start : start + ENCODE_CHUNK])
            samples.append(time.process_time() - started)
            if log is not None:
                log._buffer.records.clear()
        return statistics.median(samples) / clients * 1e6

    log = DeliveryLog(directory, "bench", max_pending=10**9)
    off = run(None)
    on = run(log)
    encoded = run(log, with_encoding=True)
    return {
        "clients": clients,
        "rounds": rounds,
        "loop_us_per_recipient_log_off": round(off, 3),
        "loop_us_per_recipient_log_on": round(on, 3),
        "added_us_per_recipient": round(on - off, 3),
        "with_encoding_us_per_recipient": round(encoded, 3),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--loop-records",
        type=int,
        default=200_000,
        help="loop cost phase: records' worth of calls per response size",
    )
    parser.add_argument("--records", type=int, default=500_000, help="writer phase records")
    parser.add_argument("--clients", type=int, default=1000, help="fan-out phase queues")
    parser.add_argument("--rounds", type=int, default=200, help="fan-out phase rounds")
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = parse_with_quick(parser, argv, QUICK)
    if min(args.loop_records, args.records, args.clients, args.rounds) < 1:
        parser.error("--loop-records, --records, --clients and --rounds must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    gc.set_threshold(100_000, 50, 100)  # as `eventq serve` does
    with tempfile.TemporaryDirectory(prefix="eventq-deliverylog-bench-") as scratch:
        root = Path(scratch)
        report: dict[str, Any] = {
            "config": {key: getattr(args, key) for key in (*QUICK, "quick")},
            "loop_cost": loop_cost(root / "loop", args.loop_records),
            "writer": writer_throughput(root / "writer", args.records),
            "fanout": fanout(root / "fanout", args.clients, args.rounds),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("loop cost of the delivery log's responder (observer call overhead subtracted)")
    for row in report["loop_cost"]:
        per_record = row["us_per_delivery_record"]
        print(
            f"  {row['response']:>10}: {row['records']:4d} records, {row['us_per_call']:8.2f} us"
            f" per call" + (f", {per_record:.2f} us per delivery record" if per_record else "")
        )
    writer = report["writer"]
    print(
        f"writer: {writer['records']:,} records written in {writer['write_secs']} s"
        f" ({writer['write_records_per_sec']:,}/s, {writer['write_cpu_us_per_record']} us CPU"
        f" each, {writer['spool_bytes_per_record']} bytes in the spool each);"
        f" compacted in {writer['compact_secs']} s ({writer['compact_records_per_sec']:,}/s,"
        f" {writer['parquet_bytes_per_record']} bytes of Parquet each)"
    )
    fan = report["fanout"]
    print(
        f"fan-out to {fan['clients']} queues, median of {fan['rounds']} rounds: loop CPU"
        f" {fan['loop_us_per_recipient_log_off']} us per recipient without the log,"
        f" {fan['loop_us_per_recipient_log_on']} us with it"
        f" (+{fan['added_us_per_recipient']} us); with the writer's encoding of its records"
        f" {fan['with_encoding_us_per_recipient']} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
