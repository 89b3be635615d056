"""`eventq logs ...`: the delivery log's files: compact the closed spool
files into Parquet, prune the date partitions past the retention.

pyarrow is imported by the commands themselves, not by this module: the
other commands do without it.
"""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

from server.admin.common import print_json
from server.config import ConfigError, Settings


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
    print_json(
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
    print_json(
        {
            "log_dir": str(log_dir),
            "keep_days": keep_days,
            "deleted": [str(path.relative_to(log_dir)) for path in deleted],
        }
    )
    return 0


def _parse_days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if days < 0:
        raise argparse.ArgumentTypeError("the number of days must be 0 (keep all) or more")
    return days


def add_log_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`logs compact|prune`."""
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
