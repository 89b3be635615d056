"""State sections of the messages area: fetchers (see apply_events/sections.py)."""

from __future__ import annotations

from apply_events.section import Section

SECTIONS: tuple[Section, ...] = ()
