"""Streams (Zulip's channels), subscriptions and the realm's default streams:
subscribing by name and creating the missing streams, unsubscribing
(`subscriptions`), the user's own settings of a subscription
(`subscription_settings`), renaming a stream and changing its description
or privacy (`update`), archiving one (`archive`) and unarchiving it
(`unarchive`), the realm's default
streams (`defaults`) and what changes to a user mean for streams
(`user_changes`), a module each, over the subscribing and unsubscribing they
share (`membership`) and their rows, checks, lookups and event senders
(`common`). This package exports their public names.

Who can see a stream, and its subscriber list: its active subscribers, and
for a public stream every active user who is not a guest (`common._viewers`).
Every event about a stream goes to exactly the users who can see it (or who
just gained or lost sight of it), so nothing about a private stream reaches
anyone else; `apply_events/fetch/streams.py` builds the state by the same
rule.

An archived stream keeps its subscriptions and its viewers (Zulip since
feature level 315); nobody sends to it or subscribes to it, and only
clients with the `archived_channels` capability hold it.

Invariant kept here: an unsubscribed (inactive) subscription row exists only
for a stream its user can still see. Whoever loses sight of a stream loses
their row for it (a private stream they leave or that stops being public, a
public stream a guest leaves), so that regaining sight of it later makes it
"never subscribed", as the `stream` create event they then get says.

Administrators manage streams they can see; `actor_id` None is the operator
(the command line), who may do anything. Every action takes one transaction
(a savepoint inside a caller's) and sends its events after the outermost
commit; streams are locked in id order, and where the realm's default
streams change, the realm row first.
"""

from generation.actions.streams.archive import do_delete_stream
from generation.actions.streams.common import (
    MAX_DESCRIPTION_LENGTH,
    MAX_NAME_LENGTH,
    StreamRow,
    check_description,
    check_stream_name,
)
from generation.actions.streams.defaults import do_add_default_stream, do_remove_default_stream
from generation.actions.streams.membership import PALETTE
from generation.actions.streams.subscription_settings import (
    SUBSCRIPTION_PROPERTIES,
    do_update_subscription_properties,
)
from generation.actions.streams.subscriptions import (
    StreamRequest,
    SubscriptionsAdded,
    SubscriptionsRemoved,
    do_add_subscriptions,
    do_create_stream,
    do_remove_subscriptions,
)
from generation.actions.streams.unarchive import do_unarchive_stream
from generation.actions.streams.update import (
    do_change_stream_description,
    do_change_stream_invite_only,
    do_rename_stream,
)
from generation.actions.streams.user_changes import (
    send_stream_access_for_role,
    send_subscriber_activity,
    subscribe_to_default_streams,
)

__all__ = [
    "MAX_DESCRIPTION_LENGTH",
    "MAX_NAME_LENGTH",
    "PALETTE",
    "SUBSCRIPTION_PROPERTIES",
    "StreamRequest",
    "StreamRow",
    "SubscriptionsAdded",
    "SubscriptionsRemoved",
    "check_description",
    "check_stream_name",
    "do_add_default_stream",
    "do_add_subscriptions",
    "do_change_stream_description",
    "do_change_stream_invite_only",
    "do_create_stream",
    "do_delete_stream",
    "do_remove_default_stream",
    "do_remove_subscriptions",
    "do_rename_stream",
    "do_unarchive_stream",
    "do_update_subscription_properties",
    "send_stream_access_for_role",
    "send_subscriber_activity",
    "subscribe_to_default_streams",
]
