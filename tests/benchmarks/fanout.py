"""eventq beside nginx + nchan: fan-out, throughput, memory and CPU, one run,
one machine.

Run from the repository root:

    .venv/bin/python tests/benchmarks/fanout.py [--quick] [--back-to-back]
        [--json] [--keep-db] [--py-spy profile.txt] [--shards N]

Two servers are measured in turn with the same load generator and the same
scenarios, and every figure is printed for both with their ratio:

- eventq on the path a user pays for: the real server as a subprocess
  (`python -m server serve`, free port, no broker) on a fresh PostgreSQL
  database `eventq_bench_<random>` (on the server of EVENTQ_DATABASE_URL,
  default `host=127.0.0.1 user=postgres`), migrated, with one realm and
  --users users (API keys by COPY). Every request carries HTTP Basic auth;
  each client creates its queue with `POST /api/v1/register`
  (`event_types=["message"]`) and then long-polls
  `GET /api/v1/events?queue_id=..&last_event_id=..`; the delivery log is on
  (EVENTQ_LOG_DIR in the run's temporary directory) and the per-user rate
  limiter is configured as in production with a limit no client reaches
  (RATE_LIMIT below). Notices are `message` events of a stream message, with
  per-user flags (the sender's ["read"], the others' []), injected with
  `POST /api/internal/notify_tornado` as send_event posts them without a
  broker (`notify_head`). A client that leaves deletes its
  queue (`DELETE /api/v1/events`), so that a smaller scenario does not also
  feed the queues of a larger one.
- nginx + nchan (tests/benchmarks/nchan.py, which describes its config): one
  long-poll channel per user, a credential checked on every request, and
  the same message as eventq delivers it, published once per flags variant
  to the channels of the users that get it.

Clients are spread over the --users users (client i is user i % users, so
1,000 clients are 10 queues per user and 10,000 are 100, eventq's limit).
Scenarios, in this order, each server alone on the machine:

1. memory: RSS with no client, then with --clients (10,000) parked;
   (RSS - RSS at 0) / clients.
2. fan-out, for each of --fanout-sizes (5,000 then 1,000; the clients past
   the size leave): one notice to every client, --warmup uncounted rounds
   then --rounds rounds, each once every client has re-parked, started
   --spacing seconds after the previous one (1 s at 1,000, 3 s at 5,000) or
   at once with --back-to-back. The largest size goes on for at least
   --lag-window seconds (the server's loop-lag window) so that the IO-loop
   lag eventq reports right after it is that of the fan-out alone. Latency
   of a client = when it finished reading its response - when the notice was
   written. Server CPU (every thread's time on a CPU, from /proc:
   `nchan.process_cpu_secs`) from the notice until the server is idle again
   (the responses and every client's re-poll), summed over the rounds, is
   divided by the events delivered.
3. throughput: --throughput-clients (1,000) clients; --injectors
   connections each keep --pipeline notices in flight for --duration s.
   Events read by clients per second inside the window; server CPU over the
   window per event.

After every scenario that sends notices, every client's message ids are
checked: each notice exactly once, none that was not sent (and for eventq,
event ids without gap or repeat). A failed check fails the run (exit 1)
after printing the figures.

Whatever happens (error, Ctrl-C, SIGTERM) both servers are stopped and the
database dropped (unless --keep-db). The load generator is this process on
raw asyncio protocols (uvloop if installed): one HTTP/1.1 keep-alive
connection per client, re-polling as soon as a response is read.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import ctypes
import gc
import http.client
import io
import json
import math
import os
import queue
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import amqp_ceiling  # beside this script
import nchan  # beside this script
import orjson
import pika
import pika.exceptions
import psycopg
from broker import (  # beside this script
    BrokerError,
    Vhost,
    broker_pid,
    process_cpu_secs,
    publish_notice,
)
from psycopg import conninfo

from generation.accounts import HASH_HMAC, api_key_id, hash_api_key, new_api_key
from generation.config import NOTIFY_QUEUE
from server.database.migrate import migrate

REPO = Path(__file__).resolve().parent.parent.parent
# The servers' EVENTQ_API_KEY_SECRET, with which `populate` hashes the keys.
API_KEY_SECRET = secrets.token_urlsafe(32)
DEFAULT_BASE_URL = "host=127.0.0.1 user=postgres"
HOST = "127.0.0.1"
TICKS = os.sysconf("SC_CLK_TCK")
# Production's limiter, with a limit no benchmark user reaches in a 60 s
# window (a user's 100 clients re-polling flat out make some 10^5 requests):
# the limiter's bookkeeping is paid on every request, its refusals never.
RATE_LIMIT = 1_000_000_000
# The bars (issue 36's): eventq against nchan, a C server doing the same
# job, measured in the same run so that the machine's speed cancels out. By
# the clients' transport: eventq/nchan server CPU per delivered event and
# time to the last client, and nchan/eventq delivered events/s.
BARS = {
    "poll": {"cpu": 1.5, "last_client": 1.25, "events": 1 / 0.8},
    "sse": {"cpu": 1.25, "last_client": 1.25, "events": 1.0},
}
SMALL_EVENTS_BAR = 2.0  # with many small events, delivered events/s >= 1/2 of nchan's
LOOP_LAG_BAR_MS = 50.0  # eventq's IO-loop lag p99 during the largest fan-out
MEMORY_BAR = 1.0  # memory per idle parked client <= nchan's
GC_SWEEP_BAR_MS = 50.0  # eventq's longest idle-queue GC sweep
# How each source of small events is named in the figures.
SMALL_SOURCES = {
    "endpoint": "through the internal endpoint",
    "rabbitmq": "through RabbitMQ (nchan: its endpoint)",
}
# A server using less than this share of a core is idle (`until_idle`): an
# idle eventq uses about 0.3 % (timers); a round's work is 100 % for a while.
IDLE_SHARE = 0.02
# --quick: every scenario for both servers at tiny sizes (options given
# beside it override these).
QUICK = {
    "users": 20,
    "clients": 200,
    "fanout_sizes": [50, 100],
    "spacing": [0.2],
    "warmup": 0,
    "rounds": 2,
    "lag_window": 0.0,
    "throughput_clients": 100,
    "duration": 2.0,
    "small_clients": 20,
}


class BenchError(RuntimeError):
    """The benchmark cannot go on; the message says why."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty sequence."""
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def median_of(rows: Sequence[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(row[key]) for row in rows))


# -- the world: database and server process ---------------------------------


@dataclass
class User:
    user_id: int
    email: str
    api_key: str

    @property
    def authorization(self) -> str:
        token = base64.b64encode(f"{self.email}:{self.api_key}".encode()).decode()
        return f"Basic {token}"


class Database:
    """A fresh database on the PostgreSQL server of `base_url`, dropped by `drop`."""

    def __init__(self, base_url: str):
        self.name = f"eventq_bench_{secrets.token_hex(4)}"
        self.admin_url = conninfo.make_conninfo(base_url, dbname="postgres")
        self.url = conninfo.make_conninfo(base_url, dbname=self.name)
        self.created = False
        self.realm_id = 0

    def create(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"'.encode())
        self.created = True
        migrate(self.url)

    def populate(self, n_users: int) -> list[User]:
        """One realm and `n_users` members with fresh API keys, by COPY."""
        keys: list[str] = []
        seen: set[str] = set()
        while len(keys) < n_users:
            key = new_api_key()
            if api_key_id(key) not in seen:  # the id column is unique
                seen.add(api_key_id(key))
                keys.append(key)
        emails = [f"bench{i}@bench.example.com" for i in range(n_users)]
        with psycopg.connect(self.url) as conn:
            row = conn.execute(
                "INSERT INTO realms (subdomain, name) VALUES ('bench', 'Benchmark') RETURNING id"
            ).fetchone()
            assert row is not None
            realm_id = self.realm_id = int(row[0])
            with conn.cursor() as cur:
                copy_sql = (
                    "COPY users (realm_id, email, full_name, role, api_key_id, api_key_hash,"
                    " api_key_hash_scheme)"
                    " FROM STDIN"
                )
                with cur.copy(copy_sql) as copy:
                    for i, (email, key) in enumerate(zip(emails, keys, strict=True)):
                        copy.write_row(
                            (
                                realm_id,
                                email,
                                f"Bench {i}",
                                400,
                                api_key_id(key),
                                hash_api_key(key, API_KEY_SECRET.encode()),
                                HASH_HMAC,
                            )
                        )
            ids: dict[str, int] = dict(conn.execute("SELECT email, id FROM users").fetchall())
        return [User(int(ids[email]), email, key) for email, key in zip(emails, keys, strict=True)]

    def drop(self) -> None:
        if not self.created:
            return
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'.encode())
        self.created = False


def die_with_parent() -> None:
    """In the child before exec: SIGTERM the server if this process dies
    (even by SIGKILL), so no server outlives its benchmark."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`python -m server serve`, its log in `state_dir/server.log`."""

    def __init__(
        self,
        database_url: str,
        state_dir: Path,
        secret: str,
        extra_env: dict[str, str] | None = None,
        port: int | None = None,
        name: str = "server",
    ):
        self.state_dir = state_dir
        self.secret = secret
        self.port = port or free_port()
        self.name = name
        self.log_path = state_dir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
        env.update(
            {
                "EVENTQ_DATABASE_URL": database_url,
                "EVENTQ_STATE_DIR": str(state_dir / "state"),
                "EVENTQ_SHARED_SECRET": secret,
                "EVENTQ_API_KEY_SECRET": API_KEY_SECRET,
                "EVENTQ_LOG_LEVEL": "WARNING",
                # No heartbeat may wake a parked request during a measurement.
                "EVENTQ_HEARTBEAT_SECS": "3600",
                # A benchmark user's ten clients re-poll many times a second:
                # the capacity is measured, not the per-user rate limit.
                "EVENTQ_RATE_LIMIT_REQUESTS": "0",
                "EVENTQ_AUTH_FAILURE_LIMIT": "0",
                # No broker unless the caller names one: notices come through
                # /api/internal/notify_tornado, and a server started here must
                # never consume the notify queue of the default vhost (that of
                # a developer's own server on this machine).
                "EVENTQ_AMQP_URL": "",
            }
        )
        env.update(extra_env or {})
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> None:
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server", "serve", "--port", str(self.port)],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches us; we stop the server
                preexec_fn=die_with_parent,  # noqa: PLW1509 (no threads yet)
            )
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            self.check()
            try:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
                conn.request("GET", "/api/v1/server_settings")
                response = conn.getresponse()
                body = response.read()
                conn.close()
                if response.status == 200 and json.loads(body)["result"] == "success":
                    return
                last_error = f"status {response.status}"
            except (OSError, http.client.HTTPException, ValueError) as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise BenchError(
            f"server did not answer /api/v1/server_settings within {timeout:.0f} s"
            f" ({last_error})\n{self.tail()}"
        )

    def delivery_path(self) -> str:
        """How its compiled modules run (its stats' `delivery_path`)."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        try:
            conn.request(
                "POST",
                "/api/internal/stats",
                urllib.parse.urlencode({"secret": self.secret}),
                {"Content-Type": "application/x-www-form-urlencoded"},
            )
            path: str = json.loads(conn.getresponse().read())["delivery_path"]
            return path
        finally:
            conn.close()

    def check(self) -> None:
        """Raise with the tail of its log if the server has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.proc.returncode}; its log ends:\n"
                + self.tail()
            )

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        if not text.strip():
            return "    (the server logged nothing)"
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def warnings(self) -> list[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]

    def rss_kb(self) -> int:
        self.check()
        with open(f"/proc/{self.pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        # A process that has just died (a zombie) has no VmRSS.
        with contextlib.suppress(subprocess.TimeoutExpired):
            assert self.proc is not None
            self.proc.wait(2)
        self.check()
        raise BenchError("no VmRSS in /proc/<pid>/status")

    def cpu_secs(self) -> float:
        """utime + stime of the whole server process (all threads)."""
        self.check()
        with open(f"/proc/{self.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            log("server did not stop within 30 s of SIGTERM; killing it")
            proc.kill()
            proc.wait(10)


class ServerGroup:
    """The processes a run measures: one server, or the shards of a sharding
    config (each user's clients connect to the shard that owns the user, as
    nginx's X-Accel-Redirect ends up doing). CPU and memory are the sum."""

    def __init__(self, members: list[ServerProcess], owner: Callable[[int], int] | None = None):
        self.members = members
        self.secret = members[0].secret
        self._owner = owner or (lambda user_id: 0)

    def member_of(self, user_id: int) -> int:
        """Index in `members` of the process holding `user_id`'s queues."""
        return self._owner(user_id)

    @property
    def pid(self) -> int:
        if len(self.members) != 1:
            raise BenchError("py-spy records one process: not with --shards")
        return self.members[0].pid

    def start(self) -> None:
        for member in self.members:
            log(f"{member.name}: starting on port {member.port} (log {member.log_path})")
            member.start()

    def check(self) -> None:
        for member in self.members:
            member.check()

    def cpu_secs(self) -> float:
        return sum(member.cpu_secs() for member in self.members)

    def rss_kb(self) -> int:
        return sum(member.rss_kb() for member in self.members)

    def warnings(self) -> list[str]:
        return [line for member in self.members for line in member.warnings()]

    def stop(self) -> None:
        for member in self.members:
            member.stop()


def sharded_group(
    database_url: str,
    workdir: Path,
    secret: str,
    shards: int,
    realm_id: int,
    extra_env: dict[str, str] | None = None,
) -> ServerGroup:
    """`shards` shard processes with the benchmark realm spread over all of
    them (user u on shard u % shards), each consuming nothing (no broker: the
    generator injects each shard's notices on its own internal endpoint);
    `extra_env` is added to each one's environment."""
    names = [f"s{i}" for i in range(shards)]
    ports = [free_port() for _ in names]
    lines = [f'default_shard = "{names[0]}"']
    for name, port in zip(names, ports, strict=True):
        lines += [f"[shards.{name}]", f'host = "{HOST}"', f"port = {port}"]
    lines += ["[[realms]]", f"id = {realm_id}", f"shards = {json.dumps(names)}"]
    config = workdir / "sharding.toml"
    config.write_text("\n".join(lines) + "\n")
    members = [
        ServerProcess(
            database_url,
            workdir,
            secret,
            {**(extra_env or {}), "EVENTQ_SHARDING": str(config), "EVENTQ_SHARD": name},
            port=port,
            name=f"shard-{name}",
        )
        for name, port in zip(names, ports, strict=True)
    ]
    return ServerGroup(members, lambda user_id: user_id % shards)


def source_state() -> str:
    """The code the server runs: REPO's commit and the files changed since
    (outside tests/), so that a result says what it measured."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{REPO} (not a git checkout)"
    changed = [line[3:] for line in status.splitlines() if not line[3:].startswith("tests/")]
    return f"commit {commit}" + (f" + uncommitted {', '.join(changed)}" if changed else "")


def own_cpu_secs() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# -- HTTP/1.1 over raw asyncio protocols -------------------------------------


class HttpConnection(asyncio.Protocol):
    """Splits a keep-alive byte stream into Content-Length framed responses."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._need = -1  # body length of the response being read; -1: in headers
        self._status = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while True:
            if self._need < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buffer[:end]).lower()
                start = head.find(b"\r\ncontent-length:")
                if start < 0 or not head.startswith(b"http/1.1 "):
                    self.protocol_error(f"unexpected response head {head[:200]!r}")
                    return
                stop = head.find(b"\r\n", start + 2)
                self._need = int(head[start + 17 : stop if stop >= 0 else len(head)])
                self._status = int(head[9:12])
                del buffer[: end + 4]
            if len(buffer) < self._need:
                return
            body = bytes(buffer[: self._need])
            del buffer[: self._need]
            self._need = -1
            self.on_response(self._status, body)

    def protocol_error(self, message: str) -> None:
        log(f"protocol error: {message}")
        if self.transport is not None:
            self.transport.abort()

    def on_response(self, status: int, body: bytes) -> None:
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()


def notify_head(secret: str) -> bytes:
    """The head of a notify_tornado request as eventq's producers send one
    without a broker (generation/send.py): the notice is the JSON body, the
    secret a bearer token. Its Content-Length's value follows."""
    return (
        f"POST /api/internal/notify_tornado HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer {secret}\r\n"
        "Content-Length: "
    ).encode()


def post_request(path: str, form: str) -> bytes:
    body = form.encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class RequestConnection(HttpConnection):
    """Request/response on one connection, pipelined: answers come in order."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: collections.deque[asyncio.Future[tuple[int, bytes]]] = collections.deque()

    def send(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        if self.closed or self.transport is None:
            raise BenchError("internal connection to the server is closed")
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        self.transport.write(request)
        return future

    def on_response(self, status: int, body: bytes) -> None:
        future = self._pending.popleft()
        if not future.done():
            future.set_result((status, body))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(BenchError(f"internal connection lost ({exc})"))


class PollClient(HttpConnection):
    """One client: creates its queue (`Bench.register_request`), then
    long-polls for ever, re-polling as soon as a response is read."""

    def __init__(self, bench: Bench, index: int, authorization: str, member: int = 0):
        super().__init__()
        self.bench = bench
        self.index = index
        self.member = member  # which of the server's processes it talks to
        self.queue_id: bytes | None = None
        self.last_id = -1
        self.got = 0  # bench events received since the last reset
        self.seqs: list[int] = []  # message ids read, for `check_deliveries`
        self.request_tail = (
            f" HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: eventq-bench/1\r\n"
            f"Authorization: {authorization}\r\n\r\n"
        ).encode()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.register()

    def register(self) -> None:
        self.queue_id = None
        self.last_id = -1
        assert self.transport is not None
        self.transport.write(self.bench.register_request(self))

    def poll(self) -> None:
        if self.closed or self.transport is None:
            return
        assert self.queue_id is not None
        self.transport.write(
            b"GET /api/v1/events?queue_id=%s&last_event_id=%d%s"
            % (self.queue_id, self.last_id, self.request_tail)
        )

    def on_response(self, status: int, body: bytes) -> None:
        now = time.time()
        bench = self.bench
        bench.responses += 1
        if status != 200:
            self.on_error(status, body)
            return
        data = orjson.loads(body)
        if self.queue_id is None:
            # A register's answer names the queue's last event id; an implicit
            # registration's (dont_block) brings the queue's events instead.
            self.queue_id = data["queue_id"].encode()
            self.last_id = data.get("last_event_id", -1)
        events = data.get("events")
        if not events:
            self.poll()
            return
        self.take(events, now)

    def take(self, events: list[dict[str, Any]], now: float) -> None:
        """Count `events`, read `now`, in order: gaps, repeats, the bench's."""
        bench = self.bench
        last = self.last_id
        for event in events:
            event_id = event["id"]
            if event_id != last + 1:
                if event_id <= last:
                    bench.duplicates += 1
                else:
                    bench.gaps += event_id - last - 1
            last = event_id
        self.last_id = last
        self.read_on()
        wanted = bench.event_type
        for event in events:
            if event["type"] == wanted:
                self.got += 1
                bench.on_client_event(self, event, now)
            else:
                bench.other_events += 1

    def read_on(self) -> None:
        """Once an answer's events are counted: the next poll, at once."""
        self.poll()

    def on_error(self, status: int, body: bytes) -> None:
        bench = self.bench
        bench.errors += 1
        try:
            error = orjson.loads(body)
        except orjson.JSONDecodeError:
            error = {"msg": body[:200].decode(errors="replace")}
        bench.last_error = f"{status} {error.get('code', '')} {error.get('msg', '')}"
        if error.get("code") == "BAD_EVENT_QUEUE_ID":
            bench.reregistered += 1
            self.register()
        elif self.queue_id is None:
            asyncio.get_running_loop().call_later(1.0, self._retry_register)
        else:
            asyncio.get_running_loop().call_later(1.0, self.poll)

    def _retry_register(self) -> None:
        if not self.closed:
            self.register()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.bench.closing_client(self):
            self.bench.lost += 1


class StreamClient(PollClient):
    """One client (`--transport sse`) that reads its queue as an event stream
    once it has one (server/handlers/stream.py): one response kept open,
    each event counted as it is read; when the server ends the stream (every
    500 events, so that the next one acknowledges them), a new one at once
    from the last id read."""

    def __init__(self, bench: Bench, index: int, authorization: str, member: int = 0):
        super().__init__(bench, index, authorization, member)
        self.stream_tail = self.request_tail[:-2] + b"Accept: text/event-stream\r\n\r\n"
        self._streaming = False  # a stream asked for: its answer is read here
        self._head = bytearray()
        self._reader: nchan.SseReader | None = None
        self._now = 0.0

    def poll(self) -> None:
        if self.closed or self.transport is None:
            return
        assert self.queue_id is not None
        self._streaming = True
        self._reader = None
        self.transport.write(
            b"GET /api/v1/events?queue_id=%s&last_event_id=%d%s"
            % (self.queue_id, self.last_id, self.stream_tail)
        )

    def read_on(self) -> None:
        """The stream goes on by itself."""

    def data_received(self, data: bytes) -> None:
        if not self._streaming:
            super().data_received(data)  # the register, or an error answer
            return
        self._now = time.time()
        if self._reader is None:
            self._head += data
            head = nchan.stream_head(self._head)
            if head is None:
                return
            status, chunked, length = head
            data, self._head = bytes(self._head), bytearray()
            if status != 200 or not chunked:
                self._streaming = False  # a JSON error, read as a poll's
                super().data_received(data)
                return
            self._reader = nchan.SseReader(self._message)
            data = data[length:]
        if self._reader.feed(data):
            self.bench.responses += 1
            self.poll()  # ended by the server: the next stream acknowledges

    def _message(self, fields: dict[bytes, bytes]) -> None:
        if b"id" in fields and b"event" not in fields:
            self.take([orjson.loads(fields[b"data"])], self._now)


class Bench:
    """The load generator against one eventq server, or the shards of a
    `ServerGroup`: its clients, their counters, notices and the server's
    stats. By default clients register implicitly (`dont_block`), client i is
    user i // clients_per_user and notices are `bench` events; subclasses
    (`EventqSubject`, rabbitmq.py's) change that by overriding
    `register_request`, `user_for`, `event_type` and `on_client_event`."""

    # The type of the events the clients count as the benchmark's.
    event_type = "bench"

    def __init__(self, args: argparse.Namespace, server: ServerGroup, users: list[User]):
        self.args = args
        self.server = server
        self.users = users
        self.per_user: int = args.clients_per_user
        # Long polls, or event streams (--transport sse).
        transport = getattr(args, "transport", "poll")
        self.client_class: type[PollClient] = StreamClient if transport == "sse" else PollClient
        # Client i connects from nchan.source_address(i, source_addresses).
        self.source_addresses: int = getattr(args, "source_addresses", 1)
        self.clients: list[PollClient] = []
        self._closing: set[int] = set()
        self.controls: dict[int, RequestConnection] = {}
        self.stats_request = post_request(
            "/api/internal/stats", urllib.parse.urlencode({"secret": server.secret})
        )
        self.seq = 0
        # counters, over the whole run unless reset
        self.responses = 0
        self.bench_events = 0
        self.other_events = 0
        self.duplicates = 0
        self.gaps = 0
        self.errors = 0
        self.reregistered = 0
        self.lost = 0
        self.last_error = ""

    # -- plumbing -----------------------------------------------------------

    def register_request(self, client: PollClient) -> bytes:
        """What a client sends first to create its queue."""
        return b"GET /api/v1/events?dont_block=true" + client.request_tail

    def user_for(self, index: int) -> User:
        """The user whose credentials client `index` uses."""
        return self.users[index // self.per_user]

    def on_client_event(self, client: PollClient, event: dict[str, Any], now: float) -> None:
        """Called by `client` for each event of `event_type` it reads, `now`
        being when it finished reading the response."""
        self.on_event(event, now)

    def on_event(self, event: dict[str, Any], now: float) -> None:
        self.bench_events += 1

    def closing_client(self, client: PollClient) -> bool:
        return client.index in self._closing

    async def wait_until(
        self, predicate: Callable[[], bool], limit_secs: float, what: str, step: float = 0.005
    ) -> None:
        deadline = time.monotonic() + limit_secs
        while not predicate():
            self.server.check()
            if time.monotonic() > deadline:
                raise BenchError(f"timed out after {limit_secs:.0f} s waiting for {what}")
            await asyncio.sleep(step)

    async def await_future(self, future: asyncio.Future[Any], limit_secs: float, what: str) -> Any:
        deadline = time.monotonic() + limit_secs
        while True:
            done, _ = await asyncio.wait([future], timeout=0.2)
            if done:
                return future.result()
            self.server.check()
            if time.monotonic() > deadline:
                raise BenchError(f"timed out after {limit_secs:.0f} s waiting for {what}")

    async def connect_internal(self, member: int = 0) -> RequestConnection:
        loop = asyncio.get_running_loop()
        port = self.server.members[member].port
        _, protocol = await asyncio.wait_for(
            loop.create_connection(RequestConnection, HOST, port), 10
        )
        return protocol

    async def member_stats(self, member: int) -> dict[str, Any]:
        control = self.controls.get(member)
        if control is None or control.closed:
            control = self.controls[member] = await self.connect_internal(member)
        status, body = await self.await_future(
            control.send(self.stats_request), 20, "POST /api/internal/stats"
        )
        if status != 200:
            raise BenchError(f"stats answered {status}: {body[:300]!r}")
        result: dict[str, Any] = orjson.loads(body)
        return result

    async def stats(self) -> dict[str, Any]:
        """The server's stats; of shards, parked and queues summed and the
        worst loop lag of any."""
        each = [await self.member_stats(m) for m in range(len(self.server.members))]
        if len(each) == 1:
            return each[0]
        return {
            "parked": sum(stats["parked"] for stats in each),
            "queues": sum(stats["queues"] for stats in each),
            "loop_lag": {
                key: max(stats["loop_lag"][key] for stats in each) for key in each[0]["loop_lag"]
            },
        }

    async def server_idle(self, quiet_secs: float = 0.1, limit_secs: float = 10.0) -> float:
        """The server's CPU seconds once it has used none for `quiet_secs`
        (read from /proc, so without adding work to it, unlike `stats`)."""
        last = self.server.cpu_secs()
        quiet_since = time.monotonic()
        deadline = quiet_since + limit_secs
        while time.monotonic() - quiet_since < quiet_secs and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            now = self.server.cpu_secs()
            if now != last:
                last = now
                quiet_since = time.monotonic()
        return last

    async def wait_parked(self, count: int, limit_secs: float = 60.0) -> dict[str, Any]:
        """Until the server says exactly `count` requests are parked."""
        deadline = time.monotonic() + limit_secs
        while True:
            stats = await self.stats()
            if stats["parked"] == count:
                return stats
            if time.monotonic() > deadline:
                raise BenchError(
                    f"timed out after {limit_secs:.0f} s waiting for {count} parked requests"
                    f" (server: parked={stats['parked']}, queues={stats['queues']};"
                    f" errors={self.errors} last={self.last_error!r}, lost={self.lost})"
                )
            await asyncio.sleep(0.02)

    def users_of(self, clients: int) -> list[int]:
        last = (clients + self.per_user - 1) // self.per_user
        return [user.user_id for user in self.users[:last]]

    # -- connections ----------------------------------------------------------

    async def _connect(self, index: int) -> PollClient:
        user = self.user_for(index)
        member = self.server.member_of(user.user_id)
        protocol = await asyncio.wait_for(
            nchan.connect_from(
                lambda: self.client_class(self, index, user.authorization, member),
                self.server.members[member].port,
                nchan.source_address(index, self.source_addresses),
            ),
            15,
        )
        return cast(PollClient, protocol)

    async def ramp_to(self, target: int) -> str | None:
        """Connect clients in batches until `target` are parked. Returns None,
        or why it stopped short (the clients connected so far stay)."""
        batch = self.args.batch
        while len(self.clients) < target:
            start = len(self.clients)
            count = min(batch, target - start)
            results = await asyncio.gather(
                *(self._connect(i) for i in range(start, start + count)), return_exceptions=True
            )
            failure: BaseException | None = None
            for result in results:
                if isinstance(result, BaseException):
                    failure = failure or result
                else:
                    self.clients.append(result)
            batch_clients = self.clients[start:]

            def batch_registered(batch_clients: list[PollClient] = batch_clients) -> bool:
                return all(client.queue_id is not None for client in batch_clients)

            await self.wait_until(batch_registered, 60, f"{len(self.clients)} clients to register")
            if failure is not None:
                self.server.check()
                return f"connecting client {len(self.clients) + 1} failed: {failure!r}"
            if len(self.clients) % 2000 == 0 or len(self.clients) == target:
                log(f"  {len(self.clients)} clients connected and registered")
        return None

    async def shrink_to(self, count: int) -> None:
        """Disconnect the clients past the first `count`. Their queues stay,
        idle until the server's GC; when `count` is a multiple of
        --clients-per-user they belong to users that get no more events."""
        extra = self.clients[count:]
        del self.clients[count:]
        for client in extra:
            self._closing.add(client.index)
            client.close()
        await self.wait_parked(count)

    def close_all(self) -> None:
        for client in self.clients:
            self._closing.add(client.index)
            client.close()
        self.clients.clear()
        for control in self.controls.values():
            control.close()

    def notice_requests(self, users: list[int]) -> dict[int, Callable[[int], bytes]]:
        """Builders of notify_tornado requests for `users`, one per process
        that holds some of them (as `send_event` splits a notice by shard):
        a builder takes the seq and stamps the send time; everything else is
        encoded once."""
        split: dict[int, list[int]] = {}
        for user_id in users:
            split.setdefault(self.server.member_of(user_id), []).append(user_id)
        return {member: self.notice_request(part) for member, part in sorted(split.items())}

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def notice_request(self, users: list[int]) -> Callable[[int], bytes]:
        prefix = '{"event":{"type":"bench","seq":'
        middle = ',"t":'
        suffix = '},"users":' + json.dumps(users, separators=(",", ":")) + "}"
        head = notify_head(self.server.secret)

        def build(seq: int) -> bytes:
            body = f"{prefix}{seq}{middle}{time.time()!r}{suffix}".encode()
            return b"%s%d\r\n\r\n%s" % (head, len(body), body)

        return build


# -- the message both servers deliver ------------------------------------------


class Messages:
    """The notice of each scenario: a new stream message from the realm's
    first user, to every user, with Zulip's per-user flags (the sender's
    ["read"], everyone else's []). `notice` is what a producer gives eventq;
    `client_events` what a client receives (eventq's form for a client that
    registered without `apply_markdown`), which nchan publishes as is."""

    STREAM_ID = 1
    RECIPIENT_ID = 11
    CONTENT = (
        "The deploy finished at 10:42; the **queue depth** graphs are back to"
        " normal. Thanks @**Bench 3** for watching them during the window."
    )
    RENDERED = (
        "<p>The deploy finished at 10:42; the <strong>queue depth</strong> graphs"
        ' are back to normal. Thanks <span class="user-mention" data-user-id="3">'
        "@Bench 3</span> for watching them during the window.</p>"
    )

    def __init__(self, realm_id: int, sender: User):
        self.realm_id = realm_id
        self.sender = sender

    def message(self, seq: int) -> dict[str, Any]:
        """Message `seq` as the producer sends it (Markdown and HTML)."""
        return {
            "id": seq,
            "type": "stream",
            "sender_id": self.sender.user_id,
            "sender_email": self.sender.email,
            "sender_full_name": "Bench 0",
            "sender_realm_str": "bench",
            "avatar_url": None,
            "client": "website",
            "content": self.CONTENT,
            "rendered_content": self.RENDERED,
            "display_recipient": "general",
            "stream_id": self.STREAM_ID,
            "recipient_id": self.RECIPIENT_ID,
            "subject": "deploys",
            "topic_links": [],
            "is_me_message": False,
            "reactions": [],
            "submessages": [],
            "timestamp": int(time.time()),
        }

    def flags(self, user_id: int) -> list[str]:
        return ["read"] if user_id == self.sender.user_id else []

    def notice(self, seq: int, user_ids: Sequence[int]) -> bytes:
        """The wire form of the notice of message `seq` to `user_ids`."""
        return orjson.dumps(
            {
                "event": {"type": "message", "message": self.message(seq)},
                "users": [{"id": user_id, "flags": self.flags(user_id)} for user_id in user_ids],
                "realm_id": self.realm_id,
            }
        )

    def client_events(self, seq: int, user_ids: Sequence[int]) -> list[tuple[list[int], bytes]]:
        """The event each of `user_ids` receives, grouped by form: (users, JSON)."""
        message = self.message(seq)
        del message["rendered_content"]
        message["content_type"] = "text/x-markdown"
        groups: dict[tuple[str, ...], list[int]] = {}
        for user_id in user_ids:
            groups.setdefault(tuple(self.flags(user_id)), []).append(user_id)
        return [
            (users, orjson.dumps({"type": "message", "message": message, "flags": list(flags)}))
            for flags, users in groups.items()
        ]


# -- what the scenarios measure: eventq, nchan --------------------------------


class Client(Protocol):
    index: int
    seqs: list[int]


class Publisher(Protocol):
    def send(self, seq: int, users: Sequence[int] | None = None) -> asyncio.Future[int]:
        """Write notice `seq` to `users` (None: every user) now; the future
        gives the number of clients (eventq: queues; nchan: subscribers) the
        server says it reached."""
        ...

    def close(self) -> None: ...


class Subject(Protocol):
    """A server under measurement with its clients: `EventqSubject` and
    nchan.py's `NchanPeer`. Clients report each message to a `Recorder`."""

    name: str
    responses: int  # responses read by the clients, over the run
    small_sources: Sequence[str]  # where its small events come from: "endpoint", "rabbitmq"

    @property
    def clients(self) -> Sequence[Client]: ...

    async def grow_to(self, count: int) -> None:
        """Connect clients until `count` are parked."""
        ...

    async def shrink_to(self, count: int) -> None:
        """Disconnect the clients past `count` (they leave for good)."""
        ...

    async def wait_parked(self, count: int, limit_secs: float = 60.0) -> Any: ...

    async def publisher(self) -> Publisher: ...

    async def amqp_publisher(self) -> Publisher:
        """Notices through RabbitMQ (with "rabbitmq" in `small_sources`)."""
        ...

    def check(self) -> None:
        """Raise if the server has died."""
        ...

    def cpu_secs(self) -> float: ...

    def rss_kb(self) -> int: ...

    async def loop_lag(self) -> dict[str, float] | None: ...

    async def gc_pauses(self) -> dict[str, Any] | None:
        """The longest idle-queue GC sweep and Python full collection over
        the run (eventq's; nchan has neither)."""
        ...

    def problems(self) -> dict[str, Any]:
        """Error responses, lost connections and such, over the run."""
        ...

    def close_all(self) -> None: ...


@dataclass
class FanoutRound:
    seq: int
    sent: float = 0.0
    latencies: list[float] = field(default_factory=list)


class Recorder:
    """Every message a client reads: appended to its `seqs`, and timed against
    when its notice was written (`stamp`)."""

    def __init__(self) -> None:
        self.seq = 0
        self.sent_at: dict[int, float] = {}  # seq -> time.time() its notice was written
        self.events = 0  # messages read by clients, over the run
        self.round: FanoutRound | None = None  # the fan-out round being timed
        self.samples: list[float] | None = None  # latencies, while collected
        # seq -> [reads still to come, future], for `until_read`.
        self.awaited: dict[int, list[Any]] = {}

    def until_read(self, seq: int, reads: int) -> asyncio.Future[int]:
        """A future done (with `reads`) once message `seq` has been read
        `reads` times."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.awaited[seq] = [reads, future]
        return future

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def stamp(self, seq: int) -> float:
        """Call just before writing notice `seq`."""
        now = self.sent_at[seq] = time.time()
        return now

    def on_message(self, client: Client, seq: int, now: float) -> None:
        client.seqs.append(seq)
        self.events += 1
        awaited = self.awaited.get(seq)
        if awaited is not None:
            awaited[0] -= 1
            if awaited[0] == 0:
                del self.awaited[seq]
                awaited[1].set_result(0)
        current = self.round
        if current is not None:
            if seq == current.seq:
                current.latencies.append(now - current.sent)
        elif self.samples is not None:
            self.samples.append(now - self.sent_at[seq])


# Builders of notify_tornado requests for a set of users, by the process
# that holds them.
Builders = dict[int, Callable[[int], bytes]]


class EventqPublisher:
    """notify_tornado on one connection per server process, each sent the
    notice for the users it holds (as `send_event` splits a notice by shard)."""

    def __init__(
        self,
        connections: dict[int, RequestConnection],
        builders: Builders,
        builders_for: Callable[[Sequence[int]], Builders],
    ):
        self.connections = connections
        self.builders = builders
        self.builders_for = builders_for
        self.targeted: dict[tuple[int, ...], Builders] = {}

    def send(self, seq: int, users: Sequence[int] | None = None) -> asyncio.Future[int]:
        builders = self.builders
        if users is not None:
            key = tuple(users)
            builders = self.targeted.get(key) or self.targeted.setdefault(
                key, self.builders_for(users)
            )
        answers = [self.connections[member].send(build(seq)) for member, build in builders.items()]
        return asyncio.ensure_future(self._reached(answers))

    @staticmethod
    async def _reached(answers: list[asyncio.Future[tuple[int, bytes]]]) -> int:
        reached = 0
        for answer in answers:
            status, body = await answer
            if status != 200:
                raise BenchError(f"notify_tornado answered {status}: {body[:300]!r}")
            reached += int(orjson.loads(body)["queues"])
        return reached

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()


class AmqpPublisher:
    """Notices published to the server's notify queue in RabbitMQ as
    `send_event` publishes them (persistent, with the notice id and the
    publish time in the headers), by a thread of this process on a pika
    blocking connection of its own, so that the clients' loop never waits
    for the broker. A notice's future is done once every client it is for
    has read it: the notices in flight are those not yet read, and the
    broker's queue holds no more than them."""

    def __init__(
        self,
        url: str,
        recorder: Recorder,
        notice: Callable[[int, Sequence[int] | None], bytes],
        reads: Callable[[Sequence[int] | None], int],
    ):
        self.recorder = recorder
        self.notice = notice
        self.reads = reads  # how many clients a notice to these users reaches
        self.jobs: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.failure: BaseException | None = None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self.thread.start()

    def _run(self, url: str) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(url))
            try:
                channel = connection.channel()
                channel.queue_declare(NOTIFY_QUEUE, passive=True)  # the server's
                self.connected.set()
                while (body := self.jobs.get()) is not None:
                    publish_notice(channel, NOTIFY_QUEUE, body)
            finally:
                connection.close()
        except BaseException as exc:  # reported by `send` and `ready`
            self.failure = exc
            self.connected.set()

    async def ready(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.connected.wait, 30)
        if self.failure is not None or not self.connected.is_set():
            raise BenchError(f"could not publish to RabbitMQ: {self.failure!r}")

    def send(self, seq: int, users: Sequence[int] | None = None) -> asyncio.Future[int]:
        if self.failure is not None:
            raise BenchError(f"the RabbitMQ publisher stopped: {self.failure!r}")
        future = self.recorder.until_read(seq, self.reads(users))
        self.jobs.put(self.notice(seq, users))
        return future

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(30)


class EventqSubject(Bench):
    """eventq as a user pays for it: clients register with
    `POST /api/v1/register` (`event_types=["message"]`), client i is user
    i % users, notices are `Messages`' and a client that leaves deletes its
    queue."""

    name = "eventq"
    event_type = "message"
    REGISTER_BODY = urllib.parse.urlencode({"event_types": '["message"]'}).encode()

    def __init__(
        self,
        args: argparse.Namespace,
        server: ServerGroup,
        users: list[User],
        recorder: Recorder,
        messages: Messages,
        amqp_url: str | None = None,
    ):
        super().__init__(args, server, users)
        self.recorder = recorder
        self.messages = messages
        # The vhost the server consumes, for `amqp_publisher`.
        self.amqp_url = amqp_url
        # Where its small events come from (`measure_small_events`).
        self.small_sources = [
            s for s in getattr(args, "small_sources", ()) if s != "rabbitmq" or amqp_url
        ]

    def user_for(self, index: int) -> User:
        return self.users[index % len(self.users)]

    def register_request(self, client: PollClient) -> bytes:
        headers = client.request_tail[:-2]  # without the blank line
        return b"POST /api/v1/register%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
            headers,
            b"application/x-www-form-urlencoded",
            len(self.REGISTER_BODY),
            self.REGISTER_BODY,
        )

    def on_client_event(self, client: PollClient, event: dict[str, Any], now: float) -> None:
        self.bench_events += 1
        self.recorder.on_message(client, event["message"]["id"], now)

    def check(self) -> None:
        self.server.check()

    def cpu_secs(self) -> float:
        """CPU time of the server's processes, measured as nchan's is."""
        self.server.check()
        return sum(nchan.process_cpu_secs(member.pid) for member in self.server.members)

    def rss_kb(self) -> int:
        return self.server.rss_kb()

    async def loop_lag(self) -> dict[str, float]:
        lag: dict[str, float] = (await self.stats())["loop_lag"]
        return lag

    async def gc_pauses(self) -> dict[str, Any]:
        stats = await self.stats()
        sweeps = stats["queue_gc"]
        python = stats["python_gc"]["pauses"]
        full = python["count"][-1]  # the oldest generation: a full collection
        return {
            "queue_gc_sweeps": sweeps["sweeps"],
            "queue_gc_max_ms": sweeps["max_ms"] if sweeps["sweeps"] else None,
            "python_full_gc_count": full,
            "python_full_gc_max_ms": python["max_ms"][-1] if full else None,
        }

    def problems(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "error_responses": self.errors,
            "connections_lost": self.lost,
            "re_registered": self.reregistered,
            "duplicate_event_ids": self.duplicates,
            "event_id_gaps": self.gaps,
            "other_events": self.other_events,
        }
        if self.last_error:
            found["last_error"] = self.last_error
        return found

    async def grow_to(self, count: int) -> None:
        stopped = await self.ramp_to(count)
        if stopped is not None:
            raise BenchError(f"eventq took only {len(self.clients)} clients: {stopped}")
        await self.wait_parked(count)

    async def shrink_to(self, count: int) -> None:
        """Disconnect the clients past `count`, then delete their queues, as a
        client that quits does (`DELETE /api/v1/events`)."""
        extra = self.clients[count:]
        del self.clients[count:]
        for client in extra:
            self._closing.add(client.index)
            client.close()
        by_member: dict[int, list[PollClient]] = {}
        for client in extra:
            if client.queue_id is not None:
                by_member.setdefault(client.member, []).append(client)
        answers = []
        connections = []
        for member, leaving in by_member.items():
            # A few connections per process, the deletes pipelined on each.
            pool = [await self.connect_internal(member) for _ in range(4)]
            connections += pool
            for number, client in enumerate(leaving):
                request = b"DELETE /api/v1/events?queue_id=%s%s" % (
                    client.queue_id,
                    client.request_tail,
                )
                answers.append(pool[number % len(pool)].send(request))
        try:
            for answer in answers:
                status, body = await self.await_future(answer, 60, "DELETE /api/v1/events")
                # 400: the queue had ended already (BAD_EVENT_QUEUE_ID).
                if status not in (200, 400):
                    raise BenchError(f"DELETE /api/v1/events answered {status}: {body[:300]!r}")
        finally:
            for connection in connections:
                connection.close()
        await self.wait_parked(count)

    async def amqp_publisher(self) -> AmqpPublisher:
        """Notices through the broker (the server consumes --amqp vhost's
        notify queue)."""
        if self.amqp_url is None:
            raise BenchError("eventq was started without a broker")
        all_ids = [user.user_id for user in self.users]
        notice = self.messages.notice
        clients_of: collections.Counter[int] = collections.Counter(
            self.user_for(client.index).user_id for client in self.clients
        )

        def reads(users: Sequence[int] | None) -> int:
            return len(self.clients) if users is None else sum(clients_of[u] for u in users)

        publisher = AmqpPublisher(
            self.amqp_url,
            self.recorder,
            lambda seq, users: notice(seq, all_ids if users is None else users),
            reads,
        )
        await publisher.ready()
        return publisher

    async def publisher(self) -> EventqPublisher:
        builders = self._builders([user.user_id for user in self.users])
        members = range(len(self.server.members))
        connections = {member: await self.connect_internal(member) for member in members}
        return EventqPublisher(connections, builders, self._builders)

    def _builders(self, user_ids: Sequence[int]) -> Builders:
        """Request builders for the notice to `user_ids`, by process."""
        split: dict[int, list[int]] = {}
        for user_id in user_ids:
            split.setdefault(self.server.member_of(user_id), []).append(user_id)
        return {member: self._notice_builder(ids) for member, ids in sorted(split.items())}

    def _notice_builder(self, user_ids: list[int]) -> Callable[[int], bytes]:
        head = notify_head(self.server.secret)
        notice = self.messages.notice

        def build(seq: int) -> bytes:
            body = notice(seq, user_ids)
            return b"%s%d\r\n\r\n%s" % (head, len(body), body)

        return build


# -- the scenarios ----------------------------------------------------------------


async def wait_for(
    subject: Subject, predicate: Callable[[], bool], limit_secs: float, what: str, step: float
) -> None:
    deadline = time.monotonic() + limit_secs
    while not predicate():
        subject.check()
        if time.monotonic() > deadline:
            raise BenchError(
                f"{subject.name}: timed out after {limit_secs:.0f} s waiting for {what}"
            )
        await asyncio.sleep(step)


async def result_of(
    subject: Subject, awaitable: Awaitable[Any], limit_secs: float, what: str
) -> Any:
    future = asyncio.ensure_future(awaitable)
    deadline = time.monotonic() + limit_secs
    while True:
        done, _ = await asyncio.wait([future], timeout=0.2)
        if done:
            return future.result()
        subject.check()
        if time.monotonic() > deadline:
            future.cancel()
            raise BenchError(
                f"{subject.name}: timed out after {limit_secs:.0f} s waiting for {what}"
            )


async def until_idle(
    subject: Subject, quiet_secs: float = 0.1, limit_secs: float = 10.0, step: float = 0.02
) -> float:
    """The server's CPU seconds once it has used less than IDLE_SHARE of a
    core for `quiet_secs` (read from /proc, so without adding work to it). An
    idle eventq still wakes up: its loop-lag sampler ten times a second, its
    delivery log's flush every second; nginx does not."""
    samples = collections.deque([(time.monotonic(), subject.cpu_secs())])
    deadline = samples[0][0] + limit_secs
    while True:
        await asyncio.sleep(step)
        now, cpu = time.monotonic(), subject.cpu_secs()
        samples.append((now, cpu))
        while len(samples) > 1 and now - samples[1][0] >= quiet_secs:
            samples.popleft()
        since, cpu_then = samples[0]
        if now - since >= quiet_secs and cpu - cpu_then < IDLE_SHARE * (now - since):
            return cpu
        if now > deadline:
            raise BenchError(f"{subject.name} was still busy {limit_secs:.0f} s after a round")


async def resize(subject: Subject, count: int) -> None:
    """Exactly `count` clients, parked, with nothing read yet."""
    if len(subject.clients) < count:
        await subject.grow_to(count)
    elif len(subject.clients) > count:
        await subject.shrink_to(count)
    await subject.wait_parked(count)
    for client in subject.clients:
        client.seqs.clear()


def check_deliveries(
    clients: Sequence[Client],
    published: Sequence[int],
    expected_of: Callable[[Client], Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Whether every client read every published message meant for it
    (`expected_of` the client; default: all of them) exactly once and no
    other: counts of what is missing, repeated or unknown."""
    everything = sorted(published)
    lost = duplicated = unexpected = 0
    for client in clients:
        expected = everything if expected_of is None else sorted(expected_of(client))
        if sorted(client.seqs) == expected:
            continue
        wanted = set(expected)
        counts = collections.Counter(client.seqs)
        lost += sum(1 for seq in wanted if seq not in counts)
        duplicated += sum(n - 1 for seq, n in counts.items() if seq in wanted and n > 1)
        unexpected += sum(n for seq, n in counts.items() if seq not in wanted)
    return {
        "clients": len(clients),
        "notices": len(published),
        "lost": lost,
        "duplicated": duplicated,
        "unexpected": unexpected,
        "ok": lost == duplicated == unexpected == 0,
    }


async def measure_memory(subject: Subject, count: int) -> dict[str, Any]:
    """RSS with no client, then with `count` parked."""
    await asyncio.sleep(1.0)
    rss0 = subject.rss_kb()
    started = time.monotonic()
    log(f"{subject.name}: memory, ramping to {count:,} parked clients")
    await resize(subject, count)
    ramp_secs = time.monotonic() - started
    await asyncio.sleep(1.0)
    rss = subject.rss_kb()
    per_client = (rss - rss0) / count
    log(f"  {count:,} parked: RSS {rss / 1024:.1f} MiB, {per_client:.2f} KB each")
    return {
        "clients": count,
        "rss0_kb": rss0,
        "rss_kb": rss,
        "per_client_kb": round(per_client, 3),
        "ramp_secs": round(ramp_secs, 2),
    }


async def measure_fanout(
    subject: Subject,
    recorder: Recorder,
    size: int,
    spacing: float,
    warmup: int,
    rounds: int,
    min_secs: float,
) -> dict[str, Any]:
    """One notice to `size` parked clients, round after round (see the module
    docstring); the last rounds' figures, and whether every client read every
    notice once."""
    await resize(subject, size)
    publisher = await subject.publisher()
    published: list[int] = []
    rows: list[dict[str, float]] = []
    latencies: list[float] = []
    late = 0
    number = 0
    first_start = 0.0
    try:
        while number < warmup + rounds or time.monotonic() - first_start < min_secs:
            await subject.wait_parked(size)
            if number == 0:
                await asyncio.sleep(0.2)  # let the server's GC and lag sampler settle
                first_start = time.monotonic()
            elif spacing > 0:
                wait = first_start + number * spacing - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                else:
                    late += 1
            else:
                await asyncio.sleep(0.2)
            seq = recorder.next_seq()
            current = recorder.round = FanoutRound(seq)
            cpu0, own0 = subject.cpu_secs(), own_cpu_secs()
            current.sent = recorder.stamp(seq)
            reached = await result_of(subject, publisher.send(seq), 30, "the notice's answer")
            notify_ms = (time.time() - current.sent) * 1000
            published.append(seq)
            if reached != size:
                raise BenchError(
                    f"{subject.name}: the notice reached {reached} clients, not {size}"
                )

            def all_read(current: FanoutRound = current) -> bool:
                return len(current.latencies) >= size

            await wait_for(subject, all_read, 30, f"{size} clients to read notice {seq}", 0.001)
            cpu_read, own1 = subject.cpu_secs(), own_cpu_secs()
            # The round's work goes on after the last read: every client's
            # re-poll is parsed, authenticated and parked.
            cpu1 = await until_idle(subject)
            recorder.round = None
            ordered = sorted(current.latencies)
            row = {
                "first_ms": ordered[0] * 1000,
                "p50_ms": percentile(ordered, 0.50) * 1000,
                "p99_ms": percentile(ordered, 0.99) * 1000,
                "last_ms": ordered[-1] * 1000,
                "notify_ms": notify_ms,
                "server_cpu_ms": (cpu1 - cpu0) * 1000,
                "server_cpu_to_last_read_ms": (cpu_read - cpu0) * 1000,
                "generator_cpu_ms": (own1 - own0) * 1000,
            }
            counted = number >= warmup
            if counted:
                rows.append(row)
                latencies += current.latencies
            if number < warmup + rounds or number % 10 == 0:
                log(
                    f"  {subject.name} fan-out {size:,} {'round' if counted else 'warm-up'}"
                    f" {number + 1}: p50 {row['p50_ms']:.1f} p99 {row['p99_ms']:.1f}"
                    f" last {row['last_ms']:.1f} ms; server CPU {row['server_cpu_ms']:.0f} ms"
                    f" until idle"
                )
            number += 1
    finally:
        recorder.round = None
        publisher.close()
    await subject.wait_parked(size)
    latencies.sort()
    cpu_ms = sum(row["server_cpu_ms"] for row in rows)
    return {
        "clients": size,
        "spacing_secs": spacing,
        "rounds": len(rows),
        "late_rounds": late,
        "secs": round(time.monotonic() - first_start, 1),
        "last_client_p50_ms": round(median_of(rows, "last_ms"), 2),
        "client_p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "client_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "server_cpu_per_event_us": round(cpu_ms * 1000 / (size * len(rows)), 2),
        "median": {key: round(median_of(rows, key), 2) for key in rows[0]},
        "deliveries": check_deliveries(subject.clients, published),
    }


async def measure_throughput(
    subject: Subject,
    recorder: Recorder,
    size: int,
    args: argparse.Namespace,
    spy: Callable[[], subprocess.Popen[bytes]] | None,
) -> dict[str, Any]:
    """`size` clients; --injectors publishers each keep --pipeline notices
    in flight for --duration s. `spy` starts py-spy on the server for the
    window (--py-spy, eventq only); its summary is in "profile_top"."""
    await resize(subject, size)
    publishers = [await subject.publisher() for _ in range(args.injectors)]
    return await drive(
        subject,
        recorder,
        publishers,
        args.pipeline,
        args.duration,
        spy=spy,
        spy_output=args.py_spy,
    )


# With many small events, one notice in this many goes to every client; the
# others go to one user's.
SMALL_TO_ALL = 100
# With many small events, the publishers start at most this many notices in
# a second of wall time (both servers alike): nchan numbers a channel's
# messages within a second in a signed 16-bit tag, and past 32,767 its ids
# wrap round (`1795979241:-30771`), and a long poll following the last one
# it read never gets the rest. A fast machine's generator reached that.
SMALL_NOTICES_PER_SEC = 30_000
# With many small events, the publishers wait while the clients have this
# many reads still to make: nchan answers a publish before its subscriber
# reads it, and a publisher far ahead would only overflow one channel's
# buffer (nchan.BUFFER_LENGTH) or one user's queues.
SMALL_BACKLOG_READS = 2000


def small_targets(seq: int, user_ids: Sequence[int]) -> Sequence[int] | None:
    """Whom small event `seq` is for: every user (None) once in SMALL_TO_ALL
    notices, else the second user (not the sender)."""
    return None if seq % SMALL_TO_ALL == 0 else (user_ids[1],)


async def measure_small_events(
    subject: Subject,
    recorder: Recorder,
    args: argparse.Namespace,
    user_ids: Sequence[int],
    source: str,
    spy: Callable[[], subprocess.Popen[bytes]] | None,
) -> dict[str, Any]:
    """Many small events: --small-clients clients, each its own user; of
    every SMALL_TO_ALL notices one goes to every client and the others to
    one user's (the second user: not the sender). Published through the
    internal endpoint (eventq's notify_tornado, nchan's publisher location:
    --injectors connections, each --pipeline notices in flight) or, for
    eventq, through RabbitMQ (`AmqpPublisher`: --amqp-window notices in
    flight until read), for --duration s. `spy`: as for `drive`."""
    size = args.small_clients
    await resize(subject, size)

    def targets(seq: int) -> Sequence[int] | None:
        return small_targets(seq, user_ids)

    broker_cpu = None
    if source == "rabbitmq":
        publishers = [await subject.amqp_publisher()]
        pipeline = args.amqp_window
        pid = broker_pid()
        if pid is not None:

            def broker_cpu() -> float:
                return process_cpu_secs(pid) or 0.0

    else:
        publishers = [await subject.publisher() for _ in range(args.injectors)]
        pipeline = args.pipeline

    def user_of(client: Client) -> int:
        return user_ids[client.index % len(user_ids)]

    return await drive(
        subject,
        recorder,
        publishers,
        pipeline,
        args.duration,
        targets=targets,
        user_of=user_of,
        backlog=SMALL_BACKLOG_READS,
        per_second=SMALL_NOTICES_PER_SEC,
        broker_cpu=broker_cpu,
        spy=spy,
        spy_output=args.py_spy,
    )


def rabbitmq_alone(
    args: argparse.Namespace, url: str, messages: Messages, user_ids: Sequence[int]
) -> dict[str, Any]:
    """The notices of `measure_small_events` through RabbitMQ with no server
    behind it (amqp_ceiling.py), the same publisher and window, for as long:
    with them, the most any server consuming the notify queue could reach."""
    log("RabbitMQ alone: the small events' notices to a bare pika consumer, no server")

    def notice(seq: int) -> bytes:
        return messages.notice(seq, small_targets(seq, user_ids) or user_ids)

    try:
        return amqp_ceiling.measure(url, notice, args.amqp_window, args.duration)
    except (BrokerError, OSError, pika.exceptions.AMQPError) as exc:
        log(f"RabbitMQ alone: not measured: {exc!r}")
        return {"error": repr(exc)}


async def drive(
    subject: Subject,
    recorder: Recorder,
    publishers: Sequence[Publisher],
    pipeline: int,
    duration: float,
    *,
    targets: Callable[[int], Sequence[int] | None] | None = None,
    user_of: Callable[[Client], int] | None = None,
    backlog: int | None = None,
    per_second: int | None = None,
    broker_cpu: Callable[[], float] | None = None,
    spy: Callable[[], subprocess.Popen[bytes]] | None = None,
    spy_output: Path | None = None,
) -> dict[str, Any]:
    """Each of `publishers` keeps `pipeline` notices in flight for `duration`
    s, each notice to `targets(seq)` (None: every user; `user_of` tells a
    client's user), while the clients have fewer than `backlog` reads
    still to make, and at most `per_second` notices start in a second of
    wall time ("paced_secs": the seconds in which that held them back);
    then every client is waited for until it has read every
    notice for it. Events read by clients per second inside the window, the
    server's CPU per event (and the broker's, from `broker_cpu`), latency;
    the delivery check. `spy` starts py-spy
    on the server for the window, recording into `spy_output`; its summary
    is in "profile_top"."""
    published: list[int] = []
    aimed: dict[int, Sequence[int] | None] = {}
    running = True
    size = len(subject.clients)
    readers: collections.Counter[int] = collections.Counter(
        user_of(client) for client in subject.clients if user_of is not None
    )
    reads = recorder.events  # reads to come: `reads` - recorder.events
    # The second of wall time notices are starting in, and how many have.
    second, started_in_second = 0, 0
    paced: set[int] = set()

    async def pump(publisher: Publisher) -> None:
        nonlocal reads, second, started_in_second
        pending: collections.deque[tuple[int, asyncio.Future[int]]] = collections.deque()
        while running or pending:
            while running and len(pending) < pipeline:
                if backlog is not None and reads - recorder.events >= backlog:
                    if pending:
                        break  # an answer first
                    await asyncio.sleep(0.0005)
                    continue
                if per_second is not None:
                    now = time.time()
                    if int(now) != second:
                        second, started_in_second = int(now), 0
                    if started_in_second >= per_second:
                        paced.add(second)
                        if pending:
                            break  # an answer first
                        await asyncio.sleep(second + 1 - now)
                        continue
                    started_in_second += 1
                seq = recorder.next_seq()
                users = aimed[seq] = targets(seq) if targets is not None else None
                reads += size if users is None else sum(readers[user] for user in users)
                recorder.stamp(seq)
                pending.append((seq, publisher.send(seq, users)))
            if not pending:
                continue  # stopped while waiting for the clients
            seq, answer = pending.popleft()
            await answer
            published.append(seq)

    await asyncio.sleep(0.2)
    profiler = spy() if spy is not None else None
    events0, responses0 = recorder.events, subject.responses
    cpu0, own0, started = subject.cpu_secs(), own_cpu_secs(), time.monotonic()
    broker0 = broker_cpu() if broker_cpu is not None else 0.0
    recorder.samples = []
    tasks = [asyncio.create_task(pump(publisher)) for publisher in publishers]
    try:
        deadline = started + duration
        while time.monotonic() < deadline:
            subject.check()
            for task in tasks:
                if task.done():
                    task.result()  # raises what stopped it
                    raise BenchError(f"{subject.name}: a publisher stopped early")
            await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        cpu1, own1, ended = subject.cpu_secs(), own_cpu_secs(), time.monotonic()
        broker = broker_cpu() - broker0 if broker_cpu is not None else None
        events = recorder.events - events0
        responses = subject.responses - responses0
        running = False
        samples = sorted(recorder.samples)
        recorder.samples = None
        await result_of(subject, asyncio.gather(*tasks), 60, "the last notices' answers")
    finally:
        running = False
        recorder.samples = None
        for task in tasks:
            task.cancel()
        for publisher in publishers:
            publisher.close()
    elapsed = ended - started
    log(f"  {subject.name}: {events:,} events in {elapsed:.2f} s; waiting for clients to drain")
    expected: dict[int, list[int]] = {}
    if targets is None or user_of is None:
        everything = sorted(published)
        expected = {client.index: everything for client in subject.clients}
    else:
        for client in subject.clients:
            user_id = user_of(client)
            expected[client.index] = [
                seq for seq in published if (users := aimed[seq]) is None or user_id in users
            ]
    with contextlib.suppress(BenchError):  # what is missing is counted below
        await wait_for(
            subject,
            lambda: all(
                len(client.seqs) >= len(expected[client.index]) for client in subject.clients
            ),
            60,
            "every client to read every notice",
            0.05,
        )
    await subject.wait_parked(size)
    profile_top = (
        finish_py_spy(profiler, spy_output)
        if profiler is not None and spy_output is not None
        else None
    )
    server_cpu = cpu1 - cpu0
    own_cpu = own1 - own0
    return {
        "clients": size,
        "publishers": len(publishers),
        "pipeline": pipeline,
        "elapsed_secs": round(elapsed, 3),
        "notices": len(published),
        "paced_secs": len(paced),
        "events_in_window": events,
        "events_per_sec": round(events / elapsed, 1),
        "events_per_response": round(events / responses, 2) if responses else None,
        "server_cpu_secs": round(server_cpu, 3),
        "server_cpu_share": round(server_cpu / elapsed, 3),
        "server_cpu_per_event_us": round(server_cpu / events * 1e6, 2) if events else None,
        "generator_cpu_share": round(own_cpu / elapsed, 3),
        "generator_cpu_per_event_us": round(own_cpu / events * 1e6, 2) if events else None,
        "broker_cpu_share": None if broker is None else round(broker / elapsed, 3),
        "latency_ms": {
            "p50": round(percentile(samples, 0.5) * 1000, 2),
            "p99": round(percentile(samples, 0.99) * 1000, 2),
        }
        if samples
        else None,
        "deliveries": check_deliveries(
            subject.clients, published, lambda client: expected[client.index]
        ),
        "profile_top": profile_top,
    }


async def run_subject(
    subject: Subject,
    recorder: Recorder,
    args: argparse.Namespace,
    into: dict[str, Any],
    user_ids: Sequence[int],
    memory: bool = True,
    small: bool = True,
    spy: Callable[[], subprocess.Popen[bytes]] | None = None,
) -> None:
    """Every scenario against `subject`, each figure added to `into` as soon
    as it is measured (so a failure still reports what came before).
    `user_ids`: the users, in the order clients are given them (client i is
    user i % len); `spy`: py-spy over --py-spy-on's scenario."""
    into.setdefault("fanout", {})
    try:
        if memory:
            into["memory"] = await measure_memory(subject, args.clients)
        gc.collect()
        gc.freeze()  # the generator's long-lived clients: no more GC scans of them
        largest = max(args.fanout_sizes)
        for size, spacing in sorted(
            zip(args.fanout_sizes, args.spacing, strict=True), reverse=True
        ):
            rounds = args.rounds
            min_secs = args.lag_window if size == largest else 0.0
            log(
                f"{subject.name}: fan-out to {size:,} clients, {args.warmup} warm-up +"
                f" {rounds} rounds"
                + (f", {spacing:g} s apart" if spacing else ", back to back")
                + (f", for at least {min_secs:.0f} s" if min_secs else "")
            )
            into["fanout"][str(size)] = await measure_fanout(
                subject, recorder, size, spacing, args.warmup, rounds, min_secs
            )
            if size == largest:
                into["loop_lag_largest_fanout"] = await subject.loop_lag()
        log(
            f"{subject.name}: throughput, {args.throughput_clients:,} clients,"
            f" {args.injectors} x {args.pipeline} notices in flight, {args.duration:g} s"
        )
        throughput = await measure_throughput(
            subject,
            recorder,
            args.throughput_clients,
            args,
            spy if args.py_spy_on == "throughput" else None,
        )
        into["throughput"] = throughput
        log(
            f"  {throughput['events_per_sec']:,.0f} events/s,"
            f" server {throughput['server_cpu_per_event_us']} us CPU per event"
        )
        # nchan's, through its publisher location, whatever eventq's sources.
        for source in subject.small_sources if small and args.small_sources else ():
            log(
                f"{subject.name}: many small events through the {source}, {args.small_clients:,}"
                f" clients, 1 in {SMALL_TO_ALL} notices to all, {args.duration:g} s"
            )
            measured = await measure_small_events(
                subject,
                recorder,
                args,
                user_ids,
                source,
                spy if args.py_spy_on == f"small-{source}" else None,
            )
            into.setdefault("small_events", {})[source] = measured
            log(
                f"  {measured['events_per_sec']:,.0f} events/s,"
                f" server {measured['server_cpu_per_event_us']} us CPU per event"
            )
        gc_pauses = await subject.gc_pauses()
        if gc_pauses is not None:
            into["gc"] = gc_pauses
    finally:
        into["problems"] = subject.problems()
        subject.close_all()
        await asyncio.sleep(0.2)  # let the closes go out before the server stops


# -- py-spy ---------------------------------------------------------------


def start_py_spy(
    pid: int, output: Path, duration: float | None, native: bool
) -> subprocess.Popen[bytes]:
    """py-spy recording `pid` into `output` for `duration` s, or until it is
    sent SIGINT (`duration` None); `finish_py_spy` waits for it."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(binary).exists():
        raise BenchError("--py-spy needs py-spy (pip install py-spy into this venv)")
    command = [binary, "record", "--pid", str(pid)]
    if duration is None:
        log(f"  py-spy recording the server into {output}")
    else:
        log(f"  py-spy recording the server for {duration:.0f} s into {output}")
        command += ["--duration", str(max(1, int(duration)))]
    # Native stacks (GC, syscalls) need the process paused at each sample:
    # a lower rate keeps that perturbation small.
    command += ["--native", "--rate", "50"] if native else ["--nonblocking", "--rate", "200"]
    command += ["--format", "raw", "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


OUR_PACKAGES = ("server/", "queues/", "generation/", "apply_events/")
_SYSCALLS = frozenset(
    {"send", "recv", "epoll_ctl", "epoll_wait", "setsockopt", "accept4", "write", "read", "close"}
)


def frame_function(frame: str) -> str:
    """`func (path/module.py:123)` -> `func (path/module.py)`."""
    name, _, where = frame.partition(" (")
    if ":" not in where:  # a native frame: `send (libc.so.6)`
        return frame
    return f"{name} ({where.rsplit(':', 1)[0]})"


def _is_ours(frame: str) -> bool:
    """A frame of our code other than the entry point (in every sample)."""
    where = frame.partition(" (")[2]
    return where.startswith(OUR_PACKAGES) and not where.startswith(
        ("server/admin/cli.py", "server/admin/entry.py", "server/__")
    )


def _category(frames: list[str]) -> str:
    leaf = frames[-1].split(" ", 1)[0]
    if any("gc_collect" in frame for frame in frames):
        return "Python GC"
    if leaf == "getpid":
        return "getpid() syscall (Python 3.11 asyncio get_running_loop)"
    if leaf in _SYSCALLS:
        return f"syscall {leaf}"
    python = [frame for frame in frames if ".py:" in frame]
    where = python[-1].partition(" (")[2] if python else ""
    if where.startswith(OUR_PACKAGES):
        return "eventq Python code"
    if where.startswith("tornado/"):
        return "tornado Python code"
    if where.startswith("pika/"):
        return "pika Python code (AMQP)"
    if where.startswith(("asyncio/", "selectors.py")):
        return "asyncio Python code"
    return "other"


def read_stacks(output: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw output: (frames, outermost first; sample count) per stack."""
    stacks = []
    for line in output.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if stack and count_text.isdigit():
            stacks.append((stack.split(";"), int(count_text)))
    return stacks


def finish_py_spy(spy: subprocess.Popen[bytes], output: Path) -> dict[str, Any]:
    """Wait for py-spy; summarize its raw stacks: where the time goes by
    category, functions by self time, and our own functions by inclusive time."""
    try:
        _, err = spy.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    if spy.returncode != 0 or not output.exists():
        return {"error": err.decode(errors="replace")[-500:]}
    own: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    categories: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in read_stacks(output):
        total += count
        own[frame_function(frames[-1])] += count
        categories[_category(frames)] += count
        for name in {frame_function(f) for f in frames if _is_ours(f)}:
            ours[name] += count
    if not total:
        return {"error": "no samples"}

    def top(counter: collections.Counter[str], n: int) -> list[tuple[str, float]]:
        return [(name, round(100 * count / total, 1)) for name, count in counter.most_common(n)]

    return {
        "samples": total,
        "categories_pct": top(categories, 20),
        "self_pct": top(own, 25),
        "eventq_inclusive_pct": top(ours, 25),
    }


# -- report -----------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One line of the table: where its value is in a server's results."""

    key: str
    label: str
    unit: str
    digits: int
    path: tuple[str, ...]
    higher_is_better: bool = False  # the ratio is then nchan/eventq
    peer: bool = True  # nchan has it too
    peer_path: tuple[str, ...] | None = None  # where nchan's is, if not at `path`

    def value(self, server: dict[str, Any], peer: bool = False) -> float | None:
        node: Any = server
        for step in (self.peer_path or self.path) if peer else self.path:
            if not isinstance(node, dict) or step not in node:
                return None
            node = node[step]
        return float(node) if isinstance(node, int | float) else None


def figures_of(config: dict[str, Any]) -> list[Figure]:
    sizes = sorted(config["fanout_sizes"])
    rows: list[Figure] = []
    for size in sizes:
        name = f"fan-out to {size:,}"
        base = ("fanout", str(size))
        rows += [
            Figure(
                f"fanout_{size}_last_client_p50_ms",
                f"{name}: time to last client, p50 of rounds",
                " ms",
                1,
                (*base, "last_client_p50_ms"),
            ),
            Figure(
                f"fanout_{size}_client_p50_ms",
                f"{name}: per-client latency p50",
                " ms",
                1,
                (*base, "client_p50_ms"),
            ),
            Figure(
                f"fanout_{size}_client_p99_ms",
                f"{name}: per-client latency p99",
                " ms",
                1,
                (*base, "client_p99_ms"),
            ),
            Figure(
                f"fanout_{size}_cpu_per_event_us",
                f"{name}: server CPU per delivered event",
                " us",
                1,
                (*base, "server_cpu_per_event_us"),
            ),
        ]
    active = config["throughput_clients"]
    rows += [
        Figure(
            "throughput_events_per_sec",
            f"{active:,} active clients: delivered events/s",
            "/s",
            0,
            ("throughput", "events_per_sec"),
            higher_is_better=True,
        ),
        Figure(
            "throughput_cpu_per_event_us",
            f"{active:,} active clients: server CPU per delivered event",
            " us",
            1,
            ("throughput", "server_cpu_per_event_us"),
        ),
        *(
            Figure(
                f"small_{source}_{key}",
                f"many small events {SMALL_SOURCES[source]}: {what}",
                unit,
                digits,
                ("small_events", source, key),
                higher_is_better=key == "events_per_sec",
                peer_path=("small_events", "endpoint", key),
            )
            for source in config.get("small_sources", ())
            for key, what, unit, digits in (
                ("events_per_sec", "delivered events/s", "/s", 0),
                ("server_cpu_per_event_us", "server CPU per delivered event", " us", 1),
            )
        ),
        Figure(
            "memory_per_idle_client_kb",
            f"memory per idle parked client ({config['clients']:,} parked)",
            " KB",
            2,
            ("memory", "per_client_kb"),
        ),
        Figure(
            "loop_lag_p99_ms",
            f"IO-loop lag p99 during the fan-out to {sizes[-1]:,}",
            " ms",
            1,
            ("loop_lag_largest_fanout", "p99_ms"),
            peer=False,
        ),
        # Measured only when one ran (every 60 s; a full collection rarely).
        Figure(
            "queue_gc_max_ms",
            "longest idle-queue GC sweep over the run",
            " ms",
            2,
            ("gc", "queue_gc_max_ms"),
            peer=False,
        ),
        Figure(
            "python_full_gc_max_ms",
            "longest Python full GC collection over the run",
            " ms",
            1,
            ("gc", "python_full_gc_max_ms"),
            peer=False,
        ),
    ]
    return rows


def compare(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure for both servers, and their ratio: eventq/nchan, or
    nchan/eventq for a figure where higher is better; above 1, eventq is
    behind either way."""
    servers = results["servers"]
    rows = []
    for figure in figures_of(results["config"]):
        ours = figure.value(servers.get("eventq", {}))
        theirs = figure.value(servers.get("nchan", {}), peer=True) if figure.peer else None
        ratio = None
        if ours and theirs:
            ratio = round(theirs / ours if figure.higher_is_better else ours / theirs, 3)
        rows.append(
            {
                "key": figure.key,
                "label": figure.label,
                "unit": figure.unit.strip(),
                "eventq": ours,
                "nchan": theirs,
                "ratio": ratio,
                "ratio_of": ("nchan/eventq" if figure.higher_is_better else "eventq/nchan")
                if figure.peer
                else None,
            }
        )
    return rows


def bars(config: dict[str, Any], compared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 36's bars for the run's transport, each "met" or "MISSED" from
    this run's figures."""
    by_key = {row["key"]: row for row in compared}
    sizes = sorted(config["fanout_sizes"])
    limits = BARS[config.get("transport", "poll")]
    wanted: list[tuple[str, str, str, float]] = []  # text, key, kind, limit
    for size in sizes:
        wanted.append(
            (
                f"server CPU per delivered event, fan-out to {size:,}",
                f"fanout_{size}_cpu_per_event_us",
                "ratio",
                limits["cpu"],
            )
        )
    for size in sizes:
        wanted.append(
            (
                f"time to last client, fan-out to {size:,}",
                f"fanout_{size}_last_client_p50_ms",
                "ratio",
                limits["last_client"],
            )
        )
    events = f"delivered events/s, eventq >= {1 / limits['events']:.2g} of nchan's"
    wanted.append((events, "throughput_events_per_sec", "ratio", limits["events"]))
    for source in config.get("small_sources", ()):
        wanted.append(
            (
                f"many small events {SMALL_SOURCES[source]}: delivered events/s,"
                f" eventq >= {1 / SMALL_EVENTS_BAR:.2g} of nchan's",
                f"small_{source}_events_per_sec",
                "ratio",
                SMALL_EVENTS_BAR,
            )
        )
    wanted += [
        (
            f"IO-loop lag p99 during the fan-out to {sizes[-1]:,}",
            "loop_lag_p99_ms",
            "value",
            LOOP_LAG_BAR_MS,
        ),
        ("memory per idle parked client", "memory_per_idle_client_kb", "ratio", MEMORY_BAR),
        ("longest idle-queue GC sweep", "queue_gc_max_ms", "value", GC_SWEEP_BAR_MS),
    ]
    out = []
    for text, key, kind, limit in wanted:
        row = by_key[key]
        value = row["ratio"] if kind == "ratio" else row["eventq"]
        if value is None:
            out.append(
                {
                    "bar": text,
                    "value": None,
                    "limit": limit,
                    "met": None,
                    "text": f"bar: {text}: not measured",
                }
            )
            continue
        met = value <= limit
        if kind == "ratio":
            shown = f"{row['ratio_of']} {value:.2f}x <= {limit:.3g}x"
        else:
            shown = f"{value:.1f} ms <= {limit:g} ms"
        line = f"bar: {text}: {shown}: {'met' if met else 'MISSED'}"
        out.append({"bar": text, "value": value, "limit": limit, "met": met, "text": line})
    return out


def rabbitmq_ceiling(results: dict[str, Any]) -> str | None:
    """What RabbitMQ alone carried on this machine, as a share of the
    notices nchan took through its endpoint: with this publisher and window,
    the most any server consuming the notify queue could reach of nchan's
    small events here (both have the same events per notice); None without
    both figures."""
    alone = results["servers"]["eventq"].get("rabbitmq_alone")
    peer = results["servers"].get("nchan", {}).get("small_events", {}).get("endpoint")
    if not alone or "error" in alone or not peer or not peer["elapsed_secs"]:
        return None
    nchan_rate = peer["notices"] / peer["elapsed_secs"]
    return (
        f"ceiling: RabbitMQ alone carried {alone['notices_per_sec']:,.0f} notices/s, nchan took"
        f" {nchan_rate:,.0f}/s through its endpoint: with this publisher and window, a server"
        f" reaches at most {alone['notices_per_sec'] / nchan_rate:.2f} of nchan's small events here"
    )


def deliveries(results: dict[str, Any]) -> dict[str, Any]:
    """Every delivery check of the run, by server and scenario."""
    checks: dict[str, Any] = {}
    for group, server in (*results["servers"].items(), ("eventq shards", results.get("sharded"))):
        if not server:
            continue
        scenarios = {
            f"fan-out {size}": phase["deliveries"]
            for size, phase in server.get("fanout", {}).items()
        }
        if "throughput" in server:
            scenarios["throughput"] = server["throughput"]["deliveries"]
        for source, phase in server.get("small_events", {}).items():
            scenarios[f"small events via {source}"] = phase["deliveries"]
        problems = server.get("problems", {})
        ids_ok = (
            problems.get("duplicate_event_ids", 0) == 0 and problems.get("event_id_gaps", 0) == 0
        )
        checks[group] = {
            "scenarios": scenarios,
            "event_ids_ok": ids_ok,
            "ok": bool(scenarios) and ids_ok and all(check["ok"] for check in scenarios.values()),
        }
    return checks


def _fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = [row[0].ljust(widths[0])] + [
            cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines) + "\n"


def render(results: dict[str, Any]) -> str:
    out = io.StringIO()
    config = results["config"]
    pairs = zip(config["fanout_sizes"], config["spacing"], strict=True)
    spacing = (
        "back to back"
        if config["back_to_back"]
        else "rounds " + " / ".join(f"{s:g} s apart at {n:,}" for n, s in pairs)
    )
    reading = "Server-Sent Events" if config.get("transport") == "sse" else "long polls"
    out.write(
        f"\neventq beside nginx + nchan, same machine, same run"
        f"{' (QUICK: tiny sizes, the bars mean nothing)' if config['quick'] else ''}"
        f"; clients read by {reading}\n"
        f"{config['cpus']} CPUs; generator loop {config['generator_loop']};"
        f" {config['users']} users; fan-out {spacing};"
        f" {config['warmup']} warm-up + {config['rounds']} rounds\n"
        f"server code: {config['source']}\n"
        "ratio: eventq/nchan, but nchan/eventq for events/s: above 1, eventq is behind\n\n"
    )
    compared = results["figures"]
    by_key = {figure.key: figure for figure in figures_of(config)}
    rows = []
    for row in compared:
        figure = by_key[row["key"]]
        rows.append(
            (
                row["label"],
                _fmt(row["eventq"], figure.unit, figure.digits),
                _fmt(row["nchan"], figure.unit, figure.digits) if figure.peer else "n/a",
                f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-",
            )
        )
    out.write(_table(("figure", "eventq", "nchan", "ratio"), rows))
    out.write("\n")
    for bar in results["bars"]:
        out.write(bar["text"] + "\n")
    ceiling = rabbitmq_ceiling(results)
    if ceiling is not None:
        out.write(ceiling + "\n")
    out.write("\n")
    for group, check in results["deliveries"].items():
        parts = []
        for name, scenario in check["scenarios"].items():
            parts.append(
                f"{name} ok"
                if scenario["ok"]
                else f"{name} FAILED ({scenario['lost']} lost, {scenario['duplicated']} duplicated,"
                f" {scenario['unexpected']} unknown)"
            )
        if not check["event_ids_ok"]:
            parts.append("event ids with gaps or repeats")
        verdict = "every client read every message exactly once" if check["ok"] else "FAILED"
        out.write(f"deliveries, {group}: {verdict}: {', '.join(parts) or 'no scenario'}\n")
    for name, server in results["servers"].items():
        out.write(f"\n{name}:\n")
        if server.get("delivery_path"):
            out.write(f"  delivery path: {server['delivery_path']}\n")
        memory = server.get("memory")
        if memory:
            out.write(
                f"  RSS {memory['rss0_kb'] / 1024:.1f} MiB with no client,"
                f" {memory['rss_kb'] / 1024:.1f} MiB with {memory['clients']:,}"
                f" (ramp {memory['ramp_secs']:.1f} s)\n"
            )
        for size, phase in server.get("fanout", {}).items():
            median = phase["median"]
            late = f" ({phase['late_rounds']} started late)" if phase["late_rounds"] else ""
            out.write(
                f"  fan-out {int(size):,}: {phase['rounds']} rounds in {phase['secs']:.0f} s"
                f"{late};"
                f" median first {median['first_ms']:.1f} ms, notice answered in"
                f" {median['notify_ms']:.1f} ms; server CPU"
                f" {median['server_cpu_to_last_read_ms']:.0f} ms to the last read,"
                f" {median['server_cpu_ms']:.0f} ms until idle;"
                f" generator {median['generator_cpu_ms']:.0f} ms\n"
            )
        windows = [("throughput", server.get("throughput"))] + [
            (f"small events via {source}", phase)
            for source, phase in server.get("small_events", {}).items()
        ]
        for title, window in windows:
            if not window:
                continue
            latency = window["latency_ms"] or {"p50": 0.0, "p99": 0.0}
            out.write(
                f"  {title}: {window['notices']:,} notices; CPU share of a core:"
                f" server {window['server_cpu_share']:.0%}, generator"
                f" {window['generator_cpu_share']:.0%}"
                f" ({_fmt(window['generator_cpu_per_event_us'], ' us', 1)} per event);"
                f" latency p50 {latency['p50']:.1f} / p99 {latency['p99']:.1f} ms;"
                f" {_fmt(window['events_per_response'], '', 2)} events per response\n"
            )
            if window.get("broker_cpu_share") is not None:
                out.write(f"    RabbitMQ's CPU share of a core: {window['broker_cpu_share']:.0%}\n")
            alone = server.get("rabbitmq_alone")
            if title == "small events via rabbitmq" and alone:
                if "error" in alone:
                    out.write(f"    RabbitMQ alone: not measured ({alone['error']})\n")
                else:
                    out.write(f"    {amqp_ceiling.render(alone)}\n")
            if window["generator_cpu_share"] > 0.9:
                out.write("  WARNING: the load generator was saturated\n")
            if window.get("paced_secs"):
                out.write(
                    f"  paced: {window['paced_secs']} s held at {SMALL_NOTICES_PER_SEC:,}"
                    " notices/s (nchan's ids)\n"
                )
        lag = server.get("loop_lag_largest_fanout")
        if lag:
            out.write(
                f"  IO-loop lag after the largest fan-out (last 60 s): p50 {lag['p50_ms']:.2f},"
                f" p99 {lag['p99_ms']:.2f}, max {lag['window_max_ms']:.1f} ms\n"
            )
        problems = server.get("problems", {})
        out.write("  counters: " + ", ".join(f"{k} {v}" for k, v in problems.items()) + "\n")
        warnings = server.get("warnings", [])
        if warnings:
            out.write(f"  the server logged {len(warnings)} warnings/errors; the last ones:\n")
            for line in warnings[-5:]:
                out.write(f"    {line}\n")
    sharded = results.get("sharded")
    if sharded:
        out.write(render_sharded(results, sharded))
    eventq = results["servers"].get("eventq", {})
    spied = config.get("py_spy_on", "throughput")
    window = (
        eventq.get("throughput")
        if spied == "throughput"
        else eventq.get("small_events", {}).get(spied.removeprefix("small-"))
    )
    profile = (window or {}).get("profile_top")
    if profile:
        if "error" in profile:
            out.write(f"\npy-spy failed: {profile['error']}\n")
        else:
            out.write(f"\npy-spy, eventq during {spied} ({profile['samples']} samples)\n")
            for title, key, count in (
                ("by category", "categories_pct", 20),
                ("self time by function", "self_pct", 15),
                ("eventq functions, inclusive", "eventq_inclusive_pct", 15),
            ):
                out.write(f"  {title}:\n")
                for name, pct in profile[key][:count]:
                    out.write(f"    {pct:5.1f}%  {name}\n")
    return out.getvalue()


def render_sharded(results: dict[str, Any], sharded: dict[str, Any]) -> str:
    """One process beside N shards and nchan, measured in the same run."""
    rows = []
    servers = {**results["servers"], "shards": sharded}
    for figure in figures_of(results["config"]):
        if figure.path[0] not in ("fanout", "throughput"):
            continue
        rows.append(
            (
                figure.label,
                *(
                    _fmt(figure.value(servers.get(name, {})), figure.unit, figure.digits)
                    for name in ("eventq", "shards", "nchan")
                ),
            )
        )
    return (
        f"\neventq in one process and in {sharded['shards']} shards (clients on their"
        " owner shard; CPU summed over the shards):\n"
        + _table(("figure", "1 process", f"{sharded['shards']} shards", "nchan"), rows)
    )


# -- main -------------------------------------------------------------------


def eventq_env(
    workdir: Path, http_server: str | None = None, pure_python: bool = False
) -> dict[str, str]:
    """What the measured eventq runs with, beside ServerProcess' defaults
    (no heartbeat during a measurement, no broker); `http_server` None: the
    server's default HTTP server; `pure_python`: the compiled modules run
    from their source (queues/compiled.py)."""
    log_dir = workdir / "deliverylog"
    log_dir.mkdir(exist_ok=True)
    env = {
        "EVENTQ_LOG_DIR": str(log_dir),
        "EVENTQ_RATE_LIMIT_REQUESTS": str(RATE_LIMIT),
        "EVENTQ_AUTH_FAILURE_LIMIT": "50",  # production's
        # The idle-queue GC sweeps every 10 s (production: 60 s), so that a
        # run sees some: a sweep costs what it collects, whatever the interval.
        "EVENTQ_GC_INTERVAL_SECS": "10",
    }
    if http_server is not None:
        env["EVENTQ_HTTP_SERVER"] = http_server
    if pure_python:
        env["EVENTQ_PURE_PYTHON"] = "1"
    return env


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="eventq beside nginx + nchan on this machine: fan-out latency, throughput,"
        " memory and CPU, each figure for both with their ratio, and the bars.",
    )
    floats = lambda text: [float(part) for part in text.split(",")]  # noqa: E731
    ints = lambda text: [int(part) for part in text.split(",")]  # noqa: E731
    parser.add_argument("--quick", action="store_true", help="every scenario at tiny sizes")
    parser.add_argument("--users", type=int, default=100, help="users the clients are spread over")
    parser.add_argument(
        "--clients", type=int, default=10_000, help="parked clients of the memory scenario"
    )
    parser.add_argument(
        "--fanout-sizes", type=ints, default=[1000, 5000], help="comma-separated client counts"
    )
    parser.add_argument(
        "--spacing",
        type=floats,
        default=[1.0, 3.0],
        help="seconds from one fan-out round's start to the next, per size (one value: all)",
    )
    parser.add_argument("--back-to-back", action="store_true", help="each round once re-parked")
    parser.add_argument("--rounds", type=int, default=10, help="counted fan-out rounds per size")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted fan-out rounds first")
    parser.add_argument(
        "--lag-window",
        type=float,
        default=60.0,
        help="the largest fan-out lasts at least this long (eventq's loop-lag window)",
    )
    parser.add_argument("--throughput-clients", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of throughput")
    parser.add_argument("--injectors", type=int, default=4, help="publisher connections")
    parser.add_argument("--pipeline", type=int, default=2, help="notices in flight on each")
    parser.add_argument("--batch", type=int, default=500, help="connections opened at once")
    parser.add_argument(
        "--source-addresses",
        type=int,
        default=1,
        metavar="K",
        help="clients connect from 127.0.0.1..127.0.0.K (over some 25,000 clients: one"
        " address has too few ephemeral ports)",
    )
    parser.add_argument(
        "--small-clients",
        type=int,
        default=100,
        help="clients of the many-small-events scenario (at most --users: one user each)",
    )
    parser.add_argument(
        "--small-sources",
        type=lambda text: [part for part in text.split(",") if part],
        default=["endpoint", "rabbitmq"],
        help="where eventq's small events come from: endpoint (notify_tornado), rabbitmq"
        " (the notify queue, in a vhost of the run's own); empty: no such scenario"
        " (long polls only: none with --transport sse)",
    )
    parser.add_argument(
        "--amqp-window", type=int, default=64, help="notices through RabbitMQ in flight until read"
    )
    parser.add_argument(
        "--amqp-base",
        default="amqp://guest:guest@127.0.0.1:5672",
        help="the broker, without a vhost (the run makes its own)",
    )
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    parser.add_argument(
        "--keep-db", action="store_true", help="keep the database and the temporary directory"
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="FILE",
        help="record eventq with py-spy (raw stacks to FILE) during throughput and print"
        " the top frames (perturbs the figures a little)",
    )
    parser.add_argument(
        "--py-spy-native", action="store_true", help="with --py-spy: native stacks too"
    )
    parser.add_argument(
        "--py-spy-on",
        choices=("throughput", "small-endpoint", "small-rabbitmq"),
        default="throughput",
        help="with --py-spy: the scenario recorded",
    )
    parser.add_argument("--no-uvloop", action="store_true", help="never use uvloop here")
    parser.add_argument(
        "--transport",
        choices=("poll", "sse"),
        default="poll",
        help="how both servers' clients read: long polls, or Server-Sent Events"
        " (eventq's event streams, nchan's eventsource subscriber)",
    )
    parser.add_argument(
        "--http-server",
        choices=("eventq", "tornado"),
        help="eventq's EVENTQ_HTTP_SERVER (default: the server's default)",
    )
    parser.add_argument(
        "--pure-python",
        action="store_true",
        help="eventq's compiled modules run as Python (EVENTQ_PURE_PYTHON=1), to measure"
        " what compiling them gives",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help="then run the fan-outs and throughput again against N eventq shards",
    )
    args = parser.parse_args(argv)
    if args.quick:  # its sizes become the defaults: options given still win
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    if len(args.spacing) == 1:
        args.spacing = args.spacing * len(args.fanout_sizes)
    if args.back_to_back:
        args.spacing = [0.0] * len(args.fanout_sizes)
    if len(args.spacing) != len(args.fanout_sizes):
        parser.error("--spacing takes one value, or one per --fanout-sizes")
    if not 1 <= args.shards <= 16:
        parser.error("--shards must be 1..16")
    if args.shards > 1 and args.py_spy:
        parser.error("--py-spy records one process: not with --shards")
    sizes = [args.clients, args.throughput_clients, *args.fanout_sizes]
    if min(sizes) < args.users or args.users < 2:
        parser.error("every client count must be at least --users, and --users at least 2")
    # Client i is user i % users: the most queues one user holds.
    args.clients_per_user = math.ceil(max(sizes) / args.users)
    if args.clients_per_user > 100:
        parser.error("more than 100 clients per user (the server's queues-per-user limit)")
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds and --duration must be positive")
    if args.transport == "sse":
        # Issue 36's bar for many small events is the long poll's; and nchan
        # loses messages on an eventsource subscriber whose channel gets
        # multi-channel publishes (the notices to all) among its own.
        args.small_sources = []
    unknown = set(args.small_sources) - {"endpoint", "rabbitmq"}
    if unknown:
        parser.error(f"--small-sources: unknown {', '.join(sorted(unknown))}")
    if args.small_sources and not 2 <= args.small_clients <= args.users:
        parser.error("--small-clients must be 2..--users (one user each)")
    if args.amqp_window < 1:
        parser.error("--amqp-window must be positive")
    if not 1 <= args.source_addresses <= 254:
        parser.error("--source-addresses must be 1..254")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        nchan.find_nginx()
        nchan.find_module()
    except nchan.PeerMissing as exc:
        log(f"FAILED: {exc}")
        return 2
    fd_limit = raise_fd_limit()
    needed = max(args.clients, *args.fanout_sizes) + 200
    if needed > fd_limit:
        # This process holds a socket per client, and each server one too.
        log(
            f"FAILED: {needed:,} file descriptors needed (the clients + 200); a process here may"
            f" open {fd_limit:,} (RLIMIT_NOFILE's hard limit: `ulimit -Hn`, raised by root"
            " with CAP_SYS_RESOURCE, or in /etc/security/limits.conf)"
        )
        return 2
    new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    loop_name = "asyncio"
    if not args.no_uvloop:
        try:
            import uvloop  # type: ignore[import-not-found]

            new_loop = uvloop.new_event_loop
            loop_name = "uvloop"
        except ImportError:
            pass
    base_url = os.environ.get("EVENTQ_DATABASE_URL") or DEFAULT_BASE_URL
    database = Database(base_url)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-bench-"))
    secret = secrets.token_urlsafe(16)
    nginx: nchan.NginxProcess | None = None
    vhost: Vhost | None = None
    server: ServerGroup | None = None
    shards: ServerGroup | None = None
    results: dict[str, Any] = {
        "config": {
            "quick": args.quick,
            "transport": args.transport,
            "users": args.users,
            "clients": args.clients,
            "fanout_sizes": args.fanout_sizes,
            "spacing": args.spacing,
            "back_to_back": args.back_to_back,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "lag_window_secs": args.lag_window,
            "throughput_clients": args.throughput_clients,
            "duration_secs": args.duration,
            "injectors": args.injectors,
            "pipeline": args.pipeline,
            "small_clients": args.small_clients,
            "small_sources": args.small_sources,
            "amqp_window": args.amqp_window,
            "py_spy_on": args.py_spy_on,
            "source_addresses": args.source_addresses,
            "cpus": os.cpu_count(),
            "generator_loop": loop_name,
            "shards": args.shards,
            "python": sys.version.split()[0],
            "source": source_state(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "database": database.name,
            "workdir": str(workdir),
        },
        "servers": {"eventq": {}, "nchan": {}},
    }
    completed = False
    try:
        log(f"database {database.name}: creating, migrating, {args.users} users")
        database.create()
        users = database.populate(args.users)
        messages = Messages(database.realm_id, users[0])
        user_ids = [user.user_id for user in users]
        with asyncio.Runner(loop_factory=new_loop) as runner:
            nginx = nchan.NginxProcess(
                workdir / "nginx",
                {user.authorization: user.user_id for user in users},
                secret,
                die_with_parent,
            )
            log(f"nginx + nchan: starting on port {nginx.port} ({nginx.module})")
            nginx.start()
            results["servers"]["nchan"]["pids"] = nginx.pids
            peer_recorder = Recorder()
            peer = nchan.NchanPeer(
                nginx,
                [(user.user_id, user.authorization) for user in users],
                peer_recorder,
                lambda seq, users: messages.client_events(
                    seq, user_ids if users is None else users
                ),
                args.batch,
                args.transport,
                args.source_addresses,
            )
            try:
                runner.run(
                    run_subject(peer, peer_recorder, args, results["servers"]["nchan"], user_ids)
                )
            finally:
                results["servers"]["nchan"]["warnings"] = nginx.warnings()
                nginx.stop()
            env = eventq_env(workdir, args.http_server, args.pure_python)
            if args.quick:  # its sweeps measured in a short run too
                env["EVENTQ_GC_INTERVAL_SECS"] = "1"
            if "rabbitmq" in args.small_sources:
                vhost = Vhost(args.amqp_base)
                log(f"RabbitMQ vhost {vhost.name}: creating (eventq consumes its notify queue)")
                vhost.create()
                results["config"]["vhost"] = vhost.name
                env["EVENTQ_AMQP_URL"] = vhost.url
            server = ServerGroup([ServerProcess(database.url, workdir, secret, env)])
            server.start()
            results["servers"]["eventq"]["pids"] = [member.pid for member in server.members]
            results["servers"]["eventq"]["delivery_path"] = server.members[0].delivery_path()
            recorder = Recorder()
            subject = EventqSubject(
                args, server, users, recorder, messages, vhost.url if vhost else None
            )
            spy = None
            if args.py_spy is not None:
                pid = server.pid

                def spy() -> subprocess.Popen[bytes]:
                    return start_py_spy(pid, args.py_spy, args.duration, args.py_spy_native)

            try:
                runner.run(
                    run_subject(
                        subject, recorder, args, results["servers"]["eventq"], user_ids, spy=spy
                    )
                )
            finally:
                results["servers"]["eventq"]["warnings"] = server.warnings()
                server.stop()
            if vhost is not None:
                results["servers"]["eventq"]["rabbitmq_alone"] = rabbitmq_alone(
                    args, vhost.url, messages, user_ids
                )
            if args.shards > 1:
                shards = sharded_group(
                    database.url,
                    workdir,
                    secret,
                    args.shards,
                    database.realm_id,
                    eventq_env(workdir, args.http_server, args.pure_python),
                )
                shards.start()
                recorder = Recorder()
                subject = EventqSubject(args, shards, users, recorder, messages)
                results["sharded"] = {"shards": args.shards}
                try:
                    runner.run(
                        run_subject(
                            subject,
                            recorder,
                            args,
                            results["sharded"],
                            user_ids,
                            memory=False,
                            small=False,
                        )
                    )
                finally:
                    results["sharded"]["warnings"] = shards.warnings()
                    shards.stop()
        completed = True
    except (BenchError, nchan.PeerError, BrokerError) as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        for group in (server, shards):
            if group is not None:
                group.stop()
        if nginx is not None:
            nginx.stop()
        if vhost is not None:
            try:
                vhost.delete()
            except BrokerError as exc:
                log(f"could not delete vhost {vhost.name}: {exc}")
        if args.keep_db:
            log(f"kept database {database.name} ({database.url}) and {workdir}")
        else:
            try:
                database.drop()
            except psycopg.Error as exc:
                log(f"could not drop database {database.name}: {exc}")
            shutil.rmtree(workdir, ignore_errors=True)
    results["completed"] = completed
    results["figures"] = compare(results)
    results["bars"] = bars(results["config"], results["figures"])
    results["deliveries"] = deliveries(results)
    results["deliveries_ok"] = bool(results["deliveries"]) and all(
        check["ok"] for check in results["deliveries"].values()
    )
    if not completed:
        log("partial results (the run did not finish):")
    report = render(results)
    if args.json:
        print(report, file=sys.stderr)
        print(json.dumps(results, indent=2))
    else:
        print(report)
    if completed and not results["deliveries_ok"]:
        log("FAILED: some client lost, repeated or got an unknown message; see 'deliveries'")
    return 0 if completed and results["deliveries_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
