"""What the event log adds to a producer's transaction.

    python -m tests.benchmarks.positions [--transactions 5000] [--quick]

In a scratch database (created, migrated and dropped), the same transaction
runs with and without `send_event_on_commit`'s log write: an UPDATE of one
row, then, with the log, the INSERT into `event_log` that takes the event's
position, then COMMIT. Publishing after the commit is RabbitMQ's cost
(tests/benchmarks/rabbitmq.py) and is not counted here. Prints p50/p99 of
both and the difference, interleaved so that both see the same machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Sequence

import psycopg

from generation import eventlog
from generation.notice import encode_notice, make_notice
from server.database.migrate import migrate
from tests.benchmarks.quickmode import parse_with_quick

ADMIN_URL = "host=127.0.0.1 port=5432 dbname=postgres user=postgres"


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transactions", type=int, default=5000)
    args = parse_with_quick(parser, argv, {"transactions": 200})
    name = f"eventq_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"host=127.0.0.1 port=5432 dbname={name} user=postgres"
    try:
        migrate(url)
        notice = make_notice(
            {"type": "message", "message": {"id": 1, "content": "x" * 200}},
            [{"id": user, "flags": []} for user in range(1, 51)],
            1,
        )
        body = encode_notice(notice)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench_counter (id int PRIMARY KEY, n bigint)")
            conn.execute("INSERT INTO bench_counter VALUES (1, 0)")
            plain: list[float] = []
            logged: list[float] = []
            for index in range(args.transactions):
                with_log = index % 2 == 1
                started = time.perf_counter()
                with conn.transaction():
                    conn.execute("UPDATE bench_counter SET n = n + 1 WHERE id = 1")
                    if with_log:
                        eventlog.write(conn, [(notice, body)])
                (logged if with_log else plain).append(time.perf_counter() - started)
        p50 = statistics.median(plain) * 1e6, statistics.median(logged) * 1e6
        p99 = _percentile(plain, 99) * 1e6, _percentile(logged, 99) * 1e6
        print(f"transactions: {args.transactions} ({len(body)}-byte notice, 50 users)")
        print(f"  without the log: p50 {p50[0]:.0f} us, p99 {p99[0]:.0f} us")
        print(f"  with the log:    p50 {p50[1]:.0f} us, p99 {p99[1]:.0f} us")
        print(
            f"  added by send_event_on_commit: p50 {p50[1] - p50[0]:.0f} us,"
            f" p99 {p99[1] - p99[0]:.0f} us"
        )
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
