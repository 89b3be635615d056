"""The `eventq` command: serve, and the operator's tasks around it.

Account commands print JSON on stdout (scripts rely on it); errors go to
stderr with exit status 1 (bad input) or 2 (usage).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import importlib.util
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from generation import accounts, sharding
from generation.actions import realm as realm_actions
from generation.actions import streams as stream_actions
from generation.actions import users as user_actions
from generation.actions.base import ActionContext, ActionError, EventSink
from generation.config import ProducerConfig, SecretInvalid
from generation.errors import BadNotice
from generation.events.users import credentials_changed
from generation.notice import Notice, encode_notice
from generation.send import (
    PublishError,
    publish_notice,
    send_event,
    send_event_on_commit,
    transaction,
)
from server.config import ConfigError, Settings, retired_advice
from server.database import background
from server.database.background_runner import make_runner
from server.database.migrate import MigrationError, migrate
from server.database.updates import standard_updates

log = logging.getLogger("eventq")

T = TypeVar("T")

DEMO_REALM = "demo"
DEMO_USERS = (
    ("iago@demo.example.com", "Iago", "administrator"),
    ("hamlet@demo.example.com", "King Hamlet", "member"),
    ("othello@demo.example.com", "Othello, the Moor of Venice", "member"),
    ("polonius@demo.example.com", "Polonius", "guest"),
)


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


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


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
    gc.set_threshold(10_000, 50, 100)
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
    log.info("event loop: %s", settings.event_loop)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_serve(settings, args.port, args.host))


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    applied = migrate(settings.database_url)
    _print_json({"applied": applied})
    return 0


def _connect(settings: Settings) -> psycopg.Connection[Any]:
    return psycopg.connect(settings.database_url)


def _background_table(settings: Settings) -> psycopg.Connection[Any]:
    conn = psycopg.connect(settings.database_url, autocommit=True)
    found = conn.execute(
        """
        SELECT to_regclass('background_updates') IS NOT NULL, EXISTS (
          SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
            AND table_name = 'background_updates' AND column_name = 'retry_at')
        """
    ).fetchone()
    if not found or not found[0]:
        conn.close()
        raise MigrationError("no background_updates table: run `eventq db migrate` first")
    if not found[1]:
        conn.close()
        raise MigrationError("background_updates predates migration 0011: run `eventq db migrate`")
    return conn


def _duration(secs: float | None) -> str:
    if secs is None:
        return "-"
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.1f} h"


def _known_updates(
    settings: Settings, secret: bytes = b"listing only"
) -> list[background.BackgroundUpdate]:
    """The updates this version (and the configured modules) can run."""
    extra = background.load_modules(settings.modules, background.Controller())
    return [*standard_updates(settings, secret), *extra]


def cmd_background_status(settings: Settings, args: argparse.Namespace) -> int:
    known = _known_updates(settings)
    with _background_table(settings) as conn:
        statuses = background.read_status_sync(conn, known)
        holder = background.runner_sync(conn)
    if args.json:
        _print_json({"runner": holder, "updates": [status.to_dict() for status in statuses]})
        return 0
    print(f"runner: {holder or 'none working now'}")
    rows = [("update", "state", "done", "left", "items/s", "batch", "time left", "progress")]
    for st in statuses:
        rows.append(
            (
                st.name,
                st.state,
                str(st.items_done),
                "-" if st.items_left is None else str(st.items_left),
                "-" if st.items_per_sec is None else f"{st.items_per_sec:.0f}",
                "-" if st.batch_size is None else str(st.batch_size),
                _duration(st.seconds_left),
                json.dumps(st.progress, separators=(",", ":")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        print("  ".join(cells), row[-1])
    for st in statuses:
        if st.last_error:
            retry = "" if st.retry_in is None else f"; next try in {_duration(st.retry_in)}"
            print(f"{st.name}: {st.failures} failures in a row{retry}; last: {st.last_error}")
    return 0


def _left_over(statuses: Sequence[background.UpdateStatus]) -> list[str]:
    """A line per update not done, saying why, for `run --until-done`. Not
    those this process's settings turn off (retention with pruning off):
    they are the servers' to run, on their own schedule."""
    why = {
        "unknown": "enqueued by a newer version; run that version's runner",
        "pending": "not started",
    }
    lines = []
    for st in statuses:
        if st.state in ("done", "disabled here"):
            continue
        if st.kind == "failing":
            retry = "" if st.retry_in is None else f", next try in {_duration(st.retry_in)}"
            detail = f"{st.failures} failures in a row{retry}; last: {st.last_error}"
        elif st.kind == "running":
            detail = f"{st.items_done} items done" + (
                "" if st.items_left is None else f", {st.items_left} left"
            )
        else:
            detail = why.get(st.kind, "")
        lines.append(f"  {st.name}: {st.state}" + (f" ({detail})" if detail else ""))
    return lines


def cmd_background_enqueue(settings: Settings, args: argparse.Namespace) -> int:
    known = {update.name: update for update in _known_updates(settings)}
    if args.name not in known:
        print(
            f"eventq: no background update named {args.name!r}; this version knows"
            f" {', '.join(known)}",
            file=sys.stderr,
        )
        return 1
    with _background_table(settings) as conn:
        background.enqueue_sync(conn, args.name, known[args.name].depends_on)
    _print_json({"enqueued": args.name})
    return 0


def cmd_background_run(settings: Settings, args: argparse.Namespace) -> int:
    from generation.config import existing_api_key_secret  # noqa: PLC0415

    secret = existing_api_key_secret()
    if secret is None:
        # A new secret would wrap every legacy key hash with a key the
        # servers do not have: run with the installation's settings.
        print(
            "eventq: no API key secret here (EVENTQ_API_KEY_SECRET, or api_key_secret in"
            " EVENTQ_STATE_DIR): run with the servers' settings",
            file=sys.stderr,
        )
        return 2
    if args.wait_secs is not None and args.wait_secs < 0:
        print("eventq: --wait-secs must be 0 or more", file=sys.stderr)
        return 2
    _background_table(settings).close()
    runner = make_runner(
        settings,
        secret,
        application_name="eventq-background cli",
        watch_status=False,  # no /metrics here
        lock_wait_secs=args.wait_secs,
    )

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if runner.stopping:
            # The batch in progress is rolled back with the connection, as
            # after a SIGKILL; the next run resumes from the last one.
            log.warning("background updates: %s again: exiting now", name)
            logging.shutdown()
            os._exit(128 + signum)
        log.warning(
            "background updates: %s: stopping after the current batch (again to exit now)", name
        )
        runner.stop()

    async def run() -> bool:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        return await runner.run(until_idle=args.until_done)

    try:
        succeeded = asyncio.run(run())
    except background.RunnerBusy as exc:
        print(f"eventq: {exc}", file=sys.stderr)
        return 1
    if not succeeded:
        print("eventq: a background update failed (see the log above)", file=sys.stderr)
    if not args.until_done:
        return 0 if succeeded else 1
    with _background_table(settings) as conn:
        left = _left_over(background.read_status_sync(conn, list(runner.updates.values())))
    if left:
        print(f"eventq: {len(left)} background updates not done:", file=sys.stderr)
        print("\n".join(left), file=sys.stderr)
        return 1
    return 0 if succeeded else 1


def cmd_realm_create(settings: Settings, args: argparse.Namespace) -> int:
    with _connect(settings) as conn:
        realm_id = accounts.create_realm(conn, args.subdomain, args.name, args.description)
    _print_json({"realm_id": realm_id, "subdomain": args.subdomain, "name": args.name})
    return 0


def cmd_realm_active(settings: Settings, args: argparse.Namespace) -> int:
    with _connect(settings) as conn:
        accounts.set_realm_active(conn, args.subdomain, args.action == "reactivate")
    _print_json({"subdomain": args.subdomain, "active": args.action == "reactivate"})
    return 0


def _publishing_sink(config: ProducerConfig) -> EventSink:
    """Where the command line's actions send their events, already logged
    with their positions in the action's transaction: through RabbitMQ (or
    the server without a broker). The change is committed when a notice goes
    out, so a delivery failure is a warning: the server reads the event from
    the log's tail all the same."""

    async def sink(notice: Notice) -> None:
        try:
            publish_notice(notice, encode_notice(notice), config)
        except PublishError as exc:
            log.warning(
                "connected clients were not told (%s event): %s; the server reads it from"
                " the event log",
                notice.event["type"],
                exc,
            )

    return sink


def _act(settings: Settings, action: Callable[[ActionContext], Awaitable[T]]) -> T:
    """Run an action as the operator, its events published after commit."""

    async def go() -> T:
        sink = _publishing_sink(ProducerConfig.from_env())
        async with await psycopg.AsyncConnection.connect(
            settings.database_url, autocommit=True
        ) as conn:
            return await action(ActionContext(conn, sink))

    return asyncio.run(go())


def _realm_id(settings: Settings, subdomain: str) -> int:
    with _connect(settings) as conn:
        return accounts.realm_id_by_subdomain(conn, subdomain)


def cmd_user_create(settings: Settings, args: argparse.Namespace) -> int:
    """The user joins the realm's default streams; connected clients get
    `realm_user` add (and `peer_add`)."""
    realm_id = _realm_id(settings, args.realm)
    user = _act(
        settings,
        lambda ctx: user_actions.do_create_user(
            ctx, None, realm_id, args.email, args.full_name, accounts.ROLES[args.role]
        ),
    )
    _print_json(user.as_json())
    return 0


def cmd_user_rotate(settings: Settings, args: argparse.Namespace) -> int:
    """The new key is printed once the change is committed; every shard is
    told in the same transaction (the event log), so each forgets what it
    cached of the old key at once, not at its cache's next look."""
    config = ProducerConfig.from_env()
    with _connect(settings) as conn:
        try:
            with transaction(conn):
                user = accounts.rotate_api_key(conn, args.realm, args.email)
                # To no user: no queue receives it, whatever its version.
                send_event_on_commit(
                    conn, user.realm_id, credentials_changed(user.user_id), [], config=config
                )
        except PublishError as exc:
            # Committed: with the event log the servers read it from its tail.
            log.warning(
                "the servers were not told (%s); %s",
                exc,
                "they read it from the event log"
                if config.event_log
                else "they refuse the old key within EVENTQ_AUTH_CACHE_SECS",
            )
    _print_json(user.as_json())
    return 0


def cmd_user_active(settings: Settings, args: argparse.Namespace) -> int:
    """Connected clients get `realm_user` update; a user already in the
    asked-for state is left alone (and the command still succeeds)."""
    realm_id = _realm_id(settings, args.realm)
    active = args.action == "reactivate"

    async def change(ctx: ActionContext) -> None:
        target = await user_actions.find_user(ctx.conn, realm_id, args.email)
        if target.is_active == active:
            return
        if active:
            await user_actions.do_reactivate_user(ctx, None, realm_id, target.id)
        else:
            await user_actions.do_deactivate_user(ctx, None, realm_id, target.id)

    _act(settings, change)
    _print_json({"email": args.email, "active": active})
    return 0


def _parse_bool(text: str) -> bool:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_edit_limit(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        seconds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or none, got {text!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("the limit must be a positive number of seconds")
    return seconds


# Tells "--message-edit-limit none" (no limit) from an absent option.
_UNSET = object()

# realm update option -> realm property
_REALM_OPTIONS = {
    "name": "name",
    "description": "description",
    "allow_message_editing": "allow_message_editing",
    "mandatory_topics": "mandatory_topics",
}


def cmd_realm_update(settings: Settings, args: argparse.Namespace) -> int:
    """Change realm settings as the operator, in one transaction; connected
    clients get `realm` update (and `update_dict` for the edit limit)."""
    changes = {
        prop: getattr(args, option)
        for option, prop in _REALM_OPTIONS.items()
        if getattr(args, option) is not None
    }
    limit_given = args.message_edit_limit is not _UNSET
    if not changes and not limit_given:
        print(
            "eventq: realm update: nothing to change; give --name, --description,"
            " --allow-message-editing, --mandatory-topics or --message-edit-limit",
            file=sys.stderr,
        )
        return 2
    realm_id = _realm_id(settings, args.subdomain)

    async def update(ctx: ActionContext) -> None:
        async with ctx.transaction():
            for prop, value in changes.items():
                await realm_actions.do_set_realm_property(ctx, None, realm_id, prop, value)
            if limit_given:
                await realm_actions.do_set_message_edit_limit(
                    ctx, None, realm_id, args.message_edit_limit
                )

    _act(settings, update)
    if limit_given:
        changes["message_content_edit_limit_seconds"] = args.message_edit_limit
    _print_json({"realm_id": realm_id, "subdomain": args.subdomain, "changed": changes})
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Create the demo realm and users if missing, and give each a fresh API key
    (keys are stored hashed, so the only way to show one is to issue it)."""
    users = []
    with _connect(settings) as conn:
        exists = conn.execute("SELECT 1 FROM realms WHERE subdomain = %s", (DEMO_REALM,)).fetchone()
        realm_id = None
        if exists is None:
            realm_id = accounts.create_realm(
                conn, DEMO_REALM, "Demo Organization", "eventq's demo realm"
            )
        for email, full_name, role in DEMO_USERS:
            try:
                user = accounts.rotate_api_key(conn, DEMO_REALM, email)
            except accounts.AccountError:
                user = accounts.create_user(conn, DEMO_REALM, email, full_name, role)
            users.append(user.as_json())
    if realm_id is not None:
        # A channel everyone is in, for the demo page. The realm is new: no
        # client can be listening, so its events go nowhere.
        async def nowhere(notice: Notice) -> None:
            return None

        async def general(conn: psycopg.AsyncConnection[Any]) -> None:
            await stream_actions.do_add_subscriptions(
                ActionContext(conn, nowhere),
                None,
                realm_id,
                [stream_actions.StreamRequest("general", "Everyone in the demo")],
                principals=[user["user_id"] for user in users],
            )

        async def create() -> None:
            async with await psycopg.AsyncConnection.connect(
                settings.database_url, autocommit=True
            ) as conn:
                await general(conn)

        asyncio.run(create())
    _print_json({"realm": DEMO_REALM, "site": args.site, "users": users})
    return 0


def _parse_users(raw: str) -> list[object]:
    """ "1,2,3" or a JSON list (ids or {"id": ..., ...} objects)."""
    text = raw.strip()
    if text.startswith("["):
        try:
            users = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadNotice(f"--users is not valid JSON: {exc}") from None
        if not isinstance(users, list):
            raise BadNotice("--users must be a JSON list")
        return users
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadNotice("--users must be comma-separated user ids or a JSON list") from None


def cmd_send_event(settings: Settings, args: argparse.Namespace) -> int:
    try:
        event = json.loads(args.event)
    except json.JSONDecodeError as exc:
        raise BadNotice(f"--event is not valid JSON: {exc}") from None
    users = _parse_users(args.users)
    with _connect(settings) as conn:
        realm_id = accounts.resolve_realm(conn, args.realm)
    config = ProducerConfig.from_env()
    send_event(realm_id, event, users, config=config)
    _print_json(
        {
            "sent": True,
            "realm_id": realm_id,
            "users": len(users),
            "via": config.notify_queue if config.amqp_url else config.notify_url,
        }
    )
    return 0


def cmd_analytics(settings: Settings, args: argparse.Namespace) -> int:
    """The jobs run in a process of their own (`python -m analytics`): Spark
    starts a JVM, and the analytics package imports nothing of the server.

    What they need beyond the server's dependencies is checked first, so that
    an installation without it gets one line saying what to install rather
    than a traceback (or a JVM's) from deep inside the job."""
    missing = [name for name in ("pyspark", "matplotlib") if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"eventq: the analytics jobs need {' and '.join(missing)}, which this installation"
            " lacks: install the package with its analytics extra"
            " (pip install 'eventq[analytics]', or the wheel's path followed by [analytics])",
            file=sys.stderr,
        )
        return 1
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        print(
            "eventq: the analytics jobs run Spark, which needs Java 17 or 21: install it"
            " (Debian: apt install openjdk-17-jre-headless) or set JAVA_HOME",
            file=sys.stderr,
        )
        return 1
    command = [sys.executable, "-m", "analytics", *args.rest]
    return subprocess.run(command, check=False).returncode


def _log_dir(settings: Settings, args: argparse.Namespace) -> Path:
    """The delivery log directory to work on: --log-dir, else EVENTQ_LOG_DIR."""
    log_dir: Path | None = args.log_dir or settings.log_dir
    if log_dir is None:
        raise ConfigError("no delivery log directory: set EVENTQ_LOG_DIR or pass --log-dir")
    if not log_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "no such log directory", str(log_dir))
    return log_dir


def cmd_logs_compact(settings: Settings, args: argparse.Namespace) -> int:
    """Compact every closed spool file, of every shard, into Parquet (waits
    for a running server's compaction to finish first)."""
    from server.observability import logfiles  # noqa: PLC0415 (pyarrow only for the log commands)

    log_dir = _log_dir(settings, args)
    done = logfiles.compact(log_dir)
    _print_json(
        {
            "log_dir": str(log_dir),
            "files_compacted": done.inputs,
            "records": done.records,
            "skipped_lines": done.skipped_lines,
            "written": [str(path.relative_to(log_dir)) for path in done.written],
        }
    )
    return 0


def cmd_logs_prune(settings: Settings, args: argparse.Namespace) -> int:
    """Delete the date partitions older than --keep-days (default:
    EVENTQ_LOG_RETENTION_DAYS; 0 keeps everything)."""
    from server.observability import logfiles  # noqa: PLC0415 (pyarrow only for the log commands)

    log_dir = _log_dir(settings, args)
    keep_days = settings.log_retention_days if args.keep_days is None else args.keep_days
    deleted = logfiles.prune(log_dir, keep_days)
    _print_json(
        {
            "log_dir": str(log_dir),
            "keep_days": keep_days,
            "deleted": [str(path.relative_to(log_dir)) for path in deleted],
        }
    )
    return 0


def _shard_map(args: argparse.Namespace) -> sharding.ShardMap:
    path = args.config or ProducerConfig.from_env().sharding_path
    if path is None:
        raise sharding.ShardingError("no sharding config: pass --config or set EVENTQ_SHARDING")
    return sharding.load(path)


def cmd_sharding_check(settings: Settings, args: argparse.Namespace) -> int:
    """Validate the config; print where everything goes."""
    shard_map = _shard_map(args)
    base = ProducerConfig.from_env().notify_queue
    _print_json(
        {
            "config": shard_map.source,
            "default_shard": shard_map.default_shard,
            "shards": {
                name: {
                    "listen": shard.address,
                    "notify_queue": sharding.notify_queue(base, name),
                    "state_file": f"event_queues.{name}.json",
                }
                for name, shard in shard_map.shards.items()
            },
            "realms": {str(realm): list(names) for realm, names in shard_map.realms.items()},
            "hosts": shard_map.hosts,
        }
    )
    return 0


def cmd_sharding_nginx(settings: Settings, args: argparse.Namespace) -> int:
    from server.admin import nginxsite  # noqa: PLC0415 (only this command needs it)

    site = nginxsite.render(
        _shard_map(args),
        listen=args.listen or "",
        server_name=args.server_name or "",
        max_body_bytes=settings.max_request_bytes,
    )
    if args.output is None:
        sys.stdout.write(site)
    else:
        tmp = args.output.with_name(f".{args.output.name}.tmp")
        tmp.write_text(site)
        tmp.replace(args.output)
        print(f"eventq: wrote {args.output}; check it with `nginx -t`, then reload nginx")
    return 0


def cmd_sharding_rabbitmq(settings: Settings, args: argparse.Namespace) -> int:
    from server.admin import brokerdefs  # noqa: PLC0415 (imports the consumer, hence pika)

    shard_map = _shard_map(args) if args.config or settings.sharding else None
    base = ProducerConfig.from_env().notify_queue
    _print_json(brokerdefs.definitions(shard_map, base, args.vhost))
    return 0


def _parse_days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if days < 0:
        raise argparse.ArgumentTypeError("the number of days must be 0 (keep all) or more")
    return days


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

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="db", required=True)
    db.add_parser("migrate", help="apply pending migrations").set_defaults(func=cmd_migrate)
    bg = db.add_parser(
        "background", help="long database work in paced batches (background updates)"
    ).add_subparsers(dest="background", required=True)
    status = bg.add_parser("status", help="every update: state, progress, rate, time left")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_background_status)
    run = bg.add_parser(
        "run", help="run the updates in this process (while no other runner does), until stopped"
    )
    run.add_argument(
        "--until-done",
        action="store_true",
        help="return once nothing is left to do now (status 1, saying what, if some is not done)",
    )
    run.add_argument(
        "--wait-secs",
        type=float,
        metavar="SECS",
        help="give up (status 1) when another runner works for longer than this (default: wait)",
    )
    run.set_defaults(func=cmd_background_run)
    enqueue = bg.add_parser("enqueue", help="run an update (again) from the start")
    enqueue.add_argument("name", help="the update's name (`db background status` lists them)")
    enqueue.set_defaults(func=cmd_background_enqueue)

    realm = sub.add_parser("realm", help="organizations").add_subparsers(
        dest="realm", required=True
    )
    create = realm.add_parser("create", help="create a realm; prints its realm_id")
    create.add_argument("--subdomain", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--description", default="")
    create.set_defaults(func=cmd_realm_create)
    for action in ("deactivate", "reactivate"):
        p = realm.add_parser(action, help=f"{action} a realm and its users' access")
        p.add_argument("--subdomain", required=True)
        p.set_defaults(func=cmd_realm_active, action=action)
    update = realm.add_parser(
        "update", help="change a realm's name, description or settings; clients are told"
    )
    update.add_argument("--subdomain", required=True)
    update.add_argument("--name")
    update.add_argument("--description")
    update.add_argument("--allow-message-editing", type=_parse_bool, metavar="true|false")
    update.add_argument("--mandatory-topics", type=_parse_bool, metavar="true|false")
    update.add_argument(
        "--message-edit-limit",
        type=_parse_edit_limit,
        default=_UNSET,
        metavar="SECONDS|none",
        help="how long after sending a message its content may be edited",
    )
    update.set_defaults(func=cmd_realm_update)

    user = sub.add_parser("user", help="users and API keys").add_subparsers(
        dest="user", required=True
    )
    create = user.add_parser(
        "create", help="create a user (joining the default streams); prints the API key"
    )
    create.add_argument("--realm", required=True, help="the realm's subdomain")
    create.add_argument("--email", required=True)
    create.add_argument("--full-name", required=True)
    create.add_argument("--role", default="member", choices=sorted(accounts.ROLES))
    create.set_defaults(func=cmd_user_create)
    rotate = user.add_parser("rotate-key", help="replace a user's API key; prints the new one")
    rotate.add_argument("--realm", required=True)
    rotate.add_argument("--email", required=True)
    rotate.set_defaults(func=cmd_user_rotate)
    for action in ("deactivate", "reactivate"):
        p = user.add_parser(action, help=f"{action} a user")
        p.add_argument("--realm", required=True)
        p.add_argument("--email", required=True)
        p.set_defaults(func=cmd_user_active, action=action)

    send = sub.add_parser(
        "send-event",
        help="send an event to users (through RabbitMQ, or the server without a broker)",
    )
    send.add_argument("--realm", required=True, help="realm id or subdomain")
    send.add_argument("--users", required=True, help='user ids "1,2" or a JSON list')
    send.add_argument("--event", required=True, help='the event as JSON: {"type": ...}')
    send.set_defaults(func=cmd_send_event)

    analytics = sub.add_parser(
        "analytics",
        help="the Spark jobs over the delivery logs (`eventq analytics run --help`)",
        add_help=False,
    )
    analytics.add_argument("rest", nargs=argparse.REMAINDER)
    analytics.set_defaults(func=cmd_analytics)

    logs = sub.add_parser("logs", help="the delivery log's files").add_subparsers(
        dest="logs", required=True
    )
    compact = logs.add_parser(
        "compact", help="compact every closed spool file into Parquet; prints what it did"
    )
    prune = logs.add_parser("prune", help="delete date partitions older than the retention")
    for p in (compact, prune):
        p.add_argument("--log-dir", type=Path, help="default: EVENTQ_LOG_DIR")
    prune.add_argument(
        "--keep-days",
        type=_parse_days,
        help="days to keep (default: EVENTQ_LOG_RETENTION_DAYS or 30; 0 keeps everything)",
    )
    compact.set_defaults(func=cmd_logs_compact)
    prune.set_defaults(func=cmd_logs_prune)

    shards = sub.add_parser(
        "sharding",
        help="several shard processes: check the config, generate nginx and RabbitMQ files",
    ).add_subparsers(dest="sharding", required=True)
    check = shards.add_parser("check", help="validate the sharding config; print the layout")
    nginx = shards.add_parser("nginx", help="the nginx site in front of the shards")
    nginx.add_argument("--listen", help="nginx listen argument (default: [nginx] listen, or 80)")
    nginx.add_argument("--server-name", help="default: [nginx] server_name, or _")
    nginx.add_argument("--output", type=Path, help="write here (atomically) instead of stdout")
    rabbit = shards.add_parser(
        "rabbitmq", help="RabbitMQ definitions of the notify and dead-letter queues"
    )
    rabbit.add_argument("--vhost", default="/", help="default: /")
    for p in (check, nginx, rabbit):
        p.add_argument("--config", type=Path, help="the sharding TOML (default: EVENTQ_SHARDING)")
    check.set_defaults(func=cmd_sharding_check)
    nginx.set_defaults(func=cmd_sharding_nginx)
    rabbit.set_defaults(func=cmd_sharding_rabbitmq)

    demo = sub.add_parser("demo", help="create the demo realm and users; prints fresh keys")
    demo.add_argument("--site", default="http://127.0.0.1:9800", help="URL shown with the keys")
    demo.set_defaults(func=cmd_demo)
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
