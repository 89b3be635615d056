"""Every event kind the actions can emit has a verify_action test."""

from __future__ import annotations

import importlib
from pathlib import Path

from generation.events import CATALOGUE
from tests.domain import harness

# Produced by the server itself, not by actions; tested in tests/server.
SERVER_EVENTS = {("heartbeat", None), ("restart", None)}


def test_every_event_kind_has_a_verify_action_test():
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        importlib.import_module(f"tests.domain.{path.stem}")
    missing = set(CATALOGUE) - SERVER_EVENTS - harness.DECLARED
    assert not missing, f"event kinds without a verify_action test: {sorted(missing, key=str)}"
