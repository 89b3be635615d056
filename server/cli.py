"""The `eventq` command: serve, and the operator's tasks around it.

Account commands print JSON on stdout (scripts rely on it); errors go to
stderr with exit status 1 (bad input) or 2 (usage).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import resource
import signal
import sys
from collections.abc import Sequence
from typing import Any

import psycopg

from generation import accounts
from generation.config import ProducerConfig
from generation.errors import BadNotice
from generation.send import PublishError, send_event
from server.config import ConfigError, Settings
from server.migrate import MigrationError, migrate

log = logging.getLogger("eventq")

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

    # Collect young objects 100x less often than the default (700): a parked
    # client holds about 100 tracked objects, so a fan-out's responses and
    # re-polls triggered thousands of collections and full sweeps of the
    # whole heap. Measured with tests/benchmarks/fanout.py, 1,000 clients:
    # 17.5k -> 21.8k events/s, 57 -> 46 us of CPU per event.
    gc.set_threshold(100_000, 50, 100)
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
    _raise_fd_limit()
    return asyncio.run(_serve(settings, args.port, args.host))


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    applied = migrate(settings.database_url)
    _print_json({"applied": applied})
    return 0


def _connect(settings: Settings) -> psycopg.Connection[Any]:
    return psycopg.connect(settings.database_url)


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


def cmd_user_create(settings: Settings, args: argparse.Namespace) -> int:
    with _connect(settings) as conn:
        user = accounts.create_user(conn, args.realm, args.email, args.full_name, args.role)
    _print_json(user.as_json())
    return 0


def cmd_user_rotate(settings: Settings, args: argparse.Namespace) -> int:
    with _connect(settings) as conn:
        user = accounts.rotate_api_key(conn, args.realm, args.email)
    _print_json(user.as_json())
    return 0


def cmd_user_active(settings: Settings, args: argparse.Namespace) -> int:
    with _connect(settings) as conn:
        accounts.set_user_active(conn, args.realm, args.email, args.action == "reactivate")
    _print_json({"email": args.email, "active": args.action == "reactivate"})
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Create the demo realm and users if missing, and give each a fresh API key
    (keys are stored hashed, so the only way to show one is to issue it)."""
    users = []
    with _connect(settings) as conn:
        exists = conn.execute("SELECT 1 FROM realms WHERE subdomain = %s", (DEMO_REALM,)).fetchone()
        if exists is None:
            accounts.create_realm(conn, DEMO_REALM, "Demo Organization", "eventq's demo realm")
        for email, full_name, role in DEMO_USERS:
            try:
                user = accounts.rotate_api_key(conn, DEMO_REALM, email)
            except accounts.AccountError:
                user = accounts.create_user(conn, DEMO_REALM, email, full_name, role)
            users.append(user.as_json())
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eventq",
        description="Real-time event delivery server (Zulip-compatible events API).",
        epilog="Configuration comes from EVENTQ_* environment variables; see README.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the server until SIGTERM or SIGINT")
    serve.add_argument("--port", type=int, help="TCP port (default: EVENTQ_PORT or 9800)")
    serve.add_argument("--host", help="address to bind (default: EVENTQ_HOST or 127.0.0.1)")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="db", required=True)
    db.add_parser("migrate", help="apply pending migrations").set_defaults(func=cmd_migrate)

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

    user = sub.add_parser("user", help="users and API keys").add_subparsers(
        dest="user", required=True
    )
    create = user.add_parser("create", help="create a user; prints the API key")
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
    except ConfigError as exc:
        print(f"eventq: configuration error: {exc}", file=sys.stderr)
        return 2
    except (accounts.AccountError, MigrationError, BadNotice, PublishError) as exc:
        print(f"eventq: {exc}", file=sys.stderr)
        return 1
    except psycopg.OperationalError as exc:
        print(
            f"eventq: cannot reach the database ({exc}); check EVENTQ_DATABASE_URL",
            file=sys.stderr,
        )
        return 1
