"""A client descriptor: one registered queue, its owner, options and parked request."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from queues.errors import BadNarrow
from queues.event_queue import EventQueue
from queues.narrow import Narrow, parse_narrow
from queues.payload import Embed, Encoder, PayloadTable, SharedPayloads

# Client capabilities a queue can hold (register's `client_capabilities`, or the
# flags of an implicit GET /events). Only some change
# what Tornado sends; the rest are kept so that register and later features see
# what the client declared.
CAPABILITIES = frozenset(
    {
        "notification_settings_null",
        "bulk_message_deletion",
        "user_avatar_url_field_optional",
        "stream_typing_notifications",
        "user_settings_object",
        "linkifier_url_template",
        "user_list_incomplete",
        "include_deactivated_groups",
        "archived_channels",
        "empty_topic_name",
        "simplified_presence_events",
        "pronouns_field_type_supported",
    }
)

# The two forms of an event under a capability rule (`ClientRule`) that are
# not rewrites (those are in queues.specialize): the event as the producer
# sent it, and no event at all.
AS_SENT = "as_sent"
DROPPED = "dropped"


class ClientRule(Protocol):
    """How one capability (or boolean register option) changes what a client
    receives of an event type: clients that declared `name` take the
    `with_it` form, the others the `without_it` form; with `when_key`, only
    events carrying that key are concerned; with `option`, `name` is a boolean
    field of QueueOptions (`slim_presence`) rather than a capability. A form
    is one of `queues.specialize.FORMS`.

    The rules are declared with the event types (`generation.events`,
    docs/event-types.md) and handed to the registry by the server: this
    package knows how to filter and rewrite, not which types take which form.
    """

    @property
    def name(self) -> str: ...
    @property
    def with_it(self) -> str: ...
    @property
    def without_it(self) -> str: ...
    @property
    def when_key(self) -> str | None: ...
    @property
    def option(self) -> bool: ...


# event type -> the rules its events are delivered by, applied in turn
# (types without one go to every client as sent)
ClientRules = Mapping[str, Sequence[ClientRule]]

# Why a parked request is being answered.
WakeReason = Literal["events", "heartbeat", "displaced", "deleted", "overflow"]


class Waiter(Protocol):
    """A parked request, as the queue layer sees it.

    `wake` is called on the IO loop, after the waiter has been detached from its
    queue; it must only schedule the response (the queue may change again before
    the response is written) and must not call back into the registry.
    """

    def wake(self, reason: WakeReason) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class QueueOptions:
    """What a client asked for at registration; fixed for the queue's life."""

    # None: every type. Otherwise only these types (heartbeats always pass).
    event_types: frozenset[str] | None = None
    narrow: Narrow = ()
    # Also receive messages to every public channel of the realm.
    all_public_streams: bool = False
    apply_markdown: bool = False
    client_gravatar: bool = False
    slim_presence: bool = False
    capabilities: frozenset[str] = frozenset()
    # Seconds without any request after which the queue is collected.
    lifespan_secs: float = 600.0
    # From the User-Agent or the `client` parameter, at most 30 characters.
    client_name: str = "Unspecified"

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_types": sorted(self.event_types) if self.event_types is not None else None,
            "narrow": [list(term) for term in self.narrow],
            "all_public_streams": self.all_public_streams,
            "apply_markdown": self.apply_markdown,
            "client_gravatar": self.client_gravatar,
            "slim_presence": self.slim_presence,
            "capabilities": sorted(self.capabilities),
            "lifespan_secs": self.lifespan_secs,
            "client_name": self.client_name,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueOptions:
        """Options saved by `to_dict`; missing keys take their defaults."""
        event_types = data.get("event_types")
        if event_types is not None and (
            not isinstance(event_types, list) or not all(isinstance(t, str) for t in event_types)
        ):
            raise ValueError("event_types is not a list of strings")
        capabilities = data.get("capabilities", [])
        if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
            raise ValueError("capabilities is not a list of strings")
        lifespan = data.get("lifespan_secs", 600.0)
        if not isinstance(lifespan, int | float) or isinstance(lifespan, bool) or lifespan <= 0:
            raise ValueError("lifespan_secs is not a positive number")
        client_name = data.get("client_name", "Unspecified")
        if not isinstance(client_name, str):
            raise ValueError("client_name is not a string")
        flags = {}
        for key in ("all_public_streams", "apply_markdown", "client_gravatar", "slim_presence"):
            value = data.get(key, False)
            if not isinstance(value, bool):
                raise ValueError(f"{key} is not a boolean")
            flags[key] = value
        return cls(
            event_types=frozenset(event_types) if event_types is not None else None,
            narrow=parse_narrow(data.get("narrow", [])),
            capabilities=frozenset(capabilities) & CAPABILITIES,
            lifespan_secs=float(lifespan),
            client_name=client_name,
            **flags,
        )


def form_for(rule: ClientRule, options: QueueOptions, event: Mapping[str, Any]) -> str | None:
    """The form of `event` that a client with `options` takes under `rule`,
    or None when the rule does not concern this event (it goes as sent)."""
    if rule.when_key is not None and rule.when_key not in event:
        return None
    if rule.option:
        declared = getattr(options, rule.name) is True
    else:
        declared = rule.name in options.capabilities
    return rule.with_it if declared else rule.without_it


def forms_for(
    rules: Sequence[ClientRule], options: QueueOptions, event: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The rewrites, in order, that a client with `options` takes of `event`
    under `rules` (empty: as sent), or None when a rule drops it."""
    forms: tuple[str, ...] = ()
    for rule in rules:
        form = form_for(rule, options, event)
        if form == DROPPED:
            return None
        if form is not None and form != AS_SENT:
            forms = (*forms, form)
    return forms


# The `covered` of almost every queue: one shared empty set rather than an
# empty frozenset (216 bytes) per queue.
NO_POSITIONS: frozenset[int] = frozenset()


class ClientDescriptor:
    """One queue and everything the server knows about the client behind it.

    Times are in the registry's clock (seconds, monotonic while the process runs).
    """

    __slots__ = (
        "covered",
        "created_at",
        "ended_at_position",
        "event_queue",
        "last_active",
        "notifiable",
        "options",
        "queue_id",
        "realm_id",
        "user_id",
        "waiter",
    )

    def __init__(
        self,
        queue_id: str,
        user_id: int,
        realm_id: int,
        options: QueueOptions,
        now: float,
        event_queue: EventQueue,
    ):
        self.queue_id = queue_id
        self.user_id = user_id
        self.realm_id = realm_id
        self.options = options
        self.event_queue = event_queue
        self.created_at = now
        # The last moment a request of this client was being served or parked;
        # the idle clock of garbage collection starts here.
        self.last_active = now
        # The request parked on this queue, if any; at most one at a time.
        self.waiter: Waiter | None = None
        # Event log positions above the stream position at creation whose
        # effect is in the state register fetched: not delivered again.
        self.covered: frozenset[int] = NO_POSITIONS
        # The stream position when the queue ended (server.handlers.longpoll_flow's
        # note_end): the queue holds no event above it, so a request parked on it
        # is answered with this position, not the stream's newer one.
        self.ended_at_position: int | None = None
        # Messages this queue received while its user was present that would
        # have been worth a notification had they been away: (event id,
        # message id, kinds: a NOTIFY_* bitmask), ascending by event id. When
        # the user's last queue is garbage-collected, those still held
        # (not acknowledged) are notified (server/notifications/away.py).
        self.notifiable: list[tuple[int, int, int]] = []

    def accepts(
        self, event_type: str, event: Mapping[str, Any], rules: Sequence[ClientRule] = ()
    ) -> bool:
        """Whether this queue takes an event of `event_type` (before any narrow),
        `rules` being the capability rules of that type.

        Heartbeats are pushed directly and never pass through here.
        """
        event_types = self.options.event_types
        if event_types is not None and event_type not in event_types:
            return False
        return not rules or forms_for(rules, self.options, event) is not None

    def expired(self, now: float) -> bool:
        """Idle for its whole lifespan with no request parked."""
        return self.waiter is None and now - self.last_active >= self.options.lifespan_secs

    def to_dict(
        self,
        now: float,
        option_forms: dict[QueueOptions, dict[str, Any]] | None = None,
        embed: Embed | None = None,
        table: PayloadTable | None = None,
    ) -> dict[str, Any]:
        """Saved form. Clock values are stored as ages, so a restart's downtime
        does not count against a queue's idle time. `option_forms` keeps the
        saved form of each distinct QueueOptions for a caller saving many
        queues (most share a few): building it was 40 % of the work. Those
        forms are then shared between the queues' saved forms: not to be
        modified. `embed`, `table`: see `EventQueue.to_dict`."""
        options = None if option_forms is None else option_forms.get(self.options)
        if options is None:
            options = self.options.to_dict()
            if option_forms is not None:
                option_forms[self.options] = options
        saved = {
            "queue_id": self.queue_id,
            "user_id": self.user_id,
            "realm_id": self.realm_id,
            "options": options,
            "idle_secs": max(0.0, now - self.last_active),
            "age_secs": max(0.0, now - self.created_at),
            "event_queue": self.event_queue.to_dict(embed, table),
        }
        if self.covered:
            saved["covered"] = sorted(self.covered)
        if self.notifiable:
            saved["notifiable"] = [list(entry) for entry in self.notifiable]
        return saved

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        now: float,
        encode: Encoder,
        shared: SharedPayloads | None = None,
    ) -> ClientDescriptor:
        """Rebuild a descriptor saved by `to_dict` (its events' payloads from
        `shared`: `EventQueue.from_dict`); raises ValueError on bad data."""
        queue_id = data.get("queue_id")
        user_id = data.get("user_id")
        realm_id = data.get("realm_id")
        if not isinstance(queue_id, str) or not queue_id:
            raise ValueError("queue_id is not a string")
        if not isinstance(user_id, int) or not isinstance(realm_id, int):
            raise ValueError(f"queue {queue_id}: user_id or realm_id is not an integer")
        options = data.get("options", {})
        event_queue = data.get("event_queue")
        if not isinstance(options, dict) or not isinstance(event_queue, dict):
            raise ValueError(f"queue {queue_id}: options or event_queue is not an object")
        idle = data.get("idle_secs", 0.0)
        age = data.get("age_secs", idle)
        if not isinstance(idle, int | float) or not isinstance(age, int | float):
            raise ValueError(f"queue {queue_id}: idle_secs or age_secs is not a number")
        try:
            client = cls(
                queue_id,
                user_id,
                realm_id,
                QueueOptions.from_dict(options),
                now - float(age),
                EventQueue.from_dict(event_queue, encode, shared),
            )
        except (ValueError, BadNarrow) as exc:
            raise ValueError(f"queue {queue_id}: {exc}") from exc
        client.last_active = now - float(idle)
        covered = data.get("covered", [])
        if not isinstance(covered, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in covered
        ):
            raise ValueError(f"queue {queue_id}: covered is not a list of positions")
        client.covered = frozenset(covered) if covered else NO_POSITIONS
        notifiable = data.get("notifiable", [])
        if not isinstance(notifiable, list) or not all(
            isinstance(entry, list)
            and len(entry) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) for n in entry)
            for entry in notifiable
        ):
            raise ValueError(
                f"queue {queue_id}: notifiable is not a list of [event, message, kinds]"
            )
        client.notifiable = [(e, m, k) for e, m, k in notifiable]
        return client
