"""Every queue of one server process, indexed by queue, user and realm.

The registry owns the queues' lifecycle: allocation, delivery of notices,
parking and waking of long-poll requests, idle expiry, bounds, deletion and
snapshots. It is pure: the caller passes the time (`now`, in seconds of a clock
that never goes back) and provides `Waiter`s to be woken. All methods run on the
server's IO loop.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from queues.client import (
    DROPPED,
    ClientDescriptor,
    ClientRule,
    ClientRules,
    QueueOptions,
    Waiter,
)
from queues.errors import BadQueueId, TooManyQueues
from queues.event_queue import EventQueue, Item
from queues.payload import Embed, Encoder, Event, Payload, PayloadTable, SharedPayloads
from queues.specialize import NoticePayloads, is_public_channel_message

# Why a queue ended; passed to end hooks and, for some, shown to its client.
EndReason = Literal["expired", "deleted", "overflow", "evicted", "deactivated", "role_changed"]
# The reasons a queue's owner is told with its next GET's BAD_EVENT_QUEUE_ID
# (`"reason"`): those the client did not cause by leaving, and may act on (a
# client made a guest cannot have all_public_streams again).
TOLD_REASONS: frozenset[EndReason] = frozenset({"overflow", "evicted", "role_changed"})

# A user in a notice: an id, or a dict with "id" and that user's own data.
NoticeUser = int | Mapping[str, Any]

# Called on the IO loop after a queue was removed: the queue, why, and whether
# it was its user's last queue on this process (for offline notifications).
EndHook = Callable[[ClientDescriptor, EndReason, bool], None]

# 2: the queues' payloads in a table of their own, each once ("payloads"), a
# queue's events [id, index in it]. 1: each queue's events whole in it.
SNAPSHOT_VERSION = 2
# Older snapshot versions this reader still accepts.
SNAPSHOT_VERSIONS_READ = frozenset({1, 2})

HEARTBEAT_EVENT: Event = {"type": "heartbeat"}
# Distinct QueueOptions values the registry shares before it starts again.
SHARED_OPTIONS = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLimits:
    """Bounds that keep one process's memory finite. See docs/configuration.md, "Limits"."""

    # 10 minutes (Zulip's default): long enough to ride out a network change or a
    # laptop lid, short enough that dead browser tabs do not hold memory.
    default_lifespan_secs: float = 600.0
    # 7 days: Zulip's cap for a requested `queue_lifespan_secs`.
    max_lifespan_secs: float = 7 * 24 * 3600.0
    # A client this far behind is better served by a fresh register than by a
    # replay: 10,000 events is about ten minutes of a very busy organization
    # (Zulip's busiest users see a few events per second).
    max_events: int = 10_000
    # 16 MiB: 10,000 typical 1.5 KB message events fit; one queue can never
    # hold more than a client could reasonably download in one response.
    max_bytes: int = 16 * 1024 * 1024
    # Browser tabs, phones and bots of one user; past this the least recently
    # active idle queue is evicted (its client re-registers).
    max_queues_per_user: int = 100
    # Ended queues remembered to tell their client why ("overflow").
    max_tombstones: int = 10_000


@dataclasses.dataclass(slots=True)
class DeliveryReport:
    """What one `deliver` call did."""

    queues: int = 0  # queues that received the event
    overflowed: int = 0  # queues ended because the event did not fit
    foreign: int = 0  # queues skipped because they belong to another realm


class QueueRegistry:
    """All queues of this process. Not thread-safe: IO loop only."""

    def __init__(
        self,
        encode: Encoder,
        limits: QueueLimits | None = None,
        new_queue_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        *,
        rules: ClientRules,
        embed: Embed | None = None,
    ):
        """`rules`: event type -> the capability rules its events are
        delivered by, in order (the server hands over `generation.events.CLIENT_RULES`;
        with none, every queue takes every event as sent)."""
        self.encode = encode
        # Wraps queued events' encodings for a snapshot's encoder (`EventQueue.to_dict`).
        self.embed = embed
        self.rules = rules
        # Per type, the rules that may drop an event for a client: the only
        # ones a queue's `accepts` must ask (the others only rewrite, which
        # NoticePayloads does once per variant, not once per queue).
        self._dropping: dict[str, tuple[ClientRule, ...]] = {
            event_type: dropping
            for event_type, type_rules in rules.items()
            if (dropping := tuple(r for r in type_rules if DROPPED in (r.with_it, r.without_it)))
        }
        self.limits = limits if limits is not None else QueueLimits()
        self._new_queue_id = new_queue_id
        self.end_hooks: list[EndHook] = []
        # Every live queue. Each is also in exactly one `_by_user` entry, and in
        # `_public_by_realm` iff its options ask for all public streams.
        self._clients: dict[str, ClientDescriptor] = {}
        # user id -> that user's queues; no empty inner dicts are kept.
        self._by_user: dict[int, dict[str, ClientDescriptor]] = {}
        # realm id -> its all_public_streams queues; no empty inner dicts.
        self._public_by_realm: dict[int, dict[str, ClientDescriptor]] = {}
        # Queues with no parked request, grouped by lifespan, each group in
        # ascending `last_active` order: a queue is here iff its waiter is None.
        # The expiry sweep then only looks at the oldest of each group.
        self._idle: dict[float, OrderedDict[str, ClientDescriptor]] = {}
        # queue id -> (owner, reason) for queues ended for a TOLD_REASONS reason.
        self._tombstones: OrderedDict[str, tuple[int, EndReason]] = OrderedDict()
        # One QueueOptions object per distinct value (`_shared_options`).
        self._options: dict[QueueOptions, QueueOptions] = {}
        # Number of queues with a parked request.
        self.parked = 0
        self._heartbeat = Payload.build(HEARTBEAT_EVENT, encode)

    # -- lookup -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, client: object) -> bool:
        return isinstance(client, ClientDescriptor) and self._clients.get(client.queue_id) is client

    def __iter__(self) -> Iterator[ClientDescriptor]:
        return iter(list(self._clients.values()))

    def user_queues(self, user_id: int) -> list[ClientDescriptor]:
        return list(self._by_user.get(user_id, {}).values())

    def users(self) -> int:
        return len(self._by_user)

    def get(self, queue_id: str, user_id: int) -> ClientDescriptor:
        """The queue `queue_id` if `user_id` owns it; else `BadQueueId`.

        An ended queue's reason is told only to its owner.
        """
        client = self._clients.get(queue_id)
        if client is not None:
            if client.user_id != user_id:
                raise BadQueueId(queue_id, wrong_owner=True)
            return client
        tombstone = self._tombstones.get(queue_id)
        if tombstone is not None and tombstone[0] == user_id:
            raise BadQueueId(queue_id, reason=tombstone[1])
        raise BadQueueId(queue_id, wrong_owner=tombstone is not None)

    def effective_lifespan(self, requested_secs: float) -> float:
        """0 means the default; anything else is capped at the maximum."""
        if requested_secs <= 0:
            return self.limits.default_lifespan_secs
        return min(float(requested_secs), self.limits.max_lifespan_secs)

    # -- lifecycle ----------------------------------------------------------

    def allocate(
        self, user_id: int, realm_id: int, options: QueueOptions, now: float
    ) -> ClientDescriptor:
        """Create an empty queue for `user_id`.

        At the per-user limit, the user's least recently active queue without a
        parked request is evicted first; if every one has a request parked,
        raises `TooManyQueues`.
        """
        self._make_room(user_id, now)
        client = self.detached(user_id, realm_id, options, now)
        self._insert(client)
        return client

    def detached(
        self, user_id: int, realm_id: int, options: QueueOptions, now: float
    ) -> ClientDescriptor:
        """An empty queue for `user_id` that no delivery reaches until it is
        `adopt`ed: a resume fills it with what the log holds (`payload_for`,
        `fill`) a slice at a time, between which the loop serves others."""
        queue_id = self._new_queue_id()
        assert queue_id not in self._clients, queue_id
        options = self._shared_options(options)
        return ClientDescriptor(queue_id, user_id, realm_id, options, now, EventQueue(self.encode))

    def adopt(self, client: ClientDescriptor, now: float) -> None:
        """Add a `detached` queue: deliveries reach it from now on. The
        per-user limit applies as in `allocate` (`TooManyQueues`)."""
        assert client.queue_id not in self._clients, client.queue_id
        self._make_room(client.user_id, now)
        client.last_active = now
        self._insert(client)

    def _make_room(self, user_id: int, now: float) -> None:
        """At the per-user limit, evict the user's least recently active queue
        without a parked request; raise `TooManyQueues` if every one has one."""
        existing = self._by_user.get(user_id)
        if existing is not None and len(existing) >= self.limits.max_queues_per_user:
            idle = [c for c in existing.values() if c.waiter is None]
            if not idle:
                raise TooManyQueues(self.limits.max_queues_per_user)
            self.end(min(idle, key=lambda c: c.last_active), "evicted", now)

    def _insert(self, client: ClientDescriptor) -> None:
        client.options = self._shared_options(client.options)
        self._clients[client.queue_id] = client
        self._by_user.setdefault(client.user_id, {})[client.queue_id] = client
        if client.options.all_public_streams:
            self._public_by_realm.setdefault(client.realm_id, {})[client.queue_id] = client
        self._idle_add(client)

    def _shared_options(self, options: QueueOptions) -> QueueOptions:
        """The registry's object equal to `options`. Clients ask for the same
        few option sets (one app, the same event types), and each object holds
        two frozensets (over 500 bytes): one object per distinct value instead
        of one per queue. At SHARED_OPTIONS distinct values the table starts
        again; queues keep the objects they have."""
        shared = self._options.get(options)
        if shared is not None:
            return shared
        if len(self._options) >= SHARED_OPTIONS:
            self._options.clear()
        self._options[options] = options
        return options

    def _idle_add(self, client: ClientDescriptor) -> None:
        """Append to its lifespan group: the newest `last_active` goes last."""
        lifespan = client.options.lifespan_secs
        group = self._idle.get(lifespan)
        if group is None:
            group = self._idle[lifespan] = OrderedDict()
        group[client.queue_id] = client

    def _idle_remove(self, client: ClientDescriptor) -> None:
        lifespan = client.options.lifespan_secs
        group = self._idle[lifespan]
        del group[client.queue_id]
        if not group:
            del self._idle[lifespan]

    def end(self, client: ClientDescriptor, reason: EndReason, now: float) -> None:
        """Remove `client`'s queue; a parked request is answered first."""
        if self._clients.pop(client.queue_id, None) is None:
            return
        user_queues = self._by_user[client.user_id]
        del user_queues[client.queue_id]
        last_for_user = not user_queues
        if last_for_user:
            del self._by_user[client.user_id]
        if client.options.all_public_streams:
            realm_queues = self._public_by_realm[client.realm_id]
            del realm_queues[client.queue_id]
            if not realm_queues:
                del self._public_by_realm[client.realm_id]
        waiter = client.waiter
        if waiter is not None:
            self._detach(client, now, reinsert=False)
            waiter.wake("overflow" if reason in ("overflow", "evicted") else "deleted")
        else:
            self._idle_remove(client)
        if reason in TOLD_REASONS:
            self._tombstones[client.queue_id] = (client.user_id, reason)
            while len(self._tombstones) > self.limits.max_tombstones:
                self._tombstones.popitem(last=False)
        for hook in self.end_hooks:
            hook(client, reason, last_for_user)

    def end_user(
        self, user_id: int, reason: EndReason, now: float, *, all_public_only: bool = False
    ) -> int:
        """End every queue of a user (deactivated), or only those that take
        every public channel's messages (a guest now); returns how many."""
        clients = [
            client
            for client in self.user_queues(user_id)
            if client.options.all_public_streams or not all_public_only
        ]
        for client in clients:
            self.end(client, reason, now)
        return len(clients)

    def delete(self, queue_id: str, user_id: int, now: float) -> ClientDescriptor:
        """The client deleted its queue (`DELETE /events`)."""
        client = self.get(queue_id, user_id)
        self.end(client, "deleted", now)
        return client

    def collect_expired(self, now: float) -> list[ClientDescriptor]:
        """End every queue idle for its whole lifespan; cost grows with the
        number collected plus the number of distinct lifespans, not with the
        number of queues."""
        expired: list[ClientDescriptor] = []
        for lifespan, group in list(self._idle.items()):
            for client in group.values():
                if now - client.last_active < lifespan:
                    break
                expired.append(client)
        for client in expired:
            self.end(client, "expired", now)
        return expired

    # -- requests -----------------------------------------------------------

    def touch(self, client: ClientDescriptor, now: float) -> None:
        """A request for this queue arrived: restart its idle clock.

        (Zulip refreshes only when a request parks; any request is safer.)
        """
        client.last_active = now
        if client.waiter is None:
            self._idle[client.options.lifespan_secs].move_to_end(client.queue_id)

    def displace(self, client: ClientDescriptor, now: float) -> None:
        """A newer request for this queue passed validation: answer the parked
        one (told it was displaced). Only one request is ever parked per queue."""
        waiter = client.waiter
        if waiter is not None:
            self._detach(client, now)
            waiter.wake("displaced")

    def park(self, client: ClientDescriptor, waiter: Waiter, now: float) -> None:
        """Attach a long-poll request to this queue until an event, a heartbeat,
        deletion or shutdown wakes it. Call `displace` first."""
        assert client.waiter is None, "park on a queue that has a parked request"
        self._idle_remove(client)
        client.waiter = waiter
        client.last_active = now
        self.parked += 1

    def unpark(self, client: ClientDescriptor, waiter: Waiter, now: float) -> bool:
        """Detach `waiter` if it is still the one parked (its connection
        closed, or its turn to be answered came without a wake-up); the queue
        and its events stay. Returns whether it was."""
        if client.waiter is not waiter or client.queue_id not in self._clients:
            return False
        self._detach(client, now, reinsert=True)
        return True

    def _detach(self, client: ClientDescriptor, now: float, *, reinsert: bool = True) -> None:
        assert client.waiter is not None
        client.waiter = None
        client.last_active = now
        self.parked -= 1
        if reinsert:
            self._idle_add(client)

    # -- delivery -----------------------------------------------------------

    def _push(
        self,
        client: ClientDescriptor,
        payload: Payload | tuple[Payload, ...],
        now: float,
        overflowed: list[ClientDescriptor],
    ) -> None:
        """Append to one queue (several events for a legacy client's
        one-per-message forms) and wake its request. A queue now over a
        bound is added to `overflowed`, for the caller to end once it is done
        iterating (ending changes the indexes being iterated)."""
        queue = client.event_queue
        if isinstance(payload, Payload):
            queue.push(payload)
        else:
            for part in payload:
                queue.push(part)
        if len(queue) > self.limits.max_events or queue.bytes > self.limits.max_bytes:
            overflowed.append(client)
            return
        waiter = client.waiter
        if waiter is not None:
            self._detach(client, now)
            waiter.wake("events")

    def _end_overflowed(self, overflowed: list[ClientDescriptor], now: float) -> int:
        for client in overflowed:
            self.end(client, "overflow", now)
        return len(overflowed)

    def deliver(
        self,
        event: Event,
        users: Sequence[NoticeUser],
        realm_id: int | None,
        now: float,
        origin: object = None,
        position: int | None = None,
    ) -> DeliveryReport:
        """Put `event` into every queue of `users` that accepts it, plus, for a
        public channel message of `realm_id`, every all_public_streams queue of
        that realm (with empty flags). Parked requests are woken.

        `event` must have a string "type" and must not be mutated afterwards.
        When `realm_id` is given, queues of other realms are skipped. `origin`
        is attached to every payload built (see `Payload.origin`). A queue
        whose `covered` holds `position` already has the event's effect.
        """
        event_type: str = event["type"]
        rules = self.rules.get(event_type, ())
        dropping = self._dropping.get(event_type, ())
        payloads = NoticePayloads(event, self.encode, origin, rules)
        report = DeliveryReport()
        overflowed: list[ClientDescriptor] = []
        public = (
            realm_id is not None
            and realm_id in self._public_by_realm
            and is_public_channel_message(event)
        )
        reached: set[str] = set()
        by_user = self._by_user
        for user in users:
            if isinstance(user, int):
                clients = by_user.get(user)
                data: Mapping[str, Any] | None = None
            else:
                clients = by_user.get(user["id"])
                data = user
            if clients is None:
                continue
            for client in clients.values():
                if realm_id is not None and client.realm_id != realm_id:
                    report.foreign += 1
                    continue
                if public:
                    # A recipient's queue is served here, with its own flags,
                    # or not at all: never again by the realm-wide pass.
                    reached.add(client.queue_id)
                if not client.accepts(event_type, event, dropping) or (
                    client.covered and position in client.covered
                ):
                    continue
                payload = payloads.for_client(client, data)
                if payload is None:
                    continue
                report.queues += 1
                self._push(client, payload, now, overflowed)
        if public:
            assert realm_id is not None
            for client in self._public_by_realm[realm_id].values():
                if client.queue_id in reached or not client.accepts(event_type, event, dropping):
                    continue
                if client.covered and position in client.covered:
                    continue
                payload = payloads.for_client(client, None)
                if payload is None:
                    continue
                report.queues += 1
                self._push(client, payload, now, overflowed)
        report.overflowed = self._end_overflowed(overflowed, now)
        return report

    def payload_for(
        self,
        client: ClientDescriptor,
        event: Event,
        users: Sequence[NoticeUser],
        realm_id: int | None,
        origin: object = None,
    ) -> Payload | tuple[Payload, ...] | None:
        """What `deliver` would put into `client`'s queue for `event`, if
        anything; nothing is pushed."""
        if realm_id is not None and client.realm_id != realm_id:
            return None
        data: Mapping[str, Any] | None = None
        for user in users:
            if isinstance(user, int):
                if user == client.user_id:
                    break
            elif user["id"] == client.user_id:
                data = user
                break
        else:
            # Not a recipient: only a public channel message reaches it.
            if not (
                client.options.all_public_streams
                and realm_id is not None
                and is_public_channel_message(event)
            ):
                return None
        rules = self.rules.get(event["type"], ())
        if not client.accepts(event["type"], event, self._dropping.get(event["type"], ())):
            return None
        return NoticePayloads(event, self.encode, origin, rules).for_client(client, data)

    def fill(self, client: ClientDescriptor, payload: Payload | tuple[Payload, ...]) -> bool:
        """Append to a `detached` queue; False once it is over a bound (it
        holds more than a queue may)."""
        assert client.queue_id not in self._clients, client.queue_id
        queue = client.event_queue
        for part in (payload,) if isinstance(payload, Payload) else payload:
            queue.push(part)
        return len(queue) <= self.limits.max_events and queue.bytes <= self.limits.max_bytes

    def wake_for_heartbeat(self, client: ClientDescriptor, now: float) -> None:
        """Answer the parked request with a heartbeat. A heartbeat takes no id
        of its own (`heartbeat_items`): ids count only the queue's events, so
        a queue rebuilt from the event log after a crash numbers them as
        before."""
        waiter = client.waiter
        if waiter is not None and client.queue_id in self._clients:
            self._detach(client, now)
            waiter.wake("heartbeat")

    def heartbeat_items(self, client: ClientDescriptor) -> list[Item]:
        """What a request woken for a heartbeat gets when no event came
        meanwhile: one heartbeat carrying the newest acknowledged id (which
        acknowledging again changes nothing)."""
        return [(client.event_queue.newest_pruned_id, self._heartbeat)]

    def push_to_accepting(self, event: Event, now: float) -> int:
        """Push `event` to every queue whose `event_types` accepts it (the
        `restart` event after a reload). Returns how many queues got it."""
        payload = Payload.build(event, self.encode)
        dropping = self._dropping.get(event["type"], ())
        overflowed: list[ClientDescriptor] = []
        count = 0
        for client in self._clients.values():
            if client.accepts(event["type"], event, dropping):
                count += 1
                self._push(client, payload, now, overflowed)
        self._end_overflowed(overflowed, now)
        return count

    # -- snapshots ----------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, Any]:
        """Every queue as plain data (parked requests are not saved), their
        events' payloads each once (`PayloadTable`)."""
        table = PayloadTable()
        queues = [
            client.to_dict(now, embed=self.embed, table=table) for client in self._clients.values()
        ]
        return {
            "version": SNAPSHOT_VERSION,
            "payloads": table.saved(self.embed),
            "queues": queues,
            "tombstones": [[qid, user, reason] for qid, (user, reason) in self._tombstones.items()],
        }

    def snapshot_without_queues(self) -> dict[str, Any]:
        """The parts of a `snapshot` other than the queues and their payloads
        (which the caller saves in slices, and then the table of payloads)."""
        return {
            "version": SNAPSHOT_VERSION,
            "tombstones": [[qid, user, reason] for qid, (user, reason) in self._tombstones.items()],
        }

    def restore(
        self, data: Mapping[str, Any], now: float
    ) -> tuple[list[ClientDescriptor], list[str]]:
        """Load a `snapshot` into an empty registry. Returns the queues loaded
        and one message per saved queue that could not be (each is skipped:
        one bad queue does not cost the others theirs).

        Raises ValueError, loading nothing, if the data as a whole is not a
        snapshot this version can read.
        """
        assert not self._clients, "restore into a registry that has queues"
        version = data.get("version")
        if not isinstance(version, int) or version not in SNAPSHOT_VERSIONS_READ:
            raise ValueError(f"unsupported queue snapshot version {version!r}")
        raw_queues = data.get("queues")
        if not isinstance(raw_queues, list):
            raise ValueError("queues is not a list")
        tombstones = data.get("tombstones", [])
        if not isinstance(tombstones, list):
            raise ValueError("tombstones is not a list")
        clients: list[ClientDescriptor] = []
        errors: list[str] = []
        seen: set[str] = set()
        shared = SharedPayloads(self.encode, data.get("payloads"))
        for index, raw in enumerate(raw_queues):
            try:
                client = self._restore_one(raw, now, shared)
            except ValueError as exc:
                errors.append(f"saved queue {index}: {exc}")
                continue
            if client.queue_id in seen:
                errors.append(f"saved queue {index}: queue {client.queue_id} appears twice")
                continue
            seen.add(client.queue_id)
            clients.append(client)
        for client in sorted(clients, key=lambda c: c.last_active):
            self._insert(client)
        for entry in tombstones:
            if (
                isinstance(entry, list)
                and len(entry) == 3
                and isinstance(entry[0], str)
                and isinstance(entry[1], int)
                and entry[2] in TOLD_REASONS
                and entry[0] not in self._clients
            ):
                self._tombstones[entry[0]] = (entry[1], entry[2])
        return clients, errors

    def restore_queue(
        self, raw: object, now: float, shared: SharedPayloads | None = None
    ) -> ClientDescriptor:
        """Load one saved queue (`ClientDescriptor.to_dict`) into the registry,
        its events' payloads shared with the other queues restored with
        `shared` (made with this registry's encoder); ValueError for bad
        data or a queue that is already here."""
        client = self._restore_one(raw, now, shared)
        if client.queue_id in self._clients:
            raise ValueError(f"queue {client.queue_id} appears twice")
        self._insert(client)
        return client

    def _restore_one(
        self, raw: object, now: float, shared: SharedPayloads | None
    ) -> ClientDescriptor:
        if not isinstance(raw, dict):
            raise ValueError("a saved queue is not an object")
        client = ClientDescriptor.from_dict(raw, now, self.encode, shared)
        # Limits may have changed since the save: keep the lifespan within them.
        lifespan = min(client.options.lifespan_secs, self.limits.max_lifespan_secs)
        if lifespan != client.options.lifespan_secs:
            client.options = dataclasses.replace(client.options, lifespan_secs=lifespan)
        return client

    # -- introspection ------------------------------------------------------

    def held(self) -> tuple[int, int]:
        """(events, bytes) held over all queues; O(queues), for stats only."""
        events = 0
        size = 0
        for client in self._clients.values():
            events += len(client.event_queue)
            size += client.event_queue.bytes
        return events, size
