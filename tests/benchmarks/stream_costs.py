"""What stream positions cost, on the path a user pays for, each
figure beside its comparison in the same run.

Run from the repository root:

    .venv/bin/python -m tests.benchmarks.stream_costs [--quick] [--json] [--keep-db]

(or `.venv/bin/python tests/benchmarks/stream_costs.py`). It builds its own
world and tears it down, with the other scripts' pieces: a RabbitMQ vhost
`eventq_bench_<random>` (rabbitmq.py's `Vhost`), a fresh database
`eventq_bench_<random>` (fanout.py's `Database`) with one realm of --users
users, --streams streams and their subscriptions and messages (register.py's
`populate_domain`), and the real server (`python -m server serve`) consuming
its notify queue in that vhost, with the delivery log on and the per-user rate
limiter on with a limit nobody reaches (fanout.py's `eventq_env`). Every
request carries HTTP Basic auth; notices are stream `message` events with
per-user flags (fanout.py's `Messages`: the sender's ["read"], the others'
[]), sent through RabbitMQ by publisher processes with
`generation.send.send_event` (publisher confirms, and the event log unless
EVENTQ_EVENT_LOG=0 is measured).

1. send->delivery latency: --clients clients (one user each) register
   (`POST /api/v1/register`, `event_types=["message"]`) and long-poll;
   --publishers processes send --rate notices/s in all for --duration s, each
   notice to --recipients of those users. Latency = when a client had read
   the event - time.time() just before its `send_event` call. After an
   uncounted --warmup with the event log on, --rounds runs with it on and
   with it off, taking turns, each mode's samples pooled: both, their ratio,
   each process's CPU, and the bar: p99 <= 10 ms with the log on (the log
   must not make delivery slow).
2. register: register.py's phases on this realm (`run_phase`: registers with
   the `zulip` client's parameters, each by another user): one at a time,
   --concurrency at once, and one at a time while --register-rate notices/s
   to every user flow through `send_event`, with the event log on and off.
3. checkpoint: a second server with EVENTQ_CHECKPOINT_SECS=--checkpoint-secs
   and --queues queues (`POST /api/v1/register`, `event_types=["message"]`,
   `fetch_event_types=[]`, pipelined). Restarted (so that its loop-lag window
   holds nothing but this), it is left alone for --lag-window s, checkpointing;
   then `/api/internal/stats`: the last checkpoint's time and longest slice
   on the IO loop (bar: <= 5 ms, a pause clients do not notice), and the loop lag p99 over the
   window; compared with the same server and queues restarted with
   checkpoints off, and with the graceful save of the same queues.
4. recovery: --recovery-events notices sent while the server cannot see
   them, then the server started again on its state directory; time from the
   start until it answers a long-poll of an old queue (`dont_block`) with
   200, after SIGKILL (the server frozen with SIGSTOP while they were sent:
   it rebuilds its queues from the checkpoint and the event log) and after
   SIGTERM (its graceful save; they were sent while it was down), and their
   ratio, with the server's own log lines. After each restart every queue is
   read (`dont_block`, nothing acknowledged): each must hold every event sent
   to its user so far, once.

Every phase checks that every event sent was read or found exactly once; a
failed check fails the run (exit 1) after the report. The bars are reported,
not enforced. Whatever happens (error, Ctrl-C, SIGTERM) the publishers and
servers are stopped, the database dropped and the vhost deleted (unless
--keep-db). `--quick` runs every phase at tiny sizes, in seconds, to check
the script (tests/test_stream_costs_benchmark.py runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import http.client
import io
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from array import array
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

# The scripts beside this one import each other by their bare names (`from
# fanout import ...`); run as `python -m tests.benchmarks.stream_costs`,
# their directory is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson
import uvloop
from fanout import (
    HOST,
    Bench,
    BenchError,
    Database,
    EventqSubject,
    Messages,
    PollClient,
    Recorder,
    ServerGroup,
    User,
    _table,
    die_with_parent,
    eventq_env,
    log,
    source_state,
)
from quickmode import parse_with_quick
from rabbitmq import (
    CpuMeter,
    FreezableServer,
    Publishers,
    Vhost,
    broker_pid,
    remove_scratch,
    spread,
)
from register import SECRET, populate_domain, run_phase

from generation.config import NOTIFY_QUEUE, ProducerConfig
from generation.send import close_for_thread, send_event
from server.durability.saved_queues import CHECKPOINT_SLICE_SECS

DEFAULT_AMQP_BASE = "amqp://guest:guest@127.0.0.1:5672"
# Issue 15's bars.
LATENCY_BAR_MS = 10.0  # send->delivery p99 at 1,000 notices/s, event log on
SLICE_BAR_MS = 5.0  # a checkpoint's longest stretch on the IO loop
# Queues created and read back per connection at once, on this many connections.
PIPELINE = 64
CONNECTIONS = 8
# --quick: every phase at tiny sizes, in seconds, to check the script (a test
# runs it); options given beside --quick still win. 2 publishers: each send
# starts its publisher processes afresh (a spawned Python importing this
# script, about a second of CPU each), 10 sends in all, which was most of a
# quick run with 4. 40 notices/s: a publisher has 20 of a round's notices to
# send before the round's cut-off (3 times --duration), 150 ms a call where
# the call takes 1 to 5 ms; the test checks that none was cut off.
QUICK = {
    "users": 50,
    "streams": 10,
    "subs_per_user": 3,
    "messages": 200,
    "registers": 10,
    "concurrency": 2,
    "register_rate": 20.0,
    "clients": 20,
    "publishers": 2,
    "rate": 40.0,
    "duration": 1.0,
    "rounds": 2,
    "warmup": 0.5,
    "queues": 200,
    "recovery_events": 50,
    "lag_window": 2.0,
}
# The server's own log lines this script reports (server/app.py).
SAVED_LINE = re.compile(r"saved (\d+) queues to \S+ \((\d+) bytes, (\d+) ms\)")
CATCH_UP_LINE = re.compile(
    r"event log: (\d+) events above position \d+ delivered to the restored queues in (\d+) ms.*"
)
REBUILT_LINE = "rebuilding its queues from the checkpoint"
TICKS = os.sysconf("SC_CLK_TCK")


def postgres_cpu_secs() -> float:
    """CPU seconds of this machine's PostgreSQL: every `postgres` process's
    own, plus what each has reaped (the postmaster counts the backends that
    ended, such as a publisher's once it quits)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        total += sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
    return total / TICKS


def recipients(seq: int, user_ids: Sequence[int], per_notice: int) -> list[int]:
    """The users notice `seq` goes to: `per_notice` consecutive ones, from a
    start that moves on by `per_notice` at each notice, so that every user
    gets the same share; all of them when `per_notice` is 0."""
    if per_notice <= 0 or per_notice >= len(user_ids):
        return list(user_ids)
    start = seq * per_notice
    return [user_ids[(start + k) % len(user_ids)] for k in range(per_notice)]


# -- publishers (processes, as rabbitmq.py's) -----------------------------------


@dataclass(frozen=True)
class SendPlan:
    """What one publisher process sends with `send_event`: the messages
    `first_seq`, `first_seq + seq_step`, ..., each from its first recipient
    to `recipients(seq, users, per_notice)`; `count` of them at most, for
    `max_secs` at most, `rate` a second from `offset_secs` after the start
    (0: each as soon as the previous one is confirmed), or until the parent
    says "stop"."""

    config: ProducerConfig
    realm_id: int
    users: tuple[User, ...]
    per_notice: int
    first_seq: int
    seq_step: int
    count: int
    max_secs: float
    rate: float
    offset_secs: float = 0.0


def publisher_main(plan: SendPlan, pipe: Connection) -> None:
    """A publisher process, speaking rabbitmq.py's `Publishers` protocol: sends
    one notice to nobody (to connect, declare the queue and open the event
    log's connection), says ("ready", 0.0), waits for its start time (None:
    quit), sends, then says ("done", result) or ("error", text). The result's
    `sent_at` holds time.time() just before each `send_event` call."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    die_with_parent()
    try:
        send_event(plan.realm_id, {"type": "bench_warmup"}, [], config=plan.config)
        pipe.send(("ready", 0.0))  # (Publishers keeps it as prepare_us; unused here)
        start_at = pipe.recv()
        if start_at is None:
            return
        time.sleep(max(0.0, start_at - time.time()))
        by_id = {user.user_id: user for user in plan.users}
        user_ids = [user.user_id for user in plan.users]
        sent_at = array("d")
        durations = array("d")
        interval = 1.0 / plan.rate if plan.rate else 0.0
        seq = plan.first_seq
        cpu0 = time.process_time()
        started = time.perf_counter()
        deadline = started + plan.max_secs
        while len(sent_at) < plan.count and not pipe.poll():
            now = time.perf_counter()
            if now >= deadline:
                break
            if interval:
                due = started + plan.offset_secs + len(sent_at) * interval
                if now < due:
                    time.sleep(due - now)
            targets = recipients(seq, user_ids, plan.per_notice)
            messages = Messages(plan.realm_id, by_id[targets[0]])
            event = {"type": "message", "message": messages.message(seq)}
            users = [{"id": user_id, "flags": messages.flags(user_id)} for user_id in targets]
            wall = time.time()
            before = time.perf_counter()
            send_event(plan.realm_id, event, users, config=plan.config)
            durations.append(time.perf_counter() - before)
            sent_at.append(wall)
            seq += plan.seq_step
        result = {
            "sent": len(sent_at),
            "elapsed_secs": time.perf_counter() - started,
            "cpu_secs": time.process_time() - cpu0,
            "durations": durations.tobytes(),
            "sent_at": sent_at.tobytes(),
        }
        pipe.send(("done", result))
    except Exception as exc:
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        close_for_thread()


class MessagePublishers(Publishers):
    """rabbitmq.py's `Publishers` (started, warmed up, then released together)
    running `publisher_main` above, which can also be told to stop."""

    def __init__(self, plans: Sequence[SendPlan]):  # Publishers' fields, another target
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        self.prepare_us: list[float] = []
        for plan in plans:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=publisher_main, args=(plan, theirs), daemon=True, name="publisher"
            )
            process.start()
            theirs.close()
            self.pipes.append(ours)
            self.processes.append(process)

    def stop(self) -> None:
        """Each publisher ends after its current notice, then reports."""
        for pipe in self.pipes:
            pipe.send("stop")


@dataclass
class Sent:
    """What publishers sent: each notice's send time, and their calls' durations."""

    at: dict[int, float]  # seq -> time.time() just before its send_event call
    durations: list[float]
    returned: dict[int, float]  # seq -> when its send_event call returned
    elapsed_secs: float  # the longest publisher's sending time
    cpu_secs: float  # the publishers' CPU, summed

    @classmethod
    def of(cls, plans: Sequence[SendPlan], results: Sequence[dict[str, Any]]) -> Sent:
        at: dict[int, float] = {}
        durations: list[float] = []
        returned: dict[int, float] = {}
        for plan, result in zip(plans, results, strict=True):
            times = array("d")
            times.frombytes(result["sent_at"])
            took = result["durations"]  # Publishers.results made it an array
            for index, (wall, secs) in enumerate(zip(times, took, strict=True)):
                seq = plan.first_seq + index * plan.seq_step
                at[seq] = wall
                returned[seq] = wall + secs
            durations += took
        return cls(
            at,
            durations,
            returned,
            max(result["elapsed_secs"] for result in results),
            sum(result["cpu_secs"] for result in results),
        )

    def rate(self) -> float:
        return len(self.at) / self.elapsed_secs if self.elapsed_secs else 0.0


@dataclass
class Round:
    """One timed send->delivery run: what was sent and read, and the CPU."""

    event_log: bool
    sent: Sent
    reads_expected: int
    reads: int
    latencies: list[float]  # seconds, one per (notice, recipient) read
    # The same, from when the send_event call returned (negative: the client
    # had the event before the publisher had RabbitMQ's confirm).
    after_call: list[float]
    cpu: dict[str, Any]  # CpuMeter.read() plus postgres_cpu_secs, publishers_cpu_secs
    stream: dict[str, int]  # STREAM_COUNTERS' increase over the run
    missing: int = 0
    extra: int = 0
    never_read: set[int] = field(default_factory=set)


# server/delivery/eventlog.py's counters; "duplicates" are notices whose event had come
# from the log first (read to close a gap, or by the tail reader).
STREAM_COUNTERS = ("duplicates", "late_arrivals", "rolled_back", "given_up", "lookups")


def summary(rounds: Sequence[Round]) -> dict[str, Any]:
    """The figures of one mode over its rounds, their samples pooled."""
    cpu: dict[str, float | None] = {}
    for key in rounds[0].cpu:
        values = [each.cpu[key] for each in rounds]
        # None: that process was not found (a broker on another machine).
        cpu[key] = None if None in values else sum(values)
    sending = sum(each.sent.elapsed_secs for each in rounds)
    notices = sum(len(each.sent.at) for each in rounds)
    return {
        "event_log": rounds[0].event_log,
        "rounds": len(rounds),
        "notices": notices,
        "notices_per_sec": round(notices / sending, 1) if sending else 0.0,
        "reads_expected": sum(each.reads_expected for each in rounds),
        "reads": sum(each.reads for each in rounds),
        "missing": sum(each.missing for each in rounds),
        "extra": sum(each.extra for each in rounds),
        "missing_seqs": sorted(set().union(*(each.never_read for each in rounds)))[:20],
        "latency_ms": spread([x for each in rounds for x in each.latencies]),
        "send_event_ms": spread([x for each in rounds for x in each.sent.durations]),
        "after_call_ms": spread([x for each in rounds for x in each.after_call]),
        # Of one core, from the publishers' release until the last read
        # ("generator": this process, the clients).
        "cpu_shares": {
            name: None if used is None or not elapsed else round(used / elapsed, 3)
            for name in ("server", "broker", "postgres", "publishers", "generator")
            for used, elapsed in [(cpu[f"{name}_cpu_secs"], cpu["elapsed_secs"])]
        },
        "stream": {
            key: sum(each.stream.get(key, 0) for each in rounds) for key in rounds[0].stream
        },
    }


# -- the clients -------------------------------------------------------------------


class Readers(EventqSubject):
    """fanout.py's eventq clients (`POST /api/v1/register` for `message`
    events, then long-polls; client i is user i), each message read recorded
    with the time its response was read: latencies are worked out afterwards
    from the publishers' send times."""

    def __init__(
        self, args: argparse.Namespace, server: ServerGroup, users: list[User], realm_id: int
    ):
        super().__init__(args, server, users, Recorder(), Messages(realm_id, users[0]))
        self.reads: list[tuple[int, float]] = []  # (seq, time.time() it was read)

    def on_client_event(self, client: PollClient, event: dict[str, Any], now: float) -> None:
        self.bench_events += 1
        seq = int(event["message"]["id"])
        client.seqs.append(seq)
        self.reads.append((seq, now))


def expected_by_user(
    seqs: Sequence[int], user_ids: Sequence[int], per_notice: int
) -> dict[int, collections.Counter[int]]:
    """Each user's messages among notices `seqs`."""
    expected: dict[int, collections.Counter[int]] = {
        user_id: collections.Counter() for user_id in user_ids
    }
    for seq in seqs:
        for user_id in recipients(seq, user_ids, per_notice):
            expected[user_id][seq] += 1
    return expected


def compare(expected: collections.Counter[int], found: collections.Counter[int]) -> tuple[int, int]:
    """(missing, extra: repeated or never sent)."""
    return sum((expected - found).values()), sum((found - expected).values())


# -- requests on pipelined connections --------------------------------------------


def request(method: str, target: str, user: User, form: str = "") -> bytes:
    body = form.encode()
    head = f"{method} {target} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: {user.authorization}\r\n"
    if body:
        head += (
            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
        )
    return head.encode() + b"\r\n" + body


REGISTER_FORM = urllib.parse.urlencode({"event_types": '["message"]', "fetch_event_types": "[]"})


def poll_target(queue_id: str) -> str:
    """Everything a queue holds, at once, acknowledging nothing."""
    return f"/api/v1/events?queue_id={queue_id}&last_event_id=-1&dont_block=true"


async def exchange(bench: Bench, requests: Sequence[bytes], what: str) -> list[tuple[int, bytes]]:
    """Send `requests` on CONNECTIONS connections, PIPELINE in flight on
    each; their answers, in order."""
    answers: list[tuple[int, bytes]] = [(0, b"")] * len(requests)

    async def worker(offset: int) -> None:
        connection = await bench.connect_internal()
        try:
            step = CONNECTIONS * PIPELINE
            for start in range(offset * PIPELINE, len(requests), step):
                batch = range(start, min(start + PIPELINE, len(requests)))
                futures = [connection.send(requests[i]) for i in batch]
                for i, future in zip(batch, futures, strict=True):
                    answers[i] = await bench.await_future(future, 120, what)
        finally:
            connection.close()

    await asyncio.gather(*(worker(offset) for offset in range(CONNECTIONS)))
    return answers


def forget_connections(bench: Bench) -> None:
    """After a restart: the stats connection is to the old process."""
    for control in bench.controls.values():
        control.close()
    bench.controls.clear()


# -- the run -------------------------------------------------------------------------


class Run:
    """The world of one run (database, vhost, users, working directory) and
    the phases measured in it."""

    def __init__(self, args: argparse.Namespace, database: Database, vhost: Vhost, workdir: Path):
        self.args = args
        self.database = database
        self.vhost = vhost
        self.workdir = workdir
        self.users: list[User] = []
        self.seq = 0  # the last message id used; every notice of the run has its own
        self.servers: list[FreezableServer] = []
        self.broker = broker_pid()  # RabbitMQ's node, for its CPU

    def server(self, name: str, extra: dict[str, str]) -> FreezableServer:
        """The measured server: delivery log and rate limiter on (fanout.py's
        `eventq_env`), consuming the run's vhost, its state in its own directory."""
        directory = self.workdir / name
        directory.mkdir()
        env = eventq_env(directory) | {
            "EVENTQ_AMQP_URL": self.vhost.url,
            "EVENTQ_NOTIFY_QUEUE": NOTIFY_QUEUE,
            # The clients all authenticate at once: with the default 60 s
            # they would all be checked again at once in the middle of a
            # phase (rabbitmq.py's README section "Re-authentication herd").
            "EVENTQ_AUTH_CACHE_SECS": "3600",
        }
        server = FreezableServer(self.database.url, directory, SECRET, env | extra)
        self.servers.append(server)
        return server

    def plans(
        self,
        users: Sequence[User],
        per_notice: int,
        *,
        event_log: bool,
        total: int,
        rate: float,
        max_secs: float,
    ) -> list[SendPlan]:
        """--publishers plans sharing `total` notices and `rate` (0: flat out)."""
        publishers = self.args.publishers
        config = ProducerConfig(
            amqp_url=self.vhost.url,
            notify_queue=NOTIFY_QUEUE,
            database_url=self.database.url,
            event_log=event_log,
        )
        first = self.seq + 1
        self.seq += total + publishers
        return [
            SendPlan(
                config=config,
                realm_id=self.database.realm_id,
                users=tuple(users),
                per_notice=per_notice,
                first_seq=first + index,
                seq_step=publishers,
                count=math.ceil(total / publishers),
                max_secs=max_secs,
                rate=rate / publishers,
                # Paced publishers take turns: one notice every 1/rate s in all.
                offset_secs=index / rate if rate else 0.0,
            )
            for index in range(publishers)
        ]

    @staticmethod
    async def send(
        plans: list[SendPlan],
        check: Callable[[], None],
        during: Callable[[], Awaitable[Any]] | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> tuple[Sent, Any]:
        """Start publishers for `plans`, release them together (calling
        `on_release` then) and wait until they are done; or, with `during`,
        run it once they are sending, then stop them. Returns what they sent
        and what `during` returned."""
        publishers = MessagePublishers(plans)
        outcome: Any = None
        try:
            await publishers.ready(check)
            start_at = time.time() + 0.1  # every publisher has its start message by then
            publishers.go(start_at)
            if on_release is not None:
                on_release()
            limit = max(plan.max_secs for plan in plans) + 60
            if during is not None:
                await asyncio.sleep(max(0.0, start_at - time.time()))
                outcome = await during()
                publishers.stop()
                limit = 60
            results = await publishers.results(limit, check)
        finally:
            publishers.close()
        return Sent.of(plans, results), outcome

    async def consuming(self, bench: Bench) -> None:
        """Until the server consumes its notify queue (it serves after 5 s
        without, and retries)."""
        deadline = time.monotonic() + 30
        while not (await bench.stats())["consumer"]["consuming"]:
            if time.monotonic() > deadline:
                raise BenchError("the server is not consuming its notify queue after 30 s")
            await asyncio.sleep(0.05)

    async def measure(self, results: dict[str, Any]) -> None:
        """Every phase, each one's figures into `results` as soon as it has them."""
        server = self.server("main", {})
        log(f"server: starting on port {server.port} (log {server.log_path})")
        server.start()
        results["latency"] = await self.latency(server)
        results["register"] = await self.registers(server)
        results["server_warnings"] = server.warnings()
        server.stop()
        await self.checkpoint_and_recovery(results)

    # -- 1. send->delivery -----------------------------------------------------

    async def latency(self, server: FreezableServer) -> dict[str, Any]:
        args = self.args
        readers = Readers(
            args, ServerGroup([server]), self.users[: args.clients], self.database.realm_id
        )
        try:
            await self.consuming(readers)
            log(f"phase 1: {args.clients} clients register and park")
            await readers.grow_to(args.clients)
            phases: dict[str, Any] = {}
            if args.warmup > 0:
                log(f"phase 1, warm-up: {args.rate:g} notices/s for {args.warmup:g} s")
                phases["warm-up"] = summary([await self.latency_run(readers, True, args.warmup)])
            # The two modes take turns, so that whatever else this machine
            # does meanwhile weighs on both alike.
            rounds: dict[str, list[Round]] = {"log on": [], "log off": []}
            for number in range(1, args.rounds + 1):
                for label, event_log in (("log on", True), ("log off", False)):
                    log(
                        f"phase 1, {label}, round {number} of {args.rounds}:"
                        f" {args.rate:g} notices/s for {args.duration:g} s"
                    )
                    rounds[label].append(await self.latency_run(readers, event_log, args.duration))
            phases |= {label: summary(each) for label, each in rounds.items()}
            # The server samples its loop's lag every 0.1 s and keeps the last
            # 600 samples: the last minute, which is the clients' start, the
            # warm-up and the rounds of both modes with the default sizes.
            phases["loop_lag"] = (await readers.stats())["loop_lag"]
            phases["problems"] = readers.problems()
            # The register phases run without these clients or their queues.
            await readers.shrink_to(0)
        finally:
            readers.close_all()
        return phases

    async def latency_run(self, readers: Readers, event_log: bool, secs: float) -> Round:
        args = self.args
        for client in readers.clients:
            client.seqs.clear()
        readers.reads = []
        stream0 = (await readers.stats())["stream"]
        # CPU from the publishers' release until every client has read the last notice.
        meters: list[tuple[CpuMeter, float]] = []

        def release() -> None:
            meters.append((CpuMeter(readers.server, self.broker), postgres_cpu_secs()))

        plans = self.plans(
            readers.users,
            args.recipients,
            event_log=event_log,
            total=round(args.rate * secs),
            rate=args.rate,
            max_secs=secs * 3,
        )
        sent, _ = await self.send(plans, readers.check, on_release=release)
        return await collect_round(readers, sent, meters[0], stream0, args.recipients, event_log)

    # -- 2. register ---------------------------------------------------------------

    async def registers(self, server: FreezableServer) -> dict[str, Any]:
        """register.py's phases, plus its phase under load with the log on and off."""
        args = self.args
        measured = self.users[: args.registers]

        def phase(concurrency: int) -> Callable[[], Awaitable[dict[str, Any]]]:
            return lambda: asyncio.to_thread(run_phase, server, measured, concurrency)

        await phase(1)()  # warm the auth cache and the pool, as register.py does
        phases: dict[str, Any] = {}
        log("phase 2: registers one at a time")
        phases["sequential"] = await phase(1)()
        log(f"phase 2: {args.concurrency} registers at once")
        phases[f"concurrent x{args.concurrency}"] = await phase(args.concurrency)()
        for event_log in (True, False):
            label = f"under {args.register_rate:g} notices/s, log {'on' if event_log else 'off'}"
            log(f"phase 2: registers one at a time {label}")
            plans = self.plans(
                self.users,
                0,  # to every user, as a busy realm's stream messages are
                event_log=event_log,
                total=math.ceil(args.register_rate * 600),
                rate=args.register_rate,
                max_secs=600,
            )
            sent, result = await self.send(plans, server.check, during=phase(1))
            phases[label] = result | {"notices": len(sent.at)}
        return phases

    # -- 3. checkpoint, 4. recovery --------------------------------------------------

    async def checkpoint_and_recovery(self, results: dict[str, Any]) -> None:
        args = self.args
        server = self.server(
            "recovery",
            {
                "EVENTQ_CHECKPOINT_SECS": f"{args.checkpoint_secs:g}",
                # Its start and save lines (server/app.py) are INFO.
                "EVENTQ_LOG_LEVEL": "INFO",
            },
        )
        log(f"recovery server: starting on port {server.port} (log {server.log_path})")
        server.start()
        bench = Bench(args, ServerGroup([server]), self.users)
        try:
            await self.consuming(bench)
            log(f"phase 3: {args.queues:,} queues")
            owners = [self.users[i % len(self.users)] for i in range(args.queues)]
            made = time.monotonic()
            answers = await exchange(
                bench,
                [request("POST", "/api/v1/register", user, REGISTER_FORM) for user in owners],
                "POST /api/v1/register",
            )
            queues: list[tuple[User, str]] = []
            for user, (status, body) in zip(owners, answers, strict=True):
                if status != 200:
                    raise BenchError(f"register answered {status}: {body[:300]!r}")
                queues.append((user, orjson.loads(body)["queue_id"]))
            registered_secs = time.monotonic() - made
            first = await self.checkpointed(bench, len(queues))
            checkpoint: dict[str, Any] = {
                "queues": len(queues),
                "registers_per_sec": round(len(queues) / registered_secs, 1),
                "first_full": first,
            }
            results["checkpoint"] = checkpoint
            recovery: dict[str, Any] = {"queues": len(queues)}
            results["recovery"] = recovery
            sent: list[int] = []
            log("phase 4: graceful restart (SIGTERM), notices sent while it is down")
            recovery["SIGTERM"] = await self.restart(server, bench, queues, sent, crash=False)
            log(f"phase 3: {args.lag_window:g} s of checkpoints every {args.checkpoint_secs:g} s")
            checkpoint["with"] = await self.lag_window(bench)
            recovery["SIGTERM"]["check"] = await self.check_queues(bench, queues, sent)
            log("phase 4: SIGKILL, notices sent while it was frozen")
            recovery["SIGKILL"] = await self.restart(server, bench, queues, sent, crash=True)
            recovery["SIGKILL"]["check"] = await self.check_queues(bench, queues, sent)
            log(f"phase 3: restart without checkpoints, {args.lag_window:g} s")
            server.env["EVENTQ_CHECKPOINT_SECS"] = "0"
            baseline = await self.restart(server, bench, queues, sent, crash=False)
            checkpoint["without"] = await self.lag_window(bench)
            baseline["check"] = await self.check_queues(bench, queues, sent)
            recovery["without checkpoints"] = baseline
            results["recovery_server_warnings"] = server.warnings()
        finally:
            bench.close_all()

    async def checkpointed(self, bench: Bench, count: int) -> dict[str, Any]:
        """Until a checkpoint holds `count` queues; its figures."""
        deadline = time.monotonic() + 120
        while True:
            last: dict[str, Any] = (await bench.stats())["checkpoint"]
            if last.get("queues") == count:
                return last
            if time.monotonic() > deadline:
                raise BenchError(f"no checkpoint of {count} queues within 120 s (last: {last})")
            await asyncio.sleep(0.2)

    async def lag_window(self, bench: Bench) -> dict[str, Any]:
        """Leave the server, freshly started, alone for --lag-window s (its
        loop-lag window, 60 s, then holds that and its start only), asking
        its stats at a third, two thirds and the end: the last checkpoint at
        each, and the loop lag."""
        secs = self.args.lag_window
        seen = []
        for _ in range(3):
            await asyncio.sleep(secs / 3)
            stats = await bench.stats()
            seen.append(stats["checkpoint"])
        return {
            "uptime_secs": stats["uptime_secs"],
            "loop_lag": stats["loop_lag"],
            "checkpoints": seen,
        }

    async def restart(
        self,
        server: FreezableServer,
        bench: Bench,
        queues: list[tuple[User, str]],
        sent: list[int],
        *,
        crash: bool,
    ) -> dict[str, Any]:
        """Send --recovery-events notices the server cannot see (frozen, then
        SIGKILL; or after SIGTERM, while it is down), start it again and time
        it. `sent` gets the notices' seqs."""
        plans = self.plans(
            self.users,
            self.args.recipients,
            event_log=True,
            total=self.args.recovery_events,
            rate=0.0,
            max_secs=120,
        )
        result: dict[str, Any] = {}
        if crash:
            server.freeze()
            batch, _ = await self.send(plans, server.check)
            assert server.proc is not None
            server.proc.kill()
            server.proc.wait(10)
        else:
            stopping = time.monotonic()
            server.stop()
            result["stop_secs"] = round(time.monotonic() - stopping, 3)
            saved = SAVED_LINE.search(server.log_path.read_text(errors="replace"))
            if saved is not None:
                result["saved"] = {
                    "queues": int(saved[1]),
                    "bytes": int(saved[2]),
                    "ms": int(saved[3]),
                }
            batch, _ = await self.send(plans, lambda: None)  # nothing to check: it is down
        sent.extend(batch.at)
        forget_connections(bench)
        user, queue_id = queues[0]
        result["answered_secs"] = round(start_timed(server, user, queue_id), 3)
        text = server.log_path.read_text(errors="replace")
        caught_up = CATCH_UP_LINE.search(text)
        if caught_up is not None:
            result["catch_up"] = {
                "line": caught_up[0],
                "events": int(caught_up[1]),
                "ms": int(caught_up[2]),
            }
        result["rebuilt_from_checkpoint"] = REBUILT_LINE in text
        # Their notices (and the publishers' warm-ups) wait in RabbitMQ too:
        # once consumed, each is a duplicate of what the log gave.
        wanted = len(batch.at) + len(plans)
        deadline = time.monotonic() + 60
        while True:
            stats = await bench.stats()
            if stats["consumer"]["processed"] >= wanted or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        result |= {
            "notices": len(batch.at),
            "queues_after": stats["queues"],
            "consumer_processed": stats["consumer"]["processed"],
            "consumer_expected": wanted,
            "stream": stats["stream"],
        }
        return result

    async def check_queues(
        self, bench: Bench, queues: list[tuple[User, str]], sent: list[int]
    ) -> dict[str, Any]:
        """Every queue's events, read without acknowledging any: each must
        hold every message sent to its user so far, once."""
        expected = expected_by_user(
            sent, [user.user_id for user in self.users], self.args.recipients
        )
        answers = await exchange(
            bench,
            [request("GET", poll_target(queue_id), user) for user, queue_id in queues],
            "GET /api/v1/events",
        )
        counts = collections.Counter[str]()
        for (user, _), (status, body) in zip(queues, answers, strict=True):
            if status != 200:
                counts["failed_polls"] += 1
                continue
            events = orjson.loads(body)["events"]
            found = collections.Counter(
                int(event["message"]["id"]) for event in events if event["type"] == "message"
            )
            lost, more = compare(expected[user.user_id], found)
            counts["events_expected"] += sum(expected[user.user_id].values())
            counts["events_found"] += sum(found.values())
            counts["missing"] += lost
            counts["extra"] += more
            counts["other_events"] += len(events) - sum(found.values())
        keys = (
            "events_expected",
            "events_found",
            "missing",
            "extra",
            "failed_polls",
            "other_events",
        )
        return {"queues": len(queues)} | {key: counts[key] for key in keys}


async def collect_round(
    readers: Readers,
    sent: Sent,
    meter: tuple[CpuMeter, float],
    stream0: dict[str, int],
    recipients: int,
    event_log: bool,
) -> Round:
    """Once every client has read what `sent` sent it: the round's
    latencies, CPU (since `meter` started, PostgreSQL's included), stream
    counters (since `stream0`) and what was lost or read twice."""
    user_ids = [user.user_id for user in readers.users]
    expected = expected_by_user(list(sent.at), user_ids, recipients)
    want = sum(sum(counts.values()) for counts in expected.values())
    await until(lambda: len(readers.reads) >= want, 60, readers.check)
    cpu_meter, postgres0 = meter
    cpu: dict[str, Any] = cpu_meter.read()
    cpu["postgres_cpu_secs"] = round(postgres_cpu_secs() - postgres0, 3)
    cpu["publishers_cpu_secs"] = round(sent.cpu_secs, 3)
    stream = (await readers.stats())["stream"]
    result = Round(
        event_log=event_log,
        sent=sent,
        reads_expected=want,
        reads=len(readers.reads),
        latencies=[now - sent.at[seq] for seq, now in readers.reads if seq in sent.at],
        after_call=[now - sent.returned[seq] for seq, now in readers.reads if seq in sent.returned],
        cpu=cpu,
        stream={key: stream[key] - stream0[key] for key in STREAM_COUNTERS if key in stream},
    )
    for client in readers.clients:
        wanted = expected[readers.user_for(client.index).user_id]
        lost, more = compare(wanted, collections.Counter(client.seqs))
        result.missing += lost
        result.extra += more
        result.never_read |= set(wanted) - set(client.seqs)
    return result


async def until(
    predicate: Callable[[], bool], limit_secs: float, check: Callable[[], None]
) -> bool:
    """Whether `predicate` came true within `limit_secs` (the checks after it
    say what is missing)."""
    deadline = time.monotonic() + limit_secs
    while not predicate():
        check()
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def first_answer(
    port: int, user: User, queue_id: str, started: float, given_up: threading.Event
) -> float:
    """Seconds from `started` until the server on `port` answers a poll of
    `queue_id` with 200 (in a thread, beside the server's start: before it
    binds, connecting is refused; after, the request waits in the backlog
    until it serves). Raises `BenchError` for any other answer."""
    target = poll_target(queue_id)
    while True:
        connection = http.client.HTTPConnection(HOST, port, timeout=120)
        try:
            connection.request("GET", target, headers={"Authorization": user.authorization})
            response = connection.getresponse()
            body = response.read()
        except (ConnectionRefusedError, ConnectionResetError):
            if given_up.is_set():
                raise BenchError("the server did not start") from None
            time.sleep(0.002)
            continue
        finally:
            connection.close()
        if response.status != 200:
            raise BenchError(f"the old queue {queue_id} answered {response.status}: {body[:300]!r}")
        return time.monotonic() - started


def start_timed(server: FreezableServer, user: User, queue_id: str) -> float:
    """Start `server` again on its state directory: seconds until it answered
    a poll of `queue_id`, an old queue of `user`."""
    started = time.monotonic()
    given_up = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="probe") as pool:
        answered = pool.submit(first_answer, server.port, user, queue_id, started, given_up)
        try:
            server.start(timeout=120)
        except BaseException:
            given_up.set()
            raise
        return answered.result(120)


# -- the report -----------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def figures_of(results: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures, flat (ms unless named _secs)."""
    figures: dict[str, float | None] = {}
    latency = results.get("latency") or {}
    for label, key in (("log on", "log_on"), ("log off", "log_off")):
        spread_ms = (latency.get(label) or {}).get("latency_ms") or {}
        figures[f"latency_{key}_p50_ms"] = spread_ms.get("p50")
        figures[f"latency_{key}_p99_ms"] = spread_ms.get("p99")
    register = results.get("register") or {}
    sequential = register.get("sequential") or {}
    figures["register_p50_ms"] = sequential.get("p50_ms")
    figures["register_p99_ms"] = sequential.get("p99_ms")
    for label, phase in register.items():
        if label.startswith("under "):
            key = "log_on" if label.endswith("log on") else "log_off"
            figures[f"register_under_load_{key}_p50_ms"] = phase["p50_ms"]
            figures[f"register_under_load_{key}_p99_ms"] = phase["p99_ms"]
    checkpoint = results.get("checkpoint") or {}
    window = checkpoint.get("with") or {}
    last = (window.get("checkpoints") or [{}])[-1]
    figures["checkpoint_ms"] = last.get("took_ms")
    figures["checkpoint_longest_slice_ms"] = max(
        (seen.get("longest_slice_ms", 0.0) for seen in window.get("checkpoints", [])), default=None
    )
    figures["checkpoint_loop_lag_p99_ms"] = (window.get("loop_lag") or {}).get("p99_ms")
    without = checkpoint.get("without") or {}
    figures["no_checkpoint_loop_lag_p99_ms"] = (without.get("loop_lag") or {}).get("p99_ms")
    recovery = results.get("recovery") or {}
    graceful, crash = recovery.get("SIGTERM") or {}, recovery.get("SIGKILL") or {}
    figures["graceful_save_ms"] = (graceful.get("saved") or {}).get("ms")
    figures["graceful_stop_secs"] = graceful.get("stop_secs")
    figures["recovery_sigterm_secs"] = graceful.get("answered_secs")
    figures["recovery_sigkill_secs"] = crash.get("answered_secs")
    return figures


def checks_of(results: dict[str, Any]) -> list[str]:
    """What went wrong with the deliveries: empty when every event sent was
    read or found once."""
    problems: list[str] = []
    latency = results.get("latency") or {}
    for label, phase in latency.items():
        if label == "problems":
            bad = {key: value for key, value in phase.items() if value and key != "last_error"}
            if bad:
                problems.append(f"phase 1 clients: {bad} (last error {phase.get('last_error')!r})")
        elif label == "loop_lag":
            continue
        elif phase["missing"] or phase["extra"] or phase["reads"] != phase["reads_expected"]:
            problems.append(
                f"phase 1, {label}: {phase['reads']} of {phase['reads_expected']} reads,"
                f" {phase['missing']} missing, {phase['extra']} extra"
            )
    recovery = results.get("recovery") or {}
    for label, restart in recovery.items():
        if not isinstance(restart, dict):
            continue
        check = restart.get("check") or {}
        if restart["queues_after"] != recovery["queues"]:
            problems.append(f"{label}: {restart['queues_after']} queues after the restart")
        if restart["consumer_processed"] != restart["consumer_expected"]:
            problems.append(
                f"{label}: the server consumed {restart['consumer_processed']} notices after"
                f" the restart, {restart['consumer_expected']} were waiting"
            )
        if any(check.get(key) for key in ("missing", "extra", "failed_polls", "other_events")):
            problems.append(f"{label}: queues read back: {check}")
        if check.get("events_found") != check.get("events_expected"):
            problems.append(
                f"{label}: {check.get('events_found')} events found,"
                f" {check.get('events_expected')} sent"
            )
    return problems


def render(results: dict[str, Any]) -> str:
    out = io.StringIO()
    config = results["config"]
    out.write(f"server code: {config['source']}\n")
    if results.get("rows"):
        out.write("realm: " + ", ".join(f"{n:,} {table}" for table, n in results["rows"].items()))
        out.write("\n")
    latency = results.get("latency") or {}
    if "log off" in latency:
        on, off = latency["log on"], latency["log off"]
        out.write(
            f"\n1. send->delivery, {config['rate']:g} notices/s (send_event through RabbitMQ,"
            f" {config['publishers']} publisher processes) to {config['clients']} parked"
            f" clients, {config['recipients']} users per notice; {config['rounds']} rounds of"
            f" {config['duration']:g} s for each mode, taking turns\n"
        )
        rows: list[tuple[str, ...]] = []
        for key in ("p50", "p90", "p99", "max"):
            a, b = on["latency_ms"][key], off["latency_ms"][key]
            rows.append((f"latency {key} (ms)", f"{a:.2f}", f"{b:.2f}", ratio(a, b)))
        for key in ("p50", "p99"):
            a, b = on["send_event_ms"][key], off["send_event_ms"][key]
            rows.append((f"send_event call {key} (ms)", f"{a:.2f}", f"{b:.2f}", ratio(a, b)))
        for key in ("p50", "p99"):
            a, b = on["after_call_ms"][key], off["after_call_ms"][key]
            rows.append((f"latency after the call returned {key} (ms)", f"{a:.2f}", f"{b:.2f}", ""))
        rows.append(
            (
                "notices/s sent",
                f"{on['notices_per_sec']:,.1f}",
                f"{off['notices_per_sec']:,.1f}",
                "",
            )
        )
        rows.append(("events read", f"{on['reads']:,}", f"{off['reads']:,}", ""))
        for name in ("server", "broker", "postgres", "publishers", "generator"):
            a, b = on["cpu_shares"].get(name), off["cpu_shares"].get(name)
            rows.append(
                (
                    f"CPU, {name} (share of a core)",
                    "-" if a is None else f"{a:.2f}",
                    "-" if b is None else f"{b:.2f}",
                    ratio(a, b),
                )
            )
        rows.append(
            (
                "delivered from the log before their notice",
                f"{on['stream'].get('duplicates', 0):,}",
                f"{off['stream'].get('duplicates', 0):,}",
                "",
            )
        )
        rows.append(
            (
                "looks at the log to close a gap",
                f"{on['stream'].get('lookups', 0):,}",
                f"{off['stream'].get('lookups', 0):,}",
                "",
            )
        )
        out.write(_table(("", "event log on", "event log off", "on/off"), rows))
        if lag := latency.get("loop_lag"):
            out.write(
                f"server IO-loop lag over its last minute (phase 1: both modes), p50 / p99 / max:"
                f" {lag['p50_ms']:.2f} / {lag['p99_ms']:.2f} / {lag['window_max_ms']:.2f} ms\n"
            )
        p99 = on["latency_ms"]["p99"]
        verdict = "met" if p99 <= LATENCY_BAR_MS else "MISSED"
        out.write(
            f"bar: send->delivery p99 at {config['rate']:g} notices/s, event log on:"
            f" {p99:.2f} ms <= {LATENCY_BAR_MS:g} ms: {verdict}\n"
        )
        for label, phase in (("on", on), ("off", off)):
            if phase["notices_per_sec"] < 0.95 * config["rate"]:
                out.write(
                    f"  (event log {label}: the publishers sent {phase['notices_per_sec']:,.0f}"
                    f" notices/s, not {config['rate']:g}: each waits for its send_event call,"
                    " and this machine's cores are all busy)\n"
                )
    register = results.get("register") or {}
    if register:
        out.write(
            f"\n2. register (the zulip client's parameters), {config['users']:,} users,"
            f" {config['streams']} streams, {config['subs_per_user']} subscriptions each\n"
        )
        rows = [
            (
                name,
                f"{phase['p50_ms']}",
                f"{phase['p99_ms']}",
                f"{phase['max_ms']}",
                f"{phase['per_sec']}",
                f"{phase['with_events_applied']}",
                f"{phase['loop_lag']['window_max_ms']}",
            )
            for name, phase in register.items()
        ]
        out.write(
            _table(("phase", "p50 ms", "p99 ms", "max ms", "reg/s", "applied", "lag max ms"), rows)
        )
        loads = [phase for name, phase in register.items() if name.startswith("under ")]
        if len(loads) == 2:
            out.write(
                "under load, event log on/off:"
                f" p50 {ratio(loads[0]['p50_ms'], loads[1]['p50_ms'])},"
                f" p99 {ratio(loads[0]['p99_ms'], loads[1]['p99_ms'])}\n"
            )
    checkpoint = results.get("checkpoint") or {}
    if "without" in checkpoint:
        window, without = checkpoint["with"], checkpoint["without"]
        seen = window["checkpoints"]
        longest = max(each["longest_slice_ms"] for each in seen)
        saved = (results["recovery"]["SIGTERM"] or {}).get("saved") or {}
        out.write(
            f"\n3. checkpoint of {checkpoint['queues']:,} queues"
            f" every {config['checkpoint_secs']:g} s"
            f" (made at {checkpoint['registers_per_sec']:,.0f} registers/s)\n"
        )
        rows = [
            (
                "checkpoint time (ms), at 1/3, 2/3, end of the window",
                " / ".join(f"{each['took_ms']:.1f}" for each in seen),
                # The server times the file's write only, not building the snapshot.
                f"graceful save (SIGTERM), writing: {saved.get('ms', '-')} ms,"
                f" {saved.get('bytes', 0):,} bytes",
            ),
            (
                "longest slice on the IO loop (ms)",
                " / ".join(f"{each['longest_slice_ms']:.2f}" for each in seen),
                f"the slice asked for: {CHECKPOINT_SLICE_SECS * 1000:g} ms",
            ),
            (
                f"IO-loop lag p99 / max over {window['uptime_secs']:.0f} s since start (ms)",
                f"{window['loop_lag']['p99_ms']:.2f} / {window['loop_lag']['window_max_ms']:.2f}",
                f"without checkpoints: {without['loop_lag']['p99_ms']:.2f}"
                f" / {without['loop_lag']['window_max_ms']:.2f}",
            ),
        ]
        out.write(_table(("", "with checkpoints", "comparison"), rows))
        verdict = "met" if longest <= SLICE_BAR_MS else "MISSED"
        out.write(
            f"bar: a checkpoint's longest slice on the IO loop: {longest:.2f} ms"
            f" <= {SLICE_BAR_MS:g} ms: {verdict}\n"
        )
    recovery = results.get("recovery") or {}
    if "SIGKILL" in recovery:
        crash, graceful = recovery["SIGKILL"], recovery["SIGTERM"]
        out.write(
            f"\n4. recovery of {recovery['queues']:,} queues, {crash['notices']:,} notices"
            " sent while the server could not see them (frozen, or down) before each start\n"
        )
        rows = [
            (
                "start -> an old queue answers (s)",
                f"{crash['answered_secs']:.3f}",
                f"{graceful['answered_secs']:.3f}",
                ratio(crash["answered_secs"], graceful["answered_secs"]),
            ),
            ("stop: SIGTERM -> exit (s)", "-", f"{graceful['stop_secs']:.3f}", ""),
            (
                "queues after the start",
                f"{crash['queues_after']:,}",
                f"{graceful['queues_after']:,}",
                "",
            ),
            (
                "catch-up from the event log (ms, server's figure)",
                f"{(crash.get('catch_up') or {}).get('ms', '-')}",
                f"{(graceful.get('catch_up') or {}).get('ms', '-')}",
                "",
            ),
        ]
        out.write(_table(("", "SIGKILL", "SIGTERM", "ratio"), rows))
        for label, restart in (("SIGKILL", crash), ("SIGTERM", graceful)):
            line = (restart.get("catch_up") or {}).get("line", "(no event log line)")
            out.write(f"{label} server log: {line}\n")
        if not crash["rebuilt_from_checkpoint"]:
            out.write("SIGKILL: the server did not say it rebuilt its queues from the checkpoint\n")
    problems = results.get("problems") or []
    if problems:
        out.write("\nchecks FAILED:")
    elif results.get("completed"):
        out.write("\nchecks: every event sent was read or found once")
    else:
        out.write(
            "\nchecks: nothing lost or repeated in the phases that ran (the run did not finish)"
        )
    out.write("".join(f"\n  {problem}" for problem in problems) + "\n")
    return out.getvalue()


# -- main ----------------------------------------------------------------------------


def add_world_arguments(parser: argparse.ArgumentParser, users: str, clients: str) -> None:
    """The realm and its clients, as this script and background_updates.py
    build them (register.py's populate_domain, Readers)."""
    parser.add_argument("--users", type=int, default=1000, help=users)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--subs-per-user", type=int, default=20)
    parser.add_argument("--messages", type=int, default=5000, help="stream messages in the realm")
    parser.add_argument("--clients", type=int, default=100, help=clients)
    parser.add_argument("--recipients", type=int, default=3, help="users per notice")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The broker, connection batches and output of this script and
    background_updates.py."""
    parser.add_argument(
        "--amqp-base",
        default=DEFAULT_AMQP_BASE,
        help="RabbitMQ URL without vhost (rabbitmqctl must manage that broker)",
    )
    parser.add_argument("--batch", type=int, default=500, help="connections opened at once")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    parser.add_argument("--keep-db", action="store_true", help="keep the database, vhost and logs")


def check_world(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 1 <= args.recipients <= args.clients <= args.users:
        parser.error("need 1 <= --recipients <= --clients <= --users")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_world_arguments(parser, "users of the realm", "parked clients of phase 1")
    parser.add_argument("--rate", type=float, default=1000.0, help="notices/s of phase 1")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of each phase 1 run")
    parser.add_argument(
        "--rounds", type=int, default=3, help="phase 1 runs of each mode, taking turns"
    )
    parser.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds first")
    parser.add_argument("--publishers", type=int, default=4, help="publisher processes")
    parser.add_argument("--registers", type=int, default=60, help="registers per phase")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--register-rate", type=float, default=50.0, help="notices/s to every user under load"
    )
    parser.add_argument("--queues", type=int, default=10_000, help="queues of phases 3 and 4")
    parser.add_argument("--checkpoint-secs", type=float, default=1.0)
    parser.add_argument(
        "--lag-window", type=float, default=30.0, help="seconds the server is left checkpointing"
    )
    parser.add_argument(
        "--recovery-events", type=int, default=2000, help="notices sent before each restart"
    )
    add_run_arguments(parser)
    args = parse_with_quick(parser, argv, QUICK)
    check_world(parser, args)
    if args.registers > args.users:
        parser.error("--registers must not exceed --users (each register is another user)")
    if math.ceil(args.queues / args.users) > 100:
        parser.error("more than 100 queues per user (the server's limit)")
    if min(args.rate, args.duration, args.register_rate, args.checkpoint_secs) <= 0:
        parser.error("rates, --duration and --checkpoint-secs must be positive")
    if min(args.publishers, args.rounds, args.recovery_events) < 1 or args.lag_window <= 0:
        parser.error("--publishers, --rounds, --recovery-events and --lag-window must be positive")
    args.clients_per_user = 1  # fanout.py's clients: client i is user i
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    database = Database(os.environ.get("EVENTQ_DATABASE_URL") or "host=127.0.0.1 user=postgres")
    vhost = Vhost(args.amqp_base)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-stream-bench-"))
    run = Run(args, database, vhost, workdir)
    config = {
        key: getattr(args, key)
        for key in (*QUICK, "recipients", "publishers", "checkpoint_secs", "quick")
    }
    results: dict[str, Any] = {
        "config": config
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
        results["rows"] = populate_domain(
            database, run.users, args.streams, args.subs_per_user, args.messages
        )
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run.measure(results))
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
