"""Every state section, in the order register fetches them."""

from __future__ import annotations

from apply_events.appliers import realm as realm_appliers
from apply_events.fetch import realm as realm_fetch
from apply_events.section import Section

SECTIONS: tuple[Section, ...] = (
    Section("realm", realm_fetch.fetch_realm, realm_appliers.APPLIERS),
)
