"""The `--quick` option every benchmark script shares: tiny sizes, seconds,
run by the test suite (tests/test_benchmarks.py) to check that the script
still works; options given beside it still win."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any


def parse_with_quick(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, quick: Mapping[str, Any]
) -> argparse.Namespace:
    """Add `--quick` (whose defaults are `quick`) to `parser` and parse `argv`."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a check of the script, in seconds: "
        + ", ".join(f"--{key.replace('_', '-')} {value}" for key, value in quick.items()),
    )
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**quick)
        args = parser.parse_args(argv)
    return args
