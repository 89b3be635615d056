"""One client's ordered event queue: ids, acknowledgement, and flag collapsing.

Pure and single-threaded: called only from the server's IO loop.
"""

from __future__ import annotations

from typing import Any

from queues.errors import EventAlreadyPruned, EventNotInQueue
from queues.payload import Embed, Encoder, Event, Payload, PayloadTable, SharedPayloads

Item = tuple[int, Payload]


class _Collapsing:
    """Unread flag events of one full type, folded together.

    The parts are kept and merged into one payload only when the queue is
    read, so each push costs O(its own messages), not a re-encoding of all the
    messages accumulated so far.
    """

    __slots__ = ("event_id", "messages", "parts", "size")

    def __init__(self, event_id: int, payload: Payload):
        # The newest id folded in: the position the merged event takes.
        self.event_id = event_id
        self.parts = [payload]
        self.messages: list[object] = list(payload.event["messages"])
        self.size = payload.size

    def add(self, event_id: int, payload: Payload) -> None:
        self.event_id = event_id
        self.parts.append(payload)
        self.messages.extend(payload.event["messages"])
        self.size += payload.size

    def merged_event(self) -> Event:
        """The first event with every part's messages and the newest timestamp."""
        event: Event = dict(self.parts[0].event)
        event["messages"] = list(self.messages)
        for part in reversed(self.parts):
            if "timestamp" in part.event:
                event["timestamp"] = part.event["timestamp"]
                break
        return event

    def item(self, encode: Encoder) -> Item:
        if len(self.parts) == 1:
            return self.event_id, self.parts[0]
        return self.event_id, Payload.build(self.merged_event(), encode)


class EventQueue:
    """Events waiting for one client, in id order, until it acknowledges them.

    Ids start at 0 and grow by one per push (a push folded into a collapsed
    event still uses up an id, so delivered ids may skip).
    """

    __slots__ = ("_encode", "_flat", "_virtual", "bytes", "newest_pruned_id", "next_event_id")

    def __init__(self, encode: Encoder) -> None:
        self._encode = encode
        # The events held, flat: id, payload, id, payload... Ids strictly
        # increase; all are > newest_pruned_id. Flat, not a list of (id,
        # payload) tuples: a held event then adds no object of its own for
        # Python's cyclic GC to scan (ints are not tracked; the payload is
        # shared by every queue it went to). A list, not a deque: most queues
        # are empty most of the time, and an empty deque takes 760 bytes (its
        # first block), a list 56; a partial prune moves the few items behind
        # the acknowledged ones.
        self._flat: list[Any] = []
        # Collapsible events not yet read, by full type; each one's id is the
        # newest id folded into it and is larger than every id in `_flat` that
        # existed when it was created. Materialized into `_flat` on read.
        self._virtual: dict[str, _Collapsing] = {}
        # The id the next push gets; every id in the queue is below it.
        self.next_event_id = 0
        # The newest id acknowledged and dropped; -1 before the first prune.
        self.newest_pruned_id = -1
        # Sum of `Payload.size` over `_flat` and `_virtual`: the byte budget used.
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._flat) // 2 + len(self._virtual)

    def empty(self) -> bool:
        return not self._flat and not self._virtual

    def push(self, payload: Payload) -> int:
        """Append `payload` with the next id and return that id.

        A collapsible flag event folds into the unread one of its kind
        (payloads may be shared between queues: they are never modified).
        """
        event_id = self.next_event_id
        self.next_event_id += 1
        self.bytes += payload.size
        if self._virtual and payload.type == "update_message_flags":
            self._settle_opposite(payload.event)
        key = payload.collapse
        if key is None:
            flat = self._flat
            flat.append(event_id)
            flat.append(payload)
            return event_id
        collapsing = self._virtual.get(key)
        if collapsing is None:
            self._virtual[key] = _Collapsing(event_id, payload)
        else:
            collapsing.add(event_id, payload)
        return event_id

    def _settle_opposite(self, event: Event) -> None:
        """Before a flag change, fix in place the unread collapsed changes of
        the same flag in the other direction. Otherwise "read X", "unread X",
        "read Y" would fold the two reads together after the unread, and the
        client would end with X read: a flaw Zulip's own source admits,
        which we do not reproduce. Changes of other flags or kinds keep
        collapsing across it."""
        operation = event.get("operation", event.get("op"))
        opposite = {"add": "remove", "remove": "add"}.get(str(operation))
        if opposite is not None and f"flags/{opposite}/{event.get('flag')}" in self._virtual:
            self._materialize()

    def prune(self, last_event_id: int) -> None:
        """Drop every event with id <= `last_event_id`: the client has them.

        Re-sending the last acknowledged id is allowed and drops nothing (the
        client retries and gets the unacknowledged events again). An id older
        than that raises `EventAlreadyPruned`; an id this queue never delivered
        raises `EventNotInQueue`. Unlike Zulip, a rejected id changes nothing.
        """
        if last_event_id < self.newest_pruned_id:
            raise EventAlreadyPruned(last_event_id)
        # Unread collapsed events take part like the others, so that nothing
        # held is ever at or below the acknowledged id. (A GET that finds the
        # queue non-empty reads it anyway, which does the same.)
        self._materialize()
        if last_event_id == self.newest_pruned_id:
            return
        if last_event_id >= self.next_event_id:
            raise EventNotInQueue(last_event_id)
        flat = self._flat
        if flat and flat[-2] <= last_event_id:
            # The usual case: the client acknowledges all it was sent.
            if flat[-2] != last_event_id:
                raise EventNotInQueue(last_event_id)
            flat.clear()
            self.bytes = 0  # nothing collapsed is left after _materialize
            self.newest_pruned_id = last_event_id
            return
        end = 0
        dropped = 0
        boundary = self.newest_pruned_id
        while end < len(flat) and flat[end] <= last_event_id:
            boundary = flat[end]
            dropped += flat[end + 1].size
            end += 2
        if boundary != last_event_id:
            raise EventNotInQueue(last_event_id)
        del flat[:end]
        self.bytes -= dropped
        self.newest_pruned_id = last_event_id

    def contents(self) -> list[Item]:
        """Every unacknowledged event in id order.

        Collapsed events are merged in at the position of their newest id and
        become ordinary events, so later flag changes start a new collapse.
        """
        self._materialize()
        return self._held()

    def after(self, event_id: int) -> list[Item]:
        """The events held with an id above `event_id`, in id order (what an
        event stream has not written yet, server/handlers/stream.py);
        collapsed events are merged in first, as by `contents`."""
        self._materialize()
        flat = self._flat
        end = len(flat)
        # A stream that keeps up has written all but the newest event.
        if end == 0 or flat[end - 2] <= event_id:
            return []
        if end == 2 or flat[end - 4] <= event_id:
            return [(flat[end - 2], flat[end - 1])]
        low, high = 0, end // 2
        while low < high:
            middle = (low + high) // 2
            if flat[2 * middle] <= event_id:
                low = middle + 1
            else:
                high = middle
        return [(flat[i], flat[i + 1]) for i in range(2 * low, end, 2)]

    def _held(self) -> list[Item]:
        """The events of `_flat` as (id, payload) pairs, in id order."""
        flat = self._flat
        if len(flat) == 2:  # most answers: one event, without two slices and a zip
            return [(flat[0], flat[1])]
        return list(zip(flat[::2], flat[1::2], strict=True))

    def _materialize(self) -> None:
        if not self._virtual:
            return
        folded = [collapsing.item(self._encode) for collapsing in self._virtual.values()]
        self.bytes += sum(payload.size for _, payload in folded) - sum(
            collapsing.size for collapsing in self._virtual.values()
        )
        # The held run is sorted and the folded ones are few: Timsort merges
        # them in about linear time.
        merged = sorted([*self._held(), *folded], key=_item_id)
        self._flat = [part for item in merged for part in item]
        self._virtual.clear()

    def last_id(self) -> int | None:
        """The id of the newest event held (read or not), or None when empty."""
        newest: int | None = self._flat[-2] if self._flat else None
        for collapsing in self._virtual.values():
            if newest is None or collapsing.event_id > newest:
                newest = collapsing.event_id
        return newest

    def to_dict(
        self, embed: Embed | None = None, table: PayloadTable | None = None
    ) -> dict[str, Any]:
        """The queue as plain JSON-able data (stored form, internal keys kept).
        With `table`, each event is [its id, its payload's index in `table`]
        (a snapshot's); else with `embed`, each event is its encoding wrapped
        by `embed` (for the encoder that writes the snapshot), else a dict
        decoded from it. Collapsed flag changes not yet read are saved whole."""
        flat = self._flat
        # Most queues are empty: a checkpoint saves thousands of them.
        if not flat:
            events: list[Any] = []
        elif table is not None:
            index = table.index
            events = [
                [event_id, index(payload)]
                for event_id, payload in zip(flat[::2], flat[1::2], strict=True)
            ]
        else:
            events = [
                payload.stored_event(event_id)
                if embed is None
                else embed(payload.stored_json(event_id))
                for event_id, payload in zip(flat[::2], flat[1::2], strict=True)
            ]
        virtual = self._virtual
        return {
            "next_event_id": self.next_event_id,
            "newest_pruned_id": self.newest_pruned_id,
            "events": events,
            "virtual_events": {
                key: {**collapsing.merged_event(), "id": collapsing.event_id}
                for key, collapsing in virtual.items()
            }
            if virtual
            else {},
        }

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], encode: Encoder, shared: SharedPayloads | None = None
    ) -> EventQueue:
        """Rebuild a queue saved by `to_dict`, its payloads from `shared` (the
        restore's, for the queues restored together); raises ValueError if it
        is inconsistent."""
        queue = cls(encode)
        if shared is None:
            shared = SharedPayloads(encode)
        queue.next_event_id = _int(data, "next_event_id")
        queue.newest_pruned_id = _int(data, "newest_pruned_id", default=-1)
        previous = queue.newest_pruned_id
        for raw in _list(data, "events"):
            event_id, payload = _stored_item(raw, shared)
            if event_id <= previous:
                raise ValueError(f"event ids out of order at {event_id}")
            previous = event_id
            queue._flat.append(event_id)
            queue._flat.append(payload)
            queue.bytes += payload.size
        virtual = data.get("virtual_events", {})
        if not isinstance(virtual, dict):
            raise ValueError("virtual_events is not an object")
        held = set(queue._flat[::2])
        for key, raw in virtual.items():
            event_id, payload = _stored_item(raw, shared)
            if payload.collapse != key:
                raise ValueError(f"virtual event {key!r} has another type")
            if event_id <= queue.newest_pruned_id or event_id in held:
                raise ValueError(f"virtual event {key!r} reuses id {event_id}")
            held.add(event_id)
            queue._virtual[key] = _Collapsing(event_id, payload)
            queue.bytes += payload.size
        newest = queue.last_id()
        if newest is not None and newest >= queue.next_event_id:
            raise ValueError("next_event_id is not above the ids held")
        if queue.newest_pruned_id >= queue.next_event_id:
            raise ValueError("newest_pruned_id is not below next_event_id")
        return queue


def _item_id(item: Item) -> int:
    return item[0]


def _int(data: dict[str, Any], key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} is not an integer")
    return value


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"{key} is not a list")
    return value


def _stored_item(raw: object, shared: SharedPayloads) -> Item:
    if isinstance(raw, list):
        # [id, index in the snapshot's table of payloads]
        if len(raw) != 2:
            raise ValueError("a stored event is not [id, payload index]")
        event_id, index = raw
        if not isinstance(event_id, int) or isinstance(event_id, bool):
            raise ValueError("a stored event has no integer id")
        return event_id, shared.at(index)
    if not isinstance(raw, dict):
        raise ValueError("a stored event is not an object")
    event = dict(raw)
    event_id = event.pop("id", None)
    if not isinstance(event_id, int) or isinstance(event_id, bool):
        raise ValueError("a stored event has no integer id")
    if not isinstance(event.get("type"), str):
        raise ValueError(f"stored event {event_id} has no string type")
    return event_id, shared.build(event)
