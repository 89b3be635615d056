"""`eventq demo`: the demo realm and its users, each given a fresh API key
(the server's demo page, EVENTQ_DEMO=1, logs in as them).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import psycopg

from generation import accounts
from generation.actions import messages as message_actions
from generation.actions import streams as stream_actions
from generation.actions.base import ActionContext
from generation.notice import Notice
from server.admin.common import connect, print_json
from server.config import DEMO_REALM, Settings

DEMO_USERS = (
    ("iago@demo.example.com", "Iago", "administrator"),
    ("hamlet@demo.example.com", "King Hamlet", "member"),
    ("othello@demo.example.com", "Othello, the Moor of Venice", "member"),
    ("polonius@demo.example.com", "Polonius", "guest"),
)
WELCOME = (
    "Welcome to eventq's demo realm. Everyone here is in #**general**;"
    " send a message, and every client of the realm has it at once."
)


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Create the demo realm and users if missing, and give each a fresh API key
    (keys are stored hashed, so the only way to show one is to issue it)."""
    users = []
    with connect(settings) as conn:
        exists = conn.execute("SELECT 1 FROM realms WHERE subdomain = %s", (DEMO_REALM,)).fetchone()
        realm_id = None
        if exists is None:
            realm_id = accounts.create_realm(
                conn, DEMO_REALM, "Demo Organization", "eventq's demo realm"
            )
        for email, full_name, role in DEMO_USERS:
            try:
                user = accounts.rotate_api_key(conn, DEMO_REALM, email)
            except accounts.AccountError:
                user = accounts.create_user(conn, DEMO_REALM, email, full_name, role)
            users.append(user.as_json())
    if realm_id is not None:
        # A channel everyone is in, for the demo page. The realm is new: no
        # client can be listening, so its events go nowhere.
        async def nowhere(notice: Notice) -> None:
            return None

        async def general(conn: psycopg.AsyncConnection[Any]) -> None:
            ctx = ActionContext(conn, nowhere)
            await stream_actions.do_add_subscriptions(
                ctx,
                None,
                realm_id,
                [stream_actions.StreamRequest("general", "Everyone in the demo")],
                principals=[user["user_id"] for user in users],
            )
            # A first message, as a new Zulip realm has its welcome messages:
            # history is where a client starts (zulip-term 0.7.0 stops at
            # start on a realm with none).
            await message_actions.do_send_stream_message(
                ctx, users[0]["user_id"], "general", "welcome", WELCOME, client="eventq demo"
            )

        async def create() -> None:
            async with await psycopg.AsyncConnection.connect(
                settings.database_url, autocommit=True
            ) as conn:
                await general(conn)

        asyncio.run(create())
    print_json({"realm": DEMO_REALM, "site": args.site, "users": users})
    return 0


def add_demo_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`demo`."""
    demo = sub.add_parser("demo", help="create the demo realm and users; prints fresh keys")
    demo.add_argument("--site", default="http://127.0.0.1:9800", help="URL shown with the keys")
    demo.set_defaults(func=cmd_demo)
