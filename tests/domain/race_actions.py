"""The actions the register race test draws from: each makes one random change
to the Domain realm, of every area: realm settings, streams and
subscriptions, messages and flags, users and presence. Refusals
(ActionError) are part of life: they change nothing and send nothing."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from generation import accounts
from generation.actions import (
    bots,
    groups,
    messages,
    personal,
    presence,
    profile_fields,
    realm_config,
    streams,
    users,
)
from generation.actions.base import ActionContext, ActionError
from generation.actions.realm import (
    do_set_can_access_all_users_group,
    do_set_message_edit_limit,
    do_set_realm_property,
)
from tests.domain.harness import Domain

RaceAction = Callable[[ActionContext, Domain, random.Random], Awaitable[Any]]

USERS = ("iago", "hamlet", "othello", "polonius")
STREAM_NAMES = ("Denmark", "Verona", "Scotland", "Rome", "Athens", "Venice")
CONTENT = (
    "hi", "@**King Hamlet** look", "@**all** lunch", "@**Iago** and @**Polonius**",
    "@**Othello, the Moor of Venice**", "@_**King Hamlet** quietly",
)  # fmt: skip
PROPAGATE = ("change_one", "change_later", "change_all")
# Topics of messages and policies: letter cases of one topic, and the empty
# topic (which clients without `empty_topic_name` see as "general chat").
TOPICS = ("a", "b", "A", "")
NEW_TOPICS = (*TOPICS, "c")


async def _ids(ctx: ActionContext, query: bytes, params: tuple[Any, ...]) -> list[int]:
    cur = await ctx.conn.execute(query, params)
    return [row[0] for row in await cur.fetchall()]


def _user(domain: Domain, rng: random.Random) -> int:
    return domain.id(rng.choice(USERS))


# -- realm ----------------------------------------------------------------------


async def realm_setting(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    choice = rng.randrange(4)
    if choice == 3:
        # Whom guests see (generation/actions/access.py): role:everyone or role:members.
        [group] = await _ids(
            ctx,
            b"SELECT id FROM user_groups WHERE realm_id = %s AND is_system_group AND name = %s",
            (domain.realm_id, rng.choice(("role:everyone", "role:members"))),
        )
        await do_set_can_access_all_users_group(ctx, None, domain.realm_id, group)
    elif choice == 0:
        await do_set_realm_property(
            ctx, None, domain.realm_id, "name", f"Realm {rng.randint(0, 9999)}"
        )
    elif choice == 1:
        prop = rng.choice(["allow_message_editing", "mandatory_topics"])
        await do_set_realm_property(ctx, None, domain.realm_id, prop, rng.random() < 0.5)
    else:
        await do_set_message_edit_limit(ctx, None, domain.realm_id, rng.choice([None, 60, 3600]))


async def realm_config_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    """A custom emoji, linkifier, code playground or domain added, changed
    or removed (names from small sets, so that refusals happen too)."""
    realm, user = domain.realm_id, _user(domain, rng)
    name = rng.choice(("one", "two", "three"))
    choice = rng.randrange(8)
    if choice == 0:
        await realm_config.do_add_realm_emoji(ctx, user, realm, name, b"GIF89a" + bytes(8))
    elif choice == 1:
        await realm_config.do_remove_realm_emoji(ctx, user, realm, name)
    elif choice == 2:
        await realm_config.do_add_linkifier(
            ctx, None, realm, f"{name}(?P<id>[0-9]+)", f"https://{name}.example.com/{{id}}"
        )
    elif choice == 3:
        ids = [x["id"] for x in await realm_config.realm_linkifiers(ctx.conn, realm)]
        rng.shuffle(ids)
        if ids and rng.random() < 0.5:
            await realm_config.do_remove_linkifier(ctx, None, realm, ids[0])
        else:
            await realm_config.do_reorder_linkifiers(ctx, None, realm, ids)
    elif choice == 4:
        await realm_config.do_add_realm_playground(
            ctx, None, realm, name, "python", "https://p.example.com/?c={code}"
        )
    elif choice == 5:
        playgrounds = await realm_config.realm_playgrounds(ctx.conn, realm)
        if playgrounds:
            playground = rng.choice(playgrounds)
            await realm_config.do_remove_realm_playground(ctx, None, realm, playground["id"])
    elif choice == 6:
        await realm_config.do_add_realm_domain(ctx, None, realm, f"{name}.example.com", False)
    elif rng.random() < 0.5:
        await realm_config.do_change_realm_domain(
            ctx, None, realm, f"{name}.example.com", rng.random() < 0.5
        )
    else:
        await realm_config.do_remove_realm_domain(ctx, None, realm, f"{name}.example.com")


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
            archived = await _ids(
                ctx,
                b"SELECT id FROM streams WHERE realm_id = %s AND deactivated ORDER BY id",
                (realm,),
            )
            if archived:
                await streams.do_unarchive_stream(ctx, None, realm, rng.choice(archived))
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
            ctx, user, rng.choice(STREAM_NAMES), rng.choice(TOPICS), rng.choice(CONTENT)
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
            ctx, user, target, topic=rng.choice(NEW_TOPICS), propagate_mode=rng.choice(PROPAGATE)
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
        # "one": a custom emoji of realm_config_change, when active
        await messages.do_add_reaction(ctx, user, target, rng.choice(("tada", "octopus", "one")))
    else:
        await messages.do_send_direct_typing(ctx, user, "start", [_user(domain, rng)])


# -- users -----------------------------------------------------------------------------


async def user_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    realm = domain.realm_id
    choice = rng.randrange(7)
    if choice == 6:
        # A newcomer: "Unknown user" to the guests of a restricted realm.
        role = rng.choice([accounts.ROLES["member"], accounts.ROLES["guest"]])
        email = f"new{rng.randint(0, 9999)}@{domain.subdomain}.example"
        await users.do_create_user(ctx, None, realm, email, "Newcomer", role)
    elif choice == 0:
        user = _user(domain, rng)
        await users.do_change_full_name(ctx, user, realm, user, f"Person {rng.randint(0, 99)}")
    elif choice == 1:
        await presence.do_update_presence(ctx, _user(domain, rng), rng.choice(("active", "idle")))
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


# -- bots ------------------------------------------------------------------------------


async def bot_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    """A bot created, renamed, given to another owner, deactivated,
    reactivated or given a new key (short names from a small set, so that
    refusals happen too); owners are the humans."""
    realm = domain.realm_id
    ids = await _ids(
        ctx, b"SELECT id FROM users WHERE realm_id = %s AND is_bot ORDER BY id", (realm,)
    )
    bot = rng.choice(ids) if ids else 0
    choice = rng.randrange(6)
    if choice == 0 or not ids:
        name = rng.choice(("helper", "feed", "alert"))
        await bots.do_create_bot(
            ctx, _user(domain, rng), realm, f"{name} {rng.randint(0, 99)}", name
        )
    elif choice == 1:
        await bots.do_change_bot_full_name(
            ctx, domain.id("iago"), realm, bot, f"Bot {rng.randint(0, 99)}"
        )
    elif choice == 2:
        await bots.do_change_bot_owner(ctx, domain.id("iago"), realm, bot, _user(domain, rng))
    elif choice == 3:
        await bots.do_deactivate_bot(ctx, domain.id("iago"), realm, bot)
    elif choice == 4:
        await users.do_reactivate_user(ctx, None, realm, bot)
    else:
        await bots.do_regenerate_bot_api_key(ctx, domain.id("iago"), realm, bot)


async def group_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    realm = domain.realm_id
    ids = await _ids(
        ctx, b"SELECT id FROM user_groups WHERE realm_id = %s AND NOT is_system_group", (realm,)
    )
    every = await _ids(ctx, b"SELECT id FROM user_groups WHERE realm_id = %s", (realm,))
    group = rng.choice(ids) if ids else 0
    members = [_user(domain, rng)]
    choice = rng.randrange(6)
    if choice == 0 or not ids:
        await groups.do_create_user_group(
            ctx, None, realm, f"Group {rng.randint(0, 999)}", "", members, [rng.choice(every)]
        )
    elif choice == 1:
        await groups.do_update_user_group(ctx, None, realm, group, name=f"G {rng.randint(0, 99)}")
    elif choice == 2:
        await groups.do_update_user_group_members(ctx, None, realm, group, add=members)
    elif choice == 3:
        await groups.do_update_user_group_members(ctx, None, realm, group, delete=members)
    elif choice == 4:
        change = rng.choice(("add", "delete"))
        await groups.do_update_user_group_subgroups(
            ctx, None, realm, group, **{change: [rng.choice(every)]}
        )
    else:
        await groups.do_deactivate_user_group(ctx, None, realm, group)


# -- a user's own preferences and words ------------------------------------------------


async def personal_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    user = _user(domain, rng)
    stream_id = domain.streams[rng.choice(("Denmark", "Verona", "Scotland"))]
    choice = rng.randrange(9)
    if choice == 0:
        await personal.do_update_user_status(
            ctx, user, status_text=rng.choice(("", "busy")), away=rng.choice((None, True, False))
        )
    elif choice in (1, 2):
        await personal.do_set_user_topic_visibility_policy(
            ctx, user, stream_id, rng.choice(TOPICS), rng.randrange(4)
        )
    elif choice == 3:
        change = rng.choice((personal.do_mute_user, personal.do_unmute_user))
        await change(ctx, user, _user(domain, rng))
    elif choice == 4:
        change = rng.choice((personal.do_add_alert_words, personal.do_remove_alert_words))
        await change(ctx, user, [rng.choice(("hi", "look", "LUNCH"))])
    elif choice == 5:
        draft = personal.DraftData("stream", [stream_id], rng.choice("ab"), "draft")
        await personal.do_create_drafts(ctx, user, [draft])
    elif choice == 6:
        drafts = await _ids(ctx, b"SELECT id FROM drafts WHERE user_id = %s", (user,)) or [0]
        await personal.do_delete_draft(ctx, user, rng.choice(drafts))
    elif choice == 7:
        await users.do_change_user_setting(
            ctx, user, "enable_drafts_synchronization", rng.random() < 0.7
        )
    else:
        await personal.do_create_saved_snippet(ctx, user, "title", rng.choice(("a", "b")))


async def scheduled_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    """Schedule, edit, delete or send a scheduled message; or vote in a poll."""
    user = _user(domain, rng)
    mine = await _ids(
        ctx, b"SELECT id FROM scheduled_messages WHERE sender_id = %s ORDER BY id", (user,)
    )
    target = rng.choice(mine) if mine else 0
    at = int(time.time()) + rng.randint(60, 7200)
    choice = rng.randrange(6)
    if choice == 0:
        stream = domain.streams[rng.choice(("Denmark", "Verona", "Scotland"))]
        await messages.do_schedule_message(
            ctx, user, "stream", stream, rng.choice("ab"), rng.choice(CONTENT), at
        )
    elif choice == 1:
        others = rng.sample([domain.id(u) for u in USERS], rng.randint(1, 2))
        await messages.do_schedule_message(ctx, user, "private", others, None, "later", at)
    elif choice == 2:
        await messages.do_edit_scheduled_message(
            ctx, user, target, content=rng.choice(CONTENT), scheduled_delivery_timestamp=at
        )
    elif choice == 3:
        await messages.do_delete_scheduled_message(ctx, user, target)
    elif choice == 4:
        # Due now and sent (or failed: the sender may have lost the channel),
        # in one transaction: a change of the time alone sends no event.
        async with ctx.transaction():
            await ctx.conn.execute(
                "UPDATE scheduled_messages SET scheduled_at = now() - interval '5 minutes'"
                " WHERE id = %s",
                (target,),
            )
            attempt = await messages.deliver_due_scheduled_message(ctx)
            if attempt is None or attempt.scheduled_id != target:
                raise ActionError("another scheduled message was due first")  # rolled back
    else:
        polls = await _ids(
            ctx,
            b"SELECT DISTINCT s.message_id FROM submessages s"
            b" JOIN messages m ON m.id = s.message_id WHERE m.realm_id = %s ORDER BY 1",
            (domain.realm_id,),
        )
        if not polls:
            await messages.do_send_stream_message(ctx, user, "Verona", "poll", "/poll Q\nA\nB")
        else:
            vote = f'{{"type": "vote", "key": "canned,{rng.randint(0, 1)}", "vote": 1}}'
            await messages.do_add_submessage(ctx, user, rng.choice(polls), "widget", vote)


async def profile_field_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    """A custom profile field created, edited (a list losing an option),
    reordered or deleted, or a user's value of one set or removed (names,
    options and values from small sets, so that refusals happen too)."""
    realm, user = domain.realm_id, _user(domain, rng)
    fields = await _ids(
        ctx, b"SELECT id FROM custom_profile_fields WHERE realm_id = %s ORDER BY id", (realm,)
    )
    field = rng.choice(fields) if fields else 0
    options = {"a": {"text": "A", "order": "1"}, "b": {"text": "B", "order": "2"}}
    choice = rng.randrange(7)
    if choice == 0:
        kind = rng.choice((1, 2, 3, 8))  # short and long text, a list, pronouns
        await profile_fields.do_create_profile_field(
            ctx, None, realm, name=rng.choice(("One", "Two", "Three")), field_type=kind,
            field_data=options if kind == 3 else None,
        )  # fmt: skip
    elif choice == 1:
        kept = dict(rng.sample(sorted(options.items()), rng.randint(1, 2)))
        await profile_fields.do_update_profile_field(
            ctx, None, realm, field, hint=rng.choice(("", "hint")), field_data=kept
        )
    elif choice == 2:
        rng.shuffle(fields)
        await profile_fields.do_reorder_profile_fields(ctx, None, realm, fields)
    elif choice == 3:
        if rng.random() < 0.3:
            await profile_fields.do_delete_profile_field(ctx, None, realm, field)
    elif choice in (4, 5):
        value = rng.choice(("a", "b", "**c**"))
        await profile_fields.do_update_profile_data(ctx, user, realm, user, [(field, value)])
    else:
        await profile_fields.do_remove_profile_data(ctx, user, realm, user, [field])


async def any_change(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    """One change of any area; a refusal changes nothing."""
    action = rng.choice([realm_setting, realm_config_change, stream_change, stream_change,
                         message_change, message_change, message_change, user_change,
                         bot_change, group_change, personal_change,
                         scheduled_change, profile_field_change])  # fmt: skip
    with contextlib.suppress(ActionError):
        await action(ctx, domain, rng)


ACTIONS: list[RaceAction] = [any_change]
