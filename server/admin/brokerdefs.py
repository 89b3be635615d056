"""RabbitMQ definitions for the notify queues (`eventq sharding rabbitmq`), to
declare them before any shard starts: `rabbitmqctl import_definitions`.

One durable queue per shard (`<EVENTQ_NOTIFY_QUEUE>_<shard>`) and its
dead-letter queue (`<queue>.dead`), declared exactly as the shards' consumers
declare them (durable, no arguments), so that either may come first.
"""

from __future__ import annotations

from typing import Any

from generation.sharding import ShardMap, notify_queue
from server.delivery.consumer import dead_letter_queue


def queue_names(shard_map: ShardMap | None, base: str) -> list[str]:
    """Every queue the shards consume or dead-letter to."""
    consumed = (
        [base] if shard_map is None else [notify_queue(base, name) for name in shard_map.shards]
    )
    return [name for queue in consumed for name in (queue, dead_letter_queue(queue))]


def definitions(shard_map: ShardMap | None, base: str, vhost: str = "/") -> dict[str, Any]:
    return {
        "queues": [
            {
                "name": name,
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": {},
            }
            for name in queue_names(shard_map, base)
        ]
    }
