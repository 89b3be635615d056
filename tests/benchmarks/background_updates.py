"""What a background update costs the clients: register and
send->delivery latency with the `wrap_legacy_api_key_hashes` update running
on a table of --rows legacy users, beside the same figures without it, in
the same run.

Run from the repository root:

    .venv/bin/python -m tests.benchmarks.background_updates [--quick] [--json] [--keep-db]

(or `.venv/bin/python tests/benchmarks/background_updates.py`). It builds its
own world and tears it down, with stream_costs.py's pieces: a RabbitMQ vhost
`eventq_bench_<random>` (rabbitmq.py's `Vhost`), a fresh database
`eventq_bench_<random>`, migrated, its pending background updates run once by
`eventq db background run --until-done` (on that fresh database they have
nothing to do), then one realm of --users users, --streams streams and their
subscriptions and messages for the clients (register.py's `populate_domain`),
and --rows more users in a realm of their own, inserted by one
`generate_series` statement, each with an API key of scheme 1 (the plain
SHA-256 of a key text this script can regenerate from the run's seed). Then
`eventq db background enqueue wrap_legacy_api_key_hashes` asks for the update
again, from the start.

The server is the real one (`python -m server serve`, stream_costs.py's
`Run.server`: delivery log on, rate limiter on with a limit nobody reaches,
consuming the run's vhost, HTTP Basic auth on every request). Rounds, taking
turns, --rounds of each mode:

- "without": the server started with EVENTQ_BACKGROUND_TASKS=off. The update
  is enqueued (and, after the first "with" round, part done) but no process
  runs it; `db background status --json` must show that no batch ran during
  the round.
- "with": the server started with EVENTQ_BACKGROUND_TASKS=on, the default
  controller (--target-ms 100 per batch, --sleep-ms 1000 before each batch)
  and EVENTQ_BACKGROUND_IDLE_SECS=--idle-secs. Before the measurement,
  `status --json` must show the update "running" with a batch done by this
  server; the runner is then left --settle-secs at most until its batch size
  has settled (a new runner starts again at 100 items and grows them to what
  --target-ms allows, and only that steady state is what a long update
  looks like); after the measurement the update must not be done (a window
  it finished in would not be "with"; the run says so and exits 1).

Every round starts a new server process (a state directory of its own; the
update's progress is in the database, so it resumes where the last "with"
round left it): both modes start the same way, so whatever a start costs
weighs on both alike. The event log's retention, which a server runs only
as a background update too, is off in both (EVENTQ_EVENT_LOG_PRUNE_SECS=0):
the one difference between the modes is the update. In each round, --clients
clients (one user each) register (`event_types=["message"]`) and long-poll;
after an uncounted --warmup, for --duration s: --publishers processes send
--rate notices/s in all through RabbitMQ with `generation.send.send_event`
(event log on), each to --recipients of those users, while a thread of this
process registers with the `zulip` client's parameters (register.py's
`register_once`, each register by the next user of the realm): --registers
one at a time, then --registers with --concurrency at once, and so on until
the notices are all sent. Latency of a delivery = when a client had read the
event - time.time() just before its `send_event` call; of a register, its
request to its answer. Each mode's samples are pooled over its rounds.

Reported for each figure: without, with, their ratio, and the bar (with <=
1.5x without, for send->delivery p99 and register p99: an update must not
noticeably slow the clients) as met or MISSED; the update's progress in
each "with" window (items, batches, items/s, the batch size and the
controller's measured rate), and the CPU of the server, PostgreSQL and
RabbitMQ (share of a core) in each mode. Then the update is finished: a
server with EVENTQ_BACKGROUND_TASKS=on and
EVENTQ_BACKGROUND_SLEEP_MS=--finish-sleep-ms (0: flat out) until the update
is done or --finish-limit s have passed (0: not at all), timed.

Checks, which fail the run (exit 1) after the report: every event sent read
exactly once by each of its recipients' clients, no error response or lost
connection; no batch ran in a "without" round; once the update is done, no
legacy row of scheme 1 is left, every one is of scheme 3 and the update's
count is the number of rows it wrapped; --check-keys of the legacy users'
keys (drawn at random among those wrapped so far when the update did not
finish: the report says how far it got) each authenticate
(`GET /api/v1/users/me`, HTTP Basic) as their user, and a wrong key does
not. The bar is reported, not enforced. Whatever happens (error, Ctrl-C,
SIGTERM) the publishers and servers are stopped, the database dropped and
the vhost deleted (unless --keep-db). `--quick` runs it all at tiny sizes in
well under a minute (tests/test_background_updates_benchmark.py runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The scripts beside this one import each other by their bare names.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
import requests
import uvloop
from fanout import (
    API_KEY_SECRET,
    HOST,
    REPO,
    BenchError,
    Database,
    ServerGroup,
    User,
    _table,
    log,
    source_state,
)
from quickmode import parse_with_quick
from rabbitmq import CpuMeter, FreezableServer, Vhost, remove_scratch, spread
from register import populate_domain, register_once
from stream_costs import (
    Readers,
    Round,
    Run,
    add_run_arguments,
    add_world_arguments,
    check_world,
    collect_round,
    postgres_cpu_secs,
    ratio,
    summary,
)

from generation.accounts import HASH_HMAC, HASH_SHA256, HASH_WRAPPED

DEFAULT_AMQP_BASE = "amqp://guest:guest@127.0.0.1:5672"
UPDATE = "wrap_legacy_api_key_hashes"
# Issue 16's bar: with the update running, register p99 and send->delivery
# p99 at most this many times their values without it.
BAR_RATIO = 1.5
# The legacy users' realm; their key texts are "L" + the row's number on 7
# digits (the 8-character key id, unique) + 24 hex digits of a hash of the
# run's seed and that number, so --rows stays below 10^7.
LEGACY_SUBDOMAIN = "legacy"
MAX_ROWS = 9_999_999
# A settled runner's batch: within this share of what its measured rate does
# in --target-ms (the next batch's size), after at least SETTLED_AFTER batches
# of its own. The first batch of an update also counts the rows to do (a scan
# of the whole table): its rate is an order of magnitude low, the next batch
# is as small as that one, and the growth only shows from the third.
SETTLED_WITHIN = 0.25
SETTLED_AFTER = 3
# How often the update's status is read while waiting for it (each read is a
# `python -m server db background status --json`: about half a second of CPU).
STATUS_POLL_SECS = 1.0
MODES = ("without", "with")
# --quick: everything at tiny sizes, in well under a minute, to check the
# script (a test runs it); options given beside --quick still win. One
# publisher and no warm-up window: each window starts its publisher
# processes afresh (a spawned Python importing these scripts, about a second
# of CPU each), which was most of a quick run's time; the measured window
# runs the same code as a warm-up.
QUICK = {
    "users": 50,
    "streams": 10,
    "subs_per_user": 3,
    "messages": 200,
    # At the default pacing the update wraps some 2,000 rows a second here
    # (batches of about 2,500 every 1.1 s): 20,000 were done inside the window.
    "rows": 100_000,
    "clients": 20,
    "rate": 100.0,
    "publishers": 1,
    "duration": 2.0,
    "rounds": 1,
    "warmup": 0.0,
    "registers": 5,
    "concurrency": 2,
    "settle_secs": 3.0,
    "finish_limit": 60.0,
    "check_keys": 5,
}


def legacy_key(seed: str, number: int) -> str:
    """The API key of legacy user `number` (1-based), as LEGACY_SQL makes it."""
    digest = hashlib.sha256(f"{seed}:{number}".encode()).hexdigest()
    return f"L{number:07d}{digest[:24]}"


def legacy_email(number: int) -> str:
    return f"legacy{number}@legacy.example.com"


# Users of scheme 1, as rows written before keyed hashes (migration 0004) are:
# `api_key_hash` is the plain SHA-256 of the key text (see `legacy_key`).
LEGACY_SQL = """
INSERT INTO users (realm_id, email, full_name, role, api_key_id, api_key_hash,
                   api_key_hash_scheme)
SELECT %(realm)s, 'legacy' || n || '@legacy.example.com', 'Legacy ' || n, 400,
       k.key_id, sha256(convert_to(k.key_id || k.rest, 'UTF8')), %(scheme)s
FROM generate_series(1, %(rows)s) AS n
CROSS JOIN LATERAL (
  SELECT 'L' || lpad(n::text, 7, '0') AS key_id,
         substr(encode(sha256(convert_to(%(seed)s::text || ':' || n, 'UTF8')), 'hex'), 1, 24)
           AS rest
) AS k
"""


# -- the update's status, through the command line --------------------------------


@dataclass(frozen=True)
class Status:
    """The update's row as `db background status --json` shows it."""

    state: str
    items_done: int
    batches: int
    batch_size: int | None
    items_per_sec: float | None
    items_left: int | None
    seconds_left: float | None
    failures: int
    last_error: str | None
    at: float  # time.monotonic() when it was read

    @classmethod
    def of(cls, row: dict[str, Any]) -> Status:
        return cls(
            state=row["state"],
            items_done=int(row["items_done"]),
            batches=int(row["batches"]),
            batch_size=row["batch_size"],
            items_per_sec=row["items_per_sec"],
            items_left=row["items_left"],
            seconds_left=row["seconds_left"],
            failures=int(row["failures"]),
            last_error=row["last_error"],
            at=time.monotonic(),
        )

    @property
    def done(self) -> bool:
        return self.state == "done"

    def settled(self, target_ms: int, since: Status) -> bool:
        """Whether the last batch was about as large as the next one will
        be, after SETTLED_AFTER batches since `since`: the runner's batch
        size has stopped growing."""
        if self.batches - since.batches < SETTLED_AFTER:
            return False
        if self.batch_size is None or not self.items_per_sec:
            return False
        next_size = self.items_per_sec * target_ms / 1000
        return abs(self.batch_size - next_size) <= SETTLED_WITHIN * next_size

    def brief(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "items_done": self.items_done,
            "batches": self.batches,
            "batch_size": self.batch_size,
            "items_per_sec": None if self.items_per_sec is None else round(self.items_per_sec, 1),
            "items_left": self.items_left,
            "seconds_left": None if self.seconds_left is None else round(self.seconds_left, 1),
            "failures": self.failures,
            "last_error": self.last_error,
        }


# -- registers, from a thread, while the notices flow ------------------------------


@dataclass
class Registrar:
    """Registers with the `zulip` client's parameters (register.py's
    `register_once`), each by the next of `users` from `first` on (and round
    again): `per_block` one at a time, then `per_block` with `concurrency`
    at once, and again. Runs in a thread of its own (`start`); `finish`
    stops it after the registers in flight. Samples in seconds; `used`: how
    many users it took."""

    url: str
    users: Sequence[User]
    first: int
    per_block: int
    concurrency: int
    one_at_a_time: list[float] = field(default_factory=list)
    at_once: list[float] = field(default_factory=list)
    error: BaseException | None = None
    used: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
        if self.error is not None:
            raise BenchError(f"a register failed: {self.error}") from self.error

    def _user(self) -> User:
        with self._lock:
            user = self.users[(self.first + self.used) % len(self.users)]
            self.used += 1
        return user

    def _run(self) -> None:
        local = threading.local()

        def one(samples: list[float]) -> None:
            if self._stop.is_set():
                return
            if not hasattr(local, "session"):
                local.session = requests.Session()
            samples.append(register_once(local.session, self.url, self._user())["secs"])

        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="register") as pool:
                while not self._stop.is_set():
                    for _ in range(self.per_block):
                        one(self.one_at_a_time)
                    list(pool.map(lambda _: one(self.at_once), range(self.per_block)))
        except BaseException as exc:
            self.error = exc


@dataclass
class Window:
    """One measured window of a round: deliveries, registers, CPU."""

    deliveries: Round
    one_at_a_time: list[float]
    at_once: list[float]
    secs: float


# -- the run ---------------------------------------------------------------------------


class UpdateRun(Run):
    """stream_costs.py's world (database, vhost, users, servers, publishers),
    with the legacy users, the rounds and the update's checks of this script."""

    def __init__(self, args: argparse.Namespace, database: Database, vhost: Vhost, workdir: Path):
        super().__init__(args, database, vhost, workdir)
        self.seed = secrets.token_hex(8)  # of the legacy users' key texts
        self.legacy_realm = 0
        # Registers so far: each register of the run is by the next user.
        self.registered = 0
        # The clients' error responses, lost connections and such, over the rounds.
        self.client_problems: dict[str, Any] = {}
        # The server of the update's last stretch, kept up for `check_keys`.
        self.checker: FreezableServer | None = None

    # -- the world ---------------------------------------------------------------

    def insert_legacy_users(self) -> dict[str, Any]:
        """--rows users of scheme 1 in a realm of their own; VACUUM ANALYZE
        after, so that the update's first reads set no hint bits."""
        rows = self.args.rows
        started = time.monotonic()
        with psycopg.connect(self.database.url) as conn:
            found = conn.execute(
                "INSERT INTO realms (subdomain, name) VALUES (%s, 'Legacy keys') RETURNING id",
                (LEGACY_SUBDOMAIN,),
            ).fetchone()
            assert found is not None
            self.legacy_realm = int(found[0])
            conn.execute(
                LEGACY_SQL,
                {
                    "realm": self.legacy_realm,
                    "rows": rows,
                    "seed": self.seed,
                    "scheme": HASH_SHA256,
                },
            )
        with psycopg.connect(self.database.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE users")
            size = conn.execute("SELECT pg_total_relation_size('users')").fetchone()
        assert size is not None
        return {
            "rows": rows,
            "insert_secs": round(time.monotonic() - started, 1),
            "users_table_bytes": int(size[0]),
        }

    def cli_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
        return (
            env
            | {
                "EVENTQ_DATABASE_URL": self.database.url,
                # The secret the wrapped hashes are keyed with: the servers'.
                "EVENTQ_API_KEY_SECRET": API_KEY_SECRET,
                "EVENTQ_EVENT_LOG_PRUNE_SECS": "0",
                "EVENTQ_LOG_LEVEL": "WARNING",
            }
            | (extra or {})
        )

    async def background(self, *args: str, limit_secs: float = 120) -> str:
        """`eventq db background ARGS` on the run's database: its stdout."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "server",
            "db",
            "background",
            *args,
            cwd=REPO,
            env=self.cli_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), limit_secs)
        except BaseException:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        if process.returncode != 0:
            raise BenchError(
                f"eventq db background {' '.join(args)} exited {process.returncode}:"
                f" {err.decode(errors='replace')[-1500:]}"
            )
        return out.decode()

    async def status(self) -> Status:
        rows = json.loads(await self.background("status", "--json"))["updates"]
        for row in rows:
            if row["name"] == UPDATE:
                return Status.of(row)
        raise BenchError(f"db background status lists no {UPDATE}: {rows}")

    def round_server(self, name: str, *, tasks: bool, sleep_ms: int) -> FreezableServer:
        args = self.args
        return self.server(
            name,
            {
                "EVENTQ_BACKGROUND_TASKS": "on" if tasks else "off",
                "EVENTQ_BACKGROUND_TARGET_MS": str(args.target_ms),
                "EVENTQ_BACKGROUND_SLEEP_MS": str(sleep_ms),
                "EVENTQ_BACKGROUND_IDLE_SECS": f"{args.idle_secs:g}",
                # Retention runs only as a background update: off in both
                # modes, so that the wrap update is their one difference.
                "EVENTQ_EVENT_LOG_PRUNE_SECS": "0",
            },
        )

    # -- the measurement ------------------------------------------------------------

    async def measure(self, results: dict[str, Any]) -> None:
        args = self.args
        rounds: list[dict[str, Any]] = []
        results["rounds"] = rounds
        windows: dict[str, list[Window]] = {mode: [] for mode in MODES}
        for number in range(1, args.rounds + 1):
            for mode in MODES:
                log(f"round {number} of {args.rounds}, {mode} the update")
                window, record = await self.round(number, mode)
                rounds.append(record)
                windows[mode].append(window)
        results["modes"] = {mode: mode_summary(windows[mode]) for mode in MODES}
        results["clients"] = self.client_problems
        results["finish"] = await self.finish()
        results["keys"] = await self.check_keys()

    async def round(self, number: int, mode: str) -> tuple[Window, dict[str, Any]]:
        args = self.args
        running = mode == "with"
        server = self.round_server(f"{mode}-{number}", tasks=running, sleep_ms=args.sleep_ms)
        record: dict[str, Any] = {"round": number, "mode": mode}
        before = await self.status()
        record["status_at_start"] = before.brief()
        if running and before.done:
            raise BenchError(f"the update finished before round {number}'s window: use more --rows")
        log(f"server: starting on port {server.port} (log {server.log_path})")
        server.start()
        readers = Readers(
            args, ServerGroup([server]), self.users[: args.clients], self.database.realm_id
        )
        try:
            await self.consuming(readers)
            await readers.grow_to(args.clients)
            if running:
                record["settle"] = await self.settle(server, before)
            if args.warmup > 0:
                await self.window(readers, server, args.warmup)
            first = await self.status()
            log(f"round {number}, {mode}: {args.duration:g} s measured")
            window = await self.window(readers, server, args.duration)
            last = await self.status()
            problems = readers.problems()
            await readers.shrink_to(0)
        finally:
            readers.close_all()
            server.stop()
        self.client_problems = merge_problems(self.client_problems, problems)
        record |= {
            "status_before": first.brief(),
            "status_after": last.brief(),
            "window_secs": round(window.secs, 3),
            "items_in_window": last.items_done - first.items_done,
            "batches_in_window": last.batches - first.batches,
            "items_per_sec_in_window": round((last.items_done - first.items_done) / window.secs, 1),
            "finished_in_window": running and last.done,
            "deliveries": round_summary(window),
            "server_warnings": server.warnings()[-20:],
        }
        return window, record

    async def settle(self, server: FreezableServer, before: Status) -> dict[str, Any]:
        """Until this server's runner has done a batch (`status` says the
        update is running) and its batch size has settled, or --settle-secs."""
        args = self.args
        started = time.monotonic()
        deadline = started + max(args.settle_secs, 60.0)
        while True:
            server.check()
            now = await self.status()
            if now.done:
                raise BenchError("the update finished while its runner settled: use more --rows")
            if now.batches > before.batches and now.state == "running":
                break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"no batch of {UPDATE} within {deadline - started:.0f} s of the server's"
                    f" start with EVENTQ_BACKGROUND_TASKS=on (status: {now.brief()})"
                )
            await asyncio.sleep(STATUS_POLL_SECS)
        first_batch = time.monotonic() - started
        deadline = started + args.settle_secs
        while not now.settled(args.target_ms, before) and time.monotonic() < deadline:
            await asyncio.sleep(STATUS_POLL_SECS)
            server.check()
            now = await self.status()
            if now.done:
                raise BenchError("the update finished while its runner settled: use more --rows")
        return {
            "first_batch_secs": round(first_batch, 1),
            "secs": round(time.monotonic() - started, 1),
            "settled": now.settled(args.target_ms, before),
            "batches": now.batches - before.batches,
            "batch_size": now.batch_size,
            "items_per_sec": None if now.items_per_sec is None else round(now.items_per_sec, 1),
        }

    async def window(self, readers: Readers, server: FreezableServer, secs: float) -> Window:
        """--rate notices/s for `secs` to the parked clients while the
        registrar registers; every notice read before it returns."""
        args = self.args
        for client in readers.clients:
            client.seqs.clear()
        readers.reads = []
        stream0 = (await readers.stats())["stream"]
        registrar = Registrar(
            f"http://{HOST}:{server.port}",
            self.users,
            self.registered,
            args.registers,
            args.concurrency,
        )
        meters: list[tuple[CpuMeter, float]] = []

        def release() -> None:
            meters.append((CpuMeter(readers.server, self.broker), postgres_cpu_secs()))
            registrar.start()

        plans = self.plans(
            readers.users,
            args.recipients,
            event_log=True,
            total=round(args.rate * secs),
            rate=args.rate,
            max_secs=secs * 3,
        )
        try:
            sent, _ = await self.send(plans, readers.check, on_release=release)
        finally:
            await asyncio.to_thread(registrar.finish)
            self.registered += registrar.used
        measured = time.monotonic() - meters[0][0].started
        deliveries = await collect_round(
            readers, sent, meters[0], stream0, args.recipients, event_log=True
        )
        return Window(deliveries, registrar.one_at_a_time, registrar.at_once, measured)

    # -- finishing the update, and its checks -----------------------------------------

    async def finish(self) -> dict[str, Any]:
        """A server that runs the update, with --finish-sleep-ms before each
        batch, until it is done or --finish-limit s; it stays up for
        `check_keys`."""
        args = self.args
        limit = args.finish_limit
        server = self.round_server("finish", tasks=limit > 0, sleep_ms=args.finish_sleep_ms)
        self.checker = server
        before = await self.status()
        result: dict[str, Any] = {"status_at_start": before.brief(), "limit_secs": limit}
        log(f"finishing the update (at most {limit:g} s); server on port {server.port}")
        server.start()
        started = time.monotonic()
        cpu0 = server.cpu_secs(), postgres_cpu_secs()
        now = before
        while limit > 0 and not now.done and time.monotonic() - started < limit:
            await asyncio.sleep(STATUS_POLL_SECS)
            server.check()
            now = await self.status()
        secs = time.monotonic() - started
        result |= {
            "done": now.done,
            "secs": round(secs, 1),
            "items": now.items_done - before.items_done,
            "items_per_sec": round((now.items_done - before.items_done) / secs, 1),
            "server_cpu_share": round((server.cpu_secs() - cpu0[0]) / secs, 3),
            "postgres_cpu_share": round((postgres_cpu_secs() - cpu0[1]) / secs, 3),
            "status_at_end": now.brief(),
        }
        return result

    async def check_keys(self) -> dict[str, Any]:
        """The legacy rows' schemes and the update's count, then a sample of
        the wrapped keys authenticated (which rewrites them as scheme 2) and
        a wrong key refused."""
        args = self.args
        assert self.checker is not None
        status = await self.status()
        with psycopg.connect(self.database.url) as conn:
            schemes: dict[int, int] = dict(
                conn.execute(
                    "SELECT api_key_hash_scheme, count(*) FROM users WHERE realm_id = %s"
                    " GROUP BY 1",
                    (self.legacy_realm,),
                ).fetchall()
            )
            clients_realm: dict[int, int] = dict(
                conn.execute(
                    "SELECT api_key_hash_scheme, count(*) FROM users WHERE realm_id = %s"
                    " GROUP BY 1",
                    (self.database.realm_id,),
                ).fetchall()
            )
            # (number in LEGACY_SQL, user id) of wrapped rows, drawn at random.
            picked: list[tuple[int, int]] = conn.execute(
                "SELECT substring(email FROM '^legacy([0-9]+)@')::int, id FROM users"
                " WHERE realm_id = %s AND api_key_hash_scheme = %s ORDER BY random() LIMIT %s",
                (self.legacy_realm, HASH_WRAPPED, args.check_keys),
            ).fetchall()
        result: dict[str, Any] = {
            "rows": args.rows,
            "update_done": status.done,
            "items_done": status.items_done,
            "schemes": {str(scheme): count for scheme, count in sorted(schemes.items())},
            "clients_realm_schemes": {
                str(scheme): count for scheme, count in sorted(clients_realm.items())
            },
        }
        url = f"http://{HOST}:{self.checker.port}/api/v1/users/me"
        answers = await asyncio.to_thread(
            authenticate_all,
            url,
            [(legacy_email(n), legacy_key(self.seed, n), user_id) for n, user_id in picked],
        )
        result["sampled"] = len(picked)
        result["authenticated"] = sum(1 for answer in answers if answer["ok"])
        result["failed"] = [answer for answer in answers if not answer["ok"]][:5]
        with psycopg.connect(self.database.url) as conn:
            rewritten = conn.execute(
                "SELECT count(*) FROM users WHERE id = ANY(%s) AND api_key_hash_scheme = %s",
                ([user_id for _, user_id in picked], HASH_HMAC),
            ).fetchone()
        assert rewritten is not None
        result["rewritten_as_scheme_2"] = int(rewritten[0])
        if picked:
            number, user_id = picked[0]
            key = legacy_key(self.seed, number)
            wrong = key[:-1] + ("0" if key[-1] != "0" else "1")
            refused = await asyncio.to_thread(
                authenticate_all, url, [(legacy_email(number), wrong, user_id)]
            )
            result["wrong_key_status"] = refused[0]["status"]
        return result


def authenticate_all(url: str, users: Sequence[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """`GET users/me` as each (email, key, expected user id): whether each
    answered 200 with that user's id."""
    answers = []
    with requests.Session() as session:
        for email, key, user_id in users:
            response = session.get(url, auth=(email, key), timeout=30)
            found = response.json().get("user_id") if response.status_code == 200 else None
            answers.append(
                {
                    "email": email,
                    "status": response.status_code,
                    "ok": response.status_code == 200 and found == user_id,
                    "body": "" if response.status_code == 200 else response.text[:200],
                }
            )
    return answers


def merge_problems(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    merged = dict(total)
    for key, value in more.items():
        if key == "last_error":
            merged[key] = value
        else:
            merged[key] = merged.get(key, 0) + value
    return merged


# -- the figures ------------------------------------------------------------------------


def round_summary(window: Window) -> dict[str, Any]:
    deliveries = window.deliveries
    return {
        "notices": len(deliveries.sent.at),
        "reads": deliveries.reads,
        "reads_expected": deliveries.reads_expected,
        "missing": deliveries.missing,
        "extra": deliveries.extra,
        "latency_ms": spread(deliveries.latencies),
        "registers_one_at_a_time": len(window.one_at_a_time),
        "registers_at_once": len(window.at_once),
        "register_ms": spread(window.one_at_a_time),
        "register_at_once_ms": spread(window.at_once),
    }


def mode_summary(windows: Sequence[Window]) -> dict[str, Any]:
    """One mode over its rounds, every sample pooled (stream_costs.py's
    `summary` for the deliveries and CPU)."""
    deliveries = summary([window.deliveries for window in windows])
    one = [x for window in windows for x in window.one_at_a_time]
    many = [x for window in windows for x in window.at_once]
    secs = sum(window.secs for window in windows)
    return deliveries | {
        "window_secs": round(secs, 3),
        "registers_one_at_a_time": len(one),
        "registers_at_once": len(many),
        "register_ms": spread(one),
        "register_at_once_ms": spread(many),
    }


def update_in_windows(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The update's progress over the "with" windows."""
    running = [each for each in rounds if each["mode"] == "with"]
    items = sum(each["items_in_window"] for each in running)
    secs = sum(each["window_secs"] for each in running)
    sizes = [each["status_after"]["batch_size"] for each in running]
    rates = [each["status_after"]["items_per_sec"] for each in running]
    return {
        "items": items,
        "batches": sum(each["batches_in_window"] for each in running),
        "items_per_sec": round(items / secs, 1) if secs else None,
        "batch_size": sizes[-1] if sizes else None,
        "batch_items_per_sec": rates[-1] if rates else None,
    }


def figures_of(results: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures, flat (ms unless named otherwise)."""
    figures: dict[str, float | None] = {}
    modes = results.get("modes") or {}
    for mode in MODES:
        each = modes.get(mode) or {}
        for name, key in (
            ("latency", "latency_ms"),
            ("register", "register_ms"),
            ("register_at_once", "register_at_once_ms"),
        ):
            spread_ms = each.get(key) or {}
            figures[f"{name}_{mode}_p50_ms"] = spread_ms.get("p50")
            figures[f"{name}_{mode}_p99_ms"] = spread_ms.get("p99")
        shares = each.get("cpu_shares") or {}
        figures[f"server_cpu_{mode}"] = shares.get("server")
        figures[f"postgres_cpu_{mode}"] = shares.get("postgres")
    update = update_in_windows(results.get("rounds") or [])
    figures["update_items_per_sec"] = update["items_per_sec"]
    figures["update_batch_size"] = update["batch_size"]
    figures["update_batch_items_per_sec"] = update["batch_items_per_sec"]
    finish = results.get("finish") or {}
    figures["finish_items_per_sec"] = finish.get("items_per_sec") if finish.get("items") else None
    return figures


BARRED = (
    ("send->delivery p99", "latency"),
    ("register p99, one at a time", "register"),
    ("register p99, several at once", "register_at_once"),
)


def bars_of(figures: dict[str, float | None]) -> list[dict[str, Any]]:
    """Issue 16's bar for each p99 of BARRED: with / without <= BAR_RATIO."""
    bars: list[dict[str, Any]] = []
    for label, name in BARRED:
        without, with_ = figures[f"{name}_without_p99_ms"], figures[f"{name}_with_p99_ms"]
        if without is None or with_ is None or not without:
            bars.append({"figure": label, "met": None, "text": f"bar: {label}: not measured"})
            continue
        value = with_ / without
        met = value <= BAR_RATIO
        bars.append(
            {
                "figure": label,
                "without_ms": without,
                "with_ms": with_,
                "ratio": round(value, 3),
                "limit": BAR_RATIO,
                "met": met,
                "text": f"bar: {label} with the update {with_:.2f} ms, without {without:.2f} ms:"
                f" {value:.2f}x <= {BAR_RATIO:g}x: {'met' if met else 'MISSED'}",
            }
        )
    return bars


def checks_of(results: dict[str, Any]) -> list[str]:
    """What went wrong: empty when every event was read once, no batch ran
    without the runner, no window lost its update, and the keys hold."""
    problems: list[str] = []
    for each in results.get("rounds") or []:
        label = f"round {each['round']}, {each['mode']}"
        deliveries = each["deliveries"]
        if (
            deliveries["missing"]
            or deliveries["extra"]
            or deliveries["reads"] != deliveries["reads_expected"]
        ):
            problems.append(
                f"{label}: {deliveries['reads']} of {deliveries['reads_expected']} reads,"
                f" {deliveries['missing']} missing, {deliveries['extra']} extra"
            )
        if (
            each["mode"] == "without"
            and each["status_after"]["batches"] != (each["status_at_start"]["batches"])
        ):
            problems.append(f"{label}: batches of the update ran without a runner")
        if each["mode"] == "with" and each["status_before"]["state"] != "running":
            problems.append(f"{label}: the update was {each['status_before']['state']!r}")
        if each["mode"] == "with" and each["batches_in_window"] == 0:
            problems.append(f"{label}: no batch of the update ran during the window")
        if each.get("finished_in_window"):
            problems.append(
                f"{label}: the update finished during the window (use more --rows):"
                " part of it was without"
            )
    clients = results.get("clients") or {}
    bad = {key: value for key, value in clients.items() if value and key != "last_error"}
    if bad:
        problems.append(f"clients: {bad} (last error {clients.get('last_error')!r})")
    keys = results.get("keys") or {}
    if keys:
        schemes = keys["schemes"]  # counted before the sampled logins
        wrapped = schemes.get(str(HASH_WRAPPED), 0)
        if keys["update_done"]:
            if schemes.get(str(HASH_SHA256), 0):
                problems.append(
                    f"the update is done, and {schemes[str(HASH_SHA256)]} legacy rows are"
                    " still of scheme 1"
                )
            if wrapped != keys["rows"]:
                problems.append(f"the update is done: {wrapped} of {keys['rows']} rows wrapped")
        if keys["items_done"] != wrapped:
            problems.append(f"the update counts {keys['items_done']} items; {wrapped} rows wrapped")
        if sum(keys["schemes"].values()) != keys["rows"]:
            problems.append(f"legacy rows by scheme: {schemes}, {keys['rows']} inserted")
        if set(keys["clients_realm_schemes"]) != {str(HASH_HMAC)}:
            problems.append(f"the clients' realm's keys changed: {keys['clients_realm_schemes']}")
        if keys["authenticated"] != keys["sampled"]:
            problems.append(
                f"{keys['sampled'] - keys['authenticated']} of {keys['sampled']} wrapped keys"
                f" did not authenticate: {keys['failed']}"
            )
        if keys.get("wrong_key_status", 401) != 401:
            problems.append(f"a wrong key was answered {keys['wrong_key_status']}, not 401")
        if not keys["sampled"]:
            problems.append("no wrapped key to authenticate: the update wrapped nothing")
    return problems


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(results: dict[str, Any]) -> str:
    out = io.StringIO()
    config = results["config"]
    out.write(f"server code: {config['source']}\n")
    if results.get("world"):
        world = results["world"]
        out.write(
            "clients' realm: "
            + ", ".join(f"{n:,} {table}" for table, n in world["clients_realm"].items())
            + f"; legacy realm: {world['legacy']['rows']:,} users of scheme 1"
            f" (inserted in {world['legacy']['insert_secs']:g} s; users table"
            f" {world['legacy']['users_table_bytes'] / 2**20:,.0f} MiB)\n"
        )
    modes = results.get("modes") or {}
    if set(modes) == set(MODES):
        without, with_ = modes["without"], modes["with"]
        out.write(
            f"\n{config['rounds']} rounds of each mode, taking turns, each on a newly started"
            f" server: {config['duration']:g} s of {config['rate']:g} notices/s (send_event"
            f" through RabbitMQ, {config['publishers']} publishers) to {config['clients']} parked"
            f" clients, {config['recipients']} users per notice, while registers run"
            f" ({config['registers']} one at a time, then {config['registers']} with"
            f" {config['concurrency']} at once, and again); the update with a target of"
            f" {config['target_ms']} ms per batch and {config['sleep_ms']} ms before each\n"
        )
        rows: list[tuple[str, ...]] = []
        for label, key in (
            ("send->delivery", "latency_ms"),
            ("register, one at a time", "register_ms"),
            (f"register, {config['concurrency']} at once", "register_at_once_ms"),
        ):
            for quantile in ("p50", "p99", "max"):
                a = (without[key] or {}).get(quantile)
                b = (with_[key] or {}).get(quantile)
                rows.append((f"{label} {quantile} (ms)", _ms(a), _ms(b), ratio(b, a)))
        rows.append(
            (
                "events read / registers (one, at once)",
                f"{without['reads']:,} / {without['registers_one_at_a_time']:,},"
                f" {without['registers_at_once']:,}",
                f"{with_['reads']:,} / {with_['registers_one_at_a_time']:,},"
                f" {with_['registers_at_once']:,}",
                "",
            )
        )
        rows.append(
            (
                "notices/s sent",
                f"{without['notices_per_sec']:,.1f}",
                f"{with_['notices_per_sec']:,.1f}",
                "",
            )
        )
        for name in ("server", "postgres", "broker", "publishers", "generator"):
            a, b = without["cpu_shares"].get(name), with_["cpu_shares"].get(name)
            rows.append((f"CPU, {name} (share of a core)", _share(a), _share(b), ratio(b, a)))
        out.write(_table(("", "without", "with the update", "with/without"), rows))
        for bar in results.get("bars") or []:
            out.write(bar["text"] + "\n")
    rounds = results.get("rounds") or []
    running = [each for each in rounds if each["mode"] == "with"]
    if running:
        out.write(f"\nthe update during the windows ({UPDATE}, {config['rows']:,} rows)\n")
        rows = []
        for each in running:
            after = each["status_after"]
            settle = each.get("settle") or {}
            rows.append(
                (
                    f"round {each['round']}",
                    f"{each['items_in_window']:,}",
                    f"{each['batches_in_window']}",
                    f"{each['items_per_sec_in_window']:,.0f}",
                    f"{after['batch_size'] or '-'}",
                    "-" if after["items_per_sec"] is None else f"{after['items_per_sec']:,.0f}",
                    f"{settle.get('secs', '-')} s"
                    + ("" if settle.get("settled", True) else " (not settled)"),
                    f"{after['items_done']:,}",
                )
            )
        out.write(
            _table(
                (
                    "",
                    "items",
                    "batches",
                    "items/s",
                    "batch size",
                    "in-batch items/s",
                    "settling",
                    "done so far",
                ),
                rows,
            )
        )
    finish = results.get("finish") or {}
    if finish:
        end = finish["status_at_end"]
        if finish["limit_secs"] <= 0:
            out.write("\nthe update was not finished (--finish-limit 0)")
        elif finish["status_at_start"]["state"] == "done":
            out.write("\nthe update was done before its last stretch")
        else:
            out.write(
                f"\nfinishing, {config['finish_sleep_ms']} ms before each batch, no clients:"
                f" {finish['items']:,} items in {finish['secs']:g} s"
                f" ({finish['items_per_sec']:,.0f}/s; CPU server {finish['server_cpu_share']:.2f},"
                f" PostgreSQL {finish['postgres_cpu_share']:.2f});"
                f" {'done' if finish['done'] else 'NOT done within the limit'}"
            )
        out.write(
            f"; {end['items_done']:,} of {config['rows']:,} rows wrapped"
            f" ({end['state']}, last batch {end['batch_size'] or '-'} items)\n"
        )
    keys = results.get("keys") or {}
    if keys:
        out.write(
            f"legacy rows by scheme: {keys['schemes']}; {keys['authenticated']} of"
            f" {keys['sampled']} sampled wrapped keys authenticated (then"
            f" {keys['rewritten_as_scheme_2']} rewritten as scheme 2 at that login);"
            f" a wrong key: {keys.get('wrong_key_status', '-')}\n"
        )
    warnings = sum(len(each.get("server_warnings") or []) for each in rounds)
    if warnings:
        out.write(f"server warnings or errors logged in the rounds: {warnings} (see --json)\n")
    problems = results.get("problems") or []
    if problems:
        out.write("\nchecks FAILED:")
    elif results.get("completed"):
        out.write(
            "\nchecks: every event read once, no batch without a runner, the keys authenticate"
        )
    else:
        out.write("\nchecks: nothing wrong in what ran (the run did not finish)")
    out.write("".join(f"\n  {problem}" for problem in problems) + "\n")
    return out.getvalue()


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_world_arguments(parser, "users of the clients' realm", "parked clients")
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="legacy users for the update to wrap"
    )
    parser.add_argument("--rate", type=float, default=200.0, help="notices/s during a window")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each window")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each mode, taking turns")
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="uncounted seconds before each window"
    )
    parser.add_argument("--publishers", type=int, default=2, help="publisher processes")
    parser.add_argument(
        "--registers", type=int, default=20, help="registers of each block (one at a time, at once)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="registers at once")
    parser.add_argument(
        "--target-ms", type=int, default=100, help="EVENTQ_BACKGROUND_TARGET_MS in the rounds"
    )
    parser.add_argument(
        "--sleep-ms", type=int, default=1000, help="EVENTQ_BACKGROUND_SLEEP_MS in the rounds"
    )
    parser.add_argument("--idle-secs", type=float, default=0.2, help="EVENTQ_BACKGROUND_IDLE_SECS")
    parser.add_argument(
        "--settle-secs",
        type=float,
        default=60.0,
        help="at most this long for a new runner's batch size to settle",
    )
    parser.add_argument(
        "--finish-limit",
        type=float,
        default=1200.0,
        help="seconds to finish the update after the rounds (0: leave it)",
    )
    parser.add_argument(
        "--finish-sleep-ms", type=int, default=0, help="EVENTQ_BACKGROUND_SLEEP_MS to finish it"
    )
    parser.add_argument(
        "--check-keys", type=int, default=20, help="wrapped keys authenticated at the end"
    )
    add_run_arguments(parser)
    args = parse_with_quick(parser, argv, QUICK)
    check_world(parser, args)
    if not 1 <= args.rows <= MAX_ROWS:
        parser.error(f"--rows must be 1 to {MAX_ROWS:,} (the key ids are L + 7 digits)")
    if min(args.rate, args.duration) <= 0 or args.warmup < 0:
        parser.error("--rate and --duration must be positive")
    if min(args.publishers, args.rounds, args.registers, args.concurrency, args.target_ms) < 1:
        parser.error("--publishers, --rounds, --registers, --concurrency, --target-ms: >= 1")
    if min(args.sleep_ms, args.finish_sleep_ms, args.finish_limit, args.settle_secs) < 0:
        parser.error("--sleep-ms, --finish-sleep-ms, --finish-limit, --settle-secs: >= 0")
    if args.idle_secs <= 0:
        parser.error("--idle-secs must be positive")
    args.clients_per_user = 1  # fanout.py's clients: client i is user i
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


CONFIG_KEYS = (
    *QUICK,
    "recipients",
    "publishers",
    "target_ms",
    "sleep_ms",
    "idle_secs",
    "finish_sleep_ms",
    "quick",
)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    database = Database(os.environ.get("EVENTQ_DATABASE_URL") or "host=127.0.0.1 user=postgres")
    vhost = Vhost(args.amqp_base)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-background-bench-"))
    run = UpdateRun(args, database, vhost, workdir)
    results: dict[str, Any] = {
        "config": {key: getattr(args, key) for key in CONFIG_KEYS}
        | {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "source": source_state(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "database": database.name,
            "vhost": vhost.name,
            "workdir": str(workdir),
        },
    }
    status = 1
    try:
        log(f"vhost {vhost.name}: creating")
        vhost.create()
        log(f"database {database.name}: creating, migrating, {args.users} users and their realm")
        database.create()
        run.users = database.populate(args.users)
        world: dict[str, Any] = {
            "clients_realm": populate_domain(
                database, run.users, args.streams, args.subs_per_user, args.messages
            )
        }
        results["world"] = world

        async def measure() -> None:
            # What migration 0009 enqueued, on a database with no legacy row yet.
            await run.background("run", "--until-done", limit_secs=300)
            log(f"{args.rows:,} legacy users of scheme 1")
            world["legacy"] = await asyncio.to_thread(run.insert_legacy_users)
            await run.background("enqueue", UPDATE)
            world["enqueued"] = (await run.status()).brief()
            await run.measure(results)

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(measure())
        status = 0
    except BenchError as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        for server in run.servers:
            server.stop()
        remove_scratch(database, vhost, workdir, keep=args.keep_db)
    results["completed"] = status == 0
    results["figures"] = figures_of(results)
    results["update"] = update_in_windows(results.get("rounds") or [])
    results["bars"] = bars_of(results["figures"])
    results["problems"] = checks_of(results)
    if status == 0 and results["problems"]:
        status = 1
    if status != 0:
        log("the run failed; what it measured:")
    report = render(results)
    if args.json:
        print(report, file=sys.stderr)
        print(json.dumps(results, indent=2, default=str))
    else:
        print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
