"""State sections of the streams area: fetchers (see apply_events/sections.py)."""

from __future__ import annotations

from apply_events.section import Section

SECTIONS: tuple[Section, ...] = ()
