"""Events of the messages area (see generation/events/__init__.py)."""

from __future__ import annotations

EVENTS: dict[tuple[str, str | None], type] = {}
