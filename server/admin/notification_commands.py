"""`eventq notifications ...`: the notification worker (docs/notifications.md)."""

from __future__ import annotations

import argparse
import sys

import orjson
import psycopg

from server.config import Settings
from server.notifications import store
from server.notifications.settings import WorkerSettings
from server.notifications.worker import run_until_signalled


def cmd_run(_settings: Settings, _args: argparse.Namespace) -> int:
    """A bad setting raises `NotificationConfigError`, a `ConfigError`: the
    command line's exit status 2 (server/admin/cli.py)."""
    run_until_signalled(WorkerSettings.from_env())
    return 0


def cmd_status(_settings: Settings, _args: argparse.Namespace) -> int:
    """The worker's totals and what waits for a batch, as JSON."""
    settings = WorkerSettings.from_env()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        body = {"counters": store.counters(conn), "pending": store.pending(conn)}
    sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def add_notification_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    notifications = sub.add_parser(
        "notifications", help="notifications for users who are away: the worker"
    )
    commands = notifications.add_subparsers(dest="notifications_command", required=True)
    run = commands.add_parser(
        "run",
        help="consume the notification queue and send emails and webhook calls until SIGTERM",
    )
    run.set_defaults(func=cmd_run)
    status = commands.add_parser("status", help="the worker's totals and pending notifications")
    status.set_defaults(func=cmd_status)
