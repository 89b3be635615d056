"""`eventq db ...`: the database schema (`migrate`) and the background
updates (`background status|run|enqueue`), long database work in paced
batches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import psycopg

from server.admin.common import print_json
from server.config import Settings
from server.database import background
from server.database.background_runner import make_runner
from server.database.migrate import MigrationError, migrate
from server.database.updates import standard_updates

log = logging.getLogger("eventq")


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    applied = migrate(settings.database_url)
    print_json({"applied": applied})
    return 0


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
        print_json({"runner": holder, "updates": [status.to_dict() for status in statuses]})
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
    print_json({"enqueued": args.name})
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


def add_db_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`db migrate` and `db background status|run|enqueue`."""
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
