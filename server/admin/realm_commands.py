"""`eventq realm ...`: organizations: create, deactivate, reactivate, and
update (name, description, settings), connected clients told of changes.
"""

from __future__ import annotations

import argparse
import sys

from generation import accounts
from generation.actions import realm as realm_actions
from generation.actions import realm_lifecycle
from generation.actions.access import ACCESS_GROUPS
from generation.actions.base import ActionContext
from generation.actions.groups.common import system_group_ids
from server.admin.common import act, connect, find_realm_id, print_json
from server.config import Settings


def cmd_realm_create(settings: Settings, args: argparse.Namespace) -> int:
    with connect(settings) as conn:
        realm_id = accounts.create_realm(conn, args.subdomain, args.name, args.description)
    print_json({"realm_id": realm_id, "subdomain": args.subdomain, "name": args.name})
    return 0


def cmd_realm_active(settings: Settings, args: argparse.Namespace) -> int:
    """Deactivating tells every active user of the realm (`realm`
    deactivated); every shard then ends their queues and refuses their
    requests. A realm already in the asked-for state is left alone (and the
    command still succeeds)."""
    realm_id = find_realm_id(settings, args.subdomain)
    active = args.action == "reactivate"
    change = realm_lifecycle.do_reactivate_realm if active else realm_lifecycle.do_deactivate_realm
    act(settings, lambda ctx: change(ctx, realm_id))
    print_json({"subdomain": args.subdomain, "active": active})
    return 0


def _parse_bool(text: str) -> bool:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_edit_limit(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        seconds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or none, got {text!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("the limit must be a positive number of seconds")
    return seconds


# Tells "--message-edit-limit none" (no limit) from an absent option.
_UNSET = object()

# realm update option -> realm property
_REALM_OPTIONS = {
    "name": "name",
    "description": "description",
    "allow_message_editing": "allow_message_editing",
    "mandatory_topics": "mandatory_topics",
}


def cmd_realm_update(settings: Settings, args: argparse.Namespace) -> int:
    """Change realm settings as the operator, in one transaction; connected
    clients get `realm` update (and `update_dict` for the edit limit)."""
    changes = {
        prop: getattr(args, option)
        for option, prop in _REALM_OPTIONS.items()
        if getattr(args, option) is not None
    }
    limit_given = args.message_edit_limit is not _UNSET
    access_group = args.can_access_all_users_group
    if not changes and not limit_given and access_group is None:
        print(
            "eventq: realm update: nothing to change; give --name, --description,"
            " --allow-message-editing, --mandatory-topics, --message-edit-limit"
            " or --can-access-all-users-group",
            file=sys.stderr,
        )
        return 2
    realm_id = find_realm_id(settings, args.subdomain)

    async def update(ctx: ActionContext) -> None:
        async with ctx.transaction():
            for prop, value in changes.items():
                await realm_actions.do_set_realm_property(ctx, None, realm_id, prop, value)
            if limit_given:
                await realm_actions.do_set_message_edit_limit(
                    ctx, None, realm_id, args.message_edit_limit
                )
            if access_group is not None:
                group_id = (await system_group_ids(ctx.conn, realm_id))[access_group]
                await realm_actions.do_set_can_access_all_users_group(ctx, None, realm_id, group_id)

    act(settings, update)
    if limit_given:
        changes["message_content_edit_limit_seconds"] = args.message_edit_limit
    if access_group is not None:
        changes["can_access_all_users_group"] = access_group
    print_json({"realm_id": realm_id, "subdomain": args.subdomain, "changed": changes})
    return 0


def add_realm_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`realm create|deactivate|reactivate|update`."""
    realm = sub.add_parser("realm", help="organizations").add_subparsers(
        dest="realm", required=True
    )
    create = realm.add_parser("create", help="create a realm; prints its realm_id")
    create.add_argument("--subdomain", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--description", default="")
    create.set_defaults(func=cmd_realm_create)
    for action in ("deactivate", "reactivate"):
        p = realm.add_parser(action, help=f"{action} a realm and its users' access")
        p.add_argument("--subdomain", required=True)
        p.set_defaults(func=cmd_realm_active, action=action)
    update = realm.add_parser(
        "update", help="change a realm's name, description or settings; clients are told"
    )
    update.add_argument("--subdomain", required=True)
    update.add_argument("--name")
    update.add_argument("--description")
    update.add_argument("--allow-message-editing", type=_parse_bool, metavar="true|false")
    update.add_argument("--mandatory-topics", type=_parse_bool, metavar="true|false")
    update.add_argument(
        "--message-edit-limit",
        type=_parse_edit_limit,
        default=_UNSET,
        metavar="SECONDS|none",
        help="how long after sending a message its content may be edited",
    )
    update.add_argument(
        "--can-access-all-users-group",
        choices=ACCESS_GROUPS,
        help="who sees every user: role:everyone, or role:members"
        " (guests see only whom they share a channel or a conversation with)",
    )
    update.set_defaults(func=cmd_realm_update)
