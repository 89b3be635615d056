"""The `eventq` command's entry point.

`eventq analytics ...` starts the analytics jobs, a process of their own
(`python -m analytics`), without importing the server: its database driver,
Tornado and the command modules cost half a second before the jobs' own
start (analytics_commands.py imports none of them). Everything else is
cli.main.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["analytics"]:
        from server.admin.analytics_commands import run_analytics  # noqa: PLC0415

        return run_analytics(args[1:])
    from server.admin.cli import main as cli_main  # noqa: PLC0415

    return cli_main(args)
