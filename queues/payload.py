"""An event as it is held in queues: stored once, shared by every queue it went to.

One notice fanned out to thousands of queues produces one `Payload` per distinct
client variant (usually one), not one per queue: a queue keeps only each
event's id and its payload, and the response writer splices the per-queue id
in front of the pre-encoded bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

Event = dict[str, Any]

# Encodes a JSON object to bytes. Injected (orjson in the server, json in tests)
# because this package imports nothing outside the standard library.
Encoder = Callable[[Mapping[str, Any]], bytes]
# Decodes what an `Encoder` wrote.
Decoder = Callable[[bytes], Any]
# Wraps an event's encoding so that the encoder of a snapshot writes it as it
# is (the server's is `orjson.Fragment`): a snapshot then neither decodes nor
# re-encodes the queued events.
Embed = Callable[[bytes], Any]

# Keys a stored event may carry for the server's own use; never sent to clients.
INTERNAL_KEYS = frozenset({"internal_data"})

# Fixed cost charged to a queue's byte budget per event, on top of its encoding:
# the payload object and the queue's two list slots (id, payload).
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
    """One event in stored form: its client-visible encoding and a few scalars.

    Invariants: `tail` is the encoding of the event minus `INTERNAL_KEYS`,
    without its opening brace, so `b'{"id":%d,' % id + tail` is the event as
    a client sees it; `internal` is the encoding of its internal keys (None
    when it has none); `type` is its "type"; `collapse` is
    `collapse_key(event)`, computed once for every queue. A payload in more
    than one queue is never mutated.

    The event itself is not kept (but for flag changes, which queues fold
    together): a queued event is then one object for Python's cyclic GC to
    scan, not the ten or so of a decoded message event, so that a burst of
    queued events (a resume fills a queue with a thousand) does not make a
    collection stop the IO loop for tens of milliseconds. `event` decodes it
    again, for the rare readers (snapshots, register's own queue, tests).
    """

    __slots__ = ("_event", "collapse", "internal", "origin", "size", "tail", "type")

    def __init__(self, event: Event, tail: bytes, internal: bytes | None = None):
        self.tail = tail
        self.internal = internal
        self.size = len(tail) + PER_EVENT_OVERHEAD
        self.type: str = event["type"]
        self.collapse = collapse_key(event)
        # Kept for the flag changes only: `EventQueue` folds and settles them.
        self._event: Event | None = event if self.type == "update_message_flags" else None
        # Whatever the server attached to the notice this came from (its
        # times, for the delivery log); opaque here. Best a tuple of numbers,
        # which the cyclic GC stops tracking.
        self.origin: object = None

    @classmethod
    def build(cls, event: Event, encode: Encoder) -> Payload:
        """Encode `event` once; `event` must not be mutated afterwards."""
        internal: bytes | None = None
        if INTERNAL_KEYS.isdisjoint(event):
            visible: Mapping[str, Any] = event
        else:
            visible = {k: v for k, v in event.items() if k not in INTERNAL_KEYS}
            internal = encode({k: v for k, v in event.items() if k in INTERNAL_KEYS})
        encoded = encode(visible)
        # Every event has "type", so the object is never empty and the tail is
        # never just "}".
        assert encoded[:1] == b"{", encoded[:20]
        assert len(encoded) > 2, encoded
        return cls(event, encoded[1:], internal)

    def stored_json(self, event_id: int) -> bytes:
        """`stored_event`'s encoding, from the encodings held."""
        return b'{"id":%d,' % event_id + self._stored_tail()

    def stored_body(self) -> bytes:
        """The encoding of `stored`, from the encodings held (a snapshot's
        table of payloads: `PayloadTable`)."""
        return b"{" + self._stored_tail()

    def _stored_tail(self) -> bytes:
        """`tail` with the internal keys joined in (the stored event's
        encoding without its opening brace)."""
        if self.internal is None:
            return self.tail
        # tail ends with "}", internal begins with "{" and holds a key at least.
        return self.tail[:-1] + b"," + self.internal[1:]

    def stored(self, decode: Decoder = json.loads) -> Event:
        """The event as stored (internal keys included), as a new dict."""
        if self._event is not None:
            return dict(self._event)
        event: Event = decode(b"{" + self.tail)
        if self.internal is not None:
            event.update(decode(self.internal))
        return event

    @property
    def event(self) -> Event:
        """The event (internal keys included), decoded anew: not for hot paths."""
        return self.stored()

    def client_event(self, event_id: int, decode: Decoder = json.loads) -> Event:
        """The event as a client sees it, as a new dict (for tests and register)."""
        if self._event is not None:
            out = {k: v for k, v in self._event.items() if k not in INTERNAL_KEYS}
        else:
            out = decode(b"{" + self.tail)
        out["id"] = event_id
        return out

    def stored_event(self, event_id: int, decode: Decoder = json.loads) -> Event:
        """The event with its id, internal keys included (for snapshots)."""
        out = self.stored(decode)
        out["id"] = event_id
        return out


class PayloadTable:
    """The payloads of the queues a snapshot saves, each once: a queue saves
    an event as its id and the payload's index here (`EventQueue.to_dict`),
    and the snapshot the table beside the queues. A notice delivered to
    5,000 queues is then saved once, not 5,000 times."""

    __slots__ = ("_index", "payloads")

    def __init__(self) -> None:
        # By id(): the table holds each payload, so no id is reused meanwhile.
        self._index: dict[int, int] = {}
        self.payloads: list[Payload] = []

    def index(self, payload: Payload) -> int:
        """`payload`'s index in the table (added if new)."""
        key = id(payload)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.payloads)
            self.payloads.append(payload)
        return index

    def saved(self, embed: Embed | None = None) -> list[Any]:
        """The table as a snapshot holds it: each payload's stored event
        (`Payload.stored`, without an id), or its encoding wrapped by `embed`."""
        if embed is None:
            return [payload.stored() for payload in self.payloads]
        return [embed(payload.stored_body()) for payload in self.payloads]


class SharedPayloads:
    """Payloads rebuilt from saved queues (a snapshot, the queue journal),
    one per distinct event, for one restore.

    A notice delivered to many queues is one payload shared by all of them.
    A snapshot saves it once (its table, `PayloadTable`), and the queues of
    that snapshot share what is built from that entry; events saved on
    their own (the queue journal, snapshots of format version 1, which saved
    each queue's events in it) get the payload of the same encoding built
    already: 2,000 queues holding the same 20 events of 2 KB came back as
    89 MB of copies instead of the 40 KB they had taken. Delivery never
    modifies a payload, and neither does a queue."""

    __slots__ = ("_built", "_table", "_table_built", "encode")

    def __init__(self, encode: Encoder, table: object = None) -> None:
        """`table`: the snapshot's saved `PayloadTable` (None: none); a
        ValueError if it is not a list."""
        if table is None:
            table = []
        if not isinstance(table, list):
            raise ValueError("payloads is not a list")
        self.encode = encode
        self._built: dict[tuple[bytes, bytes | None], Payload] = {}
        self._table: list[Any] = table
        self._table_built: dict[int, Payload] = {}

    def at(self, index: object) -> Payload:
        """The payload of the table's entry `index`, built on first use (a
        bad entry costs only the queues that hold it: ValueError)."""
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError("a saved event's payload index is not an integer")
        payload = self._table_built.get(index)
        if payload is None:
            if not 0 <= index < len(self._table):
                raise ValueError(f"no saved payload {index}")
            event = self._table[index]
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise ValueError(f"saved payload {index} is not an event with a string type")
            if "id" in event:
                raise ValueError(f"saved payload {index} has an id (each queue gives its own)")
            payload = self._table_built[index] = self.build(dict(event))
        return payload

    def build(self, event: Event) -> Payload:
        """`Payload.build(event)`, or the payload built already for an event
        of the same encoding. ValueError for one the encoder refuses (a
        file edited by hand: nested past its limit, say)."""
        try:
            payload = Payload.build(event, self.encode)
        except TypeError as exc:  # orjson's JSONEncodeError among them
            raise ValueError(f"a saved event cannot be encoded: {exc}") from None
        return self._built.setdefault((payload.tail, payload.internal), payload)
