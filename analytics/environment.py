"""The analytics' settings from environment variables (EVENTQ_ANALYTICS_*):
a number, checked, with a message naming the variable."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

Number = TypeVar("Number", int, float)


def number(
    environ: Mapping[str, str], name: str, kind: type[Number], minimum: Number
) -> Number | None:
    """Variable `name` of `environ` as a `kind` of at least `minimum`; None
    when unset or blank. ValueError naming the variable otherwise."""
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}={text!r} is not a finite number")
    if value < minimum:
        raise ValueError(f"{name}={text!r} is below {minimum}")
    return value
