"""Every state section, in the order register fetches them. Each area's fetch
module declares its sections (fetcher, appliers, post-processing, state
schema); an integrator adds state by adding a section there."""

from __future__ import annotations

from apply_events.fetch import (
    bots,
    groups,
    messages,
    personal,
    profile_fields,
    realm,
    realm_config,
    scheduled,
    streams,
    users,
)
from apply_events.section import Section

SECTIONS: tuple[Section, ...] = (
    *realm.SECTIONS,
    *realm_config.SECTIONS,
    *users.SECTIONS,
    *bots.SECTIONS,
    *groups.SECTIONS,
    *streams.SECTIONS,
    *messages.SECTIONS,
    *scheduled.SECTIONS,
    *personal.SECTIONS,
    *profile_fields.SECTIONS,
)
