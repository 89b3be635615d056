"""Endpoints of the users area (Zulip's paths; see server/handlers/domain.py)."""

from __future__ import annotations

from typing import Any

ROUTES: list[tuple[str, Any]] = []
