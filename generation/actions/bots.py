"""Bots: users that a program runs, owned by a human of the realm.

A bot is a user row (`is_bot`, Zulip's `bot_type`, `bot_owner_id`: migration
0018) with its own API key in the hashed scheme of every key
(`generation.accounts`); the key is returned to whoever creates the bot or
regenerates its key, and shown nowhere else. A bot is administered by its
owner and by the realm's administrators (Zulip's `can_admin_user`); members
may create bots, guests and bots may not.

Who is told: every active user learns of a bot as a person (`realm_user`
add, and updates of its name, owner and activity); the bot's owner and the
realm's active human administrators (`bot_audience`, Zulip's
`bot_owner_user_ids`) also get `realm_bot` events. Each action writes its
change and queues its events in one transaction.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from generation.accounts import FAKE_EMAIL_DOMAIN, ROLES, api_key_id, hash_api_key, new_api_key

# A module, not its names: generation/actions/users.py imports this module
# (a deactivated person's bots stop with them), so either may load first.
from generation.actions import users as user_actions
from generation.actions.base import (
    ActionContext,
    ActionError,
    Outbox,
    UserRow,
    active_user_ids,
    get_user,
)
from generation.actions.groups import send_activity_group_changes, send_role_group_changes
from generation.actions.streams import send_subscriber_activity
from generation.actions.streams.common import _lock_streams as lock_streams
from generation.actions.streams.membership import _unsubscribe as unsubscribe
from generation.events.bots import (
    BOT_EMBEDDED,
    BOT_GENERIC,
    BOT_INCOMING_WEBHOOK,
    Bot,
    bot_entry,
)
from generation.events.users import ROLE_ADMINISTRATOR, credentials_changed, person

# Bots one user may own, active or not (a deactivated bot can be
# reactivated, so it still counts): each is a users row and an entry of its
# owner's and every administrator's `realm_bots`, so a loop of creations
# must not grow them without end. Zulip has no such limit; a person running
# more than 100 programs under their name is not the case we serve.
MAX_BOTS_PER_OWNER = 100

# The bot types eventq creates: outgoing webhook bots call out to a service
# (eventq makes no outgoing requests), embedded bots run inside Zulip's server.
CREATABLE_BOT_TYPES = (BOT_GENERIC, BOT_INCOMING_WEBHOOK)

# A bot's address is `<short_name>-bot@` the realm's subdomain under
# generation/accounts.py's FAKE_EMAIL_DOMAIN: an identifier no mail is ever
# sent to.
BOT_EMAIL_DOMAIN = FAKE_EMAIL_DOMAIN

# What a bot's short name (the local part before `-bot`) may contain: the
# common characters of an address's local part, without leading, trailing
# or doubled dots.
_SHORT_NAME = re.compile(r"^[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*$")
MAX_EMAIL = 254


@dataclasses.dataclass(frozen=True, slots=True)
class BotRow:
    """A bot of any state."""

    id: int
    realm_id: int
    email: str
    full_name: str
    bot_type: int
    is_active: bool
    bot_owner_id: int
    date_joined: datetime
    timezone: str

    def entry(self) -> Bot:
        return bot_entry(
            user_id=self.id,
            email=self.email,
            full_name=self.full_name,
            bot_type=self.bot_type,
            is_active=self.is_active,
            owner_id=self.bot_owner_id,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class CreatedBot:
    """A new bot; `api_key` is shown here only."""

    user_id: int
    email: str
    full_name: str
    bot_type: int
    owner_id: int
    api_key: str


_BOT_COLUMNS = (
    "id, realm_id, email, full_name, bot_type, is_active, bot_owner_id, date_joined, timezone"
)


async def _bot_row(ctx: ActionContext, realm_id: int, bot_id: int, *, lock: bool) -> BotRow | None:
    cur = ctx.conn.cursor(row_factory=class_row(BotRow))
    await cur.execute(
        f"SELECT {_BOT_COLUMNS} FROM users"  # noqa: S608 (fixed columns)
        f" WHERE id = %s AND realm_id = %s AND is_bot{' FOR UPDATE' if lock else ''}",
        (bot_id, realm_id),
    )
    return await cur.fetchone()


async def bot_audience(
    conn: psycopg.AsyncConnection[Any], realm_id: int, owner_id: int
) -> list[int]:
    """Who receives a bot's `realm_bot` events: its owner (if active) and the
    realm's active human administrators, by id."""
    cur = await conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND is_active"
        " AND (id = %s OR (role <= %s AND NOT is_bot)) ORDER BY id",
        (realm_id, owner_id, ROLE_ADMINISTRATOR),
    )
    return [row[0] for row in await cur.fetchall()]


async def _human_member(ctx: ActionContext, actor_id: int, realm_id: int) -> Any:
    """The acting user, who must be an active human member or more: Zulip's
    `require_member_or_admin`."""
    actor = await get_user(ctx.conn, actor_id, realm_id)
    if actor.is_guest:
        raise ActionError("Not allowed for guest users")
    if await _is_bot(ctx, actor_id):
        raise ActionError("This endpoint does not accept bot requests.")
    return actor


async def _is_bot(ctx: ActionContext, user_id: int) -> bool:
    cur = await ctx.conn.execute("SELECT is_bot FROM users WHERE id = %s", (user_id,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def access_bot(
    ctx: ActionContext, actor_id: int, realm_id: int, bot_id: int, *, lock: bool = True
) -> BotRow:
    """A bot of the realm (active or not) that the actor may administer: its
    owner or an administrator (Zulip's `access_bot_by_id`); locked for the
    caller's transaction unless `lock` is False."""
    actor = await _human_member(ctx, actor_id, realm_id)
    bot = await _bot_row(ctx, realm_id, bot_id, lock=lock)
    if bot is None:
        raise ActionError("No such bot")
    if not actor.is_admin and bot.bot_owner_id != actor_id:
        raise ActionError("Insufficient permission")
    return bot


def check_short_name(short_name: object) -> str:
    """A short name as stored (surrounding blanks removed), or Zulip's
    "Bad name or username"."""
    name = short_name.strip() if isinstance(short_name, str) else ""
    if not name or not _SHORT_NAME.match(name):
        raise ActionError("Bad name or username")
    return name


def bot_email(short_name: str, subdomain: str) -> str:
    """The address Zulip forms for a bot: `<short_name>-bot@<realm domain>`."""
    return f"{short_name}-bot@{subdomain}.{BOT_EMAIL_DOMAIN}"


def _check_bot_type(bot_type: object) -> int:
    if bot_type == BOT_EMBEDDED:
        # What Zulip answers where EMBEDDED_BOTS_ENABLED is off.
        raise ActionError("Embedded bots are not enabled.")
    if not isinstance(bot_type, int) or isinstance(bot_type, bool):
        raise ActionError("Invalid bot type")
    if bot_type not in CREATABLE_BOT_TYPES:
        raise ActionError("Invalid bot type")
    return bot_type


async def _check_name_available(ctx: ActionContext, realm_id: int, full_name: str) -> None:
    """Zulip's `check_bot_name_available`: no active user of the realm has
    the name already."""
    cur = await ctx.conn.execute(
        "SELECT 1 FROM users WHERE realm_id = %s AND full_name = %s AND is_active",
        (realm_id, full_name),
    )
    if await cur.fetchone() is not None:
        raise ActionError("Name is already in use!")


async def _check_room(ctx: ActionContext, owner_id: int) -> None:
    """Refuse a bot past `MAX_BOTS_PER_OWNER` for `owner_id` (whose row the
    caller holds locked, so that two creations cannot both pass)."""
    cur = await ctx.conn.execute(
        "SELECT count(*) FROM users WHERE bot_owner_id = %s AND is_bot", (owner_id,)
    )
    row = await cur.fetchone()
    assert row is not None
    if row[0] >= MAX_BOTS_PER_OWNER:
        raise ActionError(f"A user may own at most {MAX_BOTS_PER_OWNER} bots")


async def _lock_user(ctx: ActionContext, user_id: int) -> None:
    await ctx.conn.execute("SELECT 1 FROM users WHERE id = %s FOR UPDATE", (user_id,))


# -- creating --------------------------------------------------------------------


async def do_create_bot(
    ctx: ActionContext,
    owner_id: int,
    realm_id: int,
    full_name: str,
    short_name: str,
    bot_type: int = BOT_GENERIC,
) -> CreatedBot:
    """Create an active bot owned by `owner_id` (an active human member or
    more), with a fresh API key, returned only here. Every active user gets
    `realm_user` add; the owner and the administrators `realm_bot` add
    (Zulip's order). The bot joins no stream: Zulip's default streams are
    for humans."""
    owner = await _human_member(ctx, owner_id, realm_id)
    name = check_short_name(short_name)
    full_name = user_actions.check_full_name(full_name)
    bot_type = _check_bot_type(bot_type)
    async with ctx.transaction() as outbox:
        cur = await ctx.conn.execute("SELECT subdomain FROM realms WHERE id = %s", (realm_id,))
        realm = await cur.fetchone()
        assert realm is not None  # the owner is of this realm
        email = bot_email(name, realm[0])
        if len(email) > MAX_EMAIL:
            raise ActionError("Bad name or username")
        await _lock_user(ctx, owner.id)
        taken = await ctx.conn.execute(
            "SELECT 1 FROM users WHERE realm_id = %s AND lower(email) = lower(%s)",
            (realm_id, email),
        )
        if await taken.fetchone() is not None:
            raise ActionError("Username already in use")
        await _check_name_available(ctx, realm_id, full_name)
        await _check_room(ctx, owner.id)
        bot_id, api_key = await _insert_bot(ctx, realm_id, email, full_name, bot_type, owner.id)
        await ctx.conn.execute("INSERT INTO user_settings (user_id) VALUES (%s)", (bot_id,))
        bot = await _bot_row(ctx, realm_id, bot_id, lock=False)
        assert bot is not None
        shown = person(
            user_id=bot.id,
            email=bot.email,
            full_name=bot.full_name,
            role=ROLES["member"],
            is_active=True,
            date_joined=bot.date_joined,
            timezone=bot.timezone,
            bot_type=bot.bot_type,
            bot_owner_id=bot.bot_owner_id,
        )
        everyone = await active_user_ids(ctx.conn, realm_id)
        outbox.send(realm_id, {"type": "realm_user", "op": "add", "person": shown}, everyone)
        # A bot is in the system groups of its role, as every user.
        await send_role_group_changes(ctx, realm_id, bot.id, None, ROLES["member"])
        outbox.send(
            realm_id,
            {"type": "realm_bot", "op": "add", "bot": bot.entry()},
            await bot_audience(ctx.conn, realm_id, owner.id),
        )
    return CreatedBot(bot.id, bot.email, bot.full_name, bot.bot_type, owner.id, api_key)


async def _insert_bot(
    ctx: ActionContext, realm_id: int, email: str, full_name: str, bot_type: int, owner_id: int
) -> tuple[int, str]:
    """Insert the row in a savepoint (a lost race for the address is an
    ActionError, not a broken transaction); returns (bot id, API key)."""
    while True:
        api_key = new_api_key()
        try:
            async with ctx.conn.transaction():
                cur = await ctx.conn.execute(
                    """
                    INSERT INTO users (realm_id, email, full_name, role, api_key_id,
                                       api_key_hash, api_key_hash_scheme,
                                       is_bot, bot_type, bot_owner_id)
                    VALUES (%s, %s, %s, %s, %s, %s, 2, true, %s, %s) RETURNING id
                    """,
                    (
                        realm_id,
                        email,
                        full_name,
                        ROLES["member"],
                        api_key_id(api_key),
                        hash_api_key(api_key),
                        bot_type,
                        owner_id,
                    ),
                )
                row = await cur.fetchone()
        except psycopg.errors.UniqueViolation as exc:
            if "api_key_id" in str(exc):
                continue  # 1 in 62^8: draw another key
            raise ActionError("Username already in use") from None
        assert row is not None
        return int(row[0]), api_key


# -- changing --------------------------------------------------------------------


async def do_change_bot_full_name(
    ctx: ActionContext, actor_id: int, realm_id: int, bot_id: int, full_name: str
) -> bool:
    """Rename a bot the actor administers. Every active user gets
    `realm_user` update, the bot's audience `realm_bot` update. Returns
    False (and tells nobody) if the name is unchanged."""
    full_name = user_actions.check_full_name(full_name)
    async with ctx.transaction() as outbox:
        bot = await access_bot(ctx, actor_id, realm_id, bot_id)
        if bot.full_name == full_name:
            return False
        await _check_name_available(ctx, realm_id, full_name)
        await ctx.conn.execute("UPDATE users SET full_name = %s WHERE id = %s", (full_name, bot_id))
        renamed = {"user_id": bot_id, "full_name": full_name}
        outbox.send(
            realm_id,
            {"type": "realm_user", "op": "update", "person": renamed},
            await active_user_ids(ctx.conn, realm_id),
        )
        outbox.send(
            realm_id,
            {"type": "realm_bot", "op": "update", "bot": renamed},
            await bot_audience(ctx.conn, realm_id, bot.bot_owner_id),
        )
    return True


async def do_change_bot_owner(
    ctx: ActionContext, actor_id: int, realm_id: int, bot_id: int, owner_id: int
) -> bool:
    """Give a bot the actor administers to another active human of the realm
    (Zulip's messages for one who is not). Zulip's events: the former owner,
    unless an administrator, gets `realm_bot` delete; the new owner, unless
    an administrator, `realm_bot` add; the rest of the bot's audience
    `realm_bot` update; every active user `realm_user` update. Returns False
    (and tells nobody) if `owner_id` owns it already."""
    async with ctx.transaction() as outbox:
        bot = await access_bot(ctx, actor_id, realm_id, bot_id)
        cur = ctx.conn.cursor(row_factory=class_row(_OwnerRow))
        await cur.execute(
            "SELECT id, role, is_active, is_bot FROM users WHERE id = %s AND realm_id = %s",
            (owner_id, realm_id),
        )
        new = await cur.fetchone()
        if new is None:
            raise ActionError("Failed to change owner, no such user")
        if not new.is_active:
            raise ActionError("Failed to change owner, user is deactivated")
        if new.is_bot:
            raise ActionError("Failed to change owner, bots can't own other bots")
        if new.id == bot.bot_owner_id:
            return False
        await _lock_user(ctx, new.id)
        await _check_room(ctx, new.id)
        await ctx.conn.execute("UPDATE users SET bot_owner_id = %s WHERE id = %s", (new.id, bot_id))
        await _send_owner_change(ctx, outbox, bot, new)
        if new.role > ROLE_ADMINISTRATOR:
            await _leave_private_streams_of_others(ctx, outbox, bot, new.id)
    return True


async def _leave_private_streams_of_others(
    ctx: ActionContext, outbox: Outbox, bot: BotRow, owner_id: int
) -> None:
    """Unsubscribe the bot from the private streams its new owner (no
    administrator) is not subscribed to (Zulip's
    `remove_bot_from_inaccessible_private_streams`): the owner may
    regenerate the bot's key, and must not read a stream through it that
    they cannot read themselves."""
    streams = await lock_streams(
        ctx.conn,
        bot.realm_id,
        "invite_only AND id IN (SELECT stream_id FROM subscriptions WHERE user_id = %s AND active)"
        " AND id NOT IN (SELECT stream_id FROM subscriptions WHERE user_id = %s AND active)",
        (bot.id, owner_id),
    )
    if streams:
        member = UserRow(
            bot.id, bot.realm_id, bot.email, bot.full_name, ROLES["member"], bot.is_active
        )
        await unsubscribe(ctx.conn, outbox, bot.realm_id, streams, [member])


@dataclasses.dataclass(frozen=True, slots=True)
class _OwnerRow:
    id: int
    role: int
    is_active: bool
    is_bot: bool


async def _send_owner_change(
    ctx: ActionContext, outbox: Outbox, bot: BotRow, new: _OwnerRow
) -> None:
    realm_id = bot.realm_id
    audience = set(await bot_audience(ctx.conn, realm_id, new.id))
    cur = await ctx.conn.execute(
        "SELECT role, is_active FROM users WHERE id = %s", (bot.bot_owner_id,)
    )
    previous = await cur.fetchone()
    assert previous is not None
    if previous[1] and previous[0] > ROLE_ADMINISTRATOR:
        outbox.send(
            realm_id,
            {"type": "realm_bot", "op": "delete", "bot": {"user_id": bot.id}},
            [bot.bot_owner_id],
        )
        audience.discard(bot.bot_owner_id)
    if new.role > ROLE_ADMINISTRATOR:
        moved = dataclasses.replace(bot, bot_owner_id=new.id)
        outbox.send(realm_id, {"type": "realm_bot", "op": "add", "bot": moved.entry()}, [new.id])
        audience.discard(new.id)
    outbox.send(
        realm_id,
        {"type": "realm_bot", "op": "update", "bot": {"user_id": bot.id, "owner_id": new.id}},
        sorted(audience),
    )
    outbox.send(
        realm_id,
        {
            "type": "realm_user",
            "op": "update",
            "person": {"user_id": bot.id, "bot_owner_id": new.id},
        },
        await active_user_ids(ctx.conn, realm_id),
    )


async def do_deactivate_bot(ctx: ActionContext, actor_id: int, realm_id: int, bot_id: int) -> bool:
    """Deactivate a bot the actor administers (DELETE /bots/{id}): its key
    stops working and its queues end on every shard (the `realm_user`
    update is what every shard acts on). The viewers of its streams get
    `peer_remove`, every remaining active user `realm_user` update, its
    audience `realm_bot` update of `is_active` (Zulip since feature level
    222). An inactive bot is left alone: returns False, as Zulip succeeds."""
    async with ctx.transaction():
        bot = await access_bot(ctx, actor_id, realm_id, bot_id)
        if not bot.is_active:
            return False
        await set_bot_active(ctx, bot, active=False)
    return True


async def set_bot_active(ctx: ActionContext, bot: BotRow, *, active: bool) -> None:
    """Deactivate or reactivate a bot whose row the caller holds locked, in
    the caller's transaction, with Zulip's events (see `do_deactivate_bot`;
    reactivation: `realm_user` update, `peer_add`, `realm_bot` update)."""
    realm_id = bot.realm_id
    async with ctx.transaction() as outbox:
        await ctx.conn.execute("UPDATE users SET is_active = %s WHERE id = %s", (active, bot.id))
        if not active:
            # Subscriber lists hold active users: `peer_remove` first, as Zulip.
            await send_subscriber_activity(ctx, bot.id)
        change = {"user_id": bot.id, "is_active": active}
        outbox.send(
            realm_id,
            {"type": "realm_user", "op": "update", "person": change},
            await active_user_ids(ctx.conn, realm_id),
        )
        outbox.send(
            realm_id,
            {"type": "realm_bot", "op": "update", "bot": change},
            await bot_audience(ctx.conn, realm_id, bot.bot_owner_id),
        )
        await send_activity_group_changes(ctx, realm_id, bot.id, active=active)
        if active:
            await send_subscriber_activity(ctx, bot.id)


async def do_regenerate_bot_api_key(
    ctx: ActionContext, actor_id: int, realm_id: int, bot_id: int
) -> str:
    """Give a bot the actor administers a new API key, returned only here;
    the old one stops working at once on every shard
    (`eventq.credentials_changed`, logged with the change). No client
    event: Zulip's `realm_bot` update carries the key, which eventq never
    puts in an event (generation/events/bots.py)."""
    async with ctx.transaction() as outbox:
        await access_bot(ctx, actor_id, realm_id, bot_id)
        while True:
            api_key = new_api_key()
            try:
                async with ctx.conn.transaction():
                    await ctx.conn.execute(
                        "UPDATE users SET api_key_id = %s, api_key_hash = %s,"
                        " api_key_hash_scheme = 2 WHERE id = %s",
                        (api_key_id(api_key), hash_api_key(api_key), bot_id),
                    )
            except psycopg.errors.UniqueViolation:
                continue  # the key's id is another user's: 1 in 62^8, draw again
            break
        outbox.send(realm_id, credentials_changed(bot_id), [])
    return api_key


# -- reading ---------------------------------------------------------------------


async def bot_row(ctx: ActionContext, realm_id: int, bot_id: int) -> BotRow:
    """A bot of the realm as it is now, without a permission check (the
    caller made it: PATCH answers with the bot it changed, even one the
    actor just gave away)."""
    bot = await _bot_row(ctx, realm_id, bot_id, lock=False)
    if bot is None:
        raise ActionError("No such bot")
    return bot


async def own_bots(ctx: ActionContext, user_id: int, realm_id: int) -> list[BotRow]:
    """The active bots `user_id` owns, oldest first (Zulip's GET /bots)."""
    await _human_member(ctx, user_id, realm_id)
    cur = ctx.conn.cursor(row_factory=class_row(BotRow))
    await cur.execute(
        f"SELECT {_BOT_COLUMNS} FROM users"  # noqa: S608 (fixed columns)
        " WHERE realm_id = %s AND is_bot AND is_active AND bot_owner_id = %s"
        " ORDER BY date_joined, id",
        (realm_id, user_id),
    )
    return await cur.fetchall()


# -- what a change to a person means for bots (generation/actions/users.py) ----


async def deactivate_owned_bots(ctx: ActionContext, realm_id: int, owner_id: int) -> None:
    """Deactivate every active bot of a user being deactivated, first, in
    the caller's transaction (Zulip's cascade: a person's programs stop with
    them)."""
    cur = ctx.conn.cursor(row_factory=class_row(BotRow))
    await cur.execute(
        f"SELECT {_BOT_COLUMNS} FROM users"  # noqa: S608 (fixed columns)
        " WHERE realm_id = %s AND is_bot AND is_active AND bot_owner_id = %s"
        " ORDER BY id FOR UPDATE",
        (realm_id, owner_id),
    )
    for bot in await cur.fetchall():
        await set_bot_active(ctx, bot, active=False)


async def send_bot_activity(
    ctx: ActionContext, outbox: Outbox, realm_id: int, user_id: int, active: bool
) -> None:
    """After `users.do_deactivate_user` / `do_reactivate_user` changed a
    user who is a bot: its audience gets `realm_bot` update of `is_active`,
    as after `set_bot_active`. Nothing for a human."""
    bot = await _bot_row(ctx, realm_id, user_id, lock=False)
    if bot is not None:
        outbox.send(
            realm_id,
            {"type": "realm_bot", "op": "update", "bot": {"user_id": user_id, "is_active": active}},
            await bot_audience(ctx.conn, realm_id, bot.bot_owner_id),
        )
