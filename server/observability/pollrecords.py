"""The delivery log's records of one answer: one per event it carried and
one for the poll (or the stream's write) itself, as tuples in the column
order of `COLUMNS` (server/observability/logfiles.py).

Compiled (queues/compiled.py): an answer to a fan-out carries one event, a
busy client's many, and building their records in Python was a fifth of
the IO loop's time with a thousand busy clients (`DeliveryLog.responded`
hands them to its writer thread). No class here, so nothing to subclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from queues.client import ClientDescriptor
from queues.event_queue import Item
from server.observability.logfiles import FORMAT_VERSION

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
