"""The ways an analytics run fails for a reason the operator can fix."""

from __future__ import annotations


class AnalyticsError(Exception):
    """Base of the errors below; the CLI prints it and exits with status 1."""


class NoDeliveryLogs(AnalyticsError):
    """Raised by the job when no Parquet partition falls in the selected hours."""


class BadState(AnalyticsError):
    """Raised by `state.load_state` when the state file under --out is unreadable."""


class BadArguments(AnalyticsError):
    """Raised by the CLI for a malformed --since/--until or an empty window."""
