"""`eventq user ...`: users and API keys: create, rotate-key, deactivate,
reactivate, connected clients (and every shard) told of changes.
"""

from __future__ import annotations

import argparse
import logging

from generation import accounts
from generation.actions import users as user_actions
from generation.actions.base import ActionContext
from generation.config import ProducerConfig
from generation.events.users import credentials_changed
from generation.send import PublishError, send_event_on_commit, transaction
from server.admin.common import act, connect, find_realm_id, print_json
from server.config import Settings

log = logging.getLogger("eventq")


def cmd_user_create(settings: Settings, args: argparse.Namespace) -> int:
    """The user joins the realm's default streams; connected clients get
    `realm_user` add (and `peer_add`)."""
    realm_id = find_realm_id(settings, args.realm)
    user = act(
        settings,
        lambda ctx: user_actions.do_create_user(
            ctx, None, realm_id, args.email, args.full_name, accounts.ROLES[args.role]
        ),
    )
    print_json(user.as_json())
    return 0


def cmd_user_rotate(settings: Settings, args: argparse.Namespace) -> int:
    """The new key is printed once the change is committed; every shard is
    told in the same transaction (the event log), so each forgets what it
    cached of the old key at once, not at its cache's next look."""
    config = ProducerConfig.from_env()
    with connect(settings) as conn:
        try:
            with transaction(conn):
                user = accounts.rotate_api_key(conn, args.realm, args.email)
                # To no user: no queue receives it, whatever its version.
                send_event_on_commit(
                    conn, user.realm_id, credentials_changed(user.user_id), [], config=config
                )
        except PublishError as exc:
            # Committed: with the event log the servers read it from its tail.
            log.warning(
                "the servers were not told (%s); %s",
                exc,
                "they read it from the event log"
                if config.event_log
                else "they refuse the old key within EVENTQ_AUTH_CACHE_SECS",
            )
    print_json(user.as_json())
    return 0


def cmd_user_active(settings: Settings, args: argparse.Namespace) -> int:
    """Connected clients get `realm_user` update; a user already in the
    asked-for state is left alone (and the command still succeeds)."""
    realm_id = find_realm_id(settings, args.realm)
    active = args.action == "reactivate"

    async def change(ctx: ActionContext) -> None:
        target = await user_actions.find_user(ctx.conn, realm_id, args.email)
        if target.is_active == active:
            return
        if active:
            await user_actions.do_reactivate_user(ctx, None, realm_id, target.id)
        else:
            await user_actions.do_deactivate_user(ctx, None, realm_id, target.id)

    act(settings, change)
    print_json({"email": args.email, "active": active})
    return 0


def add_user_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`user create|rotate-key|deactivate|reactivate`."""
    user = sub.add_parser("user", help="users and API keys").add_subparsers(
        dest="user", required=True
    )
    create = user.add_parser(
        "create", help="create a user (joining the default streams); prints the API key"
    )
    create.add_argument("--realm", required=True, help="the realm's subdomain")
    create.add_argument("--email", required=True)
    create.add_argument("--full-name", required=True)
    create.add_argument("--role", default="member", choices=sorted(accounts.ROLES))
    create.set_defaults(func=cmd_user_create)
    rotate = user.add_parser("rotate-key", help="replace a user's API key; prints the new one")
    rotate.add_argument("--realm", required=True)
    rotate.add_argument("--email", required=True)
    rotate.set_defaults(func=cmd_user_rotate)
    for action in ("deactivate", "reactivate"):
        p = user.add_parser(action, help=f"{action} a user")
        p.add_argument("--realm", required=True)
        p.add_argument("--email", required=True)
        p.set_defaults(func=cmd_user_active, action=action)
