"""Helpers for tests that run the real server: its process, an API client and
condition waits. Imported by tests/conftest.py and the server tests."""

from __future__ import annotations

import base64
import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import requests

from generation import accounts
from generation.config import ProducerConfig

REPO = Path(__file__).resolve().parent.parent
SECRET = "test-shared-secret"
# The key of API key hashes, for the servers, the command line and the tests'
# own account helpers (tests/conftest.py puts it in this process's env).
API_KEY_SECRET = "test-api-key-secret"


def rabbitmqctl(*args: str) -> str:
    """Run rabbitmqctl (it needs root's Erlang cookie: through sudo
    otherwise); what it printed."""
    command = ["rabbitmqctl", "--quiet", *args]
    if os.geteuid() != 0 and shutil.which("sudo"):
        command = ["sudo", "-n", *command]
    done = subprocess.run(command, check=True, capture_output=True, timeout=60)
    return done.stdout.decode()


def external_address() -> str | None:
    """This machine's non-loopback IPv4 address, to call a server bound to
    0.0.0.0 from "elsewhere"; None when it has none."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent by connect()
        address: str = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout`
    (30 s by default: a wait ends on its condition, so a margin for machines
    several times slower than this one costs nothing when the test passes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def raw_exchange(
    port: int, data: bytes, send_buffer: int | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Send `data` as it is on a new connection to 127.0.0.1:`port` and read
    until the server closes it: (status, headers by lowercase name, body).
    `send_buffer`: the socket's SO_SNDBUF, small to still be sending when
    the server answers (a reset then fails the send or the read)."""
    with socket.socket() as conn:
        if send_buffer is not None:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        conn.settimeout(30)
        conn.connect(("127.0.0.1", port))
        conn.sendall(data)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"


def run_quick_benchmark(
    script: str,
    *,
    env: dict[str, str] | None = None,
    limit_secs: float,
    cleanup_secs: float = 60,
    args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """`tests/benchmarks/<script> --quick --json [args]` from the repository
    root: its JSON figures. Past `limit_secs` it gets SIGTERM, so that it still
    removes what it created (servers, database, vhost) within
    `cleanup_secs`, and the test fails with the end of its stderr."""
    process = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--json", *args],
        cwd=BENCHMARKS.parent.parent,
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=limit_secs)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=cleanup_secs)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        raise AssertionError(
            f"{script} --quick ran past {limit_secs:g} s; stderr ends:\n{err[-3000:]}"
        ) from None
    assert process.returncode == 0, f"{script} --quick exited {process.returncode}:\n{err[-4000:]}"
    figures: dict[str, Any] = json.loads(out)
    return figures


def run_eventq(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`eventq ARGS` (as `python -m server`) with this environment minus every
    EVENTQ_* variable, plus `env`; never raises on a non-zero exit."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
    environ["EVENTQ_API_KEY_SECRET"] = API_KEY_SECRET
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "server", *args],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class ServerProcess:
    """`python -m server serve` on a free loopback port, with its own state dir."""

    def __init__(
        self,
        database_url: str,
        state_dir: Path,
        env: dict[str, str] | None = None,
        amqp_url: str = "",
        serve_args: tuple[str, ...] = ("--port", "0"),
    ):
        self.database_url = database_url
        self.serve_args = serve_args
        self.amqp_url = amqp_url
        # Each server consumes its own queue of the session's vhost.
        self.notify_queue = f"notify_tornado.{uuid.uuid4().hex[:8]}"
        # And publishes notifications to its own queue, for the worker a test
        # starts (server/notifications/), not to one every server shares.
        self.notification_queue = f"eventq.notifications.{uuid.uuid4().hex[:8]}"
        self.state_dir = state_dir
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log_path = state_dir / f"server-{uuid.uuid4().hex[:8]}.log"
        self._log_offset = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
        env.update(
            {
                "EVENTQ_DATABASE_URL": self.database_url,
                "EVENTQ_AMQP_URL": self.amqp_url,
                "EVENTQ_NOTIFY_QUEUE": self.notify_queue,
                "EVENTQ_NOTIFICATION_QUEUE": self.notification_queue,
                "EVENTQ_STATE_DIR": str(self.state_dir),
                "EVENTQ_SHARED_SECRET": SECRET,
                "EVENTQ_API_KEY_SECRET": API_KEY_SECRET,
                "EVENTQ_LOG_LEVEL": "DEBUG",
                # Long by default so that nothing wakes a parked request by
                # surprise; tests of heartbeats and GC shorten them.
                "EVENTQ_HEARTBEAT_SECS": "600",
                # Tests that poll fast (restarts, fan-outs) must not meet the
                # per-user rate limit; its own tests set it.
                "EVENTQ_RATE_LIMIT_REQUESTS": "100000",
                "EVENTQ_AUTH_FAILURE_LIMIT": "100000",
                "EVENTQ_GC_INTERVAL_SECS": "0.05",
                "EVENTQ_SHUTDOWN_GRACE_SECS": "5",
                # Test servers share the session's database: the tests of
                # background updates turn a runner on where they want one.
                "EVENTQ_BACKGROUND_TASKS": "off",
                # Likewise the scheduler: a server sending due scheduled
                # messages would take those the domain tests make due in
                # the shared database; the scheduler's own tests turn it on.
                "EVENTQ_SCHEDULED_MESSAGES": "0",
            }
        )
        # The suite runs against either HTTP server (server/http/http1.py; the
        # default is the settings' own).
        http_server = os.environ.get("EVENTQ_TEST_HTTP_SERVER")
        if http_server:
            env["EVENTQ_HTTP_SERVER"] = http_server
        env.update(self.extra_env)
        return env

    # A start takes 1 s here and 2.5 s on one core shared with a busy loop
    # (.ci/slow); 60 s keeps a wide margin on a loaded slower machine.
    def start(self, timeout: float = 60.0) -> ServerProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server", "serve", *self.serve_args],
            cwd=REPO,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        match = wait_for(lambda: self._listening() or self._died(), timeout, "the server to listen")
        if match == "died":
            raise AssertionError(f"server exited at start:\n{self.log()}")
        self.port = int(match)
        return self

    def _listening(self) -> str | None:
        found = re.search(r"listening on http://[\d.]+:(\d+)", self.log())
        return found.group(1) if found else None

    def _died(self) -> str | None:
        assert self.proc is not None
        return "died" if self.proc.poll() is not None else None

    def log(self) -> str:
        """What the server logged since its last start."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(self._log_offset)
            return handle.read().decode("utf-8", "replace")

    def settled_log(self, timeout: float = 30.0) -> str:
        """What the server logged, once every line it logged before this call
        is on disk. Lines are written by a thread of their own, in order
        (server/observability/logwriter.py), so a request to a path of our
        own is answered, and its access line written, after them: the log
        holding that line holds every earlier one. A stopped server wrote
        its lines before it exited."""
        if self.proc is None or self.proc.poll() is not None or self.port is None:
            return self.log()
        marker = f"/api/v1/log-settled-{uuid.uuid4().hex}"
        requests.get(f"{self.url}{marker}", timeout=timeout)

        def written() -> str | None:
            log = self.log()
            return log if marker in log else None

        return str(wait_for(written, timeout, f"the server's log line for {marker}"))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send `sig` and wait; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server did not stop on {sig}:\n{self.log()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def producer(self, **overrides: Any) -> ProducerConfig:
        """The producer configuration that reaches this server."""
        fields: dict[str, Any] = {
            "amqp_url": self.amqp_url,
            "notify_url": f"{self.url}/api/internal/notify_tornado",
            "notify_queue": self.notify_queue,
            "state_dir": self.state_dir,
            "configured_secret": SECRET,
            "database_url": self.database_url,
        }
        return ProducerConfig(**(fields | overrides))

    def wait_consuming(self, timeout: float = 60.0) -> None:
        wait_for(
            lambda: self.stats().get("consumer", {}).get("consuming"),
            timeout,
            "the server to consume its notify queue",
        )

    def internal(self, path: str, **fields: Any) -> requests.Response:
        data = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
        data.setdefault("secret", self.extra_env.get("EVENTQ_SHARED_SECRET", SECRET))
        return requests.post(f"{self.url}/api/internal/{path}", data=data, timeout=10)

    def notify(
        self, event: dict[str, Any], users: list[Any], realm_id: int | None = None
    ) -> dict[str, Any]:
        notice: dict[str, Any] = {"event": event, "users": users}
        if realm_id is not None:
            notice["realm_id"] = realm_id
        response = self.internal("notify_tornado", data=json.dumps(notice))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def rss_kb(self) -> int:
        """The server process's resident memory (VmRSS), in KiB."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stats(self, user_id: int | None = None) -> dict[str, Any]:
        fields: dict[str, Any] = {} if user_id is None else {"user_id": user_id}
        response = self.internal("stats", **fields)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def user_queues(self, user_id: int) -> list[dict[str, Any]]:
        queues: list[dict[str, Any]] = self.stats(user_id)["user_queues"]
        return queues

    def wait_parked(self, user_id: int, queue_id: str, timeout: float = 30.0) -> None:
        wait_for(
            lambda: any(
                q["queue_id"] == queue_id and q["parked"] for q in self.user_queues(user_id)
            ),
            timeout,
            f"a request parked on {queue_id}",
        )


class Api:
    """One user's HTTP client, encoding parameters the way Zulip clients do."""

    def __init__(self, server: ServerProcess, user: accounts.CreatedUser, prefix: str = "/api/v1"):
        self.server = server
        self.user = user
        self.prefix = prefix
        self.session = requests.Session()
        self.session.auth = (user.email, user.api_key)
        self._pool = ThreadPoolExecutor(max_workers=4)

    @staticmethod
    def encode(params: dict[str, Any]) -> dict[str, str]:
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}

    def request(self, method: str, path: str, **params: Any) -> requests.Response:
        url = f"{self.server.url}{self.prefix}/{path}"
        encoded = self.encode(params)
        if method == "GET":
            return self.session.get(url, params=encoded, timeout=30)
        return self.session.request(method, url, data=encoded, timeout=30)

    def register(self, **params: Any) -> dict[str, Any]:
        response = self.request("POST", "register", **params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def get_events(self, **params: Any) -> requests.Response:
        return self.request("GET", "events", **params)

    def events(self, queue_id: str, last_event_id: int, **params: Any) -> list[dict[str, Any]]:
        """GET with dont_block (unless overridden); the events, asserting success."""
        params.setdefault("dont_block", True)
        response = self.get_events(queue_id=queue_id, last_event_id=last_event_id, **params)
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    def park(self, queue_id: str, last_event_id: int) -> Future[requests.Response]:
        """Start a long-poll in a thread and return once the server holds it."""
        future = self._pool.submit(self.get_events, queue_id=queue_id, last_event_id=last_event_id)
        self.server.wait_parked(self.user.user_id, queue_id)
        return future

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.session.close()


def make_guest(base_url: str, admin: accounts.CreatedUser, user_id: int) -> None:
    """`admin` makes user `user_id` a guest (`PATCH /users/{id}`) through
    the server at `base_url`."""
    response = requests.patch(
        f"{base_url}/api/v1/users/{user_id}",
        data={"role": str(accounts.ROLES["guest"])},
        auth=(admin.email, admin.api_key),
        timeout=30,
    )
    assert response.status_code == 200, response.text


class EventStream:
    """An event stream of a queue (server/handlers/stream.py), read on the
    wire as an EventSource reads it."""

    def __init__(
        self,
        base_url: str,
        client: Api,
        queue_id: str,
        last_event_id: int | None = -1,
        header_id: str | None = None,
        accept: str = "text/event-stream",
    ):
        address = urllib.parse.urlsplit(base_url)
        assert address.hostname is not None, base_url
        self.conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
        credentials = f"{client.user.email}:{client.user.api_key}".encode()
        headers = {
            "Authorization": "Basic " + base64.b64encode(credentials).decode(),
            "Accept": accept,
        }
        if header_id is not None:
            headers["Last-Event-ID"] = header_id
        query = f"queue_id={queue_id}"
        if last_event_id is not None:
            query += f"&last_event_id={last_event_id}"
        self.conn.request("GET", f"/api/v1/events?{query}", headers=headers)
        self.response = self.conn.getresponse()
        self.buffer = b""
        # The stream positions it gave (`event: position`), in order.
        self.positions: list[int] = []

    def message(self) -> dict[str, Any]:
        """The next message: its fields (`id`, `data` decoded, `event`), or
        {"comment": ...} for a comment; {} once the stream has ended."""
        while b"\n\n" not in self.buffer:
            chunk = self.response.read1(65536)
            if not chunk:
                assert not self.buffer.strip(), f"a partial message: {self.buffer!r}"
                return {}
            self.buffer += chunk
        block, _, self.buffer = self.buffer.partition(b"\n\n")
        fields: dict[str, Any] = {}
        for line in block.decode().split("\n"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                fields["comment"] = value
            elif name == "data":
                fields["data"] = json.loads(value)
            else:
                fields[name] = value
        return fields

    def events(self, count: int) -> list[dict[str, Any]]:
        """The next `count` event messages (comments and `retry` skipped)."""
        got: list[dict[str, Any]] = []
        while len(got) < count:
            message = self.message()
            assert message, f"the stream ended after {got}"
            if message.get("event") == "position":
                self.positions.append(message["data"]["stream_position"])
            elif "data" in message:
                got.append(message)
        return got

    def cut(self) -> None:
        """Close the connection at once, whatever is unread."""
        sock = self.conn.sock
        if sock is not None:
            # SO_LINGER on, 0 s: a reset, not an orderly close.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.conn.close()


class World:
    """Creates realms and users in the test database, each uniquely named."""

    def __init__(self, database_url: str):
        self.database_url = database_url

    def realm(self, name: str = "Test realm") -> str:
        subdomain = f"r{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            accounts.create_realm(conn, subdomain, name)
        return subdomain

    def user(
        self, realm: str | None = None, role: str = "member", name: str = "Test User"
    ) -> accounts.CreatedUser:
        realm = realm or self.realm()
        email = f"u{uuid.uuid4().hex[:10]}@example.com"
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return accounts.create_user(conn, realm, email, name, role)

    def execute(self, sql: bytes, params: tuple[Any, ...] = ()) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(sql, params)


def ok(response: requests.Response) -> dict[str, Any]:
    """The body of a success, asserting it is one."""
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["result"] == "success"
    return body


def error(response: requests.Response, status: int = 400) -> dict[str, Any]:
    """The body of an error with `status` and a code, asserting it is one."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["result"] == "error"
    assert body["code"]
    return body


def zulip_client(server: ServerProcess, account: accounts.CreatedUser) -> Any:
    """The real `zulip.Client` for an account, pointed at `server`."""
    import zulip

    return zulip.Client(email=account.email, api_key=account.api_key, site=server.url)


LISTENER = textwrap.dedent(
    """
    import json, sys, zulip
    client = zulip.Client(email=sys.argv[1], api_key=sys.argv[2], site=sys.argv[3])
    def show(item):
        print(json.dumps(item), flush=True)
    if sys.argv[4] == "messages":
        client.call_on_each_message(show)
    else:
        client.call_on_each_event(show, event_types=json.loads(sys.argv[4]))
    """
)


class Listener:
    """A `zulip.Client` in its own process, calling back for each message (or
    event); what it receives is read line by line."""

    def __init__(self, server, account, what: str):
        self.server = server
        self.account = account
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LISTENER, account.email, account.api_key, server.url, what],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("ZULIP_")},
        )
        self.items: queue.Queue[dict] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.items.put(json.loads(line))

    def wait_polling(self):
        wait_for(
            lambda: any(q["parked"] for q in self.server.user_queues(self.account.user_id)),
            30,
            "the listener to register and poll",
        )

    def next(self, timeout=15.0) -> dict:
        try:
            return self.items.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            assert self.proc.stderr is not None
            raise AssertionError(
                f"the listener received nothing; its stderr:\n{self.proc.stderr.read().decode()}"
            ) from None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a test may have stopped it
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
