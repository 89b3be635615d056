"""The ways a queue operation can fail because of what a client asked.

Each error is raised by `queues` and mapped to an HTTP status and a
machine-readable `code` in one place, `server.errors`.
"""

from __future__ import annotations


class QueueError(Exception):
    """Base class: a client's request cannot be applied to the queue state."""


class BadQueueId(QueueError):
    """Raised by `QueueRegistry.get`/`delete` for an unknown queue, or one owned by
    another user (both look the same to the caller, so no id leaks)."""

    def __init__(self, queue_id: str, *, reason: str | None = None, wrong_owner: bool = False):
        super().__init__(f"Bad event queue ID: {queue_id}")
        self.queue_id = queue_id
        # Why the queue ended ("overflow"), only when the caller owned it.
        self.reason = reason
        # True when the id exists but belongs to someone else: logged, never shown.
        self.wrong_owner = wrong_owner


class EventAlreadyPruned(QueueError):
    """Raised by `EventQueue.prune` when `last_event_id` is older than what the
    client already acknowledged: events after it are gone."""

    def __init__(self, last_event_id: int):
        super().__init__(f"An event newer than {last_event_id} has already been pruned!")
        self.last_event_id = last_event_id


class EventNotInQueue(QueueError):
    """Raised by `EventQueue.prune` when `last_event_id` names an id this queue
    never delivered; the queue is left unchanged."""

    def __init__(self, last_event_id: int):
        super().__init__(f"Event {last_event_id} was not in this queue")
        self.last_event_id = last_event_id


class BadNarrow(QueueError):
    """Raised by `narrow.parse_narrow` for a malformed narrow or an operator or
    operand that the queue filter does not support."""


class TooManyQueues(QueueError):
    """Raised by `QueueRegistry.allocate` when a user already holds the maximum
    number of queues and every one of them has a request parked on it."""

    def __init__(self, limit: int):
        super().__init__(f"Too many event queues: this user already has {limit} queues in use")
        self.limit = limit
