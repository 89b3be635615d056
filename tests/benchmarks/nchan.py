"""nginx + nchan on this machine: the peer that fanout.py measures eventq against.

Debian's nginx 1.22 with its nchan 1.3.6 module (`libnginx-mod-nchan`;
deploy/bootstrap.sh's `ensure_nchan` installs it). `NginxProcess` writes its
own config into a directory of its own and runs nginx in the foreground with
`-c` and `-p`: one worker (one eventq process uses one core), a free loopback
port, pid file and error log in that directory, no access log.

The config gives nchan what eventq does for a user:

- `/sub`, a long-poll subscriber (`nchan_subscriber longpoll`) on the channel
  of the user whose credential the request carries. A `map` on
  `$http_authorization` turns each benchmark user's Basic credential (the same
  strings eventq checks) into their user id; any other value maps to "" and
  is answered 403. So both servers check a credential on every request:
  eventq looks the header up in its authentication cache (the database is
  asked at most once a minute per credential), nginx in the map's hash table.
  A client follows its channel with the `Last-Modified` and `Etag` of the
  previous response sent back as `If-Modified-Since` and `If-None-Match`; a
  client that is behind gets every message it missed in one response
  (`nchan_longpoll_multipart_response raw`: one per line), as eventq answers
  a poll with every event queued since `last_event_id`.
- `/sse`, the same subscriber as Server-Sent Events (`nchan_subscriber
  eventsource`, `--transport sse`): one response kept open, a message
  written on it as it is published (`id:` and `data:`), as eventq's event
  streams write an event (server/handlers/stream.py).
- `/pub/<channels>`, the publisher: one POST publishes one body to the
  channels listed (comma-separated, up to 255: nchan's multi-channel
  publish), after a check of a shared secret header, as eventq's
  `notify_tornado` checks its secret. A message stays in its channel's buffer
  (`BUFFER_LENGTH` messages, an hour) so that a client that is behind loses
  nothing.
- `/status`, nchan's stub status: how many subscribers are parked.

Nothing here imports fanout.py (which imports this module): the callers hand
in what is shared (the users' credentials, the message bodies, the recorder
that clients report to).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import orjson

HOST = "127.0.0.1"
TICKS = os.sysconf("SC_CLK_TCK")
# Where Debian's packages put the module (the second is a symlink to the
# first); modules-available holds the `load_module` line that names it.
MODULE_NAME = "ngx_nchan_module.so"
MODULE_DIRS = (Path("/usr/lib/nginx/modules"), Path("/usr/share/nginx/modules"))
MODULE_CONFS = Path("/usr/share/nginx/modules-available")
INSTALL_HINT = (
    "install them with `bash deploy/test.sh` (its ensure_nchan step) or"
    " `apt-get install -y nginx-light libnginx-mod-nchan`"
)
# Messages kept per channel. A throughput run of 10 s publishes at most a few
# hundred notices to each user's channel; a client behind by more than this
# would miss messages, and the benchmark's delivery check would say so.
BUFFER_LENGTH = 5000
# Shared memory for the messages: only the pages used count in the RSS.
SHARED_MEMORY = "512m"
CHANNEL_PREFIX = "u"


class PeerMissing(RuntimeError):
    """nginx or its nchan module is not installed; raised by `find_nginx` and
    `find_module`, with how to install them."""


class PeerError(RuntimeError):
    """nginx would not start, exited, or answered what it should not."""


class Recorder(Protocol):
    """What a client reports every message it reads to (fanout.py's)."""

    def on_message(self, client: Any, seq: int, now: float) -> None: ...


def find_nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else "")
    if not found:
        raise PeerMissing(f"nginx is not installed: {INSTALL_HINT}")
    return found


def find_module() -> Path:
    """The nchan module's path: in a modules directory, or wherever the
    `load_module` line of modules-available points (relative to nginx's
    prefix, /usr/share/nginx)."""
    for directory in MODULE_DIRS:
        if (directory / MODULE_NAME).is_file():
            return directory / MODULE_NAME
    for conf in sorted(MODULE_CONFS.glob("*nchan*.conf")):
        match = re.search(r"load_module\s+(\S+?);", conf.read_text(errors="replace"))
        if match:
            path = Path(match.group(1))
            path = path if path.is_absolute() else Path("/usr/share/nginx") / path
            if path.is_file():
                return path
    raise PeerMissing(f"the nginx nchan module ({MODULE_NAME}) is not installed: {INSTALL_HINT}")


def process_cpu_secs(pid: int) -> float:
    """The CPU time of process `pid` in seconds: the sum over its threads of
    their time on a CPU (/proc/<pid>/task/*/schedstat, in nanoseconds). The
    utime + stime of /proc/<pid>/stat count the same time in 10 ms ticks,
    too coarse for one fan-out round (nchan's fan-out to 1,000 takes about
    one tick); they are used where schedstat is missing. A thread that has
    ended no longer counts: the servers measured keep theirs for the run.
    fanout.py measures eventq with this too, so both are measured alike."""
    if not os.path.exists(f"/proc/{pid}/schedstat"):  # a kernel without schedstats
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        path = f"/proc/{pid}/task/{tid}/schedstat"
        with contextlib.suppress(FileNotFoundError, ProcessLookupError), open(path) as handle:
            total += int(handle.read().split()[0])  # (a thread that just ended: skipped)
    return total / 1e9


def source_address(index: int, count: int) -> str:
    """The loopback address client `index` connects from, of `count`: a
    source address has some 28,000 ephemeral ports towards one server port,
    fewer than the clients of the largest runs."""
    return f"127.0.0.{1 + index % count}"


# Linux's IP_BIND_ADDRESS_NO_PORT (not in Python's socket module): a socket
# bound to an address takes its port when it connects, as an unbound one
# does, so that ports are shared among destinations (a port bound first is
# the source address's for every destination: the run's 20,000 clients of
# one server, then of the other, would not fit in the ephemeral range).
IP_BIND_ADDRESS_NO_PORT = 24


async def connect_from(
    factory: Callable[[], asyncio.Protocol], port: int, source: str
) -> asyncio.Protocol:
    """A connection to HOST:`port` from the loopback address `source`."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if source != HOST:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
        await loop.sock_connect(sock, (HOST, port))
        _, protocol = await loop.create_connection(factory, sock=sock)
    except BaseException:
        sock.close()
        raise
    return protocol


def channel(user_id: int) -> str:
    return f"{CHANNEL_PREFIX}{user_id}"


def nginx_config(
    directory: Path, port: int, module: Path, credentials: dict[str, int], secret: str
) -> str:
    """The whole nginx.conf: see the module docstring. `credentials` maps an
    Authorization header value to the user id it authenticates."""
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp = "".join(
        f"    {kind}_temp_path {directory / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    users = "".join(
        f'        "{header}" {user_id};\n' for header, user_id in sorted(credentials.items())
    )
    return f"""load_module {module};
{user}worker_processes 1;
worker_rlimit_nofile 65536;
daemon off;
pid {directory / "nginx.pid"};
error_log {directory / "error.log"} warn;
events {{
    worker_connections 65536;
}}
http {{
    access_log off;
{temp}    # A long poll re-polls on the same connection for the whole run.
    keepalive_requests 1000000000;
    keepalive_timeout 3600s;
    nchan_shared_memory_size {SHARED_MEMORY};
    # A Basic credential is some 100 characters: larger than the default bucket.
    map_hash_bucket_size 256;
    map $http_authorization $bench_user {{
        default "";
{users}    }}
    server {{
        listen {HOST}:{port};
        location = /sub {{
            if ($bench_user = "") {{
                return 403;
            }}
            nchan_subscriber longpoll;
            nchan_channel_id "{CHANNEL_PREFIX}$bench_user";
            nchan_subscriber_first_message newest;
            nchan_longpoll_multipart_response raw;
        }}
        location = /sse {{
            if ($bench_user = "") {{
                return 403;
            }}
            nchan_subscriber eventsource;
            nchan_channel_id "{CHANNEL_PREFIX}$bench_user";
            nchan_subscriber_first_message newest;
        }}
        location ~ ^/pub/([a-z0-9,]+)$ {{
            if ($http_x_bench_secret != "{secret}") {{
                return 403;
            }}
            nchan_publisher;
            nchan_channel_id "$1";
            nchan_channel_id_split_delimiter ",";
            nchan_message_buffer_length {BUFFER_LENGTH};
            nchan_message_timeout 1h;
        }}
        location = /status {{
            nchan_stub_status;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class NginxProcess:
    """nginx with `nginx_config`, in the foreground, its files in `directory`.
    `start` returns once it answers; `stop` ends master and worker whatever
    state they are in (SIGTERM, then SIGKILL to the process group)."""

    def __init__(
        self,
        directory: Path,
        credentials: dict[str, int],
        secret: str,
        preexec_fn: Callable[[], None] | None = None,
    ):
        self.binary = find_nginx()
        self.module = find_module()
        self.directory = directory
        self.port = free_port()
        self.secret = secret
        self.preexec_fn = preexec_fn
        directory.mkdir(parents=True, exist_ok=True)
        self.conf = directory / "nginx.conf"
        self.conf.write_text(nginx_config(directory, self.port, self.module, credentials, secret))
        self.error_log = directory / "error.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # The worker's pid, found once it runs (one worker: it never changes
        # unless it dies, which `check` reports).
        self._worker: int | None = None

    def command(self, *extra: str) -> list[str]:
        return [
            self.binary,
            "-c",
            str(self.conf),
            "-p",
            f"{self.directory}/",
            "-e",
            str(self.error_log),
            *extra,
        ]

    def start(self, timeout: float = 15.0) -> None:
        test = subprocess.run(self.command("-t"), capture_output=True, text=True, check=False)
        if test.returncode != 0:
            raise PeerError(f"nginx -t refused the benchmark's config:\n{test.stderr}")
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: `stop` kills it whole
            preexec_fn=self.preexec_fn,  # noqa: PLW1509 (no threads yet)
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            with contextlib.suppress(OSError):
                socket.create_connection((HOST, self.port), timeout=1).close()
                self._worker = self._find_worker()
                if self._worker is not None:
                    return
            time.sleep(0.05)
        raise PeerError(f"nginx did not listen on port {self.port} within {timeout:.0f} s")

    def _find_worker(self) -> int | None:
        assert self.proc is not None
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry.name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:  # its parent is our master
                    return int(entry.name)
        return None

    @property
    def pids(self) -> list[int]:
        assert self.proc is not None
        assert self._worker is not None
        return [self.proc.pid, self._worker]

    def check(self) -> None:
        """Raise with the tail of the error log if nginx has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise PeerError(
                f"nginx exited with status {self.proc.returncode}; its error log ends:\n"
                + self.tail()
            )
        if self._worker is not None and not Path(f"/proc/{self._worker}").exists():
            raise PeerError(f"the nginx worker died; the error log ends:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.error_log.read_text(errors="replace")
        except OSError:
            return "    (no error log)"
        return "\n".join("    " + line for line in text.splitlines()[-lines:]) or "    (empty)"

    def warnings(self) -> list[str]:
        try:
            text = self.error_log.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if "[warn]" in line or "[error]" in line]

    def cpu_secs(self) -> float:
        """CPU time of master and worker (`process_cpu_secs`)."""
        self.check()
        return sum(process_cpu_secs(pid) for pid in self.pids)

    def rss_kb(self) -> int:
        """VmRSS of master and worker (the master's does not change with load)."""
        self.check()
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # Fast shutdown: a graceful one (SIGQUIT) would wait for every long poll.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if self._worker is not None:  # a worker outliving a killed master
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._worker, signal.SIGKILL)


# -- HTTP/1.1 over raw asyncio protocols -------------------------------------


class Response:
    __slots__ = ("body", "etag", "last_modified", "status")

    def __init__(self, status: int, etag: bytes, last_modified: bytes, body: bytes):
        self.status = status
        self.etag = etag
        self.last_modified = last_modified
        self.body = body


class NginxConnection(asyncio.Protocol):
    """Splits a keep-alive byte stream into Content-Length framed responses,
    keeping the headers a long-poll client follows (`Etag`, `Last-Modified`)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._head: Response | None = None  # of the response whose body is awaited
        self._need = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while True:
            if self._head is None:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                lines = bytes(buffer[:end]).split(b"\r\n")
                del buffer[: end + 4]
                if not lines[0].startswith(b"HTTP/1.1 "):
                    self.protocol_error(f"unexpected response head {lines[0][:200]!r}")
                    return
                length = -1
                etag = last_modified = b""
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"etag":
                        etag = value.strip()
                    elif name == b"last-modified":
                        last_modified = value.strip()
                if length < 0:
                    self.protocol_error(f"a response without Content-Length: {lines!r}")
                    return
                self._head = Response(int(lines[0][9:12]), etag, last_modified, b"")
                self._need = length
            if len(buffer) < self._need:
                return
            head = self._head
            head.body = bytes(buffer[: self._need])
            del buffer[: self._need]
            self._head = None
            self.on_response(head)

    def protocol_error(self, message: str) -> None:
        self.error = message
        if self.transport is not None:
            self.transport.abort()

    def on_response(self, response: Response) -> None:
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()


class RequestConnection(NginxConnection):
    """Request/response on one connection, pipelined: answers come in order."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: collections.deque[asyncio.Future[Response]] = collections.deque()

    def send(self, request: bytes) -> asyncio.Future[Response]:
        if self.closed or self.transport is None:
            raise PeerError("a connection to nginx is closed")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        self.transport.write(request)
        return future

    def on_response(self, response: Response) -> None:
        future = self._pending.popleft()
        if not future.done():
            future.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(PeerError(f"a connection to nginx was lost ({exc})"))


class NchanClient(NginxConnection):
    """One subscriber: long-polls its user's channel for ever, following it
    by the previous response's `Last-Modified` and `Etag`."""

    def __init__(self, peer: NchanPeer, index: int, user_id: int, authorization: str):
        super().__init__()
        self.peer = peer
        self.index = index
        self.user_id = user_id
        self.seqs: list[int] = []  # message ids read, in order (the recorder appends)
        self._head = None
        self._request = (
            f"GET /sub HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: eventq-bench/1\r\n"
            f"Authorization: {authorization}\r\n"
        ).encode()
        self._follow = b""  # If-Modified-Since / If-None-Match of the last response

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.poll()

    def poll(self) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(self._request + self._follow + b"\r\n")

    def on_response(self, response: Response) -> None:
        now = time.time()
        peer = self.peer
        peer.responses += 1
        if response.status != 200:
            peer.errors += 1
            peer.last_error = f"{response.status} {response.body[:200]!r}"
            asyncio.get_running_loop().call_later(1.0, self.poll)
            return
        self._follow = b"If-Modified-Since: %s\r\nIf-None-Match: %s\r\n" % (
            response.last_modified,
            response.etag,
        )
        self.poll()
        record = peer.recorder.on_message
        for line in response.body.split(b"\n"):
            if line:
                record(self, orjson.loads(line)["message"]["id"], now)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.index not in self.peer.closing:
            self.peer.lost += 1


class SseReader:
    """Reads one HTTP/1.1 response of Server-Sent Events as it comes: `feed`
    its bytes (after its head); each message's fields go to `on_message`.
    A chunked response (eventq's) ends with its last chunk: `feed` returns
    True then, with the bytes after it in `rest`; one without framing
    (nchan's, which never ends it) is read until the connection closes.
    Shared by both servers' stream clients (fanout.py's eventq one too)."""

    __slots__ = ("_buffer", "_chunk_left", "_chunked", "_text", "on_message", "rest")

    def __init__(self, on_message: Callable[[dict[bytes, bytes]], None], chunked: bool = True):
        self.on_message = on_message
        self._chunked = chunked
        self._buffer = bytearray()  # framing not yet read
        self._chunk_left = -1  # data bytes left in the current chunk; -1: at a size line
        self._text = bytearray()  # event-stream text not yet a whole message
        self.rest = b""

    def feed(self, data: bytes) -> bool:
        if not self._chunked:
            self._text += data
            self._messages()
            return False
        buffer = self._buffer
        buffer += data
        while True:
            if self._chunk_left < 0:
                end = buffer.find(b"\r\n")
                if end < 0:
                    return False
                size = int(bytes(buffer[:end]).split(b";")[0], 16)
                if size == 0:
                    if len(buffer) < end + 4:
                        return False  # the last chunk's empty trailer
                    self.rest = bytes(buffer[end + 4 :])
                    buffer.clear()
                    self._messages()
                    return True
                del buffer[: end + 2]
                self._chunk_left = size
            if len(buffer) < self._chunk_left + 2:
                take = min(len(buffer), self._chunk_left)
                self._text += buffer[:take]
                del buffer[:take]
                self._chunk_left -= take
                self._messages()
                return False
            self._text += buffer[: self._chunk_left]
            del buffer[: self._chunk_left + 2]
            self._chunk_left = -1
            self._messages()

    def _messages(self) -> None:
        text = self._text
        while (end := text.find(b"\n\n")) >= 0:
            block = bytes(text[:end])
            del text[: end + 2]
            fields: dict[bytes, bytes] = {}
            for line in block.split(b"\n"):
                name, _, value = line.partition(b":")
                if name:
                    fields[name] = value[1:] if value[:1] == b" " else value
            if b"data" in fields:
                self.on_message(fields)


def stream_head(buffer: bytearray) -> tuple[int, bool, int] | None:
    """The status of the response head at the front of `buffer`, whether
    its body is chunked, and the head's length; None until it is whole."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).lower()
    return int(head[9:12]), b"\r\ntransfer-encoding: chunked" in head, end + 4


class NchanStreamClient(asyncio.Protocol):
    """One subscriber reading its user's channel as Server-Sent Events
    (`/sse`): one response, each message recorded as it comes."""

    def __init__(self, peer: NchanPeer, index: int, user_id: int, authorization: str):
        self.peer = peer
        self.index = index
        self.user_id = user_id
        self.seqs: list[int] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._reader: SseReader | None = None
        self._now = 0.0
        self._request = (
            f"GET /sse HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: eventq-bench/1\r\n"
            f"Accept: text/event-stream\r\nAuthorization: {authorization}\r\n\r\n"
        ).encode()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self._now = time.time()
        if self._reader is None:
            self._buffer += data
            head = stream_head(self._buffer)
            if head is None:
                return
            status, chunked, length = head
            if status != 200:
                self.peer.errors += 1
                self.peer.last_error = f"/sse answered {status}"
                self.close()
                return
            self._reader = SseReader(self._message, chunked)
            data, self._buffer = bytes(self._buffer[length:]), bytearray()
        if self._reader.feed(data):
            self.peer.errors += 1
            self.peer.last_error = "nchan ended an event stream"
            self.close()

    def _message(self, fields: dict[bytes, bytes]) -> None:
        self.peer.responses += 1
        self.peer.recorder.on_message(
            self, orjson.loads(fields[b"data"])["message"]["id"], self._now
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.index not in self.peer.closing:
            self.peer.lost += 1

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()


# The parts of notice `seq` to the given users (None: every user): each
# body and the users it goes to.
PublishParts = Callable[[int, Sequence[int] | None], Sequence[tuple[Sequence[int], bytes]]]


class NchanPublisher:
    """Publishes notices on one keep-alive connection: each part of a notice
    (one body and the users it goes to) is one POST to their channels."""

    def __init__(self, connection: RequestConnection, parts: PublishParts, secret: str):
        self.connection = connection
        self.parts = parts
        self.head = (
            f"HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/json\r\n"
            f"Content-Type: application/json\r\nX-Bench-Secret: {secret}\r\nContent-Length: "
        ).encode()

    def send(self, seq: int, users: Sequence[int] | None = None) -> asyncio.Future[int]:
        """Write the notice `seq` to `users` (None: every user) now; the
        future gives how many subscribers nchan says it reached."""
        answers = []
        for reached, body in self.parts(seq, users):
            path = ("/pub/" + ",".join(channel(user_id) for user_id in reached)).encode()
            request = b"POST %s %s%d\r\n\r\n%s" % (path, self.head, len(body), body)
            answers.append(self.connection.send(request))
        return asyncio.ensure_future(self._reached(answers))

    @staticmethod
    async def _reached(answers: list[asyncio.Future[Response]]) -> int:
        reached = 0
        for answer in answers:
            response = await answer
            if response.status not in (201, 202):
                raise PeerError(f"nchan refused a publish: {response.status} {response.body!r}")
            reached += int(orjson.loads(response.body)["subscribers"])
        return reached

    def close(self) -> None:
        self.connection.close()


class NchanPeer:
    """The clients and publishers of a run against `nginx`, with the same
    methods as fanout.py's eventq subject (see its `Subject`)."""

    name = "nchan"
    # Its small events come through its publisher location only.
    small_sources = ("endpoint",)

    def __init__(
        self,
        nginx: NginxProcess,
        users: Sequence[tuple[int, str]],
        recorder: Recorder,
        parts: PublishParts,
        batch: int = 500,
        transport: str = "poll",
        source_addresses: int = 1,
    ):
        self.nginx = nginx
        # Client i connects from source_address(i, source_addresses).
        self.source_addresses = source_addresses
        # "poll": NchanClient's long polls; "sse": NchanStreamClient.
        self.client_class = NchanStreamClient if transport == "sse" else NchanClient
        self.users = users  # (user id, Authorization value); client i is user i % len
        self.recorder = recorder
        self.parts = parts
        self.batch = batch
        self.clients: list[NchanClient | NchanStreamClient] = []
        self.closing: set[int] = set()
        self._control: RequestConnection | None = None
        self._next_index = 0
        # counters over the run
        self.responses = 0
        self.errors = 0
        self.lost = 0
        self.last_error = ""

    def check(self) -> None:
        self.nginx.check()

    def cpu_secs(self) -> float:
        return self.nginx.cpu_secs()

    def rss_kb(self) -> int:
        return self.nginx.rss_kb()

    async def loop_lag(self) -> None:
        """nginx reports none."""
        return

    def problems(self) -> dict[str, Any]:
        found: dict[str, Any] = {"error_responses": self.errors, "connections_lost": self.lost}
        if self.last_error:
            found["last_error"] = self.last_error
        return found

    async def _connect(self, factory: Callable[[], asyncio.Protocol], index: int = 0) -> Any:
        source = source_address(index, self.source_addresses)
        return await asyncio.wait_for(connect_from(factory, self.nginx.port, source), 15)

    async def parked(self) -> int:
        """Subscribers nchan holds (its stub status)."""
        if self._control is None or self._control.closed:
            self._control = await self._connect(RequestConnection)
        assert self._control is not None
        answer = self._control.send(b"GET /status HTTP/1.1\r\nHost: %s\r\n\r\n" % HOST.encode())
        response = await asyncio.wait_for(answer, 20)
        match = re.search(rb"^subscribers: (\d+)$", response.body, re.MULTILINE)
        if response.status != 200 or match is None:
            raise PeerError(f"nchan status answered {response.status}: {response.body[:300]!r}")
        return int(match.group(1))

    async def wait_parked(self, count: int, limit_secs: float = 60.0) -> None:
        deadline = time.monotonic() + limit_secs
        while (parked := await self.parked()) != count:
            self.check()
            if time.monotonic() > deadline:
                raise PeerError(
                    f"timed out after {limit_secs:.0f} s waiting for {count} parked subscribers"
                    f" (nchan: {parked}; errors {self.errors} {self.last_error!r},"
                    f" lost {self.lost})"
                )
            await asyncio.sleep(0.02)

    async def grow_to(self, count: int) -> None:
        """Connect clients in batches until `count` are parked."""
        while len(self.clients) < count:
            new = min(self.batch, count - len(self.clients))
            made = []
            for _ in range(new):
                index = self._next_index
                self._next_index += 1
                user_id, authorization = self.users[index % len(self.users)]
                factory = functools.partial(self.client_class, self, index, user_id, authorization)
                made.append(self._connect(factory, index))
            self.clients.extend(await asyncio.gather(*made))
            await self.wait_parked(len(self.clients))

    async def shrink_to(self, count: int) -> None:
        extra = self.clients[count:]
        del self.clients[count:]
        for client in extra:
            self.closing.add(client.index)
            client.close()
        await self.wait_parked(count)

    async def publisher(self) -> NchanPublisher:
        connection: RequestConnection = await self._connect(RequestConnection)
        return NchanPublisher(connection, self.parts, self.nginx.secret)

    async def gc_pauses(self) -> None:
        return None  # nginx has no garbage collector

    async def amqp_publisher(self) -> NchanPublisher:
        raise PeerError("nchan has no broker: its notices come through its publisher location")

    def close_all(self) -> None:
        for client in self.clients:
            self.closing.add(client.index)
            client.close()
        self.clients.clear()
        if self._control is not None:
            self._control.close()
