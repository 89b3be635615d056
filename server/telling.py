"""What the server tells of its requests and queues: the observers
(server/observability/observe.py) of every answer, register, failed poll and
queue end, and the operator's log of the queue ends that need acting on.

The handlers call `responded`, `registered` and `poll_failed` through the
server (`observe_response`, ...); the registry calls `queue_ended` from its
end hooks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from server.handlers.poll import note_end

if TYPE_CHECKING:
    from queues.client import ClientDescriptor
    from queues.event_queue import Item
    from queues.registry import EndReason, QueueLimits
    from server.durability.journal import QueueJournal
    from server.interface import PollApi
    from server.observability.observe import Observers

log = logging.getLogger("eventq.server")


class Telling:
    """Tells the observers (when there are any: the delivery log and the
    metrics) with the wall clock's time, and logs the queue ends."""

    def __init__(
        self,
        observers: Observers,
        journal: QueueJournal,
        limits: QueueLimits,
        server: PollApi,
        clock: Callable[[], float],
    ):
        self.observers = observers
        self.journal = journal
        self.limits = limits
        self.server = server
        self.clock = clock

    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: str,
        waited_secs: float,
    ) -> None:
        # Each observer's responder (compiled ones called with no Python
        # frame between), not `Observers.responded`, which would add one.
        responders = self.observers.responders
        if responders:
            wall = time.time()
            for respond in responders:
                respond(client, items, response_bytes, outcome, waited_secs, wall)

    def registered(self, client: ClientDescriptor, latency_secs: float) -> None:
        if self.observers:
            self.observers.registered(client, latency_secs, time.time())

    def poll_failed(self, user_id: int, realm_id: int, queue_id: str | None, code: str) -> None:
        if self.observers:
            self.observers.poll_failed(user_id, realm_id, queue_id, code, time.time())

    def queue_ended(self, client: ClientDescriptor, reason: EndReason, last: bool) -> None:
        """The registry's end hook: a queue ended for `reason`."""
        note_end(self.server, client)
        self.journal.ended(client.queue_id)
        if self.observers:
            lifetime = self.clock() - client.created_at
            self.observers.queue_ended(client, reason, lifetime, time.time())
        if reason == "overflow":
            log.warning(
                "queue %s of user %d overflowed (%d events, %d bytes; limits %d events,"
                " %d bytes) and was ended: its client is not reading; it will re-register",
                client.queue_id,
                client.user_id,
                len(client.event_queue),
                client.event_queue.bytes,
                self.limits.max_events,
                self.limits.max_bytes,
            )
        elif reason == "evicted":
            log.info(
                "queue %s of user %d evicted: the user reached %d queues",
                client.queue_id,
                client.user_id,
                self.limits.max_queues_per_user,
            )
        else:
            log.debug("queue %s of user %d ended: %s", client.queue_id, client.user_id, reason)
