"""What notifications for users who are away cost the server, and how late
the worker sends them (issue 35, "Figures").

Run from the repository root:

    .venv/bin/python tests/benchmarks/notifications.py [--quick] [--json] [--keep-db]

It builds its own world and tears it down, with the other scripts' pieces: a
RabbitMQ vhost `eventq_bench_<random>` (rabbitmq.py's `Vhost`), a fresh
database (fanout.py's `Database`) with one realm of --users users, its
streams, subscriptions and messages (register.py's `populate_domain`), and
two real servers (`python -m server serve`), each consuming its own notify
queue in that vhost, as a user pays for them: HTTP Basic auth on every
request, the delivery log on and the rate limiter on with a limit nobody
reaches (fanout.py's `eventq_env`). One runs with notifications on
(EVENTQ_NOTIFICATIONS=1), the other with them off (EVENTQ_NOTIFICATIONS=0).

Of the --users users, --away (spread evenly) have no queue; every other one
registers on each server (`POST /api/v1/register`, `event_types=["message"]`)
and keeps a long-poll parked there (stream_costs.py's `Readers`, fanout.py's
clients). --publishers processes send --rate notices/s in all with
`generation.send.send_event`: each a channel message to --recipients users
with per-user flags (the sender's ["read"], the mentioned user's
["mentioned"], the others' []), mentioning one of them with
`notify={"email": [them], "push": [them]}`; the mentioned user is away in
the proportion --away / --users. The database holds each message and the
mentioned user's row, as the send action would have written them, so that the
worker finds them unread.

The notification worker (`python -m server notifications run`) consumes
what the server publishes, with EVENTQ_NOTIFICATION_DELAY_SECS=--window, an
SMTP server in this process (aiosmtpd) and a webhook receiver (http.server,
checking each call's signature), both on loopback.

--rounds runs of --duration s on each server, taking turns (after an
uncounted --warmup on each), so that whatever else the machine does weighs
on both alike; after a round with notifications on, the next waits until
the worker has sent every batch of it. Figures:

- server CPU per delivered event (every thread's time on a CPU, from
  /proc/<pid>/task/*/schedstat, from the publishers' release until the server
  is idle after the clients' last read, divided by the events the clients
  read), notifications on and off, and their ratio: bar <= 1.05;
- for every batch the worker sent (an email, a webhook call), when it was
  received minus when the server enqueued its first notification, minus the
  window (--window for emails; the webhook's is EVENTQ_NOTIFICATION_PUSH_DELAY_SECS,
  0 by default): p50, p99, max; bar: max <= 5 s;
- the worker's CPU, emails and webhook calls sent, and `eventq notifications
  status` at the end.

Checks: every client read every event sent to its user once; every
notification of a mentioned user who was away was sent once by email and once
by webhook, and none of a user who was present; the server published what
it enqueued; no webhook call with a bad signature. A failed check fails the
run (exit 1) after the report; the bars are reported, not enforced. Servers,
worker, publishers, database, vhost and working directory are removed on
success, error, Ctrl-C or SIGTERM (--keep-db keeps the database, vhost and
logs). `--quick` runs it at tiny sizes, in seconds (tests/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import email
import email.policy
import hashlib
import hmac
import http.server
import io
import json
import math
import multiprocessing
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

# The scripts beside this one import each other by their bare names.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson
import psycopg
import uvloop
from aiosmtpd.controller import Controller
from fanout import (
    REPO,
    BenchError,
    Database,
    ServerGroup,
    ServerProcess,
    User,
    _table,
    die_with_parent,
    eventq_env,
    free_port,
    log,
    own_cpu_secs,
    percentile,
    raise_fd_limit,
    source_state,
    until_idle,
)
from nchan import process_cpu_secs
from quickmode import parse_with_quick
from rabbitmq import Publishers, Vhost, broker_pid, remove_scratch, spread
from rabbitmq import process_cpu_secs as ticks_cpu_secs
from register import SECRET, populate_domain
from stream_costs import DEFAULT_AMQP_BASE, Readers, postgres_cpu_secs, until

from generation.config import NOTIFICATION_QUEUE, ProducerConfig
from generation.send import close_for_thread, send_event

# Issue 35's bars.
CPU_BAR = 1.05  # server CPU per delivered event, notifications on / off
LATENESS_BAR_SECS = 5.0  # every batch sent within its window plus this
# The webhook's window: EVENTQ_NOTIFICATION_PUSH_DELAY_SECS, left at its default.
PUSH_WINDOW_SECS = 0.0
MODES = ("on", "off")
WEBHOOK_SECRET = secrets.token_urlsafe(24)
# A receiver refuses a call signed further than this from its clock
# (docs/notifications.md, "The webhook").
WEBHOOK_TOLERANCE_SECS = 300
TOPIC = "deploys"
# The email's links to its messages (server/notifications/mail.py's narrow_url).
NEAR = re.compile(r"/near/(\d+)")
# The worker says so once it consumes (server/notifications/worker.py).
CONSUMING = f"consuming {NOTIFICATION_QUEUE}"
# --quick: the whole run at tiny sizes, in seconds (a test runs it); options
# given beside --quick still win. 12 away users of 60, 6 recipients a notice:
# about one notice in five mentions someone away, some 10 per round.
QUICK = {
    "users": 60,
    "away": 12,
    "recipients": 6,
    "streams": 5,
    "subs_per_user": 2,
    "messages": 50,
    "rate": 40.0,
    "duration": 1.5,
    "rounds": 2,
    "warmup": 0.5,
    "window": 1.0,
    "publishers": 2,
}


# -- who gets what -------------------------------------------------------------


@dataclass(frozen=True)
class Audience:
    """The realm's users (by index: user i is "Bench i"), who is away, and
    who each notice goes to. Notice `seq` mentions an away user in exactly
    the proportion away / users (of any `users` consecutive notices), the
    away users in turn, else a present user, the present ones in turn; it
    goes to `per_notice` consecutive users from a start that moves on by
    `per_notice` at each notice (so every user is as often a recipient),
    the one mentioned among them, a user other than them sending it."""

    user_ids: tuple[int, ...]
    away_indexes: tuple[int, ...]  # spread evenly over the users
    present_indexes: tuple[int, ...]
    per_notice: int

    @classmethod
    def of(cls, users: Sequence[User], away: int, per_notice: int) -> Audience:
        chosen = {k * len(users) // away for k in range(away)}
        present = tuple(i for i in range(len(users)) if i not in chosen)
        return cls(
            tuple(user.user_id for user in users), tuple(sorted(chosen)), present, per_notice
        )

    @property
    def away(self) -> frozenset[int]:
        """The away users' ids."""
        return frozenset(self.user_ids[i] for i in self.away_indexes)

    def present_ids(self) -> list[int]:
        return [self.user_ids[i] for i in self.present_indexes]

    def mentioned(self, seq: int) -> int:
        """The index of the user notice `seq` mentions."""
        users, away = len(self.user_ids), len(self.away_indexes)
        before = seq * away // users  # away users mentioned by notices 0 .. seq - 1
        if (seq + 1) * away // users > before:
            return self.away_indexes[before % away]
        return self.present_indexes[(seq - before) % len(self.present_indexes)]

    def targets(self, seq: int) -> list[int]:
        """The indexes of the users notice `seq` goes to, its sender first."""
        start = seq * self.per_notice
        window = [(start + k) % len(self.user_ids) for k in range(self.per_notice)]
        mentioned = self.mentioned(seq)
        if mentioned not in window:
            window[-1] = mentioned
        sender = next(i for i in window if i != mentioned)
        return [sender, *(i for i in window if i != sender)]


def loop_wait_secs(pid: int) -> float | None:
    """How long process `pid`'s main thread (a server's IO loop) has waited,
    runnable, for a CPU: the second field of /proc/<pid>/task/<pid>/schedstat
    (nanoseconds). None on a kernel without schedstats."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except FileNotFoundError:
        return None


def mention_of(index: int, user_id: int) -> tuple[str, str]:
    """A message's Markdown and HTML, mentioning user `index`."""
    return (
        f"@**Bench {index}** could you look at the deploy graphs?",
        f'<p><span class="user-mention" data-user-id="{user_id}">@Bench {index}</span>'
        " could you look at the deploy graphs?</p>",
    )


def notice_of(
    audience: Audience, realm_id: int, stream: tuple[int, str], seq: int
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, list[int]]]:
    """Notice `seq` as the send action makes it: the event, its users with
    their flags, and `notify`."""
    targets = audience.targets(seq)
    sender, mentioned = targets[0], audience.mentioned(seq)
    ids = audience.user_ids
    content, rendered = mention_of(mentioned, ids[mentioned])
    event = {
        "type": "message",
        "message": {
            "id": seq,
            "type": "stream",
            "sender_id": ids[sender],
            "sender_email": f"bench{sender}@bench.example.com",
            "sender_full_name": f"Bench {sender}",
            "sender_realm_str": "bench",
            "avatar_url": None,
            "client": "website",
            "content": content,
            "rendered_content": rendered,
            "display_recipient": stream[1],
            "stream_id": stream[0],
            "recipient_id": stream[0],
            "subject": TOPIC,
            "topic_links": [],
            "is_me_message": False,
            "reactions": [],
            "submessages": [],
            "timestamp": int(time.time()),
        },
    }
    flags = {sender: ["read"], mentioned: ["mentioned"]}
    users = [{"id": ids[i], "flags": flags.get(i, [])} for i in targets]
    return event, users, {"email": [ids[mentioned]], "push": [ids[mentioned]]}


# -- publishers (processes, as rabbitmq.py's) -----------------------------------


@dataclass(frozen=True)
class SendPlan:
    """What one publisher process sends: notices `first_seq`, `first_seq +
    seq_step`, ...; `count` at most, for `max_secs` at most, `rate` a second
    from `offset_secs` after the start."""

    config: ProducerConfig
    realm_id: int
    stream: tuple[int, str]
    audience: Audience
    first_seq: int
    seq_step: int
    count: int
    max_secs: float
    rate: float
    offset_secs: float

    def seqs(self, count: int | None = None) -> list[int]:
        return [
            self.first_seq + k * self.seq_step
            for k in range(self.count if count is None else count)
        ]


def publisher_main(plan: SendPlan, pipe: Connection) -> None:
    """A publisher process, speaking rabbitmq.py's `Publishers` protocol: one
    notice to nobody (to connect and declare the queue), ("ready", 0.0), its
    start time (None: quit), then ("done", result) or ("error", text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    die_with_parent()
    try:
        send_event(plan.realm_id, {"type": "bench_warmup"}, [], config=plan.config)
        pipe.send(("ready", 0.0))
        start_at = pipe.recv()
        if start_at is None:
            return
        time.sleep(max(0.0, start_at - time.time()))
        durations = array("d")
        interval = 1.0 / plan.rate
        cpu0 = time.process_time()
        started = time.perf_counter()
        for seq in plan.seqs():
            now = time.perf_counter()
            if now - started >= plan.max_secs:
                break
            due = started + plan.offset_secs + len(durations) * interval
            if now < due:
                time.sleep(due - now)
            event, users, notify = notice_of(plan.audience, plan.realm_id, plan.stream, seq)
            before = time.perf_counter()
            send_event(plan.realm_id, event, users, config=plan.config, notify=notify)
            durations.append(time.perf_counter() - before)
        pipe.send(
            (
                "done",
                {
                    "sent": len(durations),
                    "elapsed_secs": time.perf_counter() - started,
                    "cpu_secs": time.process_time() - cpu0,
                    "durations": durations.tobytes(),
                },
            )
        )
    except Exception as exc:
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        close_for_thread()


class NoticePublishers(Publishers):
    """rabbitmq.py's `Publishers` (started, warmed up, released together)
    running `publisher_main` above."""

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


# -- what the worker sends: an SMTP server and a webhook receiver ------------------


@dataclass(frozen=True)
class Batch:
    """One email or webhook call: whose, which messages, when it arrived."""

    kind: str  # "email" or "push"
    user_id: int
    message_ids: tuple[int, ...]
    at: float  # time.time() when received


class Inbox:
    """What the SMTP server and the webhook receiver took, raw, with the time
    they took it; parsed later (`parse`), on the caller's thread, not on
    theirs. The raw lists, `bad_calls` and `deliveries` are guarded by
    `lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.emails: list[tuple[float, bytes]] = []
        self.calls: list[tuple[float, bytes]] = []
        self.bad_calls = 0  # webhook calls refused: bad signature, stale or replayed
        self.deliveries: set[str] = set()  # the delivery ids taken
        # Parsed so far (one caller at a time): the batches, the webhook's
        # "remove" calls, and how much of each raw list they cover.
        self.batches: list[Batch] = []
        self.removes = 0
        self._parsed = (0, 0)

    # aiosmtpd's hook, on its own thread's loop.
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.emails.append((time.time(), bytes(envelope.content)))
        return "250 OK: queued"

    def take_call(self, headers: Any, body: bytes) -> int:
        """A webhook call, checked as docs/notifications.md asks of a
        receiver (signature, replay): the status to answer."""
        at = time.time()
        timestamp = headers.get("X-Eventq-Timestamp", "")
        digest = hmac.new(
            WEBHOOK_SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        good = hmac.compare_digest(headers.get("X-Eventq-Signature", ""), "v1=" + digest)
        with self.lock:
            delivery = headers.get("X-Eventq-Delivery", "")
            stale = not timestamp.isdigit() or abs(at - int(timestamp)) > WEBHOOK_TOLERANCE_SECS
            if not good or stale or delivery in self.deliveries:
                self.bad_calls += 1
                return 401
            self.deliveries.add(delivery)
            self.calls.append((at, body))
        return 200

    def parse(self) -> list[Batch]:
        """The batches received since the last call (also added to `batches`)."""
        with self.lock:
            emails = self.emails[self._parsed[0] :]
            calls = self.calls[self._parsed[1] :]
            self._parsed = (len(self.emails), len(self.calls))
        new: list[Batch] = []
        for at, raw in emails:
            mail = email.message_from_bytes(raw, policy=email.policy.default)
            # <eventq-email-<user>-<first>-<last>-<count>@host>: worker.py's batch id.
            user_id = int(str(mail["Message-ID"]).split("-")[2])
            plain = mail.get_body(("plain",))
            text = "" if plain is None else str(plain.get_content())
            ids = tuple(int(found) for found in NEAR.findall(text))
            new.append(Batch("email", user_id, ids, at))
        for at, body in calls:
            data = orjson.loads(body)
            if data["type"] != "notification":
                self.removes += 1
                continue
            ids = tuple(int(message["id"]) for message in data["messages"])
            new.append(Batch("push", int(data["user_id"]), ids, at))
        self.batches += new
        return new


class Receivers:
    """The SMTP server (aiosmtpd's threaded controller) and the webhook
    receiver (http.server in a thread), on loopback."""

    def __init__(self, inbox: Inbox):
        self.inbox = inbox
        self.smtp = Controller(inbox, hostname="127.0.0.1", port=free_port())

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = inbox.take_call(self.headers, body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.started = False

    @property
    def smtp_url(self) -> str:
        return f"smtp://127.0.0.1:{self.smtp.port}"

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/eventq-hook"

    def start(self) -> None:
        self.smtp.start()
        self._thread.start()
        self.started = True

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.smtp.stop()
            self.http.shutdown()
        self.http.server_close()


class WorkerProcess:
    """`python -m server notifications run`, its output in `log_path`."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server", "notifications", "run"],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches us; we stop it
                preexec_fn=die_with_parent,  # noqa: PLW1509 (no threads yet)
            )
        deadline = time.monotonic() + timeout
        while CONSUMING not in self.log_path.read_text(errors="replace"):
            self.check()
            if time.monotonic() > deadline:
                raise BenchError(f"the worker did not consume within {timeout:.0f} s")
            time.sleep(0.05)

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            lines = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise BenchError(
                f"the worker exited with status {self.proc.returncode}; its log ends:\n"
                + "\n".join("    " + line for line in lines)
            )

    def cpu_secs(self) -> float:
        self.check()
        assert self.proc is not None
        return process_cpu_secs(self.proc.pid)

    def status(self) -> dict[str, Any]:
        """`eventq notifications status`, as an operator runs it."""
        done = subprocess.run(
            [sys.executable, "-m", "server", "notifications", "status"],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"notifications status exited {done.returncode}: {done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def warnings(self) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            log("the worker did not stop within 30 s of SIGTERM; killing it")
            proc.kill()
            proc.wait(10)


# -- the run -------------------------------------------------------------------------


class Run:
    """The world of one run and its rounds."""

    def __init__(self, args: argparse.Namespace, database: Database, vhost: Vhost, workdir: Path):
        self.args = args
        self.database = database
        self.vhost = vhost
        self.workdir = workdir
        self.inbox = Inbox()
        self.receivers = Receivers(self.inbox)
        self.servers: dict[str, ServerProcess] = {}
        self.readers: dict[str, Readers] = {}
        self.worker: WorkerProcess | None = None
        self.audience = Audience((), (), (), 2)
        self.stream = (0, "")
        self.seq = 0  # the last message id used
        self.broker = broker_pid()
        # Every notification the server is to enqueue: (user, message).
        self.expected: set[tuple[int, int]] = set()
        self.users: list[User] = []
        # What the worker sent, by kind ("email", "push"): (user, message) -> times.
        self.sent: dict[str, collections.Counter[tuple[int, int]]] = {
            "email": collections.Counter(),
            "push": collections.Counter(),
        }

    def build(self, users: list[User]) -> dict[str, int]:
        """The realm around `users` (register.py's `populate_domain`), who is
        away, the channel of the notices and the first free message id."""
        args = self.args
        self.users = users
        rows = populate_domain(
            self.database, users, args.streams, args.subs_per_user, args.messages
        )
        self.audience = Audience.of(users, args.away, args.recipients)
        with psycopg.connect(self.database.url) as conn:
            row = conn.execute("SELECT id, name FROM streams ORDER BY id LIMIT 1").fetchone()
            top = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()
        assert row is not None
        assert top is not None
        self.stream = (int(row[0]), str(row[1]))
        self.seq = int(top[0])
        return rows

    def server(self, mode: str) -> ServerProcess:
        directory = self.workdir / mode
        directory.mkdir()
        env = eventq_env(directory) | {
            "EVENTQ_AMQP_URL": self.vhost.url,
            "EVENTQ_NOTIFY_QUEUE": f"notify_tornado_{mode}",
            "EVENTQ_NOTIFICATIONS": "1" if mode == "on" else "0",
            # The clients all authenticate at once: with the default 60 s they
            # would all be checked again in the middle of a round (rabbitmq.py's
            # README section "Re-authentication herd").
            "EVENTQ_AUTH_CACHE_SECS": "3600",
        }
        server = ServerProcess(self.database.url, directory, SECRET, env, name=f"server-{mode}")
        self.servers[mode] = server
        return server

    def start_worker(self) -> WorkerProcess:
        directory = self.workdir / "worker"
        directory.mkdir()
        env = dict(self.servers["on"].env)
        env.update(
            {
                "EVENTQ_STATE_DIR": str(directory / "state"),
                # Production's level: a line per batch sent.
                "EVENTQ_LOG_LEVEL": "INFO",
                "EVENTQ_SMTP_URL": self.receivers.smtp_url,
                "EVENTQ_NOTIFICATION_DELAY_SECS": f"{self.args.window:g}",
                "EVENTQ_NOTIFICATION_WEBHOOK_URL": self.receivers.webhook_url,
                "EVENTQ_NOTIFICATION_WEBHOOK_SECRET": WEBHOOK_SECRET,
                "EVENTQ_SITE_URL": "http://127.0.0.1:9800",
            }
        )
        self.worker = WorkerProcess(env, directory / "worker.log")
        self.worker.start()
        return self.worker

    async def consuming(self, readers: Readers) -> None:
        deadline = time.monotonic() + 30
        while not (await readers.stats())["consumer"]["consuming"]:
            if time.monotonic() > deadline:
                raise BenchError("a server is not consuming its notify queue after 30 s")
            await asyncio.sleep(0.05)

    async def measure(self, results: dict[str, Any]) -> None:
        """Servers, receivers, worker and clients, then the rounds; every
        figure into `results`."""
        args = self.args
        present = set(self.audience.present_ids())
        users = [user for user in self.users if user.user_id in present]
        for mode in MODES:
            server = self.server(mode)
            log(f"server, notifications {mode}: starting on port {server.port}")
            server.start()
            self.readers[mode] = Readers(args, ServerGroup([server]), users, self.database.realm_id)
        self.receivers.start()
        self.start_worker()
        worker = self.worker
        assert worker is not None
        worker_cpu0 = worker.cpu_secs()
        for mode, readers in self.readers.items():
            await self.consuming(readers)
            log(f"notifications {mode}: {len(users):,} clients register and park")
            await readers.grow_to(len(users))
        # In `results` as they come: a run that fails midway reports them.
        rounds: dict[str, list[dict[str, Any]]] = results.setdefault("rounds", {})
        warmups: dict[str, dict[str, Any]] = results.setdefault("warmup", {})
        if args.warmup > 0:
            for mode in MODES:
                log(f"warm-up, notifications {mode}: {args.rate:g} notices/s for {args.warmup:g} s")
                warmups[mode] = await self.round(mode, args.warmup)
        for number in range(1, args.rounds + 1):
            for mode in MODES:
                log(
                    f"round {number} of {args.rounds}, notifications {mode}:"
                    f" {args.rate:g} notices/s for {args.duration:g} s"
                )
                rounds.setdefault(mode, []).append(await self.round(mode, args.duration))
        results["modes"] = {mode: summary(each) for mode, each in rounds.items()}
        results["clients"] = {mode: readers.problems() for mode, readers in self.readers.items()}
        results["server_notifier"] = (await self.readers["on"].stats()).get("notifications")
        results["server_off_notifier"] = (await self.readers["off"].stats()).get("notifications")
        results["worker"] = self.worker_figures(worker.cpu_secs() - worker_cpu0, worker.status())
        results["worker_warnings"] = worker.warnings()[-20:]
        results["server_warnings"] = {m: s.warnings()[-20:] for m, s in self.servers.items()}
        for readers in self.readers.values():
            readers.close_all()

    # -- one round -------------------------------------------------------------------

    def plans(self, mode: str, secs: float) -> list[SendPlan]:
        args = self.args
        publishers = args.publishers
        total = round(args.rate * secs)
        config = ProducerConfig(
            amqp_url=self.vhost.url,
            notify_queue=f"notify_tornado_{mode}",
            database_url=self.database.url,
            # Two servers share the database: with the event log each would
            # deliver the other's events from it (its tail reader).
            event_log=False,
        )
        first = self.seq + 1
        self.seq += total + publishers
        return [
            SendPlan(
                config=config,
                realm_id=self.database.realm_id,
                stream=self.stream,
                audience=self.audience,
                first_seq=first + index,
                seq_step=publishers,
                count=math.ceil(total / publishers),
                max_secs=secs * 3,
                rate=args.rate / publishers,
                # Paced publishers take turns: one notice every 1/rate s in all.
                offset_secs=index / args.rate,
            )
            for index in range(publishers)
        ]

    def write_messages(self, seqs: Sequence[int]) -> None:
        """What the send action writes and the worker reads: each message,
        and its row for the user it mentions (unread, mentioned)."""
        audience, ids = self.audience, self.audience.user_ids
        with psycopg.connect(self.database.url) as conn, conn.cursor() as cur:
            with cur.copy(
                "COPY messages (id, realm_id, sender_id, stream_id, topic, content,"
                " rendered_content) FROM STDIN"
            ) as copy:
                for seq in seqs:
                    mentioned = audience.mentioned(seq)
                    content, rendered = mention_of(mentioned, ids[mentioned])
                    sender = ids[audience.targets(seq)[0]]
                    copy.write_row(
                        (
                            seq,
                            self.database.realm_id,
                            sender,
                            self.stream[0],
                            TOPIC,
                            content,
                            rendered,
                        )
                    )
            with cur.copy(
                "COPY user_messages (user_id, message_id, read, mentioned) FROM STDIN"
            ) as copy:
                for seq in seqs:
                    copy.write_row((ids[audience.mentioned(seq)], seq, False, True))

    async def round(self, mode: str, secs: float) -> dict[str, Any]:
        """Send for `secs` to the server of `mode`; once every client has read
        its events and the server is idle again, the round's figures; with
        notifications on, once the worker has also sent every batch of it."""
        readers, worker = self.readers[mode], self.worker
        assert worker is not None
        for client in readers.clients:
            client.seqs.clear()
        readers.reads = []
        plans = self.plans(mode, secs)
        self.write_messages([seq for plan in plans for seq in plan.seqs()])
        publishers = NoticePublishers(plans)
        try:
            await publishers.ready(readers.check)
            start_at = time.time() + 0.1  # every publisher has its start by then
            publishers.go(start_at)
            await asyncio.sleep(max(0.0, start_at - time.time()))
            cpu0 = self.cpu_now(readers, worker)
            limit = max(plan.max_secs for plan in plans) + 60
            results = await publishers.results(limit, readers.check)
        finally:
            publishers.close()
        sent = [
            seq
            for plan, result in zip(plans, results, strict=True)
            for seq in plan.seqs(result["sent"])
        ]
        expected = self.expected_reads(sent)
        want = sum(sum(counts.values()) for counts in expected.values())
        await until(lambda: len(readers.reads) >= want, 60, readers.check)
        # The server's CPU once it is idle again: its notifications published too.
        idle_cpu = await until_idle(readers)
        cpu = self.cpu_now(readers, worker) | {"server": idle_cpu}
        used = {
            name: round(value - start, 4)
            for name, start in cpu0.items()
            if start is not None and (value := cpu[name]) is not None
        }
        elapsed = used.pop("elapsed")
        used["publishers"] = round(sum(result["cpu_secs"] for result in results), 4)
        missing = extra = 0
        for client in readers.clients:
            wanted = expected[readers.user_for(client.index).user_id]
            found = collections.Counter(client.seqs)
            missing += sum((wanted - found).values())
            extra += sum((found - wanted).values())
        ids = self.audience.user_ids
        mentioned = [(ids[self.audience.mentioned(seq)], seq) for seq in sent]
        away_ids = self.audience.away
        away = {pair for pair in mentioned if pair[0] in away_ids}
        figures: dict[str, Any] = {
            "notices_planned": sum(plan.count for plan in plans),
            "notices": len(sent),
            "sending_secs": round(max(result["elapsed_secs"] for result in results), 3),
            "send_event_ms": spread([x for result in results for x in result["durations"]]),
            "reads_expected": want,
            "reads": len(readers.reads),
            "missing": missing,
            "extra": extra,
            "elapsed_secs": round(elapsed, 3),
            "cpu_secs": used,
            "server_cpu_us_per_event": (
                round(used["server"] / len(readers.reads) * 1e6, 2) if readers.reads else None
            ),
            "mentions_of_away_users": len(away),
            "mentions_of_present_users": len(mentioned) - len(away),
        }
        # (After the CPU reading: stats walk every queue, some milliseconds.)
        figures["loop_lag"] = (await readers.stats())["loop_lag"]
        if mode == "on":
            self.expected |= away
            figures["worker"] = await self.notified(away, worker)
        return figures

    def cpu_now(self, readers: Readers, worker: WorkerProcess) -> dict[str, float | None]:
        """CPU seconds so far of each process measured (and the clock)."""
        return {
            "elapsed": time.monotonic(),
            "server": readers.cpu_secs(),
            # Not CPU: the IO loop's time waiting for one (see `summary`).
            "server_loop_wait": loop_wait_secs(readers.server.pid),
            "broker": ticks_cpu_secs(self.broker),
            "postgres": postgres_cpu_secs(),
            "worker": worker.cpu_secs(),
            "generator": own_cpu_secs(),
        }

    def expected_reads(self, seqs: Sequence[int]) -> dict[int, collections.Counter[int]]:
        """What each present user's client is to read of notices `seqs`."""
        ids, away = self.audience.user_ids, self.audience.away
        expected: dict[int, collections.Counter[int]] = {
            user_id: collections.Counter() for user_id in self.audience.present_ids()
        }
        for seq in seqs:
            for index in self.audience.targets(seq):
                if ids[index] not in away:
                    expected[ids[index]][seq] += 1
        return expected

    def take_batches(self) -> None:
        """Count what arrived since the last call, by kind."""
        for batch in self.inbox.parse():
            self.sent[batch.kind].update((batch.user_id, m) for m in batch.message_ids)

    async def notified(self, wanted: set[tuple[int, int]], worker: WorkerProcess) -> dict[str, Any]:
        """Until the worker has sent every notification of `wanted` by email
        and by webhook (at most the window and a minute): how long that took
        after the round, and the worker's CPU meanwhile."""
        started, cpu0 = time.monotonic(), worker.cpu_secs()
        deadline = started + self.args.window + 60
        while True:
            await asyncio.to_thread(self.take_batches)
            done = all(wanted <= counts.keys() for counts in self.sent.values())
            if done or time.monotonic() > deadline:
                break
            worker.check()
            await asyncio.sleep(0.25)
        return {
            "all_sent": done,
            "secs_after_round": round(time.monotonic() - started, 2),
            "cpu_secs_meanwhile": round(worker.cpu_secs() - cpu0, 3),
        }

    # -- the worker's figures ----------------------------------------------------------

    def worker_figures(self, cpu_secs: float, status: dict[str, Any]) -> dict[str, Any]:
        """Every batch's lateness (against the server's enqueue time of its
        first notification, from the worker's table), what was sent or not."""
        self.take_batches()
        with psycopg.connect(self.database.url) as conn:
            rows = conn.execute(
                "SELECT user_id, message_id, extract(epoch FROM enqueued_at)::float8, via"
                " FROM notifications"
            ).fetchall()
        enqueued = {(int(user), int(message)): float(at) for user, message, at, _ in rows}
        figures: dict[str, Any] = {
            "cpu_secs": round(cpu_secs, 3),
            "status": status,
            "expected": len(self.expected),
            "recorded_via": dict(collections.Counter(str(row[3]) for row in rows)),
            "removes": self.inbox.removes,
            "bad_webhook_calls": self.inbox.bad_calls,
        }
        for kind, window in (("email", self.args.window), ("push", PUSH_WINDOW_SECS)):
            batches = [batch for batch in self.inbox.batches if batch.kind == kind]
            late: list[float] = []
            for batch in batches:
                firsts = [enqueued.get((batch.user_id, m)) for m in batch.message_ids]
                known = [at for at in firsts if at is not None]
                if known:
                    late.append(batch.at - min(known) - window)
            ordered = sorted(late)
            sent = self.sent[kind]
            figures[kind] = {
                "batches": len(batches),
                "notifications": sum(sent.values()),
                "window_secs": window,
                "late_secs": (
                    {
                        "p50": round(percentile(ordered, 0.5), 3),
                        "p99": round(percentile(ordered, 0.99), 3),
                        "max": round(ordered[-1], 3),
                    }
                    if ordered
                    else None
                ),
                # Batches with a message the worker's table does not hold.
                "unknown_batches": len(batches) - len(late),
                "missing": len(self.expected - sent.keys()),
                "repeated": sum(1 for n in sent.values() if n > 1),
                "unexpected": len(sent.keys() - self.expected),
            }
        total = figures["email"]["notifications"] + figures["push"]["notifications"]
        figures["cpu_us_per_notification_sent"] = (
            round(cpu_secs / total * 1e6, 1) if total else None
        )
        return figures


def summary(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds, pooled."""
    reads = sum(each["reads"] for each in rounds)
    elapsed = sum(each["elapsed_secs"] for each in rounds)
    cpu: dict[str, float] = collections.defaultdict(float)
    for each in rounds:
        for name, used in each["cpu_secs"].items():
            cpu[name] += used
    return {
        "rounds": len(rounds),
        "notices": sum(each["notices"] for each in rounds),
        "notices_per_sec": round(
            sum(each["notices"] for each in rounds) / sum(each["sending_secs"] for each in rounds),
            1,
        ),
        "reads": reads,
        "reads_expected": sum(each["reads_expected"] for each in rounds),
        "missing": sum(each["missing"] for each in rounds),
        "extra": sum(each["extra"] for each in rounds),
        "server_cpu_secs": round(cpu["server"], 3),
        "server_cpu_us_per_event": round(cpu["server"] / reads * 1e6, 2) if reads else None,
        # Of one core, from the publishers' release until the server was idle.
        "cpu_shares": {
            name: round(used / elapsed, 3)
            for name, used in cpu.items()
            if name != "server_loop_wait"
        },
        "mentions_of_away_users": sum(each["mentions_of_away_users"] for each in rounds),
        "mentions_of_present_users": sum(each["mentions_of_present_users"] for each in rounds),
        # The server's IO-loop lag over its last minute, at the end of each round: the worst.
        "loop_lag_p99_ms": max(each["loop_lag"]["p99_ms"] for each in rounds),
        # How long the IO loop's thread waited, runnable, while other
        # processes or threads had the CPUs, per second of the rounds: lag
        # that follows it is the machine's, not the server's work.
        "loop_wait_ms_per_sec": (
            round(cpu["server_loop_wait"] / elapsed * 1000, 1)
            if "server_loop_wait" in cpu and elapsed
            else None
        ),
    }


# -- the report ---------------------------------------------------------------------


def figures_of(results: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures, flat."""
    modes = results.get("modes") or {}
    on, off = modes.get("on") or {}, modes.get("off") or {}
    worker = results.get("worker") or {}
    a, b = on.get("server_cpu_us_per_event"), off.get("server_cpu_us_per_event")
    late = [(worker.get(kind) or {}).get("late_secs") or {} for kind in ("email", "push")]
    return {
        "server_cpu_us_per_event_on": a,
        "server_cpu_us_per_event_off": b,
        "server_cpu_ratio": round(a / b, 4) if a is not None and b else None,
        "email_late_p99_secs": late[0].get("p99"),
        "email_late_max_secs": late[0].get("max"),
        "webhook_late_p99_secs": late[1].get("p99"),
        "webhook_late_max_secs": late[1].get("max"),
        "emails": (worker.get("email") or {}).get("batches"),
        "webhook_calls": (worker.get("push") or {}).get("batches"),
        "worker_cpu_secs": worker.get("cpu_secs"),
    }


def checks_of(results: dict[str, Any]) -> list[str]:
    """What went wrong: empty when every event and notification arrived once."""
    problems: list[str] = []
    for mode, phase in (results.get("modes") or {}).items():
        if phase["missing"] or phase["extra"] or phase["reads"] != phase["reads_expected"]:
            problems.append(
                f"notifications {mode}: {phase['reads']} of {phase['reads_expected']} reads,"
                f" {phase['missing']} missing, {phase['extra']} extra"
            )
    for mode, found in (results.get("clients") or {}).items():
        bad = {key: value for key, value in found.items() if value and key != "last_error"}
        if bad:
            problems.append(f"clients, notifications {mode}: {bad} ({found.get('last_error')!r})")
    labelled = [
        ("warm-up", mode, figures) for mode, figures in (results.get("warmup") or {}).items()
    ] + [
        (f"round {number}", mode, figures)
        for mode, each in (results.get("rounds") or {}).items()
        for number, figures in enumerate(each, 1)
    ]
    for label, mode, figures in labelled:
        if figures["notices"] != figures["notices_planned"]:
            problems.append(
                f"{label}, notifications {mode}: {figures['notices']} of"
                f" {figures['notices_planned']} notices sent"
            )
        if mode == "on" and not figures["worker"]["all_sent"]:
            problems.append(f"{label}: the worker had not sent every notification in time")
    notifier = results.get("server_notifier")
    worker = results.get("worker")
    if "modes" in results:
        if results.get("server_off_notifier") is not None:
            problems.append("the server with EVENTQ_NOTIFICATIONS=0 has a notifier")
        if notifier is None:
            problems.append("the server with notifications on has no notifier")
        elif worker is not None:
            wanted = {
                "enqueued": {"delivery": worker["expected"], "gc": 0},
                "published": worker["expected"],
                "pending": 0,
                "dropped": 0,
                "publish_failures": 0,
            }
            # Its own counters; beside them, the workers' figures as it last
            # read them (`worker`, `queue`), which may be a read old.
            own = {key: notifier.get(key) for key in wanted}
            if own != wanted:
                problems.append(f"the server's notifier: {own}, expected {wanted}")
    if worker is not None:
        for kind in ("email", "push"):
            sent = worker[kind]
            bad = {
                key: sent[key] for key in ("missing", "repeated", "unexpected", "unknown_batches")
            }
            if any(bad.values()):
                problems.append(f"{kind} notifications: {bad}")
        if worker["bad_webhook_calls"]:
            problems.append(f"{worker['bad_webhook_calls']} webhook calls failed their check")
        counters = worker["status"]["counters"]
        expected = worker["expected"]
        wanted = {"recorded": expected, "email_sent": expected, "push_sent": expected}
        found = {key: counters.get(key) for key in wanted}
        if found != wanted or worker["status"]["pending"] != {"email": 0, "push": 0}:
            problems.append(
                f"notifications status: {found} and pending {worker['status']['pending']},"
                f" expected {wanted} and none pending"
            )
    return problems


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(results: dict[str, Any]) -> str:
    out = io.StringIO()
    config = results["config"]
    out.write(f"server code: {config['source']}\n")
    if results.get("rows"):
        out.write("realm: " + ", ".join(f"{n:,} {table}" for table, n in results["rows"].items()))
        out.write("\n")
    present = config["users"] - config["away"]
    out.write(
        f"{config['users']:,} users, {config['away']:,} away (no queue); the other {present:,}"
        f" with a long-poll parked on each of the two servers ({2 * present:,} connections"
        f" held by this process)\n"
    )
    modes = results.get("modes") or {}
    if set(modes) == set(MODES):
        on, off = modes["on"], modes["off"]
        out.write(
            f"\n{config['rate']:g} notices/s (send_event through RabbitMQ, {config['publishers']}"
            f" publisher processes), each to {config['recipients']} users, mentioning one;"
            f" {config['rounds']} rounds of {config['duration']:g} s for each server, taking"
            " turns\n"
        )

        def row(label: str, a: float | None, b: float | None, digits: int = 2) -> tuple[str, ...]:
            ratio = f"{a / b:.3f}x" if a is not None and b else ""
            return (label, _num(a, digits), _num(b, digits), ratio)

        rows = [
            row(
                "server CPU per delivered event (us)",
                on["server_cpu_us_per_event"],
                off["server_cpu_us_per_event"],
            ),
            row("server CPU (s)", on["server_cpu_secs"], off["server_cpu_secs"], 3),
            row("notices/s sent", on["notices_per_sec"], off["notices_per_sec"], 1),
            row("events read", on["reads"], off["reads"], 0),
            row(
                "mentions of away users",
                on["mentions_of_away_users"],
                off["mentions_of_away_users"],
                0,
            ),
        ]
        rows.append(
            row(
                "server IO-loop lag p99, worst round (ms)",
                on["loop_lag_p99_ms"],
                off["loop_lag_p99_ms"],
            )
        )
        rows.append(
            row(
                "server IO loop's wait for a CPU (ms per s)",
                on["loop_wait_ms_per_sec"],
                off["loop_wait_ms_per_sec"],
                1,
            )
        )
        for name in ("server", "broker", "postgres", "worker", "publishers", "generator"):
            rows.append(
                row(
                    f"CPU, {name} (share of a core)",
                    on["cpu_shares"].get(name),
                    off["cpu_shares"].get(name),
                    3,
                )
            )
        out.write(_table(("", "notifications on", "off", "on/off"), rows))
        ratio = results["figures"]["server_cpu_ratio"]
        if ratio is not None:
            verdict = "met" if ratio <= CPU_BAR else "MISSED"
            out.write(
                f"bar: server CPU per delivered event, on/off {ratio:.3f} <= {CPU_BAR:g}:"
                f" {verdict}\n"
            )
    worker = results.get("worker")
    if worker is not None:
        out.write(
            f"\nthe worker (EVENTQ_NOTIFICATION_DELAY_SECS={config['window']:g}): lateness of a"
            " batch = received - the server's enqueue time of its first notification - its"
            " window (s)\n"
        )
        rows = []
        worst: list[float] = []
        for kind, label in (("email", "emails"), ("push", "webhook calls")):
            sent = worker[kind]
            late = sent["late_secs"] or {}
            if late:
                worst.append(late["max"])
            rows.append(
                (
                    label,
                    f"{sent['batches']:,}",
                    f"{sent['notifications']:,}",
                    f"{sent['window_secs']:g}",
                    _num(late.get("p50"), 3),
                    _num(late.get("p99"), 3),
                    _num(late.get("max"), 3),
                )
            )
        out.write(_table(("", "batches", "notifications", "window", "p50", "p99", "max"), rows))
        out.write(
            f"worker CPU: {worker['cpu_secs']:.2f} s over the run (its idle ticks included),"
            f" {_num(worker['cpu_us_per_notification_sent'], 1)} us per notification sent;"
            f" {worker['removes']} remove calls; notifications expected: {worker['expected']:,}\n"
        )
        if worst:
            verdict = "met" if max(worst) <= LATENESS_BAR_SECS else "MISSED"
            out.write(
                f"bar: every batch within its window + {LATENESS_BAR_SECS:g} s: worst"
                f" {max(worst):.3f} s: {verdict}\n"
            )
        out.write("eventq notifications status: " + json.dumps(worker["status"]) + "\n")
    if results.get("server_notifier") is not None:
        out.write(f"server's notifier: {json.dumps(results['server_notifier'])}\n")
    for line in results.get("worker_warnings") or []:
        out.write(f"worker: {line}\n")
    for mode, lines in (results.get("server_warnings") or {}).items():
        for line in lines:
            out.write(f"server {mode}: {line}\n")
    problems = results.get("problems") or []
    if problems:
        out.write("\nCHECKS FAILED:\n  " + "\n  ".join(problems) + "\n")
    elif not results.get("completed"):
        out.write("\nthe run did not complete: nothing above failed its checks\n")
    else:
        out.write("\nchecks passed\n")
    return out.getvalue()


# -- main --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10_000, help="users of the realm")
    parser.add_argument("--away", type=int, default=1000, help="users without a queue")
    parser.add_argument("--recipients", type=int, default=50, help="users per notice")
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--subs-per-user", type=int, default=5)
    parser.add_argument("--messages", type=int, default=1000, help="stream messages in the realm")
    parser.add_argument("--rate", type=float, default=200.0, help="notices/s")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each server, taking turns")
    parser.add_argument("--warmup", type=float, default=5.0, help="uncounted seconds on each first")
    parser.add_argument(
        "--window", type=float, default=10.0, help="EVENTQ_NOTIFICATION_DELAY_SECS of the worker"
    )
    parser.add_argument("--publishers", type=int, default=4, help="publisher processes")
    parser.add_argument(
        "--amqp-base",
        default=DEFAULT_AMQP_BASE,
        help="RabbitMQ URL without vhost (rabbitmqctl must manage that broker)",
    )
    parser.add_argument("--batch", type=int, default=500, help="connections opened at once")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    parser.add_argument("--keep-db", action="store_true", help="keep the database, vhost and logs")
    args = parse_with_quick(parser, argv, QUICK)
    if not 0 <= args.away < args.users:
        parser.error("need 0 <= --away < --users")
    if not 2 <= args.recipients <= args.users:
        parser.error("need 2 <= --recipients <= --users (a sender and someone mentioned)")
    if min(args.rate, args.duration, args.window) <= 0 or args.warmup < 0:
        parser.error("--rate, --duration and --window must be positive")
    if min(args.rounds, args.publishers) < 1:
        parser.error("--rounds and --publishers must be positive")
    args.clients_per_user = 1  # fanout.py's clients: client i is (present) user i
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    # Every present user's client on each server, and the rest of this process.
    present = args.users - args.away
    fd_limit = raise_fd_limit()
    if 2 * present + 300 > fd_limit:
        log(
            f"FAILED: {2 * present:,} connections (the {present:,} present users' clients on each"
            f" of two servers) do not fit this process's file limit, {fd_limit:,}: raise --away"
            " or lower --users"
        )
        return 2
    database = Database(os.environ.get("EVENTQ_DATABASE_URL") or "host=127.0.0.1 user=postgres")
    vhost = Vhost(args.amqp_base)
    workdir = Path(tempfile.mkdtemp(prefix="eventq-notify-bench-"))
    run = Run(args, database, vhost, workdir)
    results: dict[str, Any] = {
        "config": {key: getattr(args, key) for key in (*QUICK, "quick")}
        | {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "source": source_state(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "database": database.name,
            "vhost": vhost.name,
            "workdir": str(workdir),
            "parked_per_server": present,
        },
    }
    status = 1
    try:
        log(f"vhost {vhost.name}: creating")
        vhost.create()
        log(f"database {database.name}: creating, migrating, {args.users:,} users and their realm")
        database.create()
        results["rows"] = run.build(database.populate(args.users))
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run.measure(results))
        status = 0
    except BenchError as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        for readers in run.readers.values():
            readers.close_all()
        if run.worker is not None:
            run.worker.stop()
        for server in run.servers.values():
            server.stop()
        run.receivers.stop()
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
