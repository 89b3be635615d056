"""An event as it is held in queues: stored once, shared by every queue it went to.

One notice fanned out to thousands of queues produces one `Payload` per distinct
client variant (usually one), not one per queue: the queue keeps only
`(event_id, payload)` pairs, and the response writer splices the per-queue id in
front of the pre-encoded bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Event = dict[str, Any]

# Encodes a JSON object to bytes. Injected (orjson in the server, json in tests)
# because this package imports nothing outside the standard library.
Encoder = Callable[[Mapping[str, Any]], bytes]

# Keys a stored event may carry for the server's own use; never sent to clients.
INTERNAL_KEYS = frozenset({"internal_data"})

# Fixed cost charged to a queue's byte budget per event, on top of its encoding:
# the (id, payload) tuple and the deque slot.
PER_EVENT_OVERHEAD = 64


def collapse_key(event: Event) -> str | None:
    """The "full type" under which consecutive unread events merge, or None.

    Only `update_message_flags` events collapse (as in Zulip): their full
    type is `flags/<op>/<flag>` (`all_flags/...` when `all` is true, which never
    collapses); every `flags/` kind collapses except `flags/remove/read`,
    because a client must see each "mark unread" to keep its counts right.
    """
    if event.get("type") != "update_message_flags":
        return None
    operation = event.get("operation", event.get("op"))
    flag = event.get("flag")
    if not isinstance(operation, str) or not isinstance(flag, str):
        return None
    if event.get("all") or not isinstance(event.get("messages"), list):
        return None
    full_type = f"flags/{operation}/{flag}"
    return None if full_type == "flags/remove/read" else full_type


class Payload:
    """One event in stored form plus its client-visible encoding.

    Invariants: `event` has a string "type" and no "id" (ids are per queue);
    `tail` is the encoding of `event` minus `INTERNAL_KEYS`, without its opening
    brace, so `b'{"id":%d,' % id + tail` is the event as a client sees it;
    `collapse` is `collapse_key(event)`, computed once for every queue.
    A payload in more than one queue is never mutated.
    """

    __slots__ = ("collapse", "event", "origin", "size", "tail")

    def __init__(self, event: Event, tail: bytes):
        self.event = event
        self.tail = tail
        self.size = len(tail) + PER_EVENT_OVERHEAD
        self.collapse = collapse_key(event)
        # Whatever the server attached to the notice this came from (its
        # times, for the delivery log); opaque here.
        self.origin: object = None

    @classmethod
    def build(cls, event: Event, encode: Encoder) -> Payload:
        """Encode `event` once; `event` must not be mutated afterwards."""
        if INTERNAL_KEYS.isdisjoint(event):
            visible: Mapping[str, Any] = event
        else:
            visible = {k: v for k, v in event.items() if k not in INTERNAL_KEYS}
        encoded = encode(visible)
        # Every event has "type", so the object is never empty and the tail is
        # never just "}".
        assert encoded[:1] == b"{", encoded[:20]
        assert len(encoded) > 2, encoded
        return cls(event, encoded[1:])

    def client_event(self, event_id: int) -> Event:
        """The event as a client sees it, as a new dict (for tests and register)."""
        out = {k: v for k, v in self.event.items() if k not in INTERNAL_KEYS}
        out["id"] = event_id
        return out

    def stored_event(self, event_id: int) -> Event:
        """The event with its id, internal keys included (for snapshots)."""
        out = dict(self.event)
        out["id"] = event_id
        return out
