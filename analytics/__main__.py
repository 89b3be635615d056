"""`python -m analytics run --logs DIR --out DIR [--since ISO] [--until ISO] [--master URL]
[--incremental] [--top N]` (also `eventq analytics run ...`).

Prints the console summary on stdout, and on stderr a progress line per
chunk of hours when the run has more than one (progress.py); exits 1 with a
message on stderr when there is nothing to read or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from analytics import job, session
from analytics.errors import AnalyticsError, BadArguments
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = job.Options(
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
        spark = session.build_session(args.master, input_bytes=planned.input_bytes())
        try:
            result = job.run(spark, options, planned, Progress(sys.stderr))
        finally:
            spark.stop()
    except AnalyticsError as exc:
        print(f"analytics: {exc}", file=sys.stderr)
        return 1
    print(
        f"processed {len(result.processed)} of {len(result.selected)} hours "
        f"in {time.monotonic() - started:.1f} s; tables and report in {options.out}"
    )
    print("\n".join(result.summary.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
