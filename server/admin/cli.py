"""The `eventq` command: serve, and the operator's tasks around it.

Account commands print JSON on stdout (scripts rely on it); errors go to
stderr with exit status 1 (bad input) or 2 (usage).

This module builds the parser, runs `serve`, and turns the commands' errors
into messages and exit statuses; each command group is a module of its own
(db_commands.py, realm_commands.py, user_commands.py, event_commands.py,
analytics_commands.py, log_commands.py, notification_commands.py, sharding_commands.py,
demo_commands.py), which adds its subparsers and holds their handlers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import resource
import signal
import sys
from collections.abc import Sequence

import psycopg

from generation import accounts, sharding
from generation.actions.base import ActionError
from generation.config import SecretInvalid
from generation.errors import BadNotice
from generation.send import PublishError
from queues import compiled
from server.admin.analytics_commands import add_analytics_command
from server.admin.db_commands import add_db_commands
from server.admin.demo_commands import add_demo_command
from server.admin.event_commands import add_send_event_command
from server.admin.log_commands import add_log_commands
from server.admin.notification_commands import add_notification_commands
from server.admin.realm_commands import add_realm_commands
from server.admin.sharding_commands import add_sharding_commands
from server.admin.user_commands import add_user_commands
from server.config import DEMO_REALM, ConfigError, Settings, retired_advice
from server.database import background
from server.database.migrate import MigrationError
from server.observability.logwriter import logs_off_the_loop

log = logging.getLogger("eventq")


def _setup_logging() -> None:
    level = os.environ.get("EVENTQ_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if level != "DEBUG":
        # pika logs each step of every connection at INFO (a dozen lines per
        # `eventq send-event`); the consumer and the publisher log what an
        # operator acts on (connected, lost, reconnecting) themselves.
        logging.getLogger("pika").setLevel(logging.WARNING)


def _raise_fd_limit() -> None:
    """Each parked client holds a socket: allow as many as the system permits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    log.info("file descriptor limit %d (about that many clients)", soft)


async def _serve(settings: Settings, port: int | None, host: str | None) -> int:
    from server.app import EventServer, StartupError  # noqa: PLC0415 (tornado only when serving)

    # Collect young objects less often than the default (700): a parked
    # client holds about 100 tracked objects, so a fan-out's responses and
    # re-polls triggered thousands of collections and full sweeps of the
    # whole heap (tests/benchmarks/fanout.py, 1,000 clients, at 100,000:
    # 17.5k -> 21.8k events/s, 57 -> 46 us of CPU per event). Not much less
    # often: each collection stops the IO loop for as long as it takes, and
    # at 100,000 the send->delivery p99 of tests/benchmarks/stream_costs.py
    # was 67-72 ms with the event log off, 5.6-7.0 ms at 10,000 (log on:
    # 15-18 against 10-13 ms), with fanout.py's figures within their noise.
    # 5,000 rather than 10,000: a young collection while a resume parses its
    # rows (every object young and alive) stopped the loop for 4.2-4.7 ms at
    # 10,000, with the server alone on its core (tests/benchmarks/resume.py).
    # Measured at 5,000 (with queued events one tracked object each):
    # fanout.py's CPU per event 34-43 us against 40-53 us before, its
    # loop-lag p99 14-18 against 34-45 ms; stream_costs.py's send->delivery
    # p99 7.5 ms with the log on, 4.9 ms off.
    gc.set_threshold(5_000, 50, 100)
    # Hand the GIL over after 1 ms rather than CPython's 5 ms. The server's
    # threads (the delivery log's writer, the log writer, the checkpoint's
    # and journal's file writes) run Python; when the IO loop's thread wakes
    # from epoll while one of them holds the GIL, it waits out the whole
    # interval before it may ask for it back: a wait that is neither
    # run-queue time nor the loop's own work, and at 5 ms as long as
    # tests/benchmarks/resume.py's whole bar for a stop of the loop.
    sys.setswitchinterval(0.001)
    for name in settings.ignored:
        log.warning("%s is set but no longer used: %s", name, retired_advice(name))
    if settings.demo:
        log.warning(
            "EVENTQ_DEMO=1: the demo page is on, and anyone who reaches this server can log"
            " in as the users of the realm %r without a key; never on a public server",
            DEMO_REALM,
        )
    server = EventServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await server.start(port, host)
    except StartupError as exc:
        await server.db.close()
        print(f"eventq: cannot start: {exc}", file=sys.stderr)
        return 1
    # What startup built (modules, restored queues) stays: keep it out of
    # every future collection.
    gc.freeze()
    await stop.wait()
    await server.stop()
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    if settings.sharding is not None and not settings.shard:
        print(
            f"eventq: EVENTQ_SHARDING is set: EVENTQ_SHARD must name the shard this process"
            f" serves (one of {', '.join(settings.sharding.shards)})",
            file=sys.stderr,
        )
        return 2
    if settings.sharding is not None and args.port is not None and args.port != settings.port:
        print(
            f"eventq: --port {args.port} disagrees with {settings.sharding.source}, where shard"
            f" {settings.shard!r} listens on port {settings.port}; leave --port out",
            file=sys.stderr,
        )
        return 2
    _raise_fd_limit()
    loop_factory = None
    if settings.event_loop == "uvloop":
        import uvloop  # noqa: PLC0415 (only when serving)

        loop_factory = uvloop.new_event_loop
    log.info("event loop: %s; delivery path: %s", settings.event_loop, compiled.describe())
    with logs_off_the_loop(), asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_serve(settings, args.port, args.host))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eventq",
        description="Real-time event delivery server (Zulip-compatible events API).",
        epilog="Configuration comes from EVENTQ_* environment variables: docs/configuration.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the server until SIGTERM or SIGINT")
    serve.add_argument("--port", type=int, help="TCP port (default: EVENTQ_PORT or 9800)")
    serve.add_argument("--host", help="address to bind (default: EVENTQ_HOST or 127.0.0.1)")
    serve.set_defaults(func=cmd_serve)

    # In the order of `eventq --help`.
    add_db_commands(sub)
    add_realm_commands(sub)
    add_user_commands(sub)
    add_send_event_command(sub)
    add_notification_commands(sub)
    add_analytics_command(sub)
    add_log_commands(sub)
    add_sharding_commands(sub)
    add_demo_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _setup_logging()
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        return int(args.func(settings, args))
    except (ConfigError, SecretInvalid, background.ModuleError) as exc:
        print(f"eventq: configuration error: {exc}", file=sys.stderr)
        return 2
    except (
        accounts.AccountError,
        MigrationError,
        BadNotice,
        PublishError,
        sharding.ShardingError,
    ) as exc:
        print(f"eventq: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the log commands' files
        print(f"eventq: {exc}", file=sys.stderr)
        return 1
    except ActionError as exc:
        print(f"eventq: {exc.msg}", file=sys.stderr)
        return 1
    except psycopg.OperationalError as exc:
        print(
            f"eventq: cannot reach the database ({exc}); check EVENTQ_DATABASE_URL",
            file=sys.stderr,
        )
        return 1
