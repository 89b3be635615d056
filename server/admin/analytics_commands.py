"""`eventq analytics ...`: the Spark jobs over the delivery logs, run in a
process of their own (`python -m analytics`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.config import Settings


def cmd_analytics(settings: Settings, args: argparse.Namespace) -> int:
    """`eventq analytics ...` reached through the full parser (entry.py
    takes the common case without it)."""
    return run_analytics(args.rest)


def run_analytics(rest: Sequence[str]) -> int:
    """The jobs run in a process of their own (`python -m analytics`): Spark
    starts a JVM, and the analytics package imports nothing of the server.
    This module imports nothing of it either, so that entry.py starts them
    without the server's imports.

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
    command = [sys.executable, "-m", "analytics", *rest]
    return subprocess.run(command, check=False).returncode


def add_analytics_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`analytics ...`: everything after it goes to `python -m analytics`."""
    analytics = sub.add_parser(
        "analytics",
        help="the Spark jobs over the delivery logs (`eventq analytics run --help`)",
        add_help=False,
    )
    analytics.add_argument("rest", nargs=argparse.REMAINDER)
    analytics.set_defaults(func=cmd_analytics)
