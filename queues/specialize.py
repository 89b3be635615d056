"""Per-client forms of one notice's event, built once per distinct variant.

A notice names an event and its users; each target queue may need a slightly
different event (the user's own `flags`, rendered or raw content, the sender's
`local_message_id`). `NoticePayloads` builds and encodes each distinct form
once and hands the same `Payload` to every queue that needs it, so the cost of
a fan-out grows with the number of variants, not the number of queues.

The message event contract (what a producer sends for a message):
`{"type": "message", "message": {...}, "sender_queue_id"?: str,
"local_id"?: str, "invite_only"?: bool, "internal_data"?: {...},
"user_ids_without_access_to_sender"?: [int]}` where `message` is the client
message dict, optionally with `rendered_content` (the HTML) beside the raw
`content`. Clients receive
`{"type": "message", "message": ..., "flags": [...]}`, plus `local_message_id`
on the sender's own queue (as Zulip's `process_message_event` builds them);
a channel message to the empty topic carries `EMPTY_TOPIC_DISPLAY_NAME` as its
`subject` for clients without the `empty_topic_name` capability; the users of
`user_ids_without_access_to_sender` get the sender as "Unknown user" (Zulip's
`can_access_sender`: that name, the address
`user{id}@{sender_realm_str}.eventq.invalid` and the unknown-user picture;
`sender_id` and `display_recipient` unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from queues.client import AS_SENT, DROPPED, ClientDescriptor, ClientRule, forms_for
from queues.narrow import narrow_matches
from queues.payload import Encoder, Event, Payload

UserData = Mapping[str, Any]


class NoticePayloads:
    """The payloads of one notice, memoised by variant. Lives for one delivery."""

    __slots__ = (
        "_by_key",
        "_empty_topic",
        "_encode",
        "_event",
        "_event_type",
        "_gravatar",
        "_last_form",
        "_last_user",
        "_messages",
        "_origin",
        "_rules",
        "_shared",
        "_variants",
        "_without_access",
    )

    # The message notice's key of the users who may not see its sender, and
    # what Zulip shows them instead: the same texts as generation.events
    # .messages.USER_IDS_WITHOUT_ACCESS_TO_SENDER and generation.actions
    # .access (INACCESSIBLE_USER_NAME, INACCESSIBLE_AVATAR_URL, and the
    # address of `inaccessible_email`, under generation.accounts
    # .FAKE_EMAIL_DOMAIN); `queues` imports only the standard library, and
    # tests/domain/test_access_messages.py checks they agree.
    WITHOUT_ACCESS_TO_SENDER: Final = "user_ids_without_access_to_sender"
    UNKNOWN_SENDER_NAME: Final = "Unknown user"
    UNKNOWN_SENDER_AVATAR: Final = "/static/unknown-user-avatar.svg"
    UNKNOWN_SENDER_DOMAIN: Final = "eventq.invalid"

    def __init__(
        self,
        event: Event,
        encode: Encoder,
        origin: object = None,
        rules: Sequence[ClientRule] = (),
    ):
        """`rules`: the capability rules of the event's type, in order."""
        self._origin = origin
        self._rules = _concerning(rules, event) if rules else rules
        self._event = event
        self._event_type: str = event["type"]
        is_message = self._event_type == "message"
        # Whether a message's sender has a Gravatar (once per notice, not per client).
        self._gravatar = is_message and _is_gravatar(event["message"].get("avatar_url"))
        # Whether it is a channel message to the empty topic, which clients
        # without `empty_topic_name` see under the display name (once per
        # notice: every other message costs its clients nothing more).
        self._empty_topic = is_message and _in_empty_topic(event["message"])
        # The users who get the sender as "Unknown user" (once per notice;
        # None, the common case, costs the other messages one test per client).
        without = event.get(self.WITHOUT_ACCESS_TO_SENDER) if is_message else None
        self._without_access: frozenset[int] | None = (
            frozenset(without) if isinstance(without, list) and without else None
        )
        self._encode = encode
        self._shared: Payload | None = None
        self._by_key: dict[object, Payload] = {}
        # (apply_markdown, avatar_url nulled, empty topic named, sender seen)
        # -> the client message dict
        self._messages: dict[tuple[bool, bool, bool, bool], dict[str, Any]] = {}
        self._variants: dict[object, Payload | tuple[Payload, ...]] = {}
        # One-entry memo of `_user_form`: delivery visits a user's queues one
        # after the other, so the per-user work is done once per user.
        self._last_user: UserData | None = None
        self._last_form: tuple[object, Any] = (None, None)

    def _build(self, event: Event, encode: Encoder) -> Payload:
        payload = Payload.build(event, encode)
        payload.origin = self._origin
        return payload

    def _user_form(self, user_data: UserData) -> tuple[object, Any]:
        """(variant key part, user data) for one notice user: their flags for
        a message, else the keys merged into their copy of the event."""
        if user_data is self._last_user:
            return self._last_form
        if self._event_type == "message":
            raw_flags = user_data.get("flags", ())
            flags = tuple(raw_flags) if isinstance(raw_flags, list | tuple) else ()
            form: tuple[object, Any] = (flags, flags)
        else:
            extra = {k: v for k, v in user_data.items() if k != "id"}
            form = (self._encode(extra), extra)
        self._last_user = user_data
        self._last_form = form
        return form

    def for_client(
        self, client: ClientDescriptor, user_data: UserData | None
    ) -> Payload | tuple[Payload, ...] | None:
        """What `client` (whose user's own data is `user_data`) receives: one
        payload, several (a legacy client's one-per-message deletions), or
        None if the client's narrow or the type's capability rule filters this
        event out."""
        if self._event_type == "message":
            flags: Sequence[str] = self._user_form(user_data)[1] if user_data else ()
            return self._message_payload(client, flags)
        variant = forms_for(self._rules, client.options, self._event) if self._rules else ()
        if variant is None:
            return None
        if not variant and (not user_data or len(user_data) == 1):
            if self._shared is None:
                self._shared = self._build(self._event, self._encode)
            return self._shared
        user_key, extra = self._user_form(user_data) if user_data else (None, {})
        key = (variant, user_key)
        cached = self._variants.get(key)
        if cached is None:
            event = {**self._event, **extra} if extra else self._event
            forms = _rewrite(event, variant)
            payloads = tuple(self._build(form, self._encode) for form in forms)
            cached = payloads[0] if len(payloads) == 1 else payloads
            self._variants[key] = cached
        # A rewrite that drops the event for this form leaves no payload.
        return cached or None

    def _message_payload(self, client: ClientDescriptor, flags: Sequence[str]) -> Payload | None:
        event = self._event
        message: dict[str, Any] = event["message"]
        options = client.options
        if options.narrow and not narrow_matches(options.narrow, message, flags):
            return None
        local_id = event.get("local_id")
        is_sender_queue = local_id is not None and event.get("sender_queue_id") == client.queue_id
        without = self._without_access
        sees_sender = without is None or client.user_id not in without
        # Zulip's client_gravatar: the client computes a Gravatar itself, so
        # the sender's avatar_url is null for it (any other URL is kept; an
        # unknown sender's picture is never a Gravatar).
        no_avatar = options.client_gravatar and self._gravatar and sees_sender
        named = self._empty_topic and EMPTY_TOPIC_CAPABILITY not in options.capabilities
        key = (
            "message", options.apply_markdown, no_avatar, flags, is_sender_queue, named,
            sees_sender,
        )  # fmt: skip
        payload = self._by_key.get(key)
        if payload is None:
            message_variant = self._message_variant(
                options.apply_markdown, no_avatar, named, sees_sender
            )
            client_event: Event = {
                "type": "message",
                "message": message_variant,
                "flags": list(flags),
            }
            if is_sender_queue:
                client_event["local_message_id"] = local_id
            if "internal_data" in event:
                client_event["internal_data"] = event["internal_data"]
            payload = self._build(client_event, self._encode)
            self._by_key[key] = payload
        return payload

    def _message_variant(
        self, apply_markdown: bool, no_avatar: bool, named: bool, sees_sender: bool
    ) -> dict[str, Any]:
        """The client message dict of one variant, built once per notice."""
        variant_key = (apply_markdown, no_avatar, named, sees_sender)
        variant = self._messages.get(variant_key)
        if variant is None:
            variant = dict(self._event["message"])
            if no_avatar:
                variant["avatar_url"] = None
            if not sees_sender:
                # Zulip's MessageDict.finalize_payload with can_access_sender false.
                variant["sender_full_name"] = self.UNKNOWN_SENDER_NAME
                variant["sender_email"] = (
                    f"user{variant.get('sender_id')}@{variant.get('sender_realm_str')}"
                    f".{self.UNKNOWN_SENDER_DOMAIN}"
                )
                variant["avatar_url"] = self.UNKNOWN_SENDER_AVATAR
            if named:
                variant["subject"] = EMPTY_TOPIC_DISPLAY_NAME
            rendered = variant.pop("rendered_content", None)
            if isinstance(rendered, str):
                if apply_markdown:
                    variant["content"] = rendered
                    variant["content_type"] = "text/html"
                else:
                    variant["content_type"] = "text/x-markdown"
            self._messages[variant_key] = variant
        return variant


# The start of every Gravatar URL producers put in `avatar_url` (the same
# text as generation.events.users.GRAVATAR_PREFIX: `queues` imports only the
# standard library; tests/queues/test_specialize.py checks they agree).
GRAVATAR_PREFIX = "https://secure.gravatar.com/avatar/"


def _is_gravatar(url: object) -> bool:
    return isinstance(url, str) and url.startswith(GRAVATAR_PREFIX)


def _has_gravatar(event: Event) -> bool:
    person = event.get("person")
    return isinstance(person, Mapping) and _is_gravatar(person.get("avatar_url"))


def _gravatar_null(event: Event) -> list[Event]:
    """Zulip's client_gravatar for a person (`realm_user` add and update):
    a Gravatar `avatar_url` is null, the client computes it from the email."""
    person = event.get("person")
    if isinstance(person, Mapping) and _is_gravatar(person.get("avatar_url")):
        return [{**event, "person": {**person, "avatar_url": None}}]
    return [event]


def _modern_presence(event: Event) -> list[Event]:
    """Zulip's simplified presence: only the modern `presences` (an event
    without them goes as sent)."""
    if "presences" not in event:
        return [event]
    return [{"type": event["type"], "presences": event["presences"]}]


def _legacy_presence(event: Event) -> list[Event]:
    """Zulip's legacy presence: the event without the modern `presences`."""
    return [{k: v for k, v in event.items() if k != "presences"}]


# Zulip's field types PRONOUNS and SHORT_TEXT (generation.events.profile_fields;
# `queues` imports only the standard library).
_PRONOUNS, _SHORT_TEXT = 8, 1


def _has_pronouns(event: Event) -> bool:
    fields = event.get("fields")
    return isinstance(fields, list) and any(
        isinstance(field, Mapping) and field.get("type") == _PRONOUNS for field in fields
    )


def _pronouns_as_short_text(event: Event) -> list[Event]:
    """Zulip's custom profile fields for clients without
    `pronouns_field_type_supported`: PRONOUNS fields as SHORT_TEXT."""
    if not _has_pronouns(event):
        return [event]
    fields = event["fields"]
    shown = [
        {**field, "type": _SHORT_TEXT}
        if isinstance(field, Mapping) and field.get("type") == _PRONOUNS
        else field
        for field in fields
    ]
    return [{**event, "fields": shown}]


def _without_email(event: Event) -> list[Event]:
    """Zulip's slim presence: the event without `email`."""
    return [{k: v for k, v in event.items() if k != "email"}]


def _one_per_message(event: Event) -> list[Event]:
    """Zulip's deletions for clients without bulk deletion: one event per id
    of `message_ids`, each with `message_id` instead."""
    ids = event.get("message_ids")
    if isinstance(ids, list):
        base = {k: v for k, v in event.items() if k != "message_ids"}
        return [{**base, "message_id": message_id} for message_id in ids] or [event]
    return [event]


def _deactivation_as_remove(event: Event) -> list[Event]:
    """Zulip's group deactivation for clients without
    `include_deactivated_groups`: an update that deactivates a group becomes
    the group's `remove`; any other event is unchanged."""
    data = event.get("data")
    if event.get("op") == "update" and isinstance(data, Mapping) and data.get("deactivated"):
        return [{"type": event["type"], "op": "remove", "group_id": event.get("group_id")}]
    return [event]


# Zulip's name for the empty topic shown to clients without the
# `empty_topic_name` capability (Message.EMPTY_TOPIC_FALLBACK_NAME): the same
# text as generation.topics.EMPTY_TOPIC_DISPLAY_NAME (`queues` imports only
# the standard library; tests/queues/test_empty_topic.py checks they agree).
EMPTY_TOPIC_DISPLAY_NAME = "general chat"
EMPTY_TOPIC_CAPABILITY = "empty_topic_name"
# The keys of an event that name a channel topic (`topic`: delete_message,
# typing; `topic_name`: user_topic; `subject`, `orig_subject`: update_message).
_TOPIC_KEYS = ("topic", "topic_name", "subject", "orig_subject")


def _in_empty_topic(message: Mapping[str, Any]) -> bool:
    return message.get("subject") == "" and message.get("type") == "stream"


def _empty_channel_detail(detail: object) -> bool:
    """A `message_details` entry of a channel message in the empty topic."""
    return (
        isinstance(detail, Mapping) and detail.get("topic") == "" and detail.get("type") == "stream"
    )


def _has_empty_topic(event: Event) -> bool:
    """Whether any topic the event names is the empty topic."""
    for key in _TOPIC_KEYS:
        if event.get(key) == "":
            return True
    details = event.get("message_details")
    return isinstance(details, Mapping) and any(map(_empty_channel_detail, details.values()))


def _empty_topic_display(event: Event) -> list[Event]:
    """Zulip's topics for clients without `empty_topic_name`: each topic of
    the event that is "" (and each channel message's topic in the
    `message_details` of a `read` removal) is the display name instead."""
    if not _has_empty_topic(event):
        return [event]
    named = dict(event)
    for key in _TOPIC_KEYS:
        if named.get(key) == "":
            named[key] = EMPTY_TOPIC_DISPLAY_NAME
    details = event.get("message_details")
    if isinstance(details, Mapping):
        named["message_details"] = {
            message_id: (
                {**detail, "topic": EMPTY_TOPIC_DISPLAY_NAME}
                if _empty_channel_detail(detail)
                else detail
            )
            for message_id, detail in details.items()
        }
    return [named]


# The key of an event a producer meant only for clients without the
# `archived_channels` capability: the same text as
# generation.events.streams.WITHOUT_ARCHIVED_CHANNELS (`queues` imports only
# the standard library; tests/queues/test_archived_channels.py checks they
# agree). It never reaches a client.
WITHOUT_ARCHIVED_CHANNELS = "only_without_archived_channels"


# The key of Zulip's `realm_user` add of a user the recipient may not see
# (its person is "Unknown user"): the same text as
# generation.events.users.INACCESSIBLE_USER (tests/queues/test_specialize.py
# checks they agree). It never reaches a client.
INACCESSIBLE_USER = "inaccessible_user"


def _inaccessible(event: Event) -> bool:
    return INACCESSIBLE_USER in event


def _inaccessible_dropped(event: Event) -> list[Event]:
    """Zulip's `user_list_incomplete` clients: no event for a user they may
    not see (they leave such users out of their list)."""
    return [] if INACCESSIBLE_USER in event else [event]


def _inaccessible_unmarked(event: Event) -> list[Event]:
    """Clients without `user_list_incomplete`: the "Unknown user" they keep
    in their list, without the mark."""
    if INACCESSIBLE_USER not in event:
        return [event]
    return [{k: v for k, v in event.items() if k != INACCESSIBLE_USER}]


def _archiving_update(event: Event) -> bool:
    """A `stream` update saying a channel was archived or unarchived."""
    return event.get("op") == "update" and event.get("property") == "is_archived"


def _archived_streams(event: Event) -> bool:
    """A `stream` create naming an archived channel."""
    streams = event.get("streams")
    return (
        event.get("op") == "create"
        and isinstance(streams, list)
        and any(isinstance(s, Mapping) and s.get("is_archived") is True for s in streams)
    )


def _for_hidden(event: Event) -> bool:
    return WITHOUT_ARCHIVED_CHANNELS in event


def _hides_archived(event: Event) -> bool:
    return WITHOUT_ARCHIVED_CHANNELS in event or (
        event.get("type") == "stream" and (_archiving_update(event) or _archived_streams(event))
    )


def _archived_kept(event: Event) -> list[Event]:
    """Zulip's stream and subscription events for clients with
    `archived_channels`: nothing of what was meant for the others."""
    return [] if WITHOUT_ARCHIVED_CHANNELS in event else [event]


def _archived_hidden(event: Event) -> list[Event]:
    """Zulip's stream and subscription events for clients without
    `archived_channels`, which hold no archived channel: what was meant for
    them without its mark; an archived channel as a `stream` delete (the
    update saying it was unarchived is dropped: a `stream` create meant for
    them follows); a `stream` create without its archived channels."""
    if WITHOUT_ARCHIVED_CHANNELS in event:
        return [{k: v for k, v in event.items() if k != WITHOUT_ARCHIVED_CHANNELS}]
    if event.get("type") != "stream":
        return [event]
    if _archiving_update(event):
        if event.get("value") is not True:
            return []
        stream_id = event.get("stream_id")
        return [
            {
                "type": "stream",
                "op": "delete",
                "streams": [{"stream_id": stream_id}],
                "stream_ids": [stream_id],
            }
        ]
    if _archived_streams(event):
        shown = [
            s for s in event["streams"] if not (isinstance(s, Mapping) and s.get("is_archived"))
        ]
        return [{**event, "streams": shown}] if shown else []
    return [event]


# The rewrites of the forms a capability rule names (`ClientRule`); producers
# send the modern form (presence with both `user_id` and `email`, deletions
# with `message_ids`, the empty topic as "").
_REWRITES: dict[str, Callable[[Event], list[Event]]] = {
    "without_email": _without_email,
    "one_per_message": _one_per_message,
    "deactivation_as_remove": _deactivation_as_remove,
    "gravatar_null": _gravatar_null,
    "modern_presence": _modern_presence,
    "legacy_presence": _legacy_presence,
    "pronouns_as_short_text": _pronouns_as_short_text,
    "empty_topic_display": _empty_topic_display,
    "archived_kept": _archived_kept,
    "archived_hidden": _archived_hidden,
    "inaccessible_dropped": _inaccessible_dropped,
    "inaccessible_unmarked": _inaccessible_unmarked,
}
# Every form a rule may name: as sent, none, or one of the rewrites.
FORMS = frozenset({AS_SENT, DROPPED, *_REWRITES})
# Rewrites that change only some events, with the test of whether an event
# is one of them: a notice whose event none of a rule's rewrites would
# change is delivered as if the rule were not there (`_concerning`), so an
# ordinary event is built and encoded once for every client, not once per
# form.
_CHANGES: dict[str, Callable[[Event], bool]] = {
    "gravatar_null": _has_gravatar,
    "pronouns_as_short_text": _has_pronouns,
    "empty_topic_display": _has_empty_topic,
    "archived_kept": _for_hidden,
    "archived_hidden": _hides_archived,
    "inaccessible_dropped": _inaccessible,
    "inaccessible_unmarked": _inaccessible,
}


def _concerning(rules: Sequence[ClientRule], event: Event) -> Sequence[ClientRule]:
    """`rules` less those that cannot change `event`: every form they name
    is as sent or a rewrite of `_CHANGES` that leaves this event alone."""
    kept = [
        rule
        for rule in rules
        if not all(
            form == AS_SENT or (form in _CHANGES and not _CHANGES[form](event))
            for form in (rule.with_it, rule.without_it)
        )
    ]
    return rules if len(kept) == len(rules) else tuple(kept)


def _rewrite(event: Event, variant: tuple[str, ...]) -> list[Event]:
    """The event(s) a client of `variant` (the forms it takes, in order;
    none: as sent) receives."""
    events = [event]
    for form in variant:
        rewrite = _REWRITES[form]
        events = [rewritten for each in events for rewritten in rewrite(each)]
    return events


def is_public_channel_message(event: Mapping[str, Any]) -> bool:
    """Whether a message event may reach `all_public_streams` queues: a channel
    message whose producer said explicitly that the channel is public."""
    message = event.get("message")
    return (
        event.get("type") == "message"
        and isinstance(message, Mapping)
        and message.get("type") == "stream"
        and event.get("invite_only") is False
    )
