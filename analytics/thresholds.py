"""Limits an operator sets, checked hour by hour over the last 24 hours of
the log: delivery latency p99, dead-lettered notices, queues ended by
overflow.

An hour over a limit is named on the report, in the console summary and,
with `--fail-on-threshold`, in the command's exit status (EXIT_OVER), so
that the hourly timer's unit fails and whatever watches it alerts. Each
limit comes from its option, else its environment variable, else is unset
(not checked).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from analytics import environment, histogram, windows

# The exit status of a run that found an hour over a limit with
# --fail-on-threshold (1 is an error, 2 wrong arguments).
EXIT_OVER = 3

ENV_P99_MS = "EVENTQ_ANALYTICS_MAX_P99_MS"
ENV_DEAD_LETTERS = "EVENTQ_ANALYTICS_MAX_DEAD_LETTERS_PER_HOUR"
ENV_OVERFLOWED = "EVENTQ_ANALYTICS_MAX_OVERFLOWED_PER_HOUR"


@dataclass(frozen=True)
class Limits:
    """The limits set (None: not checked)."""

    p99_ms: float | None = None
    dead_letters_per_hour: int | None = None
    overflowed_per_hour: int | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Limits:
        """The limits of the environment's variables; ValueError naming the
        variable for a value that is not a number of 0 or more."""

        return cls(
            p99_ms=environment.number(environ, ENV_P99_MS, float, 0.0),
            dead_letters_per_hour=environment.number(environ, ENV_DEAD_LETTERS, int, 0),
            overflowed_per_hour=environment.number(environ, ENV_OVERFLOWED, int, 0),
        )


@dataclass(frozen=True)
class Check:
    """One limit over the last 24 hours: the worst hour's value, and the
    hours (labels) over the limit."""

    name: str
    limit: float
    unit: str
    worst: float | None
    over: list[str] = field(default_factory=list)

    def line(self) -> str:
        worst = "-" if self.worst is None else f"{self.worst:g}"
        state = f"OVER in {len(self.over)} of the last 24 hours" if self.over else "ok"
        return f"{self.name} <= {self.limit:g}{self.unit}: worst hour {worst}{self.unit}, {state}"


def check(
    limits: Limits,
    hours: windows.Window | None,
    latency: pa.Table,
    lifecycle: Sequence[Mapping[str, Any]],
    bound: histogram.Bound,
) -> list[Check]:
    """The limits set, checked per hour of `hours` (the last-24-hours
    window; None when the log has no hour): `latency` the hourly histograms
    of the delivery latency over all deliveries, `lifecycle` the hourly
    queue_lifecycle rows."""
    checks: list[Check] = []
    if hours is None:
        return checks

    def counted(name: str, limit: int | None, column: str) -> None:
        if limit is None:
            return
        values = [0.0] * len(hours.labels)
        for row in lifecycle:
            slot = hours.slot_of(row["date"], row["hour"])
            if slot is not None:
                values[slot] += float(row[column] or 0)
        over = [hours.labels[s] for s, value in enumerate(values) if value > limit]
        checks.append(Check(name, limit, "", max(values), over))

    if limits.p99_ms is not None:
        per_hour = windows.percentiles(hours, latency, bound)
        p99s = {row["slot"]: row["p99"] for row in per_hour}
        # A p99 is its bucket's upper bound (histogram.py), up to 4.7 % above
        # the real value: an hour is over the limit only when the real value
        # surely is, when the bucket's lower bound (the bound below) reaches it.
        over = [
            hours.labels[slot]
            for slot, seconds in sorted(p99s.items())
            if seconds > 0 and bound(round(50 * math.log10(seconds)) - 1) * 1000 >= limits.p99_ms
        ]
        p99s = {slot: seconds * 1000 for slot, seconds in p99s.items()}
        checks.append(
            Check("delivery latency p99", limits.p99_ms, " ms", max(p99s.values(), default=None),
                  over)
        )  # fmt: skip
    counted("dead-lettered notices per hour", limits.dead_letters_per_hour, "dead_letters")
    counted("queues ended by overflow per hour", limits.overflowed_per_hour, "overflow")
    return checks
