"""JSON encoding of responses; the events response is spliced from bytes.

Each event's client form is encoded once per payload (`queues.payload`); a
response to one queue only adds its ids and queue id around those bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from queues.payload import Payload

_OPTIONS = orjson.OPT_NON_STR_KEYS
# The media type of an event stream's answer (server/handlers/stream.py).
EVENT_STREAM_TYPE = "text/event-stream"


def encode(value: Mapping[str, Any]) -> bytes:
    """The encoder handed to the queue registry."""
    return orjson.dumps(value, option=_OPTIONS)


_EVENTS_PREFIX = b'{"result":"success","msg":"","events":['


def events_body(
    items: Sequence[tuple[int, Payload]],
    queue_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
    position: int | None = None,
) -> bytes:
    """`{"result": "success", "msg": "", "events": [...], "queue_id"?: ...,
    "stream_position"?: ...}`."""
    parts = [_EVENTS_PREFIX, b",".join([b'{"id":%d,%s' % (i, p.tail) for i, p in items]), b"]"]
    if position is not None:
        parts.append(b',"stream_position":%d' % position)
    if queue_id is not None:
        parts.append(b',"queue_id":')
        parts.append(orjson.dumps(queue_id))
    if extra:
        parts.append(b",")
        parts.append(orjson.dumps(extra, option=_OPTIONS)[1:-1])
    parts.append(b"}")
    return b"".join(parts)


def success_body(data: Mapping[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"result": "success", "msg": ""}
    if data:
        body.update(data)
    return orjson.dumps(body, option=_OPTIONS)
