"""Failures of event generation."""

from __future__ import annotations


class BadNotice(ValueError):
    """Raised by `generation.notice.parse_notice` / `make_notice` for a notice
    that does not follow the contract; the message says what is wrong."""
