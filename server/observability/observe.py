"""What the server reports about its work, to whoever watches: the delivery
log (for the analytics jobs) and the metrics (for Prometheus).

The server calls every observer at each point below, on the IO loop; an
observer must return at once (buffer, count, never wait on a disk or a
network) and never raise. The base class does nothing, so an observer
overrides only what it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeGuard

from queues.client import ClientDescriptor
from queues.event_queue import Item
from queues.registry import DeliveryReport, EndReason

# How a long-poll (GET /events) ended.
PollOutcome = str  # "events" | "heartbeat" | "displaced" | "empty" | "deleted" | "error"
# `Observer.responded` as a function: (client, items, response_bytes,
# outcome, waited_secs, now).
Responder = Callable[[ClientDescriptor, Sequence[Item], int, PollOutcome, float, float], None]


# Where a notice's events came from; one per notice, shared by every payload
# built from it (`queues.payload.Payload.origin`): wall-clock seconds when the
# server took the notice, when the producer published it (None when it did
# not say), and the event's place in the event log (None: not logged). A
# plain tuple of numbers, not a class: Python's cyclic GC stops tracking it
# at its first collection, and a resumed queue holds one per event.
Origin = tuple[float, float | None, int | None]


def make_origin(
    enqueued_at: float, published_at: float | None = None, position: int | None = None
) -> Origin:
    return (enqueued_at, published_at, position)


def is_origin(value: object) -> TypeGuard[Origin]:
    """Whether a payload's `origin` is one the server attached (a restored
    or collapsed event has none)."""
    return type(value) is tuple and len(value) == 3


class Observer:
    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: PollOutcome,
        waited_secs: float,
        now: float,
    ) -> None:
        """A GET was answered with `items` (possibly none) in a response of
        `response_bytes`; `waited_secs` it was parked; `now` is wall time."""

    def responder(self) -> Responder:
        """What the server calls for each answer, in place of `responded`
        (asked once, when the observer is added): `responded` itself, or a
        compiled function that does the same, which the server calls with
        no Python frame between (the delivery log's, the metrics')."""
        return self.responded

    def poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str, now: float
    ) -> None:
        """A GET was refused with an error `code` (BAD_EVENT_QUEUE_ID, ...)."""

    def registered(self, client: ClientDescriptor, latency_secs: float, now: float) -> None:
        """A queue was created (register, or an implicit GET registration)."""

    def queue_ended(
        self, client: ClientDescriptor, reason: EndReason, lifetime_secs: float, now: float
    ) -> None:
        """A queue ended: collected, deleted, overflowed, evicted, deactivated."""

    def notice_delivered(self, event_type: str, report: DeliveryReport, now: float) -> None:
        """A notice was delivered (its event reached `report.queues` queues)."""

    def notice_retried(self, notice_id: str | None, failures: int, error: str) -> None:
        """A notice failed and was republished for another try."""

    def notice_dead_lettered(
        self, notice_id: str | None, failures: int, error: str, now: float, realm_id: int | None
    ) -> None:
        """A notice failed for the last time and went to the dead-letter queue
        (`realm_id`: the realm its body names, if it can be read)."""

    def gc_ran(self, collected: int, duration_secs: float) -> None:
        """An idle-queue sweep ran."""

    def notification_enqueued(
        self,
        user_id: int,
        realm_id: int | None,
        message_id: int,
        kinds: Sequence[str],
        via: str,
        now: float,
    ) -> None:
        """A notification of `message_id` was enqueued for `user_id`, found
        away (server/notifications/away.py): `kinds` among "email", "push";
        `via` "delivery" (away when the message arrived) or "gc" (their last
        queue expired holding it unread)."""


class Observers(Observer):
    """Every observer of a server as one: each call goes to every member, in
    the order they were added. False (and of length 0) when it has none, so a
    caller can skip computing what it would pass (`if observers: ...`)."""

    def __init__(self, members: Iterable[Observer] = ()) -> None:
        self._members: tuple[Observer, ...] = tuple(members)
        # Each member's `responder`, in order: the hot path's `responded`.
        self.responders: tuple[Responder, ...] = tuple(m.responder() for m in self._members)

    def add(self, observer: Observer) -> None:
        self._members = (*self._members, observer)
        self.responders = (*self.responders, observer.responder())

    def __len__(self) -> int:
        return len(self._members)

    def __bool__(self) -> bool:
        return bool(self._members)

    def __iter__(self) -> Iterator[Observer]:
        return iter(self._members)

    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: PollOutcome,
        waited_secs: float,
        now: float,
    ) -> None:
        for respond in self.responders:
            respond(client, items, response_bytes, outcome, waited_secs, now)

    def responder(self) -> Responder:
        return self.responded

    def poll_failed(
        self, user_id: int, realm_id: int, queue_id: str | None, code: str, now: float
    ) -> None:
        for observer in self._members:
            observer.poll_failed(user_id, realm_id, queue_id, code, now)

    def registered(self, client: ClientDescriptor, latency_secs: float, now: float) -> None:
        for observer in self._members:
            observer.registered(client, latency_secs, now)

    def queue_ended(
        self, client: ClientDescriptor, reason: EndReason, lifetime_secs: float, now: float
    ) -> None:
        for observer in self._members:
            observer.queue_ended(client, reason, lifetime_secs, now)

    def notice_delivered(self, event_type: str, report: DeliveryReport, now: float) -> None:
        for observer in self._members:
            observer.notice_delivered(event_type, report, now)

    def notice_retried(self, notice_id: str | None, failures: int, error: str) -> None:
        for observer in self._members:
            observer.notice_retried(notice_id, failures, error)

    def notice_dead_lettered(
        self, notice_id: str | None, failures: int, error: str, now: float, realm_id: int | None
    ) -> None:
        for observer in self._members:
            observer.notice_dead_lettered(notice_id, failures, error, now, realm_id)

    def gc_ran(self, collected: int, duration_secs: float) -> None:
        for observer in self._members:
            observer.gc_ran(collected, duration_secs)

    def notification_enqueued(
        self,
        user_id: int,
        realm_id: int | None,
        message_id: int,
        kinds: Sequence[str],
        via: str,
        now: float,
    ) -> None:
        for observer in self._members:
            observer.notification_enqueued(user_id, realm_id, message_id, kinds, via, now)
