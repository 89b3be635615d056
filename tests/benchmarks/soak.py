"""Soak run of the eventq server: thousands of clients long-polling,
registering and leaving, with events flowing, for minutes (not in CI).

Run from the repository root:

    .venv/bin/python tests/benchmarks/soak.py [--clients 3000] [--minutes 5]
        [--churn 30] [--notices 50] [--idle-secs 10] [--json]

It builds its own world as fanout.py does (a scratch database, the real
server as a subprocess without a broker) and then, every second: `--churn`
clients leave (their connection closes, their queue is left to the idle GC,
as a closed browser tab's is) and as many new ones connect and register;
`--notices` notices go out, each to 20 random users. The server runs with
`EVENTQ_QUEUE_IDLE_TIMEOUT_SECS=--idle-secs` and a GC sweep every second, so
queues are created and collected all along.

Every --sample-secs (10) s it records the server's RSS, queues, parked
requests and IO-loop lag. The report compares the RSS once warm (after the first third of the run)
with the RSS at the end, per minute and per collected queue (a leak per
registered-and-collected queue shows there), the worst loop lag against the
bound (--lag-bound-ms), and the GC sweep times the server logged (it logs
the sweeps that collected queues). It exits 1 if the loop lag bound or the
memory bound (--growth-bound-mb) was broken, or a client saw a duplicate, a
gap, an error response or a lost connection.

`--quick` soaks 40 clients for 12 s with 2 s idle timeouts, to check the
script (a test runs it). Whatever happens (error, Ctrl-C, SIGTERM) the server
is stopped and the database dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from quickmode import parse_with_quick  # noqa: E402

from tests.benchmarks.fanout import (  # noqa: E402
    DEFAULT_BASE_URL,
    Bench,
    BenchError,
    Database,
    ServerGroup,
    ServerProcess,
    log,
    percentile,
    raise_fd_limit,
)

USERS_PER_NOTICE = 20
# --quick: a short soak, to check the script (a test runs it): queues idle out
# after 2 s, so some are collected while warm (after the first third, 4 s);
# options given beside --quick still win.
QUICK = {
    "clients": 40,
    "minutes": 0.2,
    "churn": 4,
    "notices": 10,
    "idle_secs": 2.0,
    "sample_secs": 2.0,
}
GC_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ INFO eventq.server: collected (\d+) idle queues"
    r" in ([\d.]+) ms",
    re.MULTILINE,
)


async def soak(args: argparse.Namespace, server: ServerGroup, users: list[Any]) -> dict[str, Any]:
    bench = Bench(args, server, users)
    capacity = len(users) * args.clients_per_user
    free = list(range(args.clients, capacity))
    random.shuffle(free)
    log(f"ramping to {args.clients} clients")
    stopped = await bench.ramp_to(args.clients)
    if stopped is not None:
        raise BenchError(stopped)
    await bench.wait_parked(args.clients)
    injector = await bench.connect_internal()
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    end = started + args.minutes * 60
    next_sample = started
    left = joined = notices = deliveries = ticks = 0
    try:
        while time.monotonic() < end:
            tick = time.monotonic()
            ticks += 1
            # Churn: some clients leave (queue left to the GC), others arrive.
            for _ in range(min(args.churn, len(bench.clients))):
                client = bench.clients.pop(random.randrange(len(bench.clients)))
                bench._closing.add(client.index)
                client.close()
                free.append(client.index)
                left += 1
            arrivals = [free.pop(0) for _ in range(min(args.churn, len(free)))]
            connected = await asyncio.gather(
                *(bench._connect(index) for index in arrivals), return_exceptions=True
            )
            for result in connected:
                if isinstance(result, BaseException):
                    raise BenchError(f"a client could not connect: {result!r}")
                bench.clients.append(result)
                joined += 1
            # Events to random users.
            answers = []
            for _ in range(args.notices):
                targets = random.sample(users, min(USERS_PER_NOTICE, len(users)))
                build = bench.notice_request([user.user_id for user in targets])
                answers.append(injector.send(build(bench.next_seq())))
            for answer in answers:
                status, body = await bench.await_future(answer, 30, "notify_tornado")
                if status != 200:
                    raise BenchError(f"notify_tornado answered {status}: {body[:200]!r}")
                notices += 1
                deliveries += json.loads(body)["queues"]
            if tick >= next_sample:
                stats = await bench.stats()
                samples.append(
                    {
                        "t": round(tick - started, 1),
                        "wall": time.time(),
                        "rss_kb": server.rss_kb(),
                        "queues": stats["queues"],
                        "parked": stats["parked"],
                        "lag_p99_ms": stats["loop_lag"]["p99_ms"],
                        "lag_window_max_ms": stats["loop_lag"]["window_max_ms"],
                    }
                )
                row = samples[-1]
                log(
                    f"  t={row['t']:>5.0f}s RSS {row['rss_kb'] / 1024:6.1f} MiB"
                    f" queues {row['queues']:>6} parked {row['parked']:>5}"
                    f" lag p99 {row['lag_p99_ms']:.1f} / max {row['lag_window_max_ms']:.1f} ms"
                )
                next_sample += args.sample_secs
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        injector.close()
        counters = {
            "duplicate_ids": bench.duplicates,
            "id_gaps": bench.gaps,
            "error_responses": bench.errors,
            "connections_lost": bench.lost,
            "last_error": bench.last_error,
        }
        bench.close_all()
        await asyncio.sleep(0.2)
    return {
        "samples": samples,
        "seconds": ticks,
        "clients_left": left,
        "clients_joined": joined,
        "notices": notices,
        "queue_deliveries_reported_by_server": deliveries,
        "events_received": bench.bench_events,
        "counters": counters,
    }


def summarize(args: argparse.Namespace, run: dict[str, Any], server_log: str) -> dict[str, Any]:
    samples = run["samples"]
    warm = [s for s in samples if s["t"] >= args.minutes * 60 / 3]
    first, last = (warm[0], warm[-1]) if len(warm) >= 2 else (samples[0], samples[-1])
    minutes = max((last["t"] - first["t"]) / 60, 1e-9)
    gc = [
        (time.mktime(time.strptime(when, "%Y-%m-%d %H:%M:%S")), int(n), float(ms))
        for when, n, ms in GC_LINE.findall(server_log)
    ]
    # Queues collected while the server was warm, between the two samples.
    collected_warm = sum(n for when, n, _ in gc if first["wall"] - 1 <= when <= last["wall"])
    sweep_ms = sorted(ms for _, _, ms in gc)
    growth_kb = last["rss_kb"] - first["rss_kb"]
    worst_lag = max(s["lag_window_max_ms"] for s in samples)
    return {
        "rss_warm_mb": round(first["rss_kb"] / 1024, 1),
        "rss_end_mb": round(last["rss_kb"] / 1024, 1),
        "rss_growth_mb_per_min": round(growth_kb / 1024 / minutes, 2),
        "queues_collected_total": sum(n for _, n, _ in gc),
        "queues_collected_while_warm": collected_warm,
        "rss_growth_bytes_per_collected_queue": round(growth_kb * 1024 / max(1, collected_warm), 1),
        "gc_sweeps_logged": len(gc),
        "gc_sweep_ms": {
            "median": round(statistics.median(sweep_ms), 2) if sweep_ms else None,
            "p99": round(percentile(sweep_ms, 0.99), 2) if sweep_ms else None,
            "max": round(sweep_ms[-1], 2) if sweep_ms else None,
        },
        "loop_lag_worst_ms": worst_lag,
        "loop_lag_p99_worst_ms": max(s["lag_p99_ms"] for s in samples),
        "lag_bound_ms": args.lag_bound_ms,
        "growth_bound_mb": args.growth_bound_mb,
        "lag_ok": worst_lag <= args.lag_bound_ms,
        "memory_ok": growth_kb / 1024 <= args.growth_bound_mb,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=3000, help="connected clients (steady)")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--churn", type=int, default=30, help="clients leaving and joining per s")
    parser.add_argument("--notices", type=int, default=50, help="notices per second (20 users)")
    parser.add_argument("--idle-secs", type=float, default=10.0, help="queue idle timeout")
    parser.add_argument("--clients-per-user", type=int, default=2)
    parser.add_argument("--lag-bound-ms", type=float, default=250.0)
    parser.add_argument(
        "--growth-bound-mb", type=float, default=10.0, help="RSS growth allowed once warm"
    )
    parser.add_argument(
        "--sample-secs", type=float, default=10.0, help="seconds between RSS/lag samples"
    )
    parser.add_argument("--json", action="store_true")
    args = parse_with_quick(parser, argv, QUICK)
    args.batch = 500  # Bench's ramp batch
    if args.clients < 1 or args.minutes <= 0 or args.churn < 0 or args.notices < 0:
        parser.error("--clients and --minutes must be positive, --churn and --notices >= 0")
    if args.sample_secs <= 0 or args.sample_secs * 3 > args.minutes * 60:
        parser.error("--sample-secs must be positive and fit three times in the run")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    raise_fd_limit()
    database = Database(os.environ.get("EVENTQ_DATABASE_URL") or DEFAULT_BASE_URL)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-soak-"))
    # Twice the clients' users: the leaving clients' queues idle out while
    # new clients take other users' slots.
    n_users = 2 * ((args.clients + args.clients_per_user - 1) // args.clients_per_user)
    server = ServerGroup(
        [
            ServerProcess(
                database.url,
                workdir,
                secrets.token_urlsafe(16),
                {
                    "EVENTQ_LOG_LEVEL": "INFO",
                    "EVENTQ_QUEUE_IDLE_TIMEOUT_SECS": str(args.idle_secs),
                    "EVENTQ_GC_INTERVAL_SECS": "1",
                },
            )
        ]
    )
    status = 1
    try:
        log(f"database {database.name}: {n_users} users")
        database.create()
        users = database.populate(n_users)
        server.start()
        run = asyncio.run(soak(args, server, users))
        log_text = server.members[0].log_path.read_text(errors="replace")
        summary = summarize(args, run, log_text)
        result = {
            "config": vars(args),
            "database": database.name,
            "workdir": str(workdir),
            "run": run,
            "summary": summary,
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(json.dumps(summary, indent=2))
            print(json.dumps(run["counters"]))
        counters = run["counters"]
        broken = (
            not summary["lag_ok"]
            or not summary["memory_ok"]
            or counters["duplicate_ids"]
            or counters["id_gaps"]
            or counters["error_responses"]
            or counters["connections_lost"]
        )
        status = 1 if broken else 0
    except BenchError as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        server.stop()
        try:
            database.drop()
        except psycopg.Error as exc:
            log(f"could not drop database {database.name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
