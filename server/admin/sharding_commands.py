"""`eventq sharding ...`: several shard processes: check the sharding
config, and generate from it the nginx site in front of the shards
(nginxsite.py) and the RabbitMQ definitions of their queues (brokerdefs.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generation import sharding
from generation.config import ProducerConfig
from server.admin.common import print_json
from server.config import Settings


def _shard_map(args: argparse.Namespace) -> sharding.ShardMap:
    path = args.config or ProducerConfig.from_env().sharding_path
    if path is None:
        raise sharding.ShardingError("no sharding config: pass --config or set EVENTQ_SHARDING")
    return sharding.load(path)


def cmd_sharding_check(settings: Settings, args: argparse.Namespace) -> int:
    """Validate the config; print where everything goes."""
    shard_map = _shard_map(args)
    base = ProducerConfig.from_env().notify_queue
    print_json(
        {
            "config": shard_map.source,
            "default_shard": shard_map.default_shard,
            "shards": {
                name: {
                    "listen": shard.address,
                    "notify_queue": sharding.notify_queue(base, name),
                    "state_file": f"event_queues.{name}.json",
                }
                for name, shard in shard_map.shards.items()
            },
            "realms": {str(realm): list(names) for realm, names in shard_map.realms.items()},
            "hosts": shard_map.hosts,
        }
    )
    return 0


def cmd_sharding_nginx(settings: Settings, args: argparse.Namespace) -> int:
    from server.admin import nginxsite  # noqa: PLC0415 (only this command needs it)

    site = nginxsite.render(
        _shard_map(args),
        listen=args.listen or "",
        server_name=args.server_name or "",
        max_body_bytes=settings.max_request_bytes,
    )
    if args.output is None:
        sys.stdout.write(site)
    else:
        tmp = args.output.with_name(f".{args.output.name}.tmp")
        tmp.write_text(site)
        tmp.replace(args.output)
        print(f"eventq: wrote {args.output}; check it with `nginx -t`, then reload nginx")
    return 0


def cmd_sharding_rabbitmq(settings: Settings, args: argparse.Namespace) -> int:
    from server.admin import brokerdefs  # noqa: PLC0415 (imports the consumer, hence pika)

    shard_map = _shard_map(args) if args.config or settings.sharding else None
    base = ProducerConfig.from_env().notify_queue
    print_json(brokerdefs.definitions(shard_map, base, args.vhost))
    return 0


def add_sharding_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sharding check|nginx|rabbitmq`."""
    shards = sub.add_parser(
        "sharding",
        help="several shard processes: check the config, generate nginx and RabbitMQ files",
    ).add_subparsers(dest="sharding", required=True)
    check = shards.add_parser("check", help="validate the sharding config; print the layout")
    nginx = shards.add_parser("nginx", help="the nginx site in front of the shards")
    nginx.add_argument("--listen", help="nginx listen argument (default: [nginx] listen, or 80)")
    nginx.add_argument("--server-name", help="default: [nginx] server_name, or _")
    nginx.add_argument("--output", type=Path, help="write here (atomically) instead of stdout")
    rabbit = shards.add_parser(
        "rabbitmq", help="RabbitMQ definitions of the notify and dead-letter queues"
    )
    rabbit.add_argument("--vhost", default="/", help="default: /")
    for p in (check, nginx, rabbit):
        p.add_argument("--config", type=Path, help="the sharding TOML (default: EVENTQ_SHARDING)")
    check.set_defaults(func=cmd_sharding_check)
    nginx.set_defaults(func=cmd_sharding_nginx)
    rabbit.set_defaults(func=cmd_sharding_rabbitmq)
