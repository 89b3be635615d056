"""Events of the realm's configuration: custom emoji, linkifiers, code
playgrounds and the realm's domains. Each goes to every active user of the
realm (Zulip's audience for all four), and each carries enough for a client
to replace its copy: the whole set, or (domains) the one entry changed."""

from __future__ import annotations

from typing import Literal, TypedDict

from generation.events.declaration import ClientRule, EventType


class RealmEmojiInfo(TypedDict):
    """One custom emoji (Zulip's `EmojiInfo`), keyed by its id as a string.
    eventq makes no still image of an animated one: `still_url` is null."""

    id: str
    name: str
    source_url: str
    deactivated: bool
    author_id: int | None
    still_url: str | None


class RealmEmojiUpdateEvent(TypedDict):
    """The realm's custom emoji changed: every one of them, deactivated ones
    included."""

    id: int
    type: Literal["realm_emoji"]
    op: Literal["update"]
    realm_emoji: dict[str, RealmEmojiInfo]


class RealmLinkifier(TypedDict):
    """A linkifier: matches of `pattern` become links to `url_template`
    (RFC 6570) filled with the pattern's named groups."""

    pattern: str
    url_template: str
    id: int


class RealmLinkifiersEvent(TypedDict):
    """The realm's linkifiers changed: all of them, in the order they apply."""

    id: int
    type: Literal["realm_linkifiers"]
    realm_linkifiers: list[RealmLinkifier]


class RealmPlayground(TypedDict):
    """A code playground: code blocks in `pygments_language` can be opened
    at `url_template` (RFC 6570, whose one variable is `code`)."""

    id: int
    name: str
    pygments_language: str
    url_template: str


class RealmPlaygroundsEvent(TypedDict):
    """The realm's code playgrounds changed: all of them."""

    id: int
    type: Literal["realm_playgrounds"]
    realm_playgrounds: list[RealmPlayground]


class RealmDomain(TypedDict):
    """A domain of the realm; `allow_subdomains`: its subdomains too."""

    domain: str
    allow_subdomains: bool


class RealmDomainsAddEvent(TypedDict):
    id: int
    type: Literal["realm_domains"]
    op: Literal["add"]
    realm_domain: RealmDomain


class RealmDomainsChangeEvent(TypedDict):
    id: int
    type: Literal["realm_domains"]
    op: Literal["change"]
    realm_domain: RealmDomain


class RealmDomainsRemoveEvent(TypedDict):
    id: int
    type: Literal["realm_domains"]
    op: Literal["remove"]
    domain: str


TYPES: tuple[EventType, ...] = (
    EventType(
        "realm_emoji",
        {"update": RealmEmojiUpdateEvent},
        state=("realm_emoji",),
        capability=None,
    ),
    EventType(
        "realm_linkifiers",
        {None: RealmLinkifiersEvent},
        state=("realm_linkifiers",),
        # Zulip 7 (feature level 176) changed linkifiers from URL format
        # strings to URL templates; a client that does not declare it reads
        # templates gets no linkifiers at all (an empty `realm_linkifiers`
        # at register, and no event), rather than ones it would misrender.
        # The legacy `realm_filters` event is sent to nobody (Zulip's
        # `realm_filters` section is always empty since then).
        capability=ClientRule("linkifier_url_template", without_it="dropped"),
    ),
    EventType(
        "realm_playgrounds",
        {None: RealmPlaygroundsEvent},
        state=("realm_playgrounds",),
        capability=None,
    ),
    EventType(
        "realm_domains",
        {
            "add": RealmDomainsAddEvent,
            "change": RealmDomainsChangeEvent,
            "remove": RealmDomainsRemoveEvent,
        },
        state=("realm_domains",),
        capability=None,
    ),
)
