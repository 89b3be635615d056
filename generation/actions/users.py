"""Users of a realm: joining, names, roles, deactivation and reactivation;
who is online (presence); and each user's own settings.

Facts about a person (`realm_user`, `presence`) go to the active users who
may see them: everyone, unless the realm restricts its guests (Zulip's
`can_access_all_users_group` set to role:members,
generation/actions/access.py). Then a guest hears only of the users they
share a channel or a conversation with: a new user reaches the other
guests as "Unknown user", and a deactivation, a reactivation or a role
into or out of guest tells each guest concerned whom they lost (`realm_user`
remove) or gained (`realm_user` add). A user's settings go to that user's
own queues only.

`actor_id` None is the operator (the command line), allowed everything an
owner is.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from typing import Any

import psycopg
from psycopg.rows import class_row

from generation.accounts import (
    ROLE_NAMES,
    ROLES,
    CreatedUser,
    api_key_id,
    hash_api_key,
    new_api_key,
)
from generation.actions import bots
from generation.actions.access import (
    AccessBefore,
    access_before,
    guests_see_all_users,
    inaccessible_person,
    realm_subdomain,
    send_access_changes,
    users_who_can_access,
)
from generation.actions.base import (
    PERSON_COLUMNS,
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    PersonRow,
    active_user_ids,
    get_user,
    person_of,
)
from generation.actions.groups import send_activity_group_changes, send_role_group_changes
from generation.actions.personal.drafts import delete_all_drafts
from generation.actions.streams import (
    send_stream_access_for_role,
    send_subscriber_activity,
    subscribe_to_default_streams,
)
from generation.events.users import (
    INACCESSIBLE_USER,
    ROLE_GUEST,
    ROLE_OWNER,
    credentials_changed,
)

MAX_FULL_NAME = 100
MAX_EMAIL = 254

# The languages a user may choose (Zulip's codes), with the English names
# Zulip sends as `language_name`.
LANGUAGES: dict[str, str] = {
    "ar": "Arabic",
    "bg": "Bulgarian",
    "ca": "Catalan",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "en-gb": "British English",
    "es": "Spanish",
    "fa": "Persian",
    "fi": "Finnish",
    "fr": "French",
    "hi": "Hindi",
    "hu": "Hungarian",
    "id": "Indonesian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "lt": "Lithuanian",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "pt-br": "Portuguese (Brazil)",
    "ro": "Romanian",
    "ru": "Russian",
    "sr": "Serbian",
    "sv": "Swedish",
    "ta": "Tamil",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "vi": "Vietnamese",
    "zh-hans": "Simplified Chinese",
    "zh-hant": "Traditional Chinese",
}

# Zulip's color_scheme values: automatic, dark, light.
COLOR_SCHEMES = (1, 2, 3)

# setting -> accepted Python type; the column has the setting's name.
USER_SETTINGS: dict[str, type] = {
    "twenty_four_hour_time": bool,
    "enter_sends": bool,
    "color_scheme": int,
    "default_language": str,
    "send_read_receipts": bool,
    "pm_content_in_desktop_notifications": bool,
    "send_private_typing_notifications": bool,
    "send_stream_typing_notifications": bool,
    # Off deletes the user's drafts (generation/actions/personal/drafts.py).
    "enable_drafts_synchronization": bool,
    # Whom the notifications of a user who is away reach, and how
    # (generation/actions/messages/notify.py, migration 0023).
    "enable_offline_email_notifications": bool,
    "enable_offline_push_notifications": bool,
    "wildcard_mentions_notify": bool,
    "enable_stream_email_notifications": bool,
    "enable_stream_push_notifications": bool,
    "email_notifications_batching_period_seconds": int,
}

# Zulip's bounds of `email_notifications_batching_period_seconds`: more than
# 0, at most a week (also the column's CHECK).
MAX_EMAIL_BATCHING_PERIOD_SECS = 7 * 24 * 60 * 60

# Zulip's words for a value of the wrong JSON type.
_TYPE_NAMES = {bool: "a boolean", int: "an integer", str: "a string"}


async def _person_row(ctx: ActionContext, realm_id: int, user_id: int) -> PersonRow | None:
    cur = ctx.conn.cursor(row_factory=class_row(PersonRow))
    await cur.execute(
        f"SELECT {PERSON_COLUMNS} FROM users WHERE id = %s AND realm_id = %s",  # noqa: S608 (fixed columns)
        (user_id, realm_id),
    )
    return await cur.fetchone()


async def find_user(conn: psycopg.AsyncConnection[Any], realm_id: int, email: str) -> PersonRow:
    """A user of a realm by address (any letter case), active or not; for the
    command line, which names users by email."""
    cur = conn.cursor(row_factory=class_row(PersonRow))
    await cur.execute(
        f"SELECT {PERSON_COLUMNS} FROM users"  # noqa: S608 (fixed columns)
        " WHERE realm_id = %s AND lower(email) = lower(%s)",
        (realm_id, email),
    )
    row = await cur.fetchone()
    if row is None:
        raise ActionError(f"No such user: {email}")
    return row


# -- permissions ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Actor:
    """Who acts: a user of the realm, or the operator (`user_id` None)."""

    user_id: int | None
    role: int

    @property
    def is_owner(self) -> bool:
        return self.role == ROLE_OWNER


_OPERATOR = _Actor(None, ROLE_OWNER)


async def _administrator(ctx: ActionContext, actor_id: int | None, realm_id: int) -> _Actor:
    """The acting administrator, or `ActionError` (403) for anyone else."""
    if actor_id is None:
        return _OPERATOR
    actor = await get_user(ctx.conn, actor_id, realm_id)
    if not actor.is_admin:
        raise ActionError("Must be an organization administrator", "UNAUTHORIZED", 403)
    return _Actor(actor.id, actor.role)


def _require_owner(actor: _Actor) -> None:
    if not actor.is_owner:
        raise ActionError("Must be an organization owner", "UNAUTHORIZED", 403)


async def _lock_realm(ctx: ActionContext, realm_id: int) -> None:
    """Serialize the realm's role changes and deactivations, so that two
    owners demoting each other at once cannot leave the realm without one."""
    await ctx.conn.execute("SELECT 1 FROM realms WHERE id = %s FOR UPDATE", (realm_id,))


async def _other_active_owners(ctx: ActionContext, realm_id: int, user_id: int) -> int:
    cur = await ctx.conn.execute(
        "SELECT count(*) FROM users WHERE realm_id = %s AND role = %s AND is_active AND id <> %s",
        (realm_id, ROLE_OWNER, user_id),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _target(ctx: ActionContext, realm_id: int, user_id: int) -> PersonRow:
    row = await _person_row(ctx, realm_id, user_id)
    if row is None:
        raise ActionError("No such user")
    return row


# -- validation ----------------------------------------------------------------


def check_full_name(full_name: object) -> str:
    """A full name as stored: surrounding blanks removed, 1 to 100
    characters, no control or formatting characters."""
    if not isinstance(full_name, str):
        raise ActionError("Invalid full_name: expected a string")
    name = full_name.strip()
    if not name:
        raise ActionError("Name too short!")
    if len(name) > MAX_FULL_NAME:
        raise ActionError("Name too long!")
    if any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn") for char in name):
        raise ActionError("Invalid characters in name!")
    return name


def check_email(email: object) -> str:
    if (
        not isinstance(email, str)
        or len(email) > MAX_EMAIL
        or email.count("@") != 1
        or any(char.isspace() for char in email)
        or email.startswith("@")
        or email.endswith("@")
    ):
        raise ActionError(f"Invalid email address: {email!r}")
    return email


def check_role(role: object) -> int:
    if not isinstance(role, int) or isinstance(role, bool) or role not in ROLE_NAMES:
        raise ActionError("Invalid role")
    return role


def check_user_setting(setting: str, value: object) -> bool | int | str:
    """A valid value of one of the settings in `USER_SETTINGS`."""
    kind = USER_SETTINGS.get(setting)
    if kind is None:
        raise ActionError(f"Unknown user setting: {setting}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ActionError(f"{setting} is not {_TYPE_NAMES[kind]}")
    if setting == "color_scheme" and value not in COLOR_SCHEMES:
        raise ActionError("Invalid color_scheme")
    if (
        setting == "email_notifications_batching_period_seconds"
        and isinstance(value, int)
        and not 0 < value <= MAX_EMAIL_BATCHING_PERIOD_SECS
    ):
        raise ActionError(f"Invalid email batching period: {value} seconds")
    if setting == "default_language" and value not in LANGUAGES:
        raise ActionError(f"Invalid default_language: {value!r}")
    assert isinstance(value, bool | int | str)
    return value


# -- joining -------------------------------------------------------------------


async def do_create_user(
    ctx: ActionContext,
    actor_id: int | None,
    realm_id: int,
    email: str,
    full_name: str,
    role: int = ROLES["member"],
) -> CreatedUser:
    """Create an active user with a fresh API key (returned only here), their
    settings row, and their subscriptions to the realm's default streams;
    every active user of the realm is told (`realm_user` add; see
    `_send_created` for a realm that restricts its guests).
    Administrators may create users; only owners may create owners."""
    actor = await _administrator(ctx, actor_id, realm_id)
    email = check_email(email)
    full_name = check_full_name(full_name)
    role = check_role(role)
    if role == ROLE_OWNER:
        _require_owner(actor)
    async with ctx.transaction() as outbox:
        exists = await ctx.conn.execute(
            "SELECT 1 FROM users WHERE realm_id = %s AND lower(email) = lower(%s)",
            (realm_id, email),
        )
        if await exists.fetchone() is not None:
            raise ActionError(f"Email '{email}' already in use")
        user_id, api_key = await _insert_user(ctx, realm_id, email, full_name, role)
        await ctx.conn.execute("INSERT INTO user_settings (user_id) VALUES (%s)", (user_id,))
        row = await _target(ctx, realm_id, user_id)
        await _send_created(ctx.conn, outbox, row)
        # System groups' members follow roles (generation/actions/groups).
        await send_role_group_changes(ctx, realm_id, user_id, None, role)
        # After the add event: their peers learn of the subscriber from it.
        await subscribe_to_default_streams(ctx, user_id)
    return CreatedUser(user_id, realm_id, row.email, row.full_name, ROLE_NAMES[role], api_key)


async def _send_created(conn: Connection, outbox: Outbox, row: PersonRow) -> None:
    """`realm_user` add of a new user, as Zulip's notify_created_user: the
    whole person to whoever may see them, and in a realm that restricts its
    guests "Unknown user" (`inaccessible_person`, flagged `inaccessible_user`
    for the queues: queues/specialize.py) to every other active guest.

    A guest subscribed to one of the default streams the user is about to
    join gets neither here: joining them makes the guest gain the user, and
    generation/actions/streams/membership.py then sends the whole person,
    before the `peer_add` that names them."""
    cur = await conn.execute(
        """
        SELECT u.id, u.role = %s AND NOT r.guests_see_all_users
        FROM users u JOIN realms r ON r.id = u.realm_id
        WHERE u.realm_id = %s AND u.is_active ORDER BY u.id
        """,
        (ROLE_GUEST, row.realm_id),
    )
    active = await cur.fetchall()
    restricted = [user_id for user_id, guest in active if guest and user_id != row.id]
    joining: set[int] = set()
    if restricted:
        cur = await conn.execute(
            """
            SELECT DISTINCT x.user_id FROM default_streams d
            JOIN streams s ON s.id = d.stream_id AND NOT s.deactivated
            JOIN subscriptions x ON x.stream_id = d.stream_id AND x.active
            WHERE d.realm_id = %s AND x.user_id = ANY(%s)
            """,
            (row.realm_id, restricted),
        )
        joining = {user_id for (user_id,) in await cur.fetchall()}
    unseen = set(restricted) - joining
    seeing = [user_id for user_id, _ in active if user_id not in joining | unseen]
    outbox.send(row.realm_id, {"type": "realm_user", "op": "add", "person": person_of(row)}, seeing)
    if unseen:
        placeholder = inaccessible_person(row.id, await realm_subdomain(conn, row.realm_id))
        event: dict[str, Any] = {"type": "realm_user", "op": "add", "person": placeholder}
        event[INACCESSIBLE_USER] = True
        outbox.send(row.realm_id, event, sorted(unseen))


async def _insert_user(
    ctx: ActionContext, realm_id: int, email: str, full_name: str, role: int
) -> tuple[int, str]:
    """Insert the row (in a savepoint, so that a lost race is an ActionError,
    not a broken transaction); returns (user id, API key)."""
    while True:
        api_key = new_api_key()
        try:
            async with ctx.conn.transaction():
                cur = await ctx.conn.execute(
                    """
                    INSERT INTO users (realm_id, email, full_name, role, api_key_id,
                                       api_key_hash, api_key_hash_scheme)
                    VALUES (%s, %s, %s, %s, %s, %s, 2) RETURNING id
                    """,
                    (realm_id, email, full_name, role, api_key_id(api_key), hash_api_key(api_key)),
                )
                row = await cur.fetchone()
        except psycopg.errors.UniqueViolation as exc:
            if "api_key_id" in str(exc):
                continue  # 1 in 62^8: draw another key
            raise ActionError(f"Email '{email}' already in use") from None
        assert row is not None
        return int(row[0]), api_key


# -- changes to a person ---------------------------------------------------------


async def do_change_full_name(
    ctx: ActionContext, actor_id: int, realm_id: int, user_id: int, full_name: str
) -> bool:
    """Rename a user: oneself, or anyone as an administrator. Every active
    user who may see them is told; returns False (and tells nobody) if the
    name is unchanged."""
    if actor_id != user_id:
        await _administrator(ctx, actor_id, realm_id)
    else:
        await get_user(ctx.conn, actor_id, realm_id)
    full_name = check_full_name(full_name)
    async with ctx.transaction() as outbox:
        target = await _target(ctx, realm_id, user_id)
        if target.full_name == full_name:
            return False
        await ctx.conn.execute(
            "UPDATE users SET full_name = %s WHERE id = %s", (full_name, user_id)
        )
        users = await users_who_can_access(ctx.conn, realm_id, user_id)
        event = {
            "type": "realm_user",
            "op": "update",
            "person": {"user_id": user_id, "full_name": full_name},
        }
        outbox.send(realm_id, event, users)
    return True


async def do_change_user_role(
    ctx: ActionContext, actor_id: int | None, realm_id: int, user_id: int, role: int
) -> bool:
    """Give a user another role. Administrators may; making or unmaking an
    owner takes an owner, and the last owner stays one. Every active user who
    may see them is told; a user who becomes or stops being a guest also gets
    the streams they now see or no longer see, and in a realm that restricts
    its guests the users they no longer see (`realm_user` remove) or now see
    (`realm_user` add). Returns False if the role is unchanged."""
    actor = await _administrator(ctx, actor_id, realm_id)
    role = check_role(role)
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        target = await _target(ctx, realm_id, user_id)
        if target.role == role:
            return False
        if ROLE_OWNER in (target.role, role):
            _require_owner(actor)
        if target.role == ROLE_OWNER and not await _other_active_owners(ctx, realm_id, user_id):
            raise ActionError(
                "The owner permission cannot be removed from the only organization owner."
            )
        own = await _own_access_before(ctx.conn, target, role)
        await ctx.conn.execute("UPDATE users SET role = %s WHERE id = %s", (role, user_id))
        users = await users_who_can_access(ctx.conn, realm_id, user_id)
        event = {"type": "realm_user", "op": "update", "person": {"user_id": user_id, "role": role}}
        outbox.send(realm_id, event, users)
        await send_role_group_changes(ctx, realm_id, user_id, target.role, role)
        was_guest = target.role == ROLE_GUEST
        # A former guest gains people before the streams whose subscribers
        # name them, a new guest loses them after the streams: the order of
        # subscriptions (generation/actions/streams/membership.py).
        if own is not None and was_guest:
            await send_access_changes(ctx.conn, outbox, own)
        # Into or out of the guest role: the streams the user can see change.
        await send_stream_access_for_role(ctx, user_id, was_guest=was_guest)
        if own is not None and not was_guest:
            await send_access_changes(ctx.conn, outbox, own)
    return True


async def _own_access_before(conn: Connection, target: PersonRow, role: int) -> AccessBefore | None:
    """Whom an active user about to become or stop being a guest sees now,
    for `send_access_changes` after the change; None if nothing changes for
    them (another role change, a deactivated user, a realm that restricts
    nobody). A non-guest sees every user of the realm."""
    if not target.is_active or (target.role == ROLE_GUEST) == (role == ROLE_GUEST):
        return None
    if target.role == ROLE_GUEST:
        return await access_before(conn, target.realm_id, guests=[target.id])
    if await guests_see_all_users(conn, target.realm_id):
        return None
    cur = await conn.execute("SELECT id FROM users WHERE realm_id = %s", (target.realm_id,))
    return AccessBefore(target.realm_id, {target.id: {row[0] for row in await cur.fetchall()}})


async def _audience(
    conn: Connection, realm_id: int, user_id: int, access: AccessBefore
) -> list[int]:
    """The active users who may see `user_id` (`users_who_can_access`),
    without a second look at the realm's guests when `access` (taken in the
    same action) found that it restricts nobody."""
    if access.seen is None:
        return await active_user_ids(conn, realm_id)
    return await users_who_can_access(conn, realm_id, user_id)


async def do_end_sessions(ctx: ActionContext, user_id: int, realm_id: int) -> None:
    """End every browser session of a user issued until now (a logout): the
    sessions' generation moves on, and every server is told to forget what
    it cached of the user (`eventq.credentials_changed`, logged with the
    change, so that a server the broker cannot reach reads it from the
    log). It names no user: no queue receives it, whatever its version."""
    async with ctx.transaction() as outbox:
        await ctx.conn.execute(
            "UPDATE users SET sessions_generation = sessions_generation + 1 WHERE id = %s",
            (user_id,),
        )
        outbox.send(realm_id, credentials_changed(user_id), [])


async def do_deactivate_user(
    ctx: ActionContext, actor_id: int | None, realm_id: int, user_id: int
) -> None:
    """Deactivate an active user: their API key stops working and they leave
    every list of active users: the viewers of their streams get
    `peer_remove`, the remaining active users who may still see them
    `realm_user` update (presence lists drop them on it), and a restricted
    guest who saw them only through a channel `realm_user` remove instead
    (Zulip's send_events_for_user_deactivation). Administrators may; an
    owner only by an owner; never the last owner."""
    actor = await _administrator(ctx, actor_id, realm_id)
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        target = await _target(ctx, realm_id, user_id)
        if not target.is_active:
            raise ActionError("User is already deactivated")
        if target.role == ROLE_OWNER:
            _require_owner(actor)
            if not await _other_active_owners(ctx, realm_id, user_id):
                raise ActionError("Cannot deactivate the only organization owner")
        # Zulip's cascade: their bots stop first.
        await bots.deactivate_owned_bots(ctx, realm_id, user_id)
        access = await access_before(ctx.conn, realm_id)
        if access.seen is not None and user_id in access.seen:
            # A deactivated guest has no queue to tell of anyone.
            seen = {guest: users for guest, users in access.seen.items() if guest != user_id}
            access = AccessBefore(realm_id, seen)
        await ctx.conn.execute("UPDATE users SET is_active = false WHERE id = %s", (user_id,))
        # Subscriber lists hold active users: `peer_remove` first, as Zulip.
        await send_subscriber_activity(ctx, user_id)
        event = {
            "type": "realm_user",
            "op": "update",
            "person": {"user_id": user_id, "is_active": False},
        }
        outbox.send(realm_id, event, await _audience(ctx.conn, realm_id, user_id, access))
        await send_access_changes(ctx.conn, outbox, access)
        await bots.send_bot_activity(ctx, outbox, realm_id, user_id, active=False)
        await send_activity_group_changes(ctx, realm_id, user_id, active=False)


async def do_reactivate_user(
    ctx: ActionContext, actor_id: int | None, realm_id: int, user_id: int
) -> None:
    """Reactivate a deactivated user (with their old API key, role, settings
    and subscriptions). Every active user who may see them, them included,
    is told (`realm_user` update; the whole person, `realm_user` add, to a
    restricted guest who sees them again), and the viewers of their streams
    get `peer_add`. Administrators may; an owner only by an owner."""
    actor = await _administrator(ctx, actor_id, realm_id)
    async with ctx.transaction() as outbox:
        await _lock_realm(ctx, realm_id)
        target = await _target(ctx, realm_id, user_id)
        if target.is_active:
            raise ActionError("User is already active")
        if target.role == ROLE_OWNER:
            _require_owner(actor)
        access = await access_before(ctx.conn, realm_id)
        await ctx.conn.execute("UPDATE users SET is_active = true WHERE id = %s", (user_id,))
        gained = await send_access_changes(ctx.conn, outbox, access)
        told = {guest for guest, users in gained.items() if user_id in users}
        event = {
            "type": "realm_user",
            "op": "update",
            "person": {"user_id": user_id, "is_active": True},
        }
        users = await _audience(ctx.conn, realm_id, user_id, access)
        outbox.send(realm_id, event, [user for user in users if user not in told])
        await bots.send_bot_activity(ctx, outbox, realm_id, user_id, active=True)
        await send_activity_group_changes(ctx, realm_id, user_id, active=True)
        # Back in the subscriber lists of their streams (`peer_add`).
        await send_subscriber_activity(ctx, user_id)


# -- settings ------------------------------------------------------------------


async def do_change_user_setting(
    ctx: ActionContext, user_id: int, setting: str, value: object
) -> bool:
    """Change one of the user's own settings (`USER_SETTINGS`); only the
    user's own queues are told. Returns False if the value is unchanged."""
    user = await get_user(ctx.conn, user_id)
    value = check_user_setting(setting, value)
    async with ctx.transaction() as outbox:
        cur = await ctx.conn.execute(
            f"SELECT {setting} FROM user_settings WHERE user_id = %s FOR UPDATE",  # noqa: S608 (setting from a fixed map)
            (user_id,),
        )
        row = await cur.fetchone()
        if row is None:  # a user made before the settings table: give them one
            await ctx.conn.execute("INSERT INTO user_settings (user_id) VALUES (%s)", (user_id,))
        elif row[0] == value:
            return False
        await ctx.conn.execute(
            f"UPDATE user_settings SET {setting} = %s WHERE user_id = %s",  # noqa: S608 (as above)
            (value, user_id),
        )
        if setting == "enable_drafts_synchronization" and value is False:
            # Zulip's rule: the server keeps no drafts while syncing is off.
            await delete_all_drafts(ctx.conn, user_id)
        event: dict[str, Any] = {
            "type": "user_settings",
            "op": "update",
            "property": setting,
            "value": value,
        }
        if setting == "default_language":
            event["language_name"] = LANGUAGES[str(value)]
        outbox.send(user.realm_id, event, [user_id])
    return True
