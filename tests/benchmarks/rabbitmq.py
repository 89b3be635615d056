"""The RabbitMQ path of the eventq server, with parked clients: how fast one
server process consumes and delivers notices, how fast `send_event` publishes,
and how long a notice takes from `send_event` to the clients.

Run from the repository root:

    .venv/bin/python tests/benchmarks/rabbitmq.py [--clients 1000] [--json]
        [--latency one@50,one@max,all@2,all@10,all@50,all@max] [--duration 10]
        [--max-publishers 2] [--max-duration 3] [--drain-one 40000]
        [--drain-all 5000] [--auth-cache-secs 3600] [--py-spy prof.txt]

It builds its own world and tears it down, as fanout.py does (whose database,
server and load-generator classes it uses): a RabbitMQ vhost
`eventq_bench_<random>` (rabbitmqctl add_vhost / set_permissions for guest,
delete_vhost at the end), a fresh PostgreSQL database with one realm and
--clients / --clients-per-user users (default one client per user, so a notice
"to all" names 1,000 users, as a busy stream's would), and the real server
consuming its notify queue in that vhost
(`EVENTQ_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/<vhost>`), its credential
cache set to --auth-cache-secs (3600: the clients, which all authenticate in
the same second, are not all checked again in the middle of a phase). Whatever
happens (error, Ctrl-C, SIGTERM) the publishers and the server are stopped,
the database dropped and the vhost deleted.

--clients clients register and long-poll, as in fanout.py. Notices are sent by
publisher processes (spawned, one thread each: `send_event` with confirms, a
process so that neither their CPU nor the GIL is shared with the clients
here); each event carries its sequence number and its send time `t`
(time.time() just before the `send_event` call).

Phases, in this order:

1. latency: for each of --latency TARGET@RATE, notices to one user's
   client(s) or to every client, at RATE notices/s from one publisher for
   --duration s, or (@max) as fast as --max-publishers publishers go for
   --max-duration s. Per-client latency = when the client had read the
   event - `t`; per notice, the time until its last client had read it. The
   phase ends when every client has every notice.
2. drain: for one user's client(s), then for every client: the server is
   frozen (SIGSTOP), so it cannot consume; one publisher thread sends
   --drain-one / --drain-all notices (this is the publisher measurement:
   send_event calls/s and the duration of each call, i.e. the confirm round
   trip, with the broker alone on the CPU); then the server is resumed
   (SIGCONT) and we time how long it takes to consume them
   (`stats()["consumer"]["processed"]`, polled every 50 ms; the queue depth
   by a passive queue.declare every 250 ms) and until the clients have read
   every event. Freezing keeps the 1,000 clients parked (restarting the
   server would not: it consumes its backlog before it listens). A freeze
   is capped at --max-freeze s (fewer notices are then sent) because RabbitMQ
   drops a connection silent for two 60 s heartbeat intervals.

With --py-spy FILE each drain is recorded with py-spy (raw stacks to
FILE-one-user / FILE-all, same suffix) and the consumer path summarized.

After each phase the run checks the consumer's counters (no retry, duplicate,
dead letter or reconnection) and the clients' (every event read once, in
order, no error response); the report lists what failed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import io
import json
import multiprocessing
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pika
import psycopg
from broker import BrokerError, Vhost, broker_pid, process_cpu_secs

# Shared with the fan-out benchmark: the world (database, server process) and
# the load generator (raw asyncio long-poll clients).
from fanout import (
    OUR_PACKAGES,
    Bench,
    BenchError,
    Database,
    ServerGroup,
    ServerProcess,
    User,
    die_with_parent,
    finish_py_spy,
    frame_function,
    log,
    own_cpu_secs,
    percentile,
    raise_fd_limit,
    read_stacks,
    source_state,
    start_py_spy,
)
from quickmode import parse_with_quick

from generation.config import NOTIFY_QUEUE, ProducerConfig
from generation.send import close_for_thread, prepare_notice, send_event

DEFAULT_AMQP_BASE = "amqp://guest:guest@127.0.0.1:5672"
# How often a drain asks the server for its consumer counters. Each stats call
# walks every queue (QueueRegistry.held): about 1 ms of the server's CPU with
# 1,000 queues, so polling costs the drain a few percent.
STATS_POLL_SECS = 0.05


class QueueProbe:
    """The notify queue's depth (ready messages) by passive queue.declare, on
    a blocking pika connection of its own, in a thread of its own."""

    def __init__(self, url: str, queue: str):
        self.params = pika.URLParameters(url)
        self.params.heartbeat = 0  # idle for minutes between probes
        self.queue = queue
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe")
        self._connection: Any = None
        self._channel: Any = None

    def _depth(self) -> tuple[int, int]:
        if self._channel is None or not self._channel.is_open:
            self._connection = pika.BlockingConnection(self.params)
            self._channel = self._connection.channel()
        frame = self._channel.queue_declare(self.queue, passive=True)
        return int(frame.method.message_count), int(frame.method.consumer_count)

    async def depth(self) -> tuple[int, int]:
        """(ready messages, consumers)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._depth)

    def _close(self) -> None:
        if self._connection is not None and self._connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                self._connection.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.executor.submit(self._close).result(10)
        self.executor.shutdown(wait=False)


class FreezableServer(ServerProcess):
    """The server, which can be frozen (SIGSTOP) so that it consumes nothing."""

    def freeze(self) -> None:
        self.check()
        os.kill(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while self._state() != "T":
            if time.monotonic() > deadline:
                raise BenchError("the server did not stop on SIGSTOP")
            time.sleep(0.001)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)

    def _state(self) -> str:
        with open(f"/proc/{self.pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]

    def stop(self) -> None:
        self.thaw()  # a stopped process would keep SIGTERM pending for ever
        super().stop()


# -- publishers (separate processes) -----------------------------------------


@dataclass(frozen=True)
class PublishPlan:
    url: str
    queue: str
    realm_id: int
    users: tuple[int, ...]
    first_seq: int
    seq_step: int
    count: int  # at most this many notices
    max_secs: float  # and for at most this long
    rate: float  # notices/s; 0: as fast as confirms come back


def _time_prepare(plan: PublishPlan) -> float:
    """Microseconds per `prepare_notice` (validate + encode): the CPU part of
    a send_event call that is not pika's."""
    event = {"type": "bench", "seq": 0, "t": time.time()}
    rounds = 300
    started = time.perf_counter()
    for _ in range(rounds):
        prepare_notice(plan.realm_id, event, plan.users)
    return (time.perf_counter() - started) / rounds * 1e6


def publisher_main(plan: PublishPlan, pipe: Connection) -> None:
    """A publisher process: one thread calling send_event. Says ("ready",
    prepare_us) once connected, waits for a start time (or None: quit), then
    sends ("done", result) or ("error", text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    die_with_parent()
    # The broker's path alone: the event log's cost is tests/benchmarks/positions.py's.
    config = ProducerConfig(amqp_url=plan.url, notify_queue=plan.queue, event_log=False)
    try:
        prepare_us = _time_prepare(plan)
        # Connects, opens the confirmed channel and declares the queue.
        send_event(plan.realm_id, {"type": "bench_warmup"}, [], config=config)
        pipe.send(("ready", prepare_us))
        start_at = pipe.recv()
        if start_at is None:
            return
        time.sleep(max(0.0, start_at - time.time()))
        durations = array("d")
        interval = 1.0 / plan.rate if plan.rate else 0.0
        late_max = 0.0
        seq = plan.first_seq
        cpu0 = time.process_time()
        started = time.perf_counter()
        deadline = started + plan.max_secs
        sent = 0
        while sent < plan.count:
            now = time.perf_counter()
            if now >= deadline:
                break
            if interval:
                due = started + sent * interval
                if now < due:
                    time.sleep(due - now)
                else:
                    late_max = max(late_max, now - due)
            event = {"type": "bench", "seq": seq, "t": time.time()}
            before = time.perf_counter()
            send_event(plan.realm_id, event, plan.users, config=config)
            durations.append(time.perf_counter() - before)
            sent += 1
            seq += plan.seq_step
        elapsed = time.perf_counter() - started
        result = {
            "sent": sent,
            "elapsed_secs": elapsed,
            "cpu_secs": time.process_time() - cpu0,
            "late_max_secs": late_max,
            "durations": durations.tobytes(),
        }
        pipe.send(("done", result))
    except Exception as exc:
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        close_for_thread()


class Publishers:
    """Publisher processes, started, warmed up (each sends one notice to
    nobody) and then released together."""

    def __init__(self, plans: Sequence[PublishPlan]):
        context = multiprocessing.get_context("spawn")
        self.plans = list(plans)
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        self.prepare_us: list[float] = []
        for plan in self.plans:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=publisher_main, args=(plan, theirs), daemon=True, name="publisher"
            )
            process.start()
            theirs.close()
            self.pipes.append(ours)
            self.processes.append(process)

    async def _receive(self, pipe: Connection, limit_secs: float, check: Callable[[], None]) -> Any:
        deadline = time.monotonic() + limit_secs
        while not pipe.poll():
            check()
            if time.monotonic() > deadline:
                raise BenchError(f"a publisher did not answer within {limit_secs:.0f} s")
            await asyncio.sleep(0.01)
        try:
            kind, value = pipe.recv()
        except EOFError:
            raise BenchError("a publisher process died") from None
        if kind == "error":
            raise BenchError(f"a publisher failed: {value}")
        return value

    async def ready(self, check: Callable[[], None]) -> None:
        for pipe in self.pipes:
            self.prepare_us.append(await self._receive(pipe, 60, check))

    def go(self, start_at: float) -> None:
        for pipe in self.pipes:
            pipe.send(start_at)

    async def results(self, limit_secs: float, check: Callable[[], None]) -> list[dict[str, Any]]:
        results = []
        for pipe in self.pipes:
            result = await self._receive(pipe, limit_secs, check)
            durations = array("d")
            durations.frombytes(result.pop("durations"))
            result["durations"] = durations
            results.append(result)
        return results

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.close()
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)


# -- the benchmark ------------------------------------------------------------


@dataclass
class Tracker:
    """Latency samples of one phase: per (notice, client), and per notice its
    read count, first and last client's latency."""

    samples: array[float] = field(default_factory=lambda: array("d"))
    per_notice: dict[int, list[float]] = field(default_factory=dict)

    def add(self, seq: int, latency: float) -> None:
        self.samples.append(latency)
        entry = self.per_notice.get(seq)
        if entry is None:
            self.per_notice[seq] = [1, latency, latency]
        else:
            entry[0] += 1
            entry[2] = max(entry[2], latency)


def ms(value: float) -> float:
    return round(value * 1000, 2)


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """p50 / p90 / p99 / p99.9 / max of seconds, in ms."""
    if not values:
        return None
    ordered = sorted(values)
    return {
        "p50": ms(percentile(ordered, 0.5)),
        "p90": ms(percentile(ordered, 0.9)),
        "p99": ms(percentile(ordered, 0.99)),
        "p999": ms(percentile(ordered, 0.999)),
        "max": ms(ordered[-1]),
    }


class CpuMeter:
    """CPU seconds of the server, the broker and this process over a window."""

    def __init__(self, server: ServerGroup, broker: int | None):
        self.server = server
        self.broker = broker
        self.started = time.monotonic()
        self.server0 = server.cpu_secs()
        self.broker0 = process_cpu_secs(broker)
        self.own0 = own_cpu_secs()

    def read(self) -> dict[str, float | None]:
        elapsed = time.monotonic() - self.started
        broker = process_cpu_secs(self.broker)
        return {
            "elapsed_secs": round(elapsed, 3),
            "server_cpu_secs": round(self.server.cpu_secs() - self.server0, 3),
            "broker_cpu_secs": round(broker - self.broker0, 3)
            if broker is not None and self.broker0 is not None
            else None,
            "generator_cpu_secs": round(own_cpu_secs() - self.own0, 3),
        }


def shares(cpu: dict[str, Any]) -> dict[str, float | None]:
    elapsed = cpu["elapsed_secs"]
    return {
        name: (
            round(cpu[f"{name}_cpu_secs"] / elapsed, 3)
            if cpu[f"{name}_cpu_secs"] is not None
            else None
        )
        for name in ("server", "broker", "generator")
    }


class RabbitBench(Bench):
    """fanout.py's load generator, plus notices sent through RabbitMQ."""

    def __init__(
        self,
        args: argparse.Namespace,
        server: FreezableServer,
        users: list[User],
        realm_id: int,
        amqp_url: str,
    ):
        # fanout.py's Bench drives a group of server processes (its shards);
        # here the group is the one server, which is also the one frozen.
        super().__init__(args, ServerGroup([server]), users)
        self.freezable = server
        self.realm_id = realm_id
        self.amqp_url = amqp_url
        self.queue = NOTIFY_QUEUE
        self.probe = QueueProbe(amqp_url, self.queue)
        self.broker = broker_pid()
        self.tracker: Tracker | None = None
        self.last_read = 0.0  # time.time() of the last bench event read
        self.published = 0  # every notice published to the queue so far
        self.plan_seq = 1  # the first seq of the next publishers' notices
        # What a phase's checks found wrong (the figures may not mean much).
        self.problems: list[str] = []

    def on_event(self, event: dict[str, Any], now: float) -> None:
        self.bench_events += 1
        self.last_read = now
        tracker = self.tracker
        if tracker is not None:
            tracker.add(event["seq"], now - event["t"])

    async def consumer_stats(self) -> dict[str, Any]:
        stats = await self.stats()
        consumer: dict[str, Any] | None = stats.get("consumer")
        if consumer is None:
            raise BenchError("the server has no consumer (is EVENTQ_AMQP_URL empty?)")
        return consumer

    async def wait_consumed(self, limit_secs: float = 60) -> dict[str, Any]:
        """Until the server has processed every notice published so far."""
        deadline = time.monotonic() + limit_secs
        while True:
            consumer = await self.consumer_stats()
            if consumer["processed"] >= self.published:
                if consumer["processed"] > self.published:
                    raise BenchError(
                        f"the server processed {consumer['processed']} notices;"
                        f" {self.published} were published"
                    )
                return consumer
            if time.monotonic() > deadline:
                raise BenchError(
                    f"timed out after {limit_secs:.0f} s waiting for the server to consume"
                    f" {self.published} notices (processed {consumer['processed']})"
                )
            await asyncio.sleep(0.02)

    def plans(
        self, users: Sequence[int], publishers: int, rate: float, count: int, max_secs: float
    ) -> list[PublishPlan]:
        first = self.plan_seq
        self.plan_seq += count * publishers + publishers
        return [
            PublishPlan(
                url=self.amqp_url,
                queue=self.queue,
                realm_id=self.realm_id,
                users=tuple(users),
                first_seq=first + index,
                seq_step=publishers,
                count=count,
                max_secs=max_secs,
                rate=rate / publishers,
            )
            for index in range(publishers)
        ]

    async def start_publishers(self, plans: list[PublishPlan]) -> Publishers:
        publishers = Publishers(plans)
        try:
            await publishers.ready(self.server.check)
        except BaseException:
            publishers.close()
            raise
        self.published += len(plans)  # their warm-up notices
        await self.wait_consumed()
        return publishers

    def counters(self) -> tuple[int, int, int]:
        return self.errors, self.duplicates, self.gaps

    def audit(
        self,
        phase: str,
        consumer0: dict[str, Any],
        consumer: dict[str, Any],
        counters0: tuple[int, int, int],
        clients: Sequence[Any],
        expected: int,
    ) -> None:
        """Record what went wrong in a phase: consumer retries, duplicates,
        dead letters or reconnections, error responses, event ids read twice
        or skipped, events read more than once."""
        for key in ("duplicates", "retried", "dead_lettered"):
            if consumer[key] != consumer0[key]:
                self.problems.append(f"{phase}: consumer {key} +{consumer[key] - consumer0[key]}")
        if consumer["connections"] != consumer0["connections"]:
            self.problems.append(f"{phase}: the consumer reconnected to RabbitMQ")
        for name, before, after in zip(
            ("error responses", "duplicate event ids", "event id gaps"),
            counters0,
            self.counters(),
            strict=True,
        ):
            if after != before:
                last = f" (last: {self.last_error})" if name == "error responses" else ""
                self.problems.append(f"{phase}: {after - before} {name}{last}")
        extra = sum(max(0, client.got - expected) for client in clients)
        if extra:
            self.problems.append(f"{phase}: {extra} events read more than once")

    async def wait_read(
        self, clients: Sequence[Any], expected: int, limit_secs: float, what: str
    ) -> None:
        def done() -> bool:
            return all(client.got >= expected for client in clients)

        try:
            await self.wait_until(done, limit_secs, what, step=0.01)
        except BenchError as exc:
            short = sum(max(0, expected - client.got) for client in clients)
            raise BenchError(
                f"{exc}: {short} events missing; errors {self.errors} ({self.last_error!r}),"
                f" re-registered {self.reregistered}, lost {self.lost}"
            ) from None

    # -- phases -------------------------------------------------------------

    async def phase_latency(
        self, label: str, n_clients: int, rate: float, publishers: int, secs: float
    ) -> dict[str, Any]:
        """Notices to the users of the first `n_clients` clients, at `rate`
        per second (0: as fast as `publishers` go), for `secs` s."""
        clients = self.clients[:n_clients]
        users = self.users_of(n_clients)
        await self.wait_parked(len(self.clients))
        log(
            f"latency {label}: notices to {len(users)} users' {len(clients)} clients for {secs:g} s"
        )
        pool = await self.start_publishers(self.plans(users, publishers, rate, 10**9, secs))
        try:
            await self.wait_parked(len(self.clients))
            for client in self.clients:
                client.got = 0
            tracker = self.tracker = Tracker()
            consumer0 = await self.consumer_stats()
            counters0 = self.counters()
            responses0, events0 = self.responses, self.bench_events
            cpu = CpuMeter(self.server, self.broker)
            pool.go(time.time() + 0.05)
            results = await pool.results(secs + 120, self.server.check)
            sent_ended = time.time()
            sent = sum(result["sent"] for result in results)
            self.published += sent
            send_secs = max(result["elapsed_secs"] for result in results)
            log(
                f"  sent {sent} notices in {send_secs:.2f} s; waiting for every client to read them"
            )
            await self.wait_read(clients, sent, 300, f"every client to read {sent} notices")
            drained_after = self.last_read - sent_ended
            usage = cpu.read()
            consumer = await self.wait_consumed()
            stats = await self.wait_parked(len(self.clients))
            self.audit(f"latency {label}", consumer0, consumer, counters0, clients, sent)
        finally:
            self.tracker = None
            pool.close()
        durations = [d for result in results for d in result["durations"]]
        complete = [entry for entry in tracker.per_notice.values() if entry[0] == len(clients)]
        events = self.bench_events - events0
        responses = self.responses - responses0
        result = {
            "label": label,
            "rate_offered": rate or None,
            "publishers": publishers,
            "clients": len(clients),
            "users_per_notice": len(users),
            "notices": sent,
            "send_secs": round(send_secs, 3),
            "notices_per_sec": round(sent / send_secs, 1),
            "publisher_late_max_ms": ms(max(result["late_max_secs"] for result in results)),
            "send_event_ms": spread(durations),
            "per_client_ms": spread(tracker.samples),
            "last_client_per_notice_ms": spread([entry[2] for entry in complete]),
            "first_client_per_notice_ms": spread([entry[1] for entry in complete]),
            "read_after_last_send_ms": ms(drained_after),
            "events": events,
            "events_per_response": round(events / responses, 2) if responses else None,
            "cpu": usage,
            "cpu_share": shares(usage),
            "server_cpu_per_event_us": round(usage["server_cpu_secs"] / events * 1e6, 2)
            if events
            else None,
            "publisher_cpu_share": round(
                sum(result["cpu_secs"] for result in results) / send_secs, 3
            ),
            "consumer_delta": {
                key: consumer[key] - consumer0[key]
                for key in ("processed", "duplicates", "retried", "dead_lettered", "connections")
            },
            "loop_lag": stats["loop_lag"],
        }
        per_client = result["per_client_ms"] or {}
        last = result["last_client_per_notice_ms"] or {}
        log(
            f"  {result['notices_per_sec']:,.0f} notices/s; per client p50 {per_client.get('p50')}"
            f" p99 {per_client.get('p99')} ms; last client per notice p50 {last.get('p50')}"
            f" p99 {last.get('p99')} max {last.get('max')} ms"
        )
        return result

    async def phase_drain(self, name: str, n_clients: int, count: int) -> dict[str, Any]:
        """`count` notices to the users of the first `n_clients` clients,
        published while the server is frozen, then consumed."""
        clients = self.clients[:n_clients]
        users = self.users_of(n_clients)
        await self.wait_parked(len(self.clients))
        log(
            f"drain {name}: {count} notices to {len(users)} users' {n_clients} clients,"
            " published while the server is frozen"
        )
        max_freeze = self.args.max_freeze
        pool = await self.start_publishers(self.plans(users, 1, 0, count, max_freeze))
        spy: subprocess.Popen[bytes] | None = None
        profile = self.profile_path(name)
        try:
            for client in self.clients:
                client.got = 0
            consumer0 = await self.consumer_stats()
            counters0 = self.counters()
            base = consumer0["processed"]
            self.freezable.freeze()
            frozen_at = time.monotonic()
            broker_cpu0 = process_cpu_secs(self.broker)
            pool.go(time.time())
            (published,) = await pool.results(max_freeze + 30, self.server.check)
            broker_cpu = process_cpu_secs(self.broker)
            sent = published["sent"]
            self.published += sent
            depth, consumers = await self.probe.depth()
            if sent < count:
                log(f"  the freeze limit (--max-freeze {max_freeze:g} s) stopped the publisher")
            log(
                f"  published {sent} in {published['elapsed_secs']:.2f} s"
                f" ({sent / published['elapsed_secs']:,.0f} send_event/s); queue depth {depth}"
                f" (the rest is the consumer's prefetch); resuming the server"
            )
            if profile is not None:
                spy = start_py_spy(self.freezable.pid, profile, None, self.args.py_spy_native)
                await asyncio.sleep(1.0)  # let py-spy attach
            frozen_secs = time.monotonic() - frozen_at
            cpu = CpuMeter(self.server, self.broker)
            responses0, events0 = self.responses, self.bench_events
            resumed = time.time()
            self.freezable.thaw()
            timeline: list[tuple[float, int, int | None]] = []
            consumed_at: float | None = None
            depth_task: asyncio.Future[tuple[int, int]] | None = None
            last_depth: int | None = depth
            depth_due = 0.0
            deadline = time.monotonic() + self.args.drain_timeout
            while True:
                processed = (await self.consumer_stats())["processed"] - base
                now = time.time()
                if depth_task is not None and depth_task.done():
                    last_depth = depth_task.result()[0]
                    depth_task = None
                if depth_task is None and now >= depth_due:
                    depth_task = asyncio.ensure_future(self.probe.depth())
                    depth_due = now + 0.25
                timeline.append((round(now - resumed, 3), processed, last_depth))
                if consumed_at is None and processed >= sent:
                    consumed_at = now
                if consumed_at is not None and all(client.got >= sent for client in clients):
                    break
                if time.monotonic() > deadline:
                    short = sum(max(0, sent - client.got) for client in clients)
                    raise BenchError(
                        f"drain {name}: not done after {self.args.drain_timeout:g} s:"
                        f" processed {processed} of {sent}, {short} events unread;"
                        f" errors {self.errors} ({self.last_error!r}),"
                        f" re-registered {self.reregistered}"
                    )
                await asyncio.sleep(STATS_POLL_SECS)
            if depth_task is not None:
                await depth_task
            delivered_at = self.last_read
            usage = cpu.read()
            events = self.bench_events - events0
            responses = self.responses - responses0
            if spy is not None:
                spy.send_signal(signal.SIGINT)
        except BaseException:
            self.freezable.thaw()
            if spy is not None and spy.poll() is None:
                spy.kill()
            raise
        finally:
            pool.close()
        profile_top = None
        if spy is not None and profile is not None:
            profile_top = finish_py_spy(spy, profile)
            if "error" not in profile_top:
                profile_top["consumer_path_pct"] = consumer_path(profile)
        consumer = await self.wait_consumed()
        stats = await self.wait_parked(len(self.clients))
        self.audit(f"drain {name}", consumer0, consumer, counters0, clients, sent)
        durations = list(published["durations"])
        consume_secs = consumed_at - resumed
        deliver_secs = delivered_at - resumed
        result = {
            "name": name,
            "clients": n_clients,
            "users_per_notice": len(users),
            "notices": sent,
            "publisher": {
                "send_event_per_sec": round(sent / published["elapsed_secs"], 1),
                "send_event_ms": spread(durations),
                "mean_ms": round(statistics.fmean(durations) * 1000, 3),
                "prepare_notice_us": round(pool.prepare_us[0], 1),
                "cpu_per_call_us": round(published["cpu_secs"] / sent * 1e6, 1),
                "cpu_share": round(published["cpu_secs"] / published["elapsed_secs"], 3),
                "broker_cpu_per_call_us": round((broker_cpu - broker_cpu0) / sent * 1e6, 1)
                if broker_cpu is not None and broker_cpu0 is not None
                else None,
            },
            "depth_before_resume": depth,
            "consumers_before_resume": consumers,
            "frozen_secs": round(frozen_secs, 2),
            "consume_secs": round(consume_secs, 3),
            "consumed_per_sec": round(sent / consume_secs, 1),
            "steady_consumed_per_sec": steady_rate(timeline, sent),
            "deliver_secs": round(deliver_secs, 3),
            "delivered_notices_per_sec": round(sent / deliver_secs, 1),
            "delivered_events_per_sec": round(sent * n_clients / deliver_secs, 1),
            "events": events,
            "events_per_response": round(events / responses, 2) if responses else None,
            "cpu": usage,
            "cpu_share": shares(usage),
            "server_cpu_per_notice_us": round(usage["server_cpu_secs"] / sent * 1e6, 1),
            "server_cpu_per_event_us": round(usage["server_cpu_secs"] / events * 1e6, 2)
            if events
            else None,
            "timeline": timeline[:: max(1, len(timeline) // 40)],
            "consumer": consumer,
            "loop_lag": stats["loop_lag"],
            "profile_top": profile_top,
        }
        log(
            f"  consumed in {consume_secs:.2f} s ({result['consumed_per_sec']:,.0f}/s), all read"
            f" after {deliver_secs:.2f} s ({result['delivered_events_per_sec']:,.0f} events/s);"
            f" server CPU {result['server_cpu_per_notice_us']:,.0f} us per notice"
        )
        return result

    def profile_path(self, name: str) -> Path | None:
        base: Path | None = self.args.py_spy
        if base is None:
            return None
        return base.with_name(f"{base.stem}-{name}{base.suffix}")


def steady_rate(timeline: Sequence[tuple[float, int, int | None]], total: int) -> float | None:
    """Notices/s between 10% and 90% processed: without the start-up and the tail."""
    low = next((row for row in timeline if row[1] >= total * 0.1), None)
    high = next((row for row in timeline if row[1] >= total * 0.9), None)
    if low is None or high is None or high[0] <= low[0]:
        return None
    return round((high[1] - low[1]) / (high[0] - low[0]), 1)


# Where a sample of the server falls on the consumer path: the first step one
# of whose (function, file) is in the stack; steps under `_on_message` are
# indented. py-spy sees Python frames only: a step whose module runs
# compiled (queues/compiled.py: parse_notice, registry.deliver, the
# consumer) reads about 0 % and its time falls to the step around it; run
# the server with EVENTQ_PURE_PYTHON=1 for this breakdown, or perf for the
# compiled build (tests/benchmarks/README.md).
CONSUMER_PATH = (
    ("  parse_notice (orjson + validation)", ("parse_notice", "generation/notice.py")),
    ("  parse_notice (orjson + validation)", ("make_notice", "generation/notice.py")),
    ("  registry.deliver (queues, payloads, waking)", ("deliver", "queues/registry.py")),
    ("  the rest (dedup, ack bookkeeping)", ("_on_message", "server/delivery/consumer.py")),
    ("ack flush (basic_ack)", ("_flush_ack", "server/delivery/consumer.py")),
    ("internal stats requests (this benchmark's polling)", ("post", "server/handlers/internal.py")),
    ("client GET: building and writing the response", ("write_body", "server/handlers/base.py")),
    (
        "client GET: the rest of the handler (auth, params, prune, park)",
        ("get", "server/handlers/events.py"),
    ),
)
ON_MESSAGE_TOTAL = "consumer _on_message (pika's callback), total"


def consumer_path(output: Path) -> list[tuple[str, float]]:
    """Share of the samples by step of the consumer path."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in read_stacks(output):
        total += count
        counts[_path_step(frames)] += count
    if not total:
        return []
    counts[ON_MESSAGE_TOTAL] = sum(c for step, c in counts.items() if step.startswith("  "))
    ordered = [ON_MESSAGE_TOTAL] + [
        step for step, _ in counts.most_common() if step != ON_MESSAGE_TOTAL
    ]
    # The indented steps right after their total.
    ordered.sort(key=lambda step: 0 if step == ON_MESSAGE_TOTAL or step.startswith("  ") else 1)
    return [(step, round(100 * counts[step] / total, 1)) for step in ordered]


def _path_step(frames: list[str]) -> str:
    located = []
    for frame in frames:
        name, _, where = frame_function(frame).partition(" (")
        located.append((name.rsplit(".", 1)[-1], where.rstrip(")")))
    for step, marker in CONSUMER_PATH:
        if marker in located:
            return step
    wheres = [where for _, where in located]
    if any(where.startswith("pika/") for where in wheres):
        return "pika, outside _on_message (socket reads, frame decoding)"
    if any(where.startswith("tornado/") for where in wheres):
        return "tornado, outside our handlers (HTTP parsing, connections)"
    # The entry point (server/admin/entry.py, cli.py) is in every stack: not "our code".
    if any(
        where.startswith(OUR_PACKAGES)
        and not where.startswith(("server/admin/cli.py", "server/admin/entry.py", "server/__"))
        for where in wheres
    ):
        return "other eventq code"
    return "asyncio loop (select: waiting, mostly; callback dispatch)"


# -- report -----------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _trio(values: dict[str, float] | None, keys: Sequence[str] = ("p50", "p99", "max")) -> str:
    if not values:
        return "-"
    return " / ".join(f"{values[key]:,.1f}" for key in keys)


def render(results: dict[str, Any]) -> str:
    out = io.StringIO()
    config = results["config"]
    out.write(
        f"\neventq RabbitMQ benchmark ({config['cpus']} CPUs; {config['clients']:,} parked"
        f" clients, {config['clients_per_user']} per user; generator loop"
        f" {config['generator_loop']})\nserver code: {config['source']}\n"
    )
    drains = results["drain"]
    if drains:
        out.write(
            "\npublisher: send_event from one thread, publisher confirms, server frozen"
            " (only the broker runs)\n"
        )
        rows = [
            (
                "notice to",
                "calls",
                "calls/s",
                "call p50 / p99 / max ms",
                "prepare_notice",
                "publisher CPU/call",
                "broker CPU/call",
            )
        ]
        for drain in drains.values():
            pub = drain["publisher"]
            rows.append(
                (
                    f"{drain['users_per_notice']:,} user(s)",
                    f"{drain['notices']:,}",
                    f"{pub['send_event_per_sec']:,.0f}",
                    _trio(pub["send_event_ms"], ("p50", "p99", "max")),
                    f"{pub['prepare_notice_us']:,.0f} us",
                    f"{pub['cpu_per_call_us']:,.0f} us ({pub['cpu_share']:.0%} busy)",
                    "-"
                    if pub["broker_cpu_per_call_us"] is None
                    else f"{pub['broker_cpu_per_call_us']:,.0f} us",
                )
            )
        _table(out, rows)
        out.write(
            "\nconsume + deliver: a backlog published while the server was frozen, then resumed\n"
        )
        rows = [
            (
                "notices to",
                "backlog",
                "consumed/s (10-90%)",
                "all read after",
                "events/s",
                "server CPU/notice",
                "events/resp",
                "CPU server/broker/gen",
            )
        ]
        for drain in drains.values():
            share = drain["cpu_share"]
            rows.append(
                (
                    f"{drain['clients']:,} client(s)",
                    f"{drain['notices']:,}",
                    f"{drain['consumed_per_sec']:,.0f}"
                    f" ({_fmt_opt(drain['steady_consumed_per_sec'])})",
                    f"{drain['deliver_secs']:.2f} s",
                    f"{drain['delivered_events_per_sec']:,.0f}",
                    f"{drain['server_cpu_per_notice_us']:,.0f} us",
                    f"{drain['events_per_response']}",
                    f"{_pct(share['server'])} / {_pct(share['broker'])}"
                    f" / {_pct(share['generator'])}",
                )
            )
        _table(out, rows)
    latency = results["latency"]
    if latency:
        out.write(
            "\nsend_event -> read by the client (ms: p50 / p99 / max; a max rate builds a"
            " backlog when the server is the bottleneck)\n"
        )
        rows = [
            (
                "rate",
                "sent/s",
                "per client",
                "last client per notice",
                "send_event call",
                "events/resp",
                "CPU server/broker/gen/pub",
            )
        ]
        for phase in latency.values():
            share = phase["cpu_share"]
            rows.append(
                (
                    phase["label"],
                    f"{phase['notices_per_sec']:,.0f}",
                    _trio(phase["per_client_ms"]),
                    _trio(phase["last_client_per_notice_ms"]),
                    _trio(phase["send_event_ms"]),
                    f"{phase['events_per_response']}",
                    f"{_pct(share['server'])} / {_pct(share['broker'])}"
                    f" / {_pct(share['generator'])} / {_pct(phase['publisher_cpu_share'])}",
                )
            )
        _table(out, rows)
    out.write(
        "\nIO-loop lag after each phase (last 60 s; a drain's includes its freeze),"
        " p50 / p99 / window max ms:\n"
    )
    width = max((len(name) for name in results["loop_lag"]), default=0) + 2
    for name, lag in results["loop_lag"].items():
        out.write(
            f"  {name:<{width}}{lag['p50_ms']:.2f} / {lag['p99_ms']:.2f}"
            f" / {lag['window_max_ms']:.1f}\n"
        )
    out.write(
        "\ngenerator counters: "
        + ", ".join(f"{key} {value}" for key, value in results["counters"].items())
        + "\n"
    )
    if results.get("consumer"):
        out.write(
            "server consumer: "
            + ", ".join(f"{key} {value}" for key, value in results["consumer"].items())
            + "\n"
        )
    if results.get("server"):
        pool = results["server"]["db_pool"]
        out.write(
            f"server: {results['server']['auth_lookups']} authentication lookups in the"
            f" database; pool: {', '.join(f'{key} {value}' for key, value in pool.items())}\n"
        )
    problems = results.get("problems")
    if problems:
        out.write(f"CHECKS FAILED ({len(problems)}); the figures above may not mean much:\n")
        for problem in problems:
            out.write(f"    {problem}\n")
    elif results["latency"] or results["drain"]:
        out.write(
            "checks passed: no consumer retry, duplicate, dead letter or reconnection;"
            " no error response; every event read once, in order\n"
        )
    warnings = results["server_warnings"]
    if warnings:
        out.write(f"server logged {len(warnings)} warnings/errors; the last ones:\n")
        for line in warnings[-5:]:
            out.write(f"    {line}\n")
    for drain in drains.values():
        profile = drain.get("profile_top")
        if not profile:
            continue
        if "error" in profile:
            out.write(f"\npy-spy failed during drain {drain['name']}: {profile['error']}\n")
            continue
        out.write(
            f"\npy-spy, server during drain {drain['name']} ({profile['samples']} samples,"
            " idle excluded)\n"
        )
        for title, key, count in (
            ("consumer path", "consumer_path_pct", 20),
            ("by category", "categories_pct", 12),
            ("self time by function", "self_pct", 15),
            ("eventq functions, inclusive", "eventq_inclusive_pct", 12),
        ):
            out.write(f"  {title}:\n")
            for name, pct in profile[key][:count]:
                out.write(f"    {pct:5.1f}%  {name}\n")
    return out.getvalue()


def _fmt_opt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table(out: io.StringIO, rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
    for number, row in enumerate(rows):
        out.write(
            "  "
            + "".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
        if number == 0:
            out.write("  " + "-" * (sum(widths) - 2) + "\n")


# -- main -------------------------------------------------------------------


async def run(
    args: argparse.Namespace,
    server: FreezableServer,
    users: list[User],
    realm_id: int,
    amqp_url: str,
    results: dict[str, Any],
) -> None:
    bench = RabbitBench(args, server, users, realm_id, amqp_url)
    results["config"]["broker_pid"] = bench.broker
    try:
        deadline = time.monotonic() + 30
        while not (await bench.consumer_stats())["consuming"]:
            if time.monotonic() > deadline:
                raise BenchError(f"the server is not consuming after 30 s\n{server.tail()}")
            await asyncio.sleep(0.05)
        log(f"connecting {args.clients} clients")
        stopped = await bench.ramp_to(args.clients)
        if stopped is not None:
            raise BenchError(stopped)
        await bench.wait_parked(args.clients)
        gc.collect()
        gc.freeze()  # the generator's long-lived clients: no more GC scans of them
        for target, rate in args.latency:
            n_clients = len(bench.clients) if target == "all" else args.clients_per_user
            who = "all clients" if target == "all" else "one user"
            if rate:
                label = f"{who}, {rate:g}/s"
                phase = await bench.phase_latency(label, n_clients, rate, 1, args.duration)
            else:
                label = f"{who}, max ({args.max_publishers} publishers)"
                phase = await bench.phase_latency(
                    label, n_clients, 0, args.max_publishers, args.max_duration
                )
            results["latency"][label] = phase
            results["loop_lag"][f"latency {label}"] = phase.pop("loop_lag")
        for name, n_clients, count in (
            ("one-user", args.clients_per_user, args.drain_one),
            ("all", len(bench.clients), args.drain_all),
        ):
            if count:
                drain = await bench.phase_drain(name, n_clients, count)
                results["drain"][name] = drain
                results["loop_lag"][f"drain {name}"] = drain.pop("loop_lag")
        stats = await bench.stats()
        results["consumer"] = stats["consumer"]
        results["server"] = {"auth_lookups": stats["auth_lookups"], "db_pool": stats["db_pool"]}
    finally:
        results["counters"] = {
            "responses": bench.responses,
            "bench_events": bench.bench_events,
            "other_events": bench.other_events,
            "duplicate_ids": bench.duplicates,
            "id_gaps": bench.gaps,
            "error_responses": bench.errors,
            "re_registered": bench.reregistered,
            "connections_lost": bench.lost,
        }
        if bench.last_error:
            results["counters"]["last_error"] = bench.last_error
        results["problems"] = bench.problems
        bench.close_all()
        bench.probe.close()
        await asyncio.sleep(0.2)


def realm_of(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT id FROM realms WHERE subdomain = 'bench'").fetchone()
    assert row is not None
    return int(row[0])


DEFAULT_LATENCY = "one@50,one@max,all@2,all@10,all@50,all@max"
# --quick: every phase kind (paced and flat-out latency, both drains) on 20
# clients for about a second each, to check the script (a test runs it);
# options given beside --quick still win. A drain's backlog must all be
# published within --max-freeze (the test checks it was): 1,500 notices took
# 10 s on a loaded 2-core machine, so 1,200 in at most 100 s (under
# RabbitMQ's 120 s for a silent connection) leave room for a machine ten
# times slower.
QUICK = {
    "clients": 20,
    "latency": "one@50,all@20,all@max",
    "duration": 1.0,
    "max_duration": 1.0,
    "drain_one": 1200,  # past the consumer's prefetch (1,000): some wait in the queue
    "drain_all": 50,
    "max_freeze": 100.0,
    "drain_timeout": 60.0,
}


def latency_phases(text: str) -> list[tuple[str, float]]:
    """ "one@50,all@max" -> [("one", 50.0), ("all", 0.0)] (0: flat out)."""
    phases = []
    for part in filter(None, (part.strip() for part in text.split(","))):
        target, _, rate = part.partition("@")
        if target not in ("one", "all"):
            raise argparse.ArgumentTypeError(f"{part!r}: the target is 'one' or 'all'")
        try:
            value = 0.0 if rate == "max" else float(rate)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: the rate is a number or 'max'") from None
        if rate != "max" and not value > 0:
            raise argparse.ArgumentTypeError(f"{part!r}: the rate must be positive")
        phases.append((target, value))
    return phases


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Consume-and-deliver rate, send_event rate and send-to-read latency of"
        " the eventq server through RabbitMQ, with parked clients.",
    )
    parser.add_argument("--clients", type=int, default=1000, help="parked clients")
    parser.add_argument(
        "--clients-per-user", type=int, default=1, help="queues per user (server limit 100)"
    )
    parser.add_argument(
        "--latency",
        type=latency_phases,
        default=latency_phases(DEFAULT_LATENCY),
        help="comma-separated latency phases TARGET@RATE, TARGET one or all, RATE notices/s"
        f" or max ('' for none; default {DEFAULT_LATENCY})",
    )
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of each paced latency phase"
    )
    parser.add_argument(
        "--max-publishers",
        type=int,
        default=2,
        help="publisher processes of the @max latency phases",
    )
    parser.add_argument(
        "--max-duration",
        type=float,
        default=3.0,
        help="seconds of each @max latency phase (its backlog to all clients takes longer to read)",
    )
    parser.add_argument(
        "--drain-one", type=int, default=40_000, help="backlog of notices to one user (0: skip)"
    )
    parser.add_argument(
        "--drain-all", type=int, default=5_000, help="backlog of notices to every client (0: skip)"
    )
    parser.add_argument(
        "--max-freeze",
        type=float,
        default=40.0,
        help="seconds the server may stay frozen while a backlog is published",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=300.0, help="seconds a drain may take"
    )
    parser.add_argument(
        "--amqp-base",
        default=DEFAULT_AMQP_BASE,
        help="RabbitMQ URL without vhost (rabbitmqctl must manage that broker)",
    )
    parser.add_argument(
        "--auth-cache-secs",
        type=float,
        default=3600.0,
        help="the server's EVENTQ_AUTH_CACHE_SECS (default 3600: no re-authentication"
        " during the run; 60 is the server's default)",
    )
    parser.add_argument("--batch", type=int, default=500, help="connections opened at once")
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    parser.add_argument("--keep-db", action="store_true", help="keep the database and vhost")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="FILE",
        help="record the server with py-spy during each drain (raw stacks to FILE-<drain>)"
        " and print where the time goes",
    )
    parser.add_argument(
        "--py-spy-native",
        action="store_true",
        help="with --py-spy: native stacks too (GC, syscalls; slows the server)",
    )
    parser.add_argument("--no-uvloop", action="store_true", help="never use uvloop here")
    args = parse_with_quick(parser, argv, QUICK)
    if not 1 <= args.clients_per_user <= 100:
        parser.error("--clients-per-user must be 1..100 (the server's queues-per-user limit)")
    if args.clients < 1 or args.duration <= 0 or args.max_duration <= 0:
        parser.error("--clients, --duration and --max-duration must be positive")
    if args.max_publishers < 1:
        parser.error("--max-publishers must be positive")
    return args


def remove_scratch(database: Database, vhost: Vhost, workdir: Path, *, keep: bool) -> None:
    """Drop a run's database and vhost and remove its directory (or, with
    `keep`, say where they are), reporting what could not be removed."""
    if keep:
        log(f"kept database {database.name}, vhost {vhost.name} and {workdir}")
        return
    try:
        database.drop()
    except psycopg.Error as exc:
        log(f"could not drop database {database.name}: {exc}")
    try:
        vhost.delete()
    except BrokerError as exc:
        log(f"could not delete vhost {vhost.name}: {exc}")
    shutil.rmtree(workdir, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    raise_fd_limit()
    new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    loop_name = "asyncio"
    if not args.no_uvloop:
        try:
            import uvloop  # type: ignore[import-not-found]

            new_loop = uvloop.new_event_loop
            loop_name = "uvloop"
        except ImportError:
            pass
    base_url = os.environ.get("EVENTQ_DATABASE_URL") or "host=127.0.0.1 user=postgres"
    database = Database(base_url)
    vhost = Vhost(args.amqp_base)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-bench-"))
    server = FreezableServer(
        database.url,
        workdir,
        secrets.token_urlsafe(16),
        {
            "EVENTQ_AMQP_URL": vhost.url,
            "EVENTQ_NOTIFY_QUEUE": NOTIFY_QUEUE,
            # All clients authenticate within a second; with the default 60 s
            # cache they would all ask the database again at once a minute
            # later, in the middle of some phase (see README).
            "EVENTQ_AUTH_CACHE_SECS": str(args.auth_cache_secs),
        },
    )
    results: dict[str, Any] = {
        "config": {
            "clients": args.clients,
            "clients_per_user": args.clients_per_user,
            "latency": args.latency,
            "duration_secs": args.duration,
            "max_publishers": args.max_publishers,
            "max_duration_secs": args.max_duration,
            "drain_one": args.drain_one,
            "drain_all": args.drain_all,
            "cpus": os.cpu_count(),
            "generator_loop": loop_name,
            "python": sys.version.split()[0],
            "source": source_state(),
            "auth_cache_secs": args.auth_cache_secs,
            "quick": args.quick,
            "vhost": vhost.name,
            "database": database.name,
            "workdir": str(workdir),
        },
        "latency": {},
        "drain": {},
        "loop_lag": {},
        "counters": {},
        "problems": [],
        "server_warnings": [],
    }
    status = 1
    try:
        log(f"vhost {vhost.name}: creating")
        vhost.create()
        n_users = (args.clients + args.clients_per_user - 1) // args.clients_per_user
        log(f"database {database.name}: creating, migrating, {n_users} users")
        database.create()
        users = database.populate(n_users)
        realm_id = realm_of(database.url)
        log(f"server: starting on port {server.port} (log {server.log_path})")
        server.start()
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(run(args, server, users, realm_id, vhost.url, results))
        status = 0
    except (BenchError, BrokerError) as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        results["server_warnings"] = server.warnings()
        server.stop()
        remove_scratch(database, vhost, workdir, keep=args.keep_db)
    if status == 0 or results["latency"] or results["drain"]:
        if status != 0:
            log("partial results (the run did not finish):")
        report = render(results)
        if args.json:
            print(report, file=sys.stderr)
            print(json.dumps(results, indent=2, default=str))
        else:
            print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
