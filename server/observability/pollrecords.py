"""The delivery log's records of one answer: one per event it carried and
one for the poll (or the stream's write) itself, as tuples in the column
order of `COLUMNS` (server/observability/logfiles.py).

Compiled (queues/compiled.py): an answer to a fan-out carries one event, a
busy client's many, and building their records in Python was a fifth of
the IO loop's time with a thousand busy clients. Every answer also passes
through `RecordBuffer.responded` (the delivery log's) and
`PollCounts.responded` (the metrics'), which the server calls directly
(`Observer.responder` in server/observability/observe.py): the same work
in interpreted observers was 6-10 % of the server's CPU in a fan-out.
Nothing subclasses the classes here (`final`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final, final

from queues.client import ClientDescriptor
from queues.event_queue import Item
from server.observability.logfiles import FORMAT_VERSION, Record

_VERSION: Final = FORMAT_VERSION


def poll_records(
    shard: str,
    client: ClientDescriptor,
    items: Sequence[Item],
    response_bytes: int,
    outcome: str,
    waited_secs: float,
    now: float,
) -> list[tuple[Any, ...]]:
    """The records of an answer to `client` carrying `items` (a heartbeat
    among them is not an event delivered: it has no record, and is not
    counted in `batch_events`)."""
    realm_id = client.realm_id
    user_id = client.user_id
    queue_id = client.queue_id
    name = client.options.client_name
    depth = len(client.event_queue)
    records: list[tuple[Any, ...]] = []
    batch = 0
    if items and outcome != "heartbeat":
        for _, payload in items:
            if payload.type != "heartbeat":
                batch += 1
        for event_id, payload in items:
            event_type = payload.type
            if event_type == "heartbeat":
                continue
            enqueued_at: object = None
            published_at: object = None
            # The origin the server attached (make_origin in
            # server/observability/observe.py); a restored or collapsed
            # event has none.
            origin = payload.origin
            if isinstance(origin, tuple) and len(origin) == 3:
                enqueued_at = origin[0]
                published_at = origin[1]
            records.append(
                (
                    _VERSION, "delivery", now, shard, realm_id, user_id, queue_id, name,
                    event_id, event_type, enqueued_at, published_at, response_bytes,
                    batch, depth, None, None, None, None,
                    None, None, None, None, None, None,
                )
            )  # fmt: skip
    records.append(
        (
            _VERSION, "poll", now, shard, realm_id, user_id, queue_id, name, None, None, None,
            None, response_bytes, batch, depth, outcome, None, waited_secs, None, None, None,
            None, None, None, None,
        )
    )  # fmt: skip
    return records


@final
class RecordBuffer:
    """The delivery log's records on their way to its writer thread. The IO
    loop adds them (`add`, `responded`), each time under `lock` for one
    extend; the writer swaps `records` for an empty list under it. At most
    `max_pending` wait: past it, new records are dropped and counted in
    `dropped` and `overflowed` (the writer adds the ones it fails to write
    to `dropped`, under `lock`)."""

    def __init__(self, shard: str, max_pending: int) -> None:
        self.shard = shard
        self.max_pending = max_pending
        self.lock = threading.Lock()
        self.records: list[Record] = []
        self.dropped = 0
        self.overflowed = 0

    def add(self, records: Sequence[Record]) -> None:
        with self.lock:
            pending = self.records
            room = self.max_pending - len(pending)
            if len(records) <= room:
                pending.extend(records)
                return
            kept = max(room, 0)
            pending.extend(records[:kept])
            self.dropped += len(records) - kept
            self.overflowed += len(records) - kept

    def count_dropped(self, count: int) -> None:
        with self.lock:
            self.dropped += count

    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: str,
        waited_secs: float,
        now: float,
    ) -> None:
        """`Observer.responded`: the answer's records."""
        self.add(poll_records(self.shard, client, items, response_bytes, outcome, waited_secs, now))


@final
class PollCounts:
    """The metrics' counts of answers: by outcome, and the events and bytes
    they carried."""

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.events_sent = 0
        self.response_bytes = 0

    def responded(
        self,
        client: ClientDescriptor,
        items: Sequence[Item],
        response_bytes: int,
        outcome: str,
        waited_secs: float,
        now: float,
    ) -> None:
        """`Observer.responded`: one answer more."""
        outcomes = self.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        self.events_sent += len(items)
        self.response_bytes += response_bytes
