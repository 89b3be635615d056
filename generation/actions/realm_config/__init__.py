"""The realm's configuration: custom emoji (`emoji`), linkifiers
(`linkifiers`), code playgrounds (`playgrounds`) and the realm's domains
(`domains`), a module each over what they share (`common`: who may, URL
templates). This package exports their public names.

Every change is written in one transaction with its event, which goes to
every active user of the realm. Each module also has the read that builds
its part of register's state (`realm_emoji`, `realm_linkifiers`, ...), so
that the event and a fresh register are built by the same query.
"""

from generation.actions.realm_config.domains import (
    MAX_DOMAINS,
    do_add_realm_domain,
    do_change_realm_domain,
    do_remove_realm_domain,
    realm_domains,
)
from generation.actions.realm_config.emoji import (
    MAX_EMOJI,
    MAX_EMOJI_BYTES,
    do_add_realm_emoji,
    do_remove_realm_emoji,
    emoji_image,
    emoji_url,
    image_type,
    realm_emoji,
)
from generation.actions.realm_config.linkifiers import (
    MAX_LINKIFIERS,
    do_add_linkifier,
    do_remove_linkifier,
    do_reorder_linkifiers,
    do_update_linkifier,
    realm_linkifiers,
)
from generation.actions.realm_config.playgrounds import (
    MAX_PLAYGROUNDS,
    do_add_realm_playground,
    do_remove_realm_playground,
    realm_playgrounds,
)

__all__ = [
    "MAX_DOMAINS",
    "MAX_EMOJI",
    "MAX_EMOJI_BYTES",
    "MAX_LINKIFIERS",
    "MAX_PLAYGROUNDS",
    "do_add_linkifier",
    "do_add_realm_domain",
    "do_add_realm_emoji",
    "do_add_realm_playground",
    "do_change_realm_domain",
    "do_remove_linkifier",
    "do_remove_realm_domain",
    "do_remove_realm_emoji",
    "do_remove_realm_playground",
    "do_reorder_linkifiers",
    "do_update_linkifier",
    "emoji_image",
    "emoji_url",
    "image_type",
    "realm_domains",
    "realm_emoji",
    "realm_linkifiers",
    "realm_playgrounds",
]
