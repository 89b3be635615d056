"""The actions the register race test draws from: each makes one random change
to the Domain realm, of every area: realm settings, streams and
subscriptions, messages and flags, users and presence. Refusals
(ActionError) are part of life: they change nothing and send nothing."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from generation import accounts
from generation.actions import messages, streams, users
from generation.actions.base import ActionContext, ActionError
from generation.actions.realm import do_set_message_edit_limit, do_set_realm_property
from tests.domain.harness import Domain

RaceAction = Callable[[ActionContext, Domain, random.Random], Awaitable[Any]]

USERS = ("iago", "hamlet", "othello", "polonius")
STREAM_NAMES = ("Denmark", "Verona", "Scotland", "Rome", "Athens", "Venice")
CONTENT = (
    "hi", "@**King Hamlet** look", "@**all** lunch", "@**Iago** and @**Polonius**",
    "@**Othello, the Moor of Venice**", "@_**King Hamlet** quietly",
)  # fmt: skip
PROPAGATE = ("change_one", "change_later", "change_all")


async def _ids(ctx: ActionContext, query: bytes, params: tuple[Any, ...]) -> list[int]:
    cur = await ctx.conn.execute(query, params)
    return [row[0] for row in await cur.fetchall()]


def _user(domain: Domain, rng: random.Random) -> int:
    return domain.id(rng.choice(USERS))


# -- realm ----------------------------------------------------------------------


async def realm_setting(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    choice = rng.randrange(3)
    if choice == 0:
        await do_set_realm_property(
            ctx, None, domain.realm_id, "name", f"Realm {rng.randint(0, 9999)}"
        )
    elif choice == 1:
        prop = rng.choice(["allow_message_editing", "mandatory_topics"])
        await do_set_realm_property(ctx, None, domain.realm_id, prop, rng.random() < 0.5)
    else:
        await do_set_message_edit_limit(ctx, None, domain.realm_id, rng.choice([None, 60, 3600]))


# -- streams and subscriptions ---------------------------------------------------


async def stream_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    user = _user(domain, rng)
    stream_ids = await _ids(
        ctx,
        b"SELECT id FROM streams WHERE realm_id = %s AND NOT deactivated ORDER BY id",
        (domain.realm_id,),
    ) or [0]
    stream_id = rng.choice(stream_ids)
    realm = domain.realm_id
    choice = rng.randrange(11)
    if choice == 0:
        members = rng.sample([domain.id(u) for u in USERS], rng.randint(0, 3))
        await streams.do_create_stream(
            ctx,
            None,
            realm,
            rng.choice(STREAM_NAMES),
            invite_only=rng.random() < 0.4,
            subscribers=members,
        )
    elif choice in (1, 2):
        await streams.do_add_subscriptions(
            ctx, None, realm, [streams.StreamRequest(rng.choice(STREAM_NAMES))], principals=[user]
        )
    elif choice in (3, 4):
        await streams.do_remove_subscriptions(ctx, user, realm, [rng.choice(STREAM_NAMES)])
    elif choice == 5:
        prop, value = rng.choice(
            [("color", "#abcdef"), ("is_muted", rng.random() < 0.5), ("pin_to_top", True)]
        )
        await streams.do_update_subscription_properties(ctx, user, [(stream_id, prop, value)])
    elif choice == 6:
        await streams.do_rename_stream(ctx, None, realm, stream_id, rng.choice(STREAM_NAMES) + "!")
    elif choice == 7:
        await streams.do_change_stream_description(
            ctx, None, realm, stream_id, f"about {rng.randint(0, 99)}"
        )
    elif choice == 8:
        await streams.do_change_stream_invite_only(ctx, None, realm, stream_id, rng.random() < 0.5)
    elif choice == 9:
        if rng.random() < 0.3:
            await streams.do_delete_stream(ctx, None, realm, stream_id)
    else:
        change = rng.choice([streams.do_add_default_stream, streams.do_remove_default_stream])
        await change(ctx, None, realm, stream_id)


# -- messages ------------------------------------------------------------------------


async def message_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    user = _user(domain, rng)
    everything = await _ids(
        ctx, b"SELECT id FROM messages WHERE realm_id = %s ORDER BY id", (domain.realm_id,)
    )
    mine = await _ids(
        ctx, b"SELECT message_id FROM user_messages WHERE user_id = %s ORDER BY 1", (user,)
    )
    some = rng.sample(mine, min(len(mine), rng.randint(1, 3)))
    target = rng.choice(everything) if everything else 0
    choice = rng.randrange(12)
    if choice < 3:
        await messages.do_send_stream_message(
            ctx, user, rng.choice(STREAM_NAMES), rng.choice("abA"), rng.choice(CONTENT)
        )
    elif choice == 3:
        others = rng.sample([domain.id(u) for u in USERS], rng.randint(1, 2))
        await messages.do_send_direct_message(ctx, user, others, rng.choice(CONTENT))
    elif choice == 4:
        senders = await _ids(ctx, b"SELECT sender_id FROM messages WHERE id = %s", (target,))
        if senders:
            await messages.do_update_message(ctx, senders[0], target, content=rng.choice(CONTENT))
    elif choice == 5:
        await messages.do_update_message(
            ctx, user, target, topic=rng.choice("abAc"), propagate_mode=rng.choice(PROPAGATE)
        )
    elif choice == 6:
        await messages.do_delete_messages(
            ctx, domain.id("iago"), rng.sample(everything, min(2, len(everything)))
        )
    elif choice in (7, 8):
        await messages.do_update_message_flags(
            ctx, user, rng.choice(("add", "remove")), rng.choice(("read", "starred")), some
        )
    elif choice == 9:
        if rng.random() < 0.5:
            await messages.do_mark_all_as_read(ctx, user)
        else:
            stream_id = domain.streams[rng.choice(("Denmark", "Verona", "Scotland"))]
            await messages.do_mark_stream_as_read(ctx, user, stream_id, rng.choice(("a", None)))
    elif choice == 10:
        await messages.do_add_reaction(ctx, user, target, rng.choice(("tada", "octopus")))
    else:
        await messages.do_send_direct_typing(ctx, user, "start", [_user(domain, rng)])


# -- users -----------------------------------------------------------------------------


async def user_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    realm = domain.realm_id
    choice = rng.randrange(6)
    if choice == 0:
        user = _user(domain, rng)
        await users.do_change_full_name(ctx, user, realm, user, f"Person {rng.randint(0, 99)}")
    elif choice == 1:
        await users.do_update_presence(ctx, _user(domain, rng), rng.choice(("active", "idle")))
    elif choice == 2:
        await users.do_change_user_setting(
            ctx, _user(domain, rng), "twenty_four_hour_time", rng.random() < 0.5
        )
    elif choice == 3:
        role = rng.choice([accounts.ROLES["member"], accounts.ROLES["guest"]])
        await users.do_change_user_role(ctx, None, realm, domain.id("othello"), role)
    elif rng.random() < 0.5:
        await users.do_deactivate_user(ctx, None, realm, domain.id("othello"))
    else:
        await users.do_reactivate_user(ctx, None, realm, domain.id("othello"))


async def any_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    """One change of any area; a refusal changes nothing."""
    action = rng.choice([realm_setting, stream_change, stream_change, message_change,
                         message_change, message_change, user_change])  # fmt: skip
    with contextlib.suppress(ActionError):
        await action(ctx, domain, rng)


ACTIONS: list[RaceAction] = [any_change]
