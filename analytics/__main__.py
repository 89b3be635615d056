"""`python -m analytics run --logs DIR --out DIR [--since ISO] [--until ISO] [--master URL]
[--incremental] [--top N] [--max-p99-ms MS] [--max-dead-letters-per-hour N]
[--max-overflowed-per-hour N] [--fail-on-threshold]` (also `eventq analytics run ...`).

Prints the console summary on stdout, and on stderr a progress line per
chunk of hours when the run has more than one (progress.py; under
spark-submit, Spark merges the driver's stderr into its stdout). Exits 1 with a
message on stderr when there is nothing to read or --since is not before
--until, 2 on arguments the parser refuses, and with --fail-on-threshold 3
when an hour of the last 24 is over a limit (thresholds.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from analytics import history, job, painter, rollup, session, thresholds
from analytics.errors import AnalyticsError, BadArguments
from analytics.painter import Painter
from analytics.progress import Progress


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date or time: {text!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _at_least_zero(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m analytics",
        description="Spark jobs over eventq's delivery logs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="aggregate the logs into tables, a report and a summary",
        description="Times are UTC unless they carry an offset; the job works in whole hours.",
        epilog=f"Environment: {rollup.ENV_KEEP_HOURLY_DAYS} (days of hourly tables kept,"
        f" {rollup.KEEP_HOURLY_DAYS}), {history.ENV_KEEP} (dated reports kept,"
        f" {history.KEEP_REPORTS}), and the limits' variables above. docs/analytics.md"
        " says what --out holds.",
    )
    run.add_argument("--logs", type=Path, required=True, help="EVENTQ_LOG_DIR of the shards")
    run.add_argument("--out", type=Path, required=True, help="directory for tables and report")
    run.add_argument("--since", type=_moment, help="first hour to read (ISO 8601)")
    run.add_argument("--until", type=_moment, help="end of the window, exclusive (ISO 8601)")
    run.add_argument(
        "--master", help="Spark master URL (default: spark-submit's, else embedded local[*])"
    )
    run.add_argument(
        "--incremental",
        action="store_true",
        help="process only hours not processed before (state in --out/state.json)",
    )
    run.add_argument("--top", type=_positive, default=20, help="busiest users and queues kept (20)")
    limits = run.add_argument_group(
        "limits",
        "checked hour by hour over the last 24 hours of the log, flagged on the report and in "
        "the summary; each defaults to its environment variable, else is not checked",
    )
    limits.add_argument(
        "--max-p99-ms",
        type=_at_least_zero(float),
        help="delivery latency p99 of an hour, in ms: over it when the p99's histogram bucket"
        f" (4.7 %% wide) lies above it ({thresholds.ENV_P99_MS})",
    )
    limits.add_argument(
        "--max-dead-letters-per-hour",
        type=_at_least_zero(int),
        help=f"notices dead-lettered in an hour ({thresholds.ENV_DEAD_LETTERS})",
    )
    limits.add_argument(
        "--max-overflowed-per-hour",
        type=_at_least_zero(int),
        help=f"queues ended by overflow in an hour ({thresholds.ENV_OVERFLOWED})",
    )
    limits.add_argument(
        "--fail-on-threshold",
        action="store_true",
        help=f"exit {thresholds.EXIT_OVER} when an hour is over a limit (for a timer unit)",
    )
    return parser


def _limits(args: argparse.Namespace, parser: argparse.ArgumentParser) -> thresholds.Limits:
    """The options' limits, else the environment's."""
    try:
        env = thresholds.Limits.from_environment()
    except ValueError as exc:
        parser.error(str(exc))

    def given(option: Any, default: Any) -> Any:
        return default if option is None else option

    return thresholds.Limits(
        p99_ms=given(args.max_p99_ms, env.p99_ms),
        dead_letters_per_hour=given(args.max_dead_letters_per_hour, env.dead_letters_per_hour),
        overflowed_per_hour=given(args.max_overflowed_per_hour, env.overflowed_per_hour),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        keep_reports = history.keep_from_environment()
        keep_hourly_days = rollup.keep_from_environment()
    except ValueError as exc:
        parser.error(str(exc))
    options = job.Options(
        limits=_limits(args, parser),
        keep_reports=keep_reports,
        keep_hourly_days=keep_hourly_days,
        logs=args.logs,
        out=args.out,
        since=args.since,
        until=args.until,
        incremental=args.incremental,
        top=args.top,
    )
    try:
        if options.since and options.until and options.since >= options.until:
            raise BadArguments("--since must be before --until")
        started = time.monotonic()
        planned = job.plan(options)  # a wrong --logs fails before the JVM starts
        for hour in planned.left_out():
            print(
                f"analytics: {hour.key} changed, but hours of its day that were processed before"
                " are gone from the log: its day's tables (rolled up) are kept as they are",
                file=sys.stderr,
            )
        embedded = session.is_embedded(args.master)
        class_data = session.find_class_data(options.out) if embedded else None
        # Forked before the JVM starts (painter.py): the charts' processes.
        with Painter(painter.workers_for_this_machine()) as charts:
            spark = session.build_session(
                args.master, input_bytes=planned.input_bytes(), class_data=class_data
            )
            stopped = False

            def stop() -> None:
                nonlocal stopped
                if not stopped:
                    stopped = True
                    session.stop_session(spark, class_data)

            try:
                # The JVM stops while the report's charts are drawn.
                result = job.run(spark, options, planned, Progress(sys.stderr), charts, stop)
            finally:
                stop()
    except AnalyticsError as exc:
        print(f"analytics: {exc}", file=sys.stderr)
        return 1
    print(
        f"processed {len(result.processed)} of {len(result.selected)} hours "
        f"in {time.monotonic() - started:.1f} s; tables and report in {options.out}"
    )
    print("\n".join(result.summary.lines))
    if args.fail_on_threshold and result.summary.over:
        print("analytics: an hour is over a limit (--fail-on-threshold)", file=sys.stderr)
        return thresholds.EXIT_OVER
    return 0


if __name__ == "__main__":
    sys.exit(main())
