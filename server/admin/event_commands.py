"""`eventq send-event`: send an event to users, through RabbitMQ (or the
server without a broker).
"""

from __future__ import annotations

import argparse
import json

from generation import accounts
from generation.config import ProducerConfig
from generation.errors import BadNotice
from generation.send import send_event
from server.admin.common import connect, print_json
from server.config import Settings


def _parse_users(raw: str) -> list[object]:
    """ "1,2,3" or a JSON list (ids or {"id": ..., ...} objects)."""
    text = raw.strip()
    if text.startswith("["):
        try:
            users = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadNotice(f"--users is not valid JSON: {exc}") from None
        if not isinstance(users, list):
            raise BadNotice("--users must be a JSON list")
        return users
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadNotice("--users must be comma-separated user ids or a JSON list") from None


def cmd_send_event(settings: Settings, args: argparse.Namespace) -> int:
    try:
        event = json.loads(args.event)
    except json.JSONDecodeError as exc:
        raise BadNotice(f"--event is not valid JSON: {exc}") from None
    users = _parse_users(args.users)
    with connect(settings) as conn:
        realm_id = accounts.resolve_realm(conn, args.realm)
    config = ProducerConfig.from_env()
    send_event(realm_id, event, users, config=config)
    print_json(
        {
            "sent": True,
            "realm_id": realm_id,
            "users": len(users),
            "via": config.notify_queue if config.amqp_url else config.notify_url,
        }
    )
    return 0


def add_send_event_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`send-event`."""
    send = sub.add_parser(
        "send-event",
        help="send an event to users (through RabbitMQ, or the server without a broker)",
    )
    send.add_argument("--realm", required=True, help="realm id or subdomain")
    send.add_argument("--users", required=True, help='user ids "1,2" or a JSON list')
    send.add_argument("--event", required=True, help='the event as JSON: {"type": ...}')
    send.set_defaults(func=cmd_send_event)
