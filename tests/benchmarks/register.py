"""Register benchmark: how long `POST /api/v1/register` takes on a realm of
realistic size, alone, concurrently, and while events flow.

Run from the repository root:

    .venv/bin/python tests/benchmarks/register.py [--users 1000] [--streams 200]
        [--messages 5000] [--registers 60] [--json]

It builds its own world and tears it down (as fanout.py does): a fresh
database `eventq_bench_<random>`, migrated, with one realm of --users members,
--streams streams (one in ten private) with each user subscribed to
--subs-per-user of them, --messages stream messages with a per-user flags row
for every subscriber (a tenth of them unread, some starred), presence for
everyone and five default streams, all inserted in SQL; then the real server
(`python -m server serve`, no broker) on a free port.

Phases:

1. sequential: --registers registers, one at a time, each by another user,
   with the `zulip` client's parameters (every event type, full state).
2. concurrent: --concurrency clients registering at once, --registers in all.
3. under load: the sequential phase again while an injector sends a notice to
   every user at --event-rate notices/s (about the message rate of a busy
   1,000-user realm); a register whose `last_event_id` is >= 0 had events
   arrive during its fetch and applied by apply_events.

Each phase reports p50 / p99 / max latency (request sent to response read),
the response size, and the server's IO-loop lag. `--quick` runs the three
phases on a realm of 30 users, in seconds, to check the script (a test runs
it). Whatever happens (error, Ctrl-C, SIGTERM) the server is stopped and the
database dropped. The number of queries a
register makes is bounded whatever the realm's size; tests/domain/
test_fetch_queries.py proves that, so it is not measured here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import requests

# Shared with the fan-out benchmark: the world (database, server process).
from fanout import (
    DEFAULT_BASE_URL,
    BenchError,
    Database,
    ServerProcess,
    User,
    log,
    percentile,
    source_state,
)
from quickmode import parse_with_quick

SECRET = "register-benchmark-secret"
# --quick: the three phases on a small realm, in seconds, to check the script
# (a test runs it); options given beside --quick still win.
QUICK = {
    "users": 30,
    "streams": 10,
    "subs_per_user": 3,
    "messages": 200,
    "registers": 10,
    "concurrency": 2,
    "event_rate": 200.0,
}


def populate_domain(
    database: Database,
    users: Sequence[User],
    streams: int,
    subs_per_user: int,
    messages: int,
) -> dict[str, int]:
    """The rest of the realm, in SQL: streams, subscriptions, messages and
    their per-user rows, presence, default streams. Returns row counts."""
    user_ids = [user.user_id for user in users]
    with psycopg.connect(database.url) as conn:
        realm_id = conn.execute("SELECT id FROM realms").fetchone()
        assert realm_id is not None
        realm = int(realm_id[0])
        conn.execute(
            "INSERT INTO streams (realm_id, name, description, invite_only)"
            " SELECT %s, 'stream ' || n, 'Stream number ' || n, n %% 10 = 0"
            " FROM generate_series(1, %s) AS n",
            (realm, streams),
        )
        stream_ids = [row[0] for row in conn.execute("SELECT id FROM streams ORDER BY id")]
        # User i is subscribed to streams i, i+1, ... (mod the stream count):
        # every stream has about users * subs_per_user / streams subscribers.
        with (
            conn.cursor() as cur,
            cur.copy("COPY subscriptions (user_id, stream_id, color) FROM STDIN") as copy,
        ):
            for i, user_id in enumerate(user_ids):
                for k in range(min(subs_per_user, len(stream_ids))):
                    copy.write_row((user_id, stream_ids[(i + k) % len(stream_ids)], "#76ce90"))
        conn.execute(
            "INSERT INTO messages (realm_id, sender_id, stream_id, topic, content,"
            " rendered_content)"
            " SELECT %s, s.user_id, s.stream_id, 'topic ' || (n %% 20),"
            " 'message ' || n, '<p>message ' || n || '</p>'"
            " FROM generate_series(1, %s) AS n"
            " CROSS JOIN LATERAL (SELECT user_id, stream_id FROM subscriptions"
            "   WHERE stream_id = (%s::bigint[])[1 + n %% %s] LIMIT 1) AS s",
            (realm, messages, stream_ids, len(stream_ids)),
        )
        # About a tenth unread and 1% starred for every user, drawn by a hash
        # of (message, user): the ids of one stream's messages share their
        # residue modulo the stream count, so `(id + user) % 10` made a user's
        # streams all read or all unread, and most users had none unread.
        conn.execute(
            "INSERT INTO user_messages (user_id, message_id, read, starred)"
            " SELECT s.user_id, m.id, h.v % 10 <> 0, h.v % 100 = 0"
            " FROM messages AS m JOIN subscriptions AS s ON s.stream_id = m.stream_id"
            " CROSS JOIN LATERAL (SELECT hashint8(m.id * 1000003 + s.user_id) AS v) AS h"
        )
        conn.execute(
            "INSERT INTO presences (user_id, realm_id, last_active_time, last_connected_time)"
            " SELECT id, realm_id, now() - (id % 600) * interval '1 second', now()"
            " FROM users"
        )
        conn.execute(
            "INSERT INTO default_streams (realm_id, stream_id)"
            " SELECT %s, id FROM streams WHERE NOT invite_only ORDER BY id LIMIT 5",
            (realm,),
        )
        row = conn.execute(
            "SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM streams),"
            " (SELECT count(*) FROM subscriptions), (SELECT count(*) FROM messages),"
            " (SELECT count(*) FROM user_messages)"
        ).fetchone()
        assert row is not None
        tables = ("users", "streams", "subscriptions", "messages", "user_messages")
        counts = dict(zip(tables, map(int, row), strict=True))
        conn.execute("ANALYZE")
    return counts


class Injector:
    """Sends one notice to every user, `rate` times a second, from a thread."""

    def __init__(self, server_url: str, user_ids: Sequence[int], rate: float):
        self.url = f"{server_url}/api/internal/notify_tornado"
        self.users = list(user_ids)
        self.rate = rate
        self.sent = 0
        self.error: str | None = None  # what stopped the thread early, raised by __exit__
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="injector", daemon=True)

    def __enter__(self) -> Injector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self.error is not None:
            raise BenchError(f"the injector stopped after {self.sent} notices: {self.error}")

    def _run(self) -> None:
        try:
            self._send()
        except (BenchError, requests.RequestException) as exc:
            self.error = str(exc)

    def _send(self) -> None:
        session = requests.Session()
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            notice = {
                "event": {"type": "benchmark", "n": self.sent, "t": time.time()},
                "users": self.users,
            }
            response = session.post(
                self.url, data={"secret": SECRET, "data": json.dumps(notice)}, timeout=10
            )
            if response.status_code != 200:
                raise BenchError(
                    f"notify_tornado answered {response.status_code}: {response.text[:200]}"
                )
            self.sent += 1
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))


def register_once(session: requests.Session, server_url: str, user: User) -> dict[str, Any]:
    started = time.perf_counter()
    response = session.post(
        f"{server_url}/api/v1/register",
        headers={"Authorization": user.authorization},
        # What zulip.Client.register() sends: every event type, full state.
        data={"event_types": "null", "apply_markdown": "true", "client_gravatar": "true"},
        timeout=60,
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise BenchError(f"register answered {response.status_code}: {response.text[:300]}")
    body = response.json()
    session.delete(
        f"{server_url}/api/v1/events",
        headers={"Authorization": user.authorization},
        data={"queue_id": body["queue_id"]},
        timeout=10,
    )
    return {
        "secs": elapsed,
        "bytes": len(response.content),
        "last_event_id": body["last_event_id"],
        "subscriptions": len(body.get("subscriptions", [])),
        "unread": body.get("unread_msgs", {}).get("count"),
    }


def summarize(samples: list[dict[str, Any]], wall_secs: float) -> dict[str, Any]:
    times = sorted(sample["secs"] * 1000 for sample in samples)
    return {
        "registers": len(samples),
        "p50_ms": round(percentile(times, 0.50), 1),
        "p99_ms": round(percentile(times, 0.99), 1),
        "max_ms": round(times[-1], 1),
        "per_sec": round(len(samples) / wall_secs, 1),
        "response_kb": round(statistics.median(s["bytes"] for s in samples) / 1024, 1),
        "subscriptions": samples[0]["subscriptions"],
        "unread": samples[0]["unread"],
        "with_events_applied": sum(1 for s in samples if s["last_event_id"] >= 0),
    }


def server_lag(server: ServerProcess) -> dict[str, float]:
    response = requests.post(
        f"http://127.0.0.1:{server.port}/api/internal/stats", data={"secret": SECRET}, timeout=10
    )
    lag: dict[str, float] = response.json()["loop_lag"]
    return lag


def run_phase(server: ServerProcess, users: Sequence[User], concurrency: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{server.port}"
    local = threading.local()

    def one(user: User) -> dict[str, Any]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return register_once(local.session, url, user)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        samples = list(pool.map(one, users))
    result = summarize(samples, time.perf_counter() - started)
    result["loop_lag"] = server_lag(server)
    return result


def render(results: dict[str, Any]) -> str:
    lines = [
        f"server code: {results['source']}",
        "realm: " + ", ".join(f"{count} {table}" for table, count in results["rows"].items()),
        "",
        f"{'phase':<28}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'reg/s':>8}"
        f"{'resp KB':>9}{'applied':>9}{'lag max ms':>12}",
    ]
    for name, phase in results["phases"].items():
        lines.append(
            f"{name:<28}{phase['p50_ms']:>9}{phase['p99_ms']:>9}{phase['max_ms']:>9}"
            f"{phase['per_sec']:>8}{phase['response_kb']:>9}"
            f"{phase['with_events_applied']:>9}{phase['loop_lag']['window_max_ms']:>12}"
        )
    first = next(iter(results["phases"].values()))
    lines += [
        "",
        f"each register returns {first['subscriptions']} subscriptions and"
        f" {first['unread']} unread messages; 'applied': registers that applied"
        " events which arrived during their fetch",
    ]
    if "injected" in results:
        lines.append(f"notices injected during the load phase: {results['injected']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_BASE_URL)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--subs-per-user", type=int, default=20)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--registers", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--event-rate", type=float, default=50.0)
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    args = parse_with_quick(parser, argv, QUICK)
    if args.registers > args.users:
        parser.error("--registers must not exceed --users (each register is another user)")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    database = Database(args.database_url)
    # Removed only once the server has stopped: it saves its queues there.
    workdir = Path(tempfile.mkdtemp(prefix="eventq-register-bench-"))
    server: ServerProcess | None = None
    try:
        log(f"creating {database.name}")
        database.create()
        users = database.populate(args.users)
        rows = populate_domain(database, users, args.streams, args.subs_per_user, args.messages)
        log("realm: " + ", ".join(f"{v} {k}" for k, v in rows.items()))
        server = ServerProcess(database.url, workdir, SECRET)
        server.start()
        measured = users[: args.registers]
        # Warm the server's auth cache and pool the way a running server is.
        run_phase(server, measured[:5], 1)
        phases: dict[str, Any] = {}
        log("phase 1: sequential registers")
        phases["sequential"] = run_phase(server, measured, 1)
        log(f"phase 2: {args.concurrency} concurrent clients")
        phases[f"concurrent x{args.concurrency}"] = run_phase(server, measured, args.concurrency)
        log(f"phase 3: sequential, with {args.event_rate:g} notices/s to every user")
        url = f"http://127.0.0.1:{server.port}"
        with Injector(url, [user.user_id for user in users], args.event_rate) as injector:
            phases[f"under {args.event_rate:g} notices/s"] = run_phase(server, measured, 1)
        results = {
            "source": source_state(),
            "database": database.name,
            "workdir": str(workdir),
            "config": {key: getattr(args, key) for key in (*QUICK, "quick")},
            "rows": rows,
            "phases": phases,
            "injected": injector.sent,
        }
        server.check()
    except BenchError as exc:
        log(f"benchmark failed: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if server is not None:
            server.stop()
        try:
            database.drop()
        except psycopg.Error as exc:
            log(f"could not drop database {database.name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
    table = render(results)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps(results, indent=2))
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
