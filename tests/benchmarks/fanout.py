"""Fan-out, throughput and memory benchmark of the eventq server.

Run from the repository root:

    .venv/bin/python tests/benchmarks/fanout.py [--clients 10000] [--rounds 5]
        [--duration 10] [--json] [--keep-db] [--py-spy profile.txt]

It builds its own world and tears it down: a fresh PostgreSQL database
`eventq_bench_<random>` (on the server of EVENTQ_DATABASE_URL, default
`host=127.0.0.1 user=postgres`), migrated, with one realm and one user per
`--clients-per-user` clients (bulk COPY); the real server as a subprocess
(`python -m server serve`) on a free port, without a broker (EVENTQ_AMQP_URL
empty: it must not consume the notify queue of the default vhost). Whatever
happens (error, Ctrl-C, SIGTERM) the server is stopped and the database
dropped (unless --keep-db).

The load generator runs in this process on raw asyncio protocols (no aiohttp
or httpx: on 2 cores the generator's own CPU competes with the server, see
shared/reference/measurements.md): one HTTP/1.1 keep-alive connection per
client, which creates its queue with `GET /api/v1/events?dont_block=true` and
then long-polls `GET /api/v1/events?queue_id=..&last_event_id=..` for ever,
re-polling as soon as a Content-Length framed response is read. Events are
injected with `POST /api/internal/notify_tornado` on separate keep-alive
connections; each event carries its send time (`t`, time.time()).

Phases, in this order (the report is ordered by topic):

1. memory: server RSS with no client, then with 1,000 / 5,000 / --clients
   parked clients; (RSS - RSS at 0) / clients.
2. fan-out: for each of --fanout-sizes (largest first; extra clients are
   disconnected), --warmup uncounted rounds then --rounds rounds of one event
   to every parked client, each round started only once the server's stats
   say every client has re-parked. Latency of a client = when it finished
   reading its response - the event's send time. The server's CPU is read
   at the last client's read and again once it is idle (after the re-polls).
   Medians over the rounds.
3. throughput: --throughput-clients clients; --injectors connections, each
   with --pipeline notices in flight, send notices to all of them for
   --duration s. Delivered events/s counts events read by clients inside the
   window; server CPU (utime+stime of /proc/<pid>/stat) and this generator's
   CPU (getrusage) over the same window are divided by those events. Afterwards
   every client must have received every accepted notice exactly once.

After each phase the server's IO-loop lag (`stats()["loop_lag"]`, last 60 s)
is recorded.
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
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import conninfo

from generation.accounts import HASH_HMAC, api_key_id, hash_api_key, new_api_key
from server.migrate import migrate

REPO = Path(__file__).resolve().parent.parent.parent
# The servers' EVENTQ_API_KEY_SECRET, with which `populate` hashes the keys.
API_KEY_SECRET = secrets.token_urlsafe(32)
DEFAULT_BASE_URL = "host=127.0.0.1 user=postgres"
HOST = "127.0.0.1"
TICKS = os.sysconf("SC_CLK_TCK")

# nginx 1.22 + nchan 1.3.6, one worker, same machine kind (measurements.md).
REFERENCE = {
    "fanout_1000_last_ms": 28.0,
    "fanout_5000_p50_ms": 81.0,
    "fanout_5000_p99_ms": 157.0,
    "throughput_1000_events_per_sec": 33_600.0,
    "memory_per_idle_client_kb": 11.4,
    "server_cpu_per_event_us": "20-25",
    "generator_cpu_per_request_us": "~14 (raw asyncio + uvloop), ~80 (aiohttp)",
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
    database_url: str, workdir: Path, secret: str, shards: int, realm_id: int
) -> ServerGroup:
    """`shards` shard processes with the benchmark realm spread over all of
    them (user u on shard u % shards), each consuming nothing (no broker: the
    generator injects each shard's notices on its own internal endpoint)."""
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
            {"EVENTQ_SHARDING": str(config), "EVENTQ_SHARD": name},
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
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

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
    """One client: implicit registration, then long-polls for ever."""

    def __init__(self, bench: Bench, index: int, authorization: str, member: int = 0):
        super().__init__()
        self.bench = bench
        self.index = index
        self.member = member  # which of the server's processes it talks to
        self.queue_id: bytes | None = None
        self.last_id = -1
        self.got = 0  # bench events received since the last reset
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
        self.transport.write(b"GET /api/v1/events?dont_block=true" + self.request_tail)

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
            self.queue_id = data["queue_id"].encode()
        events = data["events"]
        if events:
            last = self.last_id
            for event in events:
                event_id = event["id"]
                if event_id != last + 1:
                    if event_id <= last:
                        bench.duplicates += 1
                    else:
                        bench.gaps += event_id - last - 1
                last = event_id
                if event["type"] == "bench":
                    self.got += 1
                    bench.on_event(event, now)
                else:
                    bench.other_events += 1
            self.last_id = last
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


@dataclass
class FanoutRound:
    seq: int
    expected: int
    latencies: list[float] = field(default_factory=list)


class Bench:
    """The load generator and the phases it runs against one server, or
    against the shards of a `ServerGroup`."""

    def __init__(self, args: argparse.Namespace, server: ServerGroup, users: list[User]):
        self.args = args
        self.server = server
        self.users = users
        self.per_user = args.clients_per_user
        self.clients: list[PollClient] = []
        self._closing: set[int] = set()
        self.controls: dict[int, RequestConnection] = {}
        self.stats_request = post_request(
            "/api/internal/stats", urllib.parse.urlencode({"secret": server.secret})
        )
        self.seq = 0
        self.round: FanoutRound | None = None
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
        self.latency_samples: list[float] | None = None

    # -- plumbing -----------------------------------------------------------

    def on_event(self, event: dict[str, Any], now: float) -> None:
        self.bench_events += 1
        current = self.round
        if current is not None and event["seq"] == current.seq:
            current.latencies.append(now - event["t"])
        elif self.latency_samples is not None:
            self.latency_samples.append(now - event["t"])

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
        loop = asyncio.get_running_loop()
        user = self.users[index // self.per_user]
        member = self.server.member_of(user.user_id)
        _, protocol = await asyncio.wait_for(
            loop.create_connection(
                lambda: PollClient(self, index, user.authorization, member),
                HOST,
                self.server.members[member].port,
            ),
            15,
        )
        return protocol

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
        quote = urllib.parse.quote
        secret = quote(self.server.secret, safe="")
        prefix = f"secret={secret}&data=" + quote('{"event":{"type":"bench","seq":', safe="")
        middle = quote(',"t":', safe="")
        suffix = quote('},"users":' + json.dumps(users, separators=(",", ":")) + "}", safe="")
        head = (
            f"POST /api/internal/notify_tornado HTTP/1.1\r\nHost: {HOST}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: "
        ).encode()

        def build(seq: int) -> bytes:
            body = f"{prefix}{seq}{middle}{time.time()!r}{suffix}".encode()
            return b"%s%d\r\n\r\n%s" % (head, len(body), body)

        return build

    # -- phases -------------------------------------------------------------

    async def phase_memory(self, rss0: int) -> dict[str, Any]:
        target = self.args.clients
        checkpoints = sorted({n for n in (1000, 5000) if n < target} | {target})
        rows = []
        stopped: str | None = None
        for checkpoint in checkpoints:
            log(f"memory: ramping to {checkpoint} parked clients")
            started = time.monotonic()
            stopped = await self.ramp_to(checkpoint)
            reached = len(self.clients)
            await self.wait_parked(reached)
            ramp_secs = time.monotonic() - started
            await asyncio.sleep(1.0)
            rss = self.server.rss_kb()
            rows.append(
                {
                    "clients": reached,
                    "rss_kb": rss,
                    "per_client_kb": round((rss - rss0) / reached, 2),
                    "ramp_secs": round(ramp_secs, 2),
                }
            )
            per_client = rows[-1]["per_client_kb"]
            log(f"  {reached} parked: RSS {rss / 1024:.1f} MiB, {per_client} KB each")
            if stopped is not None:
                log(f"  stopped short of {target}: {stopped}")
                break
        stats = await self.stats()
        return {
            "target": target,
            "reached": len(self.clients),
            "stopped_short": stopped,
            "rss0_kb": rss0,
            "checkpoints": rows,
            "per_client_kb": rows[-1]["per_client_kb"] if rows else None,
            "loop_lag": stats["loop_lag"],
        }

    async def phase_fanout(self, size: int) -> dict[str, Any]:
        await self.shrink_to(size)
        users = self.users_of(size)
        builders = self.notice_requests(users)
        injectors = {member: await self.connect_internal(member) for member in builders}
        rows = []
        try:
            for number in range(self.args.warmup + self.args.rounds):
                await self.wait_parked(size)
                await asyncio.sleep(0.2)  # let the loop-lag sampler and GC settle
                seq = self.next_seq()
                requests = {member: build(seq) for member, build in builders.items()}
                current = FanoutRound(seq, size)
                self.round = current
                cpu0, own0 = self.server.cpu_secs(), own_cpu_secs()
                sent = time.time()
                answers = [injectors[member].send(request) for member, request in requests.items()]
                queues = 0
                for answer in answers:
                    status, body = await self.await_future(answer, 30, "notify_tornado")
                    if status != 200:
                        raise BenchError(f"notify_tornado answered {status}: {body[:300]!r}")
                    queues += orjson.loads(body)["queues"]
                notify_ms = (time.time() - sent) * 1000
                if queues != size:
                    raise BenchError(f"the notice reached {queues} queues, not {size}")

                def all_received(current: FanoutRound = current) -> bool:
                    return len(current.latencies) >= current.expected

                await self.wait_until(
                    all_received, 30, f"{size} clients to receive event {current.seq}", step=0.001
                )
                cpu_read, own1 = self.server.cpu_secs(), own_cpu_secs()
                # The round's work goes on after the last read: every client's
                # re-poll is parsed, authenticated and parked.
                cpu1 = await self.server_idle()
                self.round = None
                latencies = sorted(current.latencies)
                row = {
                    "first_ms": latencies[0] * 1000,
                    "p50_ms": percentile(latencies, 0.50) * 1000,
                    "p99_ms": percentile(latencies, 0.99) * 1000,
                    "last_ms": latencies[-1] * 1000,
                    "notify_ms": notify_ms,
                    "server_cpu_ms": (cpu1 - cpu0) * 1000,
                    "server_cpu_to_last_read_ms": (cpu_read - cpu0) * 1000,
                    "generator_cpu_ms": (own1 - own0) * 1000,
                }
                kind = "warm-up" if number < self.args.warmup else "round"
                log(
                    f"  fan-out {size} {kind}: first {row['first_ms']:.1f} p50 {row['p50_ms']:.1f}"
                    f" p99 {row['p99_ms']:.1f} last {row['last_ms']:.1f} ms"
                    f" (notify answered in {notify_ms:.1f} ms; CPU server"
                    f" {row['server_cpu_to_last_read_ms']:.0f} ms to the last read,"
                    f" {row['server_cpu_ms']:.0f} ms until idle; generator"
                    f" {row['generator_cpu_ms']:.0f} ms)"
                )
                if number >= self.args.warmup:
                    rows.append(row)
        finally:
            self.round = None
            for injector in injectors.values():
                injector.close()
        await self.wait_parked(size)
        stats = await self.stats()
        median = {key: round(median_of(rows, key), 2) for key in rows[0]}
        return {"clients": size, "rounds": rows, "median": median, "loop_lag": stats["loop_lag"]}

    async def phase_throughput(self, size: int, profile: Path | None) -> dict[str, Any]:
        await self.shrink_to(size)
        users = self.users_of(size)
        builders = self.notice_requests(users)
        # --injectors connections to each process, each pumping the notices
        # of that process's users.
        injectors = [
            (member, await self.connect_internal(member))
            for member in builders
            for _ in range(self.args.injectors)
        ]
        for client in self.clients:
            client.got = 0
        accepted = dict.fromkeys(builders, 0)
        delivered_by_server = 0
        refused: list[str] = []
        running = True

        async def pump(member: int, connection: RequestConnection) -> None:
            nonlocal delivered_by_server
            build = builders[member]
            pending: collections.deque[asyncio.Future[tuple[int, bytes]]] = collections.deque()
            while running or pending:
                while running and len(pending) < self.args.pipeline:
                    pending.append(connection.send(build(self.next_seq())))
                status, body = await pending.popleft()
                if status == 200:
                    accepted[member] += 1
                    delivered_by_server += orjson.loads(body)["queues"]
                elif len(refused) < 5:
                    refused.append(f"{status} {body[:200]!r}")

        await self.wait_parked(size)
        await asyncio.sleep(0.2)
        duration = self.args.duration
        spy = (
            start_py_spy(self.server.pid, profile, duration, self.args.py_spy_native)
            if profile
            else None
        )
        events0, responses0 = self.bench_events, self.responses
        cpu0, own0, started = self.server.cpu_secs(), own_cpu_secs(), time.monotonic()
        self.latency_samples = []
        tasks = [asyncio.create_task(pump(member, connection)) for member, connection in injectors]
        try:
            deadline = started + duration
            while time.monotonic() < deadline:
                self.server.check()
                for task in tasks:
                    if task.done():
                        task.result()  # raises what stopped it
                        raise BenchError("an injector stopped early")
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            cpu1, own1, ended = self.server.cpu_secs(), own_cpu_secs(), time.monotonic()
            events1, responses1 = self.bench_events, self.responses
            running = False
            samples = sorted(self.latency_samples)
            self.latency_samples = None
            await self.await_future(asyncio.gather(*tasks), 60, "the last notices to be answered")
        finally:
            running = False
            self.latency_samples = None
            for task in tasks:
                task.cancel()
            for _, connection in injectors:
                connection.close()
        elapsed = ended - started
        events = events1 - events0
        responses = responses1 - responses0
        log(f"  window closed: {events} events in {elapsed:.2f} s; waiting for clients to drain")
        drained = True
        try:
            await self.wait_until(
                lambda: all(client.got >= accepted[client.member] for client in self.clients),
                60,
                "every client to receive every accepted notice",
                step=0.05,
            )
        except BenchError as exc:
            drained = False
            log(f"  {exc}")
        short = sum(max(0, accepted[client.member] - client.got) for client in self.clients)
        extra = sum(max(0, client.got - accepted[client.member]) for client in self.clients)
        stats = await self.wait_parked(size)
        profile_top = (
            finish_py_spy(spy, profile) if spy is not None and profile is not None else None
        )
        server_cpu = cpu1 - cpu0
        own_cpu = own1 - own0
        return {
            "clients": size,
            "injectors": self.args.injectors,
            "pipeline": self.args.pipeline,
            "elapsed_secs": round(elapsed, 3),
            "processes": len(self.server.members),
            "notices_accepted": sum(accepted.values()),
            "notices_refused": refused,
            "notices_per_sec": round(sum(accepted.values()) / elapsed, 1),
            "queue_deliveries_reported_by_server": delivered_by_server,
            "events_received_in_window": events,
            "events_per_sec": round(events / elapsed, 1),
            "responses_in_window": responses,
            "events_per_response": round(events / responses, 2) if responses else None,
            "latency_in_window_ms": {
                "p50": round(percentile(samples, 0.5) * 1000, 2),
                "p99": round(percentile(samples, 0.99) * 1000, 2),
                "max": round(samples[-1] * 1000, 2),
            }
            if samples
            else None,
            "server_cpu_secs": round(server_cpu, 3),
            "server_cpu_share": round(server_cpu / elapsed, 3),
            "server_cpu_per_event_us": round(server_cpu / events * 1e6, 2) if events else None,
            "generator_cpu_secs": round(own_cpu, 3),
            "generator_cpu_share": round(own_cpu / elapsed, 3),
            "generator_cpu_per_event_us": round(own_cpu / events * 1e6, 2) if events else None,
            "generator_cpu_per_response_us": round(own_cpu / responses * 1e6, 2)
            if responses
            else None,
            "all_delivered": drained and short == 0 and extra == 0,
            "events_missing": short,
            "events_extra": extra,
            "loop_lag": stats["loop_lag"],
            "profile_top": profile_top,
        }


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
    return where.startswith(OUR_PACKAGES) and not where.startswith(("server/cli.py", "server/__"))


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


def _fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}{unit}"
    return str(value)


def render_sharded(results: dict[str, Any], sharded: dict[str, Any]) -> str:
    """One process beside N shards, measured in the same run."""
    n = sharded["shards"]
    rows: list[tuple[str, str, str]] = []
    for size, phase in sharded["fanout"].items():
        one = results["fanout"].get(size, {}).get("median")
        many = phase["median"]
        for label, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("last", "last_ms")):
            rows.append(
                (
                    f"fan-out to {int(size):,}: {label}",
                    _fmt(one[key], " ms") if one else "-",
                    _fmt(many[key], " ms"),
                )
            )
        rows.append(
            (
                f"fan-out to {int(size):,}: server CPU until idle",
                _fmt(one["server_cpu_ms"], " ms", 0) if one else "-",
                _fmt(many["server_cpu_ms"], " ms", 0),
            )
        )
    one_tp, many_tp = results.get("throughput"), sharded.get("throughput")
    if many_tp:
        for label, key, unit, digits in (
            ("events/s", "events_per_sec", "/s", 0),
            ("server CPU per event", "server_cpu_per_event_us", " us", 2),
            ("server CPU share (of one core)", "server_cpu_share", "", 2),
            ("generator CPU share (of one core)", "generator_cpu_share", "", 2),
        ):
            rows.append(
                (
                    f"{many_tp['clients']:,} subscribers: {label}",
                    _fmt(one_tp[key], unit, digits) if one_tp else "-",
                    _fmt(many_tp[key], unit, digits),
                )
            )
        rows.append(
            (
                "  every notice delivered exactly once",
                ("yes" if one_tp["all_delivered"] else "NO") if one_tp else "-",
                "yes" if many_tp["all_delivered"] else "NO",
            )
        )
    width = max(len(row[0]) for row in rows) + 2
    out = io.StringIO()
    out.write(f"\none process and {n} shards (clients on their owner shard), same run:\n")
    out.write(f"{'measure':<{width}}{'1 process':<16}{n} shards\n")
    out.write("-" * (width + 32) + "\n")
    for name, one_value, many_value in rows:
        out.write(f"{name:<{width}}{one_value:<16}{many_value}\n")
    for name, lag in sharded["loop_lag"].items():
        out.write(
            f"  shards' worst loop lag, {name}: p99 {lag['p99_ms']:.2f} ms,"
            f" max {lag['max_ms']:.1f} ms\n"
        )
    return out.getvalue()


def render(results: dict[str, Any]) -> str:
    out = io.StringIO()
    config = results["config"]
    out.write(
        f"\neventq fan-out benchmark  ({config['cpus']} CPUs, generator loop"
        f" {config['generator_loop']}, {config['clients_per_user']} clients per user)\n"
        f"server code: {config['source']}\n"
    )
    rows: list[tuple[str, str, str]] = []
    for size, phase in results["fanout"].items():
        median = phase["median"]
        n = len(phase["rounds"])
        rows.append(
            (
                f"fan-out to {int(size):,}: time until last (median of {n})",
                _fmt(median["last_ms"], " ms"),
                "28 ms" if int(size) == 1000 else "-",
            )
        )
        rows.append(
            (
                f"fan-out to {int(size):,}: first / p50 / p99",
                f"{median['first_ms']:.1f} / {median['p50_ms']:.1f} / {median['p99_ms']:.1f} ms",
                "- / 81 / 157 ms" if int(size) == 5000 else "-",
            )
        )
        rows.append(
            (
                f"fan-out to {int(size):,}: server CPU to last read / until idle",
                f"{median['server_cpu_to_last_read_ms']:.0f} / {median['server_cpu_ms']:.0f} ms"
                f" ({median['server_cpu_ms'] * 1000 / int(size):.0f} us/client)",
                "-",
            )
        )
        rows.append(
            (
                f"fan-out to {int(size):,}: generator CPU per round",
                f"{median['generator_cpu_ms']:.0f} ms",
                "-",
            )
        )
    throughput = results.get("throughput")
    if throughput:
        rows.append(
            (
                f"{throughput['clients']:,} subscribers, injector flat out: events/s",
                _fmt(throughput["events_per_sec"], "/s", 0),
                "33,600/s",
            )
        )
        rows.append(
            (
                "  notices/s; events per response",
                f"{throughput['notices_per_sec']:,.0f}/s; {throughput['events_per_response']}",
                "-",
            )
        )
        rows.append(
            (
                "  server CPU per delivered event",
                _fmt(throughput["server_cpu_per_event_us"], " us", 2),
                "20-25 us",
            )
        )
        rows.append(
            (
                "  server / generator CPU share of one core",
                f"{throughput['server_cpu_share']:.0%} / {throughput['generator_cpu_share']:.0%}",
                "-",
            )
        )
        rows.append(
            (
                "  generator CPU per event / per response",
                f"{_fmt(throughput['generator_cpu_per_event_us'], ' us', 2)} / "
                f"{_fmt(throughput['generator_cpu_per_response_us'], ' us', 2)}",
                "~14 us per request (uvloop)",
            )
        )
        latency = throughput["latency_in_window_ms"]
        if latency:
            rows.append(
                (
                    "  latency under load p50/p99/max (incl. injector queue)",
                    f"{latency['p50']:.1f} / {latency['p99']:.1f} / {latency['max']:.1f} ms",
                    "-",
                )
            )
        rows.append(
            (
                "  every notice delivered exactly once",
                "yes"
                if throughput["all_delivered"]
                else f"NO: {throughput['events_missing']} missing, "
                f"{throughput['events_extra']} extra",
                "-",
            )
        )
    memory = results.get("memory")
    if memory:
        for checkpoint in memory["checkpoints"]:
            rows.append(
                (
                    f"memory per idle parked client ({checkpoint['clients']:,} parked)",
                    _fmt(checkpoint["per_client_kb"], " KB", 2),
                    "11.4 KB",
                )
            )
    if throughput and throughput["generator_cpu_share"] > 0.9:
        rows.append(("  WARNING: the load generator was saturated", "", ""))
    width = max(len(row[0]) for row in rows) + 2
    value_width = max(len(row[1]) for row in rows) + 2
    out.write(f"\n{'measure':<{width}}{'eventq':<{value_width}}nginx+nchan\n")
    out.write("-" * (width + value_width + 24) + "\n")
    for name, ours, theirs in rows:
        out.write(f"{name:<{width}}{ours:<{value_width}}{theirs}\n")
    if memory:
        out.write(
            f"\nserver RSS: {memory['rss0_kb'] / 1024:.1f} MiB with no client; "
            + ", ".join(
                f"{c['rss_kb'] / 1024:.1f} MiB with {c['clients']:,}" for c in memory["checkpoints"]
            )
            + "\n"
        )
        if memory["stopped_short"]:
            out.write(
                f"memory phase reached {memory['reached']:,} of {memory['target']:,} clients:"
                f" {memory['stopped_short']}\n"
            )
    sharded = results.get("sharded")
    if sharded:
        out.write(render_sharded(results, sharded))
    out.write("\nIO-loop lag after each phase (last 60 s), p50 / p99 / window max / max ms:\n")
    for name, lag in results["loop_lag"].items():
        out.write(
            f"  {name:<22}{lag['p50_ms']:.2f} / {lag['p99_ms']:.2f} / "
            f"{lag['window_max_ms']:.1f} / {lag['max_ms']:.1f}\n"
        )
    counters = results["counters"]
    out.write(
        "\ngenerator counters: "
        + ", ".join(f"{key} {value}" for key, value in counters.items())
        + "\n"
    )
    warnings = results["server_warnings"]
    if warnings:
        out.write(f"server logged {len(warnings)} warnings/errors; the last ones:\n")
        for line in warnings[-5:]:
            out.write(f"    {line}\n")
    if throughput and throughput.get("profile_top"):
        profile = throughput["profile_top"]
        if "error" in profile:
            out.write(f"\npy-spy failed: {profile['error']}\n")
        else:
            out.write(f"\npy-spy, server during throughput ({profile['samples']} samples)\n")
            for title, key, count in (
                ("by category", "categories_pct", 20),
                ("self time by function", "self_pct", 15),
                ("eventq functions, inclusive", "eventq_inclusive_pct", 15),
            ):
                out.write(f"  {title}:\n")
                for name, pct in profile[key][:count]:
                    out.write(f"    {pct:5.1f}%  {name}\n")
    return out.getvalue()


# -- main -------------------------------------------------------------------


async def fanout_and_throughput(
    bench: Bench, sizes: list[int], into: dict[str, Any], profile: Path | None
) -> None:
    """The fan-out phase at each size (largest first), then throughput; their
    figures go to `into` ("fanout", "throughput", "loop_lag") as each ends."""
    args = bench.args
    processes = len(bench.server.members)
    where = f"{processes} shards, " if processes > 1 else ""
    for size in sizes:
        log(f"{where}fan-out to {size} clients: {args.warmup} warm-up + {args.rounds} rounds")
        phase = await bench.phase_fanout(size)
        into["loop_lag"][f"fan-out {size}"] = phase.pop("loop_lag")
        into["fanout"][str(size)] = phase
    into["fanout"] = dict(sorted(into["fanout"].items(), key=lambda kv: int(kv[0])))
    size = min(args.throughput_clients, len(bench.clients))
    log(
        f"{where}throughput: {size} clients, {args.injectors} injectors x {args.pipeline}"
        f" in flight per process, {args.duration:.0f} s"
    )
    throughput = await bench.phase_throughput(size, profile)
    into["loop_lag"]["throughput"] = throughput.pop("loop_lag")
    into["throughput"] = throughput
    log(
        f"  {throughput['events_per_sec']:,.0f} events/s,"
        f" server {throughput['server_cpu_per_event_us']} us CPU per event"
    )


async def run_sharded(
    args: argparse.Namespace, group: ServerGroup, users: list[User], results: dict[str, Any]
) -> None:
    """The fan-out and throughput phases again, against the shards."""
    bench = Bench(args, group, users)
    sharded: dict[str, Any] = {"shards": len(group.members), "fanout": {}, "loop_lag": {}}
    results["sharded"] = sharded
    try:
        sizes = sorted({min(size, args.clients) for size in args.fanout_sizes}, reverse=True)
        target = max([*sizes, min(args.throughput_clients, args.clients)])
        log(f"{len(group.members)} shards: ramping to {target} parked clients")
        stopped = await bench.ramp_to(target)
        if stopped is not None:
            raise BenchError(f"the shards took only {len(bench.clients)} clients: {stopped}")
        await bench.wait_parked(target)
        gc.collect()
        gc.freeze()
        await fanout_and_throughput(bench, sizes, sharded, None)
    finally:
        sharded["counters"] = {
            "duplicate_ids": bench.duplicates,
            "id_gaps": bench.gaps,
            "error_responses": bench.errors,
            "connections_lost": bench.lost,
        }
        bench.close_all()
        await asyncio.sleep(0.2)


async def run(
    args: argparse.Namespace, server: ServerGroup, users: list[User], results: dict[str, Any]
) -> None:
    """The phases; each adds its figures to `results` as soon as it is done,
    so that a failure still reports the phases before it."""
    bench = Bench(args, server, users)
    try:
        await bench.stats()
        await asyncio.sleep(1.0)
        rss0 = server.rss_kb()
        memory = await bench.phase_memory(rss0)
        results["memory"] = memory
        results["loop_lag"]["memory ramp"] = memory.pop("loop_lag")
        gc.collect()
        gc.freeze()  # the generator's long-lived clients: no more GC scans of them
        available = len(bench.clients)
        sizes = sorted({min(size, available) for size in args.fanout_sizes}, reverse=True)
        await fanout_and_throughput(bench, sizes, results, args.py_spy)
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
        bench.close_all()
        await asyncio.sleep(0.2)  # let the closes go out before the server stops


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Fan-out latency, throughput, memory and CPU of the eventq server,"
        " against nginx+nchan reference figures.",
    )
    parser.add_argument(
        "--clients", type=int, default=10_000, help="parked clients for the memory phase"
    )
    parser.add_argument("--rounds", type=int, default=5, help="fan-out rounds per size")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted fan-out rounds first")
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of the throughput phase"
    )
    parser.add_argument(
        "--fanout-sizes",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[1000, 5000],
        help="comma-separated parked-client counts (default 1000,5000; capped at --clients)",
    )
    parser.add_argument("--throughput-clients", type=int, default=1000)
    parser.add_argument("--injectors", type=int, default=4, help="notify connections")
    parser.add_argument(
        "--pipeline", type=int, default=2, help="notices in flight per injector connection"
    )
    parser.add_argument(
        "--clients-per-user", type=int, default=10, help="queues per user (server limit 100)"
    )
    parser.add_argument("--batch", type=int, default=500, help="connections opened at once")
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    parser.add_argument("--keep-db", action="store_true", help="keep the database and state dir")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="FILE",
        help="record the server with py-spy (raw stacks to FILE) during the throughput"
        " phase and print the top frames (perturbs the figures a little)",
    )
    parser.add_argument(
        "--py-spy-native",
        action="store_true",
        help="with --py-spy: native stacks too (shows GC and syscalls; pauses the server"
        " at each sample, so the throughput figures drop)",
    )
    parser.add_argument("--no-uvloop", action="store_true", help="never use uvloop here")
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help="after the one-process phases, run fan-out and throughput again against N shard"
        " processes (the benchmark realm spread over all of them) and compare",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.shards <= 16:
        parser.error("--shards must be 1..16")
    if args.shards > 1 and args.py_spy:
        parser.error("--py-spy records one process: not with --shards")
    if not 1 <= args.clients_per_user <= 100:
        parser.error("--clients-per-user must be 1..100 (the server's queues-per-user limit)")
    if args.clients < 1 or args.rounds < 1 or args.duration <= 0:
        parser.error("--clients, --rounds and --duration must be positive")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    fd_limit = raise_fd_limit()
    if args.clients + 100 > fd_limit:
        log(f"warning: fd limit {fd_limit} is below --clients {args.clients} + 100")
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
    server = ServerGroup([ServerProcess(database.url, workdir, secret)])
    shards: ServerGroup | None = None
    status = 1
    results: dict[str, Any] = {
        "config": {
            "clients": args.clients,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "duration_secs": args.duration,
            "clients_per_user": args.clients_per_user,
            "injectors": args.injectors,
            "pipeline": args.pipeline,
            "cpus": os.cpu_count(),
            "generator_loop": loop_name,
            "shards": args.shards,
            "python": sys.version.split()[0],
            "source": source_state(),
        },
        "reference_nginx_nchan": REFERENCE,
        "fanout": {},
        "loop_lag": {},
        "counters": {},
        "server_warnings": [],
    }
    try:
        n_users = (args.clients + args.clients_per_user - 1) // args.clients_per_user
        log(f"database {database.name}: creating, migrating, {n_users} users")
        database.create()
        users = database.populate(n_users)
        server.start()
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(run(args, server, users, results))
            if args.shards > 1:
                results["server_warnings"] = server.warnings()
                server.stop()  # the shards get both cores (and the generator its share)
                shards = sharded_group(
                    database.url, workdir, secret, args.shards, database.realm_id
                )
                shards.start()
                runner.run(run_sharded(args, shards, users, results))
        status = 0
    except BenchError as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        results["server_warnings"] = results["server_warnings"] or server.warnings()
        server.stop()
        if shards is not None:
            results["server_warnings"] += shards.warnings()
            shards.stop()
        if args.keep_db:
            log(f"kept database {database.name} ({database.url}) and {workdir}")
        else:
            try:
                database.drop()
            except psycopg.Error as exc:
                log(f"could not drop database {database.name}: {exc}")
            shutil.rmtree(workdir, ignore_errors=True)
    if status == 0 or results.get("memory"):
        if status != 0:
            log("partial results (the run did not finish):")
        report = render(results)
        if args.json:
            print(report, file=sys.stderr)
            print(json.dumps(results, indent=2))
        else:
            print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
