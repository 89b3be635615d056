"""Appliers of the realm configuration's sections: custom emoji
(`realm_emoji`), linkifiers (`realm_linkifiers`), code playgrounds
(`realm_playgrounds`) and the realm's domains (`realm_domains`); and the
legacy `realm_filters`, which no event changes.

Every applier is correct when the event's change is already in the fetched
state: it replaces or sets, never adds twice.
"""

from __future__ import annotations

from typing import TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext
from generation.events.realm_config import (
    RealmDomain,
    RealmEmojiInfo,
    RealmLinkifier,
    RealmPlayground,
)

# The capability without which a client sees no linkifiers (Zulip 7's URL
# templates; generation/events/realm_config.py).
LINKIFIER_CAPABILITY = "linkifier_url_template"


class RealmEmojiState(TypedDict, total=False):
    """The `realm_emoji` section: every custom emoji, deactivated ones
    included, by id (a string)."""

    realm_emoji: dict[str, RealmEmojiInfo]


class RealmLinkifiersState(TypedDict, total=False):
    """The `realm_linkifiers` section: the linkifiers in the order they
    apply; empty for a client without the `linkifier_url_template`
    capability."""

    realm_linkifiers: list[RealmLinkifier]


class RealmFiltersState(TypedDict, total=False):
    """The `realm_filters` section: Zulip's legacy form of linkifiers, always
    empty since URL templates replaced URL format strings (Zulip 7), which
    old clients would misrender."""

    realm_filters: list[list[str | int]]


class RealmPlaygroundsState(TypedDict, total=False):
    """The `realm_playgrounds` section: the code playgrounds."""

    realm_playgrounds: list[RealmPlayground]


class RealmDomainsState(TypedDict, total=False):
    """The `realm_domains` section: the realm's domains, in the order they
    were added."""

    realm_domains: list[RealmDomain]


def apply_realm_emoji(state: State, event: Event, ctx: StateContext) -> None:
    emoji = event.get("realm_emoji")
    if "realm_emoji" in state and isinstance(emoji, dict):
        state["realm_emoji"] = emoji


def apply_realm_linkifiers(state: State, event: Event, ctx: StateContext) -> None:
    linkifiers = event.get("realm_linkifiers")
    # The queue drops these events for clients without the capability; a
    # stray one still leaves their (empty) list alone.
    if (
        "realm_linkifiers" in state
        and LINKIFIER_CAPABILITY in ctx.capabilities
        and isinstance(linkifiers, list)
    ):
        state["realm_linkifiers"] = linkifiers


def apply_realm_playgrounds(state: State, event: Event, ctx: StateContext) -> None:
    playgrounds = event.get("realm_playgrounds")
    if "realm_playgrounds" in state and isinstance(playgrounds, list):
        state["realm_playgrounds"] = playgrounds


def apply_realm_domains(state: State, event: Event, ctx: StateContext) -> None:
    domains = state.get("realm_domains")
    if not isinstance(domains, list):
        return
    op = event.get("op")
    if op in ("add", "change"):
        changed = event.get("realm_domain")
        if not isinstance(changed, dict):
            return
        entry = {
            "domain": changed.get("domain"),
            "allow_subdomains": changed.get("allow_subdomains"),
        }
        for index, domain in enumerate(domains):
            if domain.get("domain") == entry["domain"]:
                domains[index] = entry
                return
        if op == "add":
            domains.append(entry)
    elif op == "remove":
        state["realm_domains"] = [d for d in domains if d.get("domain") != event.get("domain")]


REALM_EMOJI_APPLIERS: dict[str, Applier] = {"realm_emoji": apply_realm_emoji}
REALM_LINKIFIERS_APPLIERS: dict[str, Applier] = {"realm_linkifiers": apply_realm_linkifiers}
REALM_PLAYGROUNDS_APPLIERS: dict[str, Applier] = {"realm_playgrounds": apply_realm_playgrounds}
REALM_DOMAINS_APPLIERS: dict[str, Applier] = {"realm_domains": apply_realm_domains}
