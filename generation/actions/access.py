"""Who may see whom: Zulip's `can_access_all_users_group` realm setting.

A realm's setting is role:everyone (the default: every user sees every
user) or role:members (stored as `realms.guests_see_all_users` false,
migration 0022). Then a guest sees only:

- themselves, and every bot;
- the users they share a channel subscription with, both active (an
  archived channel keeps its subscriptions, and counts; a deactivated user
  is in no channel's list);
- the users they have a conversation with: the participants of every
  direct message they are in, 1:1 or group (deactivated participants
  included).

Zulip's rule (zerver/lib/users.py `check_can_access_user`,
`get_accessible_user_ids`; a first message from a user the guest could not
see brings the guest that user's `realm_user` add,
`get_recipients_for_user_creation_events`). As Zulip's group conversation
subscriptions, a conversation counts after its messages are deleted. A
guest sees the sender of a message as "Unknown user" only in a channel the
sender is not subscribed to (Zulip's `user_ids_without_access_to_sender`).

A guest's whole set (register, and the comparisons below) is read from the
guest's side: their channels' subscribers, and their conversation partners
(`conversation_partners`, migration 0022, kept by a trigger on `messages`).
The audience of an event about a user (`users_who_can_access`) is asked
from the user's side: the realm's active non-guests plus the guests who
share a channel or a conversation with them, one query of an index probe
per active guest, and none at all when the realm is unrestricted.

When access changes (a subscription, a deactivation, a role, the setting
itself), `access_before` and `send_access_changes` compare each affected
guest's set before and after and tell the guest: Zulip's `realm_user` add
with the whole person for a user gained, `realm_user` remove with
`{user_id, full_name: "Unknown user"}` for a user lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import class_row

from generation.accounts import FAKE_EMAIL_DOMAIN, ROLES
from generation.actions.base import PERSON_COLUMNS, PersonRow, person_of
from generation.actions.profile_fields.common import realm_profile_data
from generation.events.users import PRESENCE_HISTORY, iso_datetime, presence_event

if TYPE_CHECKING:
    from generation.actions.base import Outbox

Connection = psycopg.AsyncConnection[Any]
Event = dict[str, Any]

ROLE_MEMBER = ROLES["member"]
ROLE_GUEST = ROLES["guest"]

# Zulip's UserProfile.INACCESSIBLE_USER_NAME, and the picture it shows for one.
INACCESSIBLE_USER_NAME = "Unknown user"
INACCESSIBLE_AVATAR_URL = "/static/unknown-user-avatar.svg"
# The only two values Zulip allows for the setting.
ACCESS_GROUPS = ("role:everyone", "role:members")
_EPOCH = datetime.fromtimestamp(0, UTC)


def inaccessible_email(user_id: int, subdomain: str) -> str:
    """The address a user one may not see is shown with: Zulip's fake
    `user{id}@{realm host}`, the realm's subdomain under FAKE_EMAIL_DOMAIN."""
    return f"user{user_id}@{subdomain}.{FAKE_EMAIL_DOMAIN}"


def inaccessible_person(user_id: int, subdomain: str) -> dict[str, Any]:
    """The person shown for a user one may not see (Zulip's
    `get_data_for_inaccessible_user`): "Unknown user", a member, active,
    joined at the epoch, with the unknown-user picture and no profile data."""
    email = inaccessible_email(user_id, subdomain)
    return {
        "user_id": user_id,
        "email": email,
        "delivery_email": None,
        "full_name": INACCESSIBLE_USER_NAME,
        "role": ROLE_MEMBER,
        "is_admin": False,
        "is_owner": False,
        "is_guest": False,
        "is_bot": False,
        "is_active": True,
        "date_joined": iso_datetime(_EPOCH),
        "timezone": "",
        "avatar_version": 1,
        "avatar_url": INACCESSIBLE_AVATAR_URL,
        "profile_data": {},
    }


def removed_person(user_id: int) -> dict[str, Any]:
    """`realm_user` remove's person: the user a guest no longer sees."""
    return {"user_id": user_id, "full_name": INACCESSIBLE_USER_NAME}


async def guests_see_all_users(conn: Connection, realm_id: int) -> bool:
    cur = await conn.execute("SELECT guests_see_all_users FROM realms WHERE id = %s", (realm_id,))
    row = await cur.fetchone()
    return True if row is None else bool(row[0])


async def realm_subdomain(conn: Connection, realm_id: int) -> str:
    cur = await conn.execute("SELECT subdomain FROM realms WHERE id = %s", (realm_id,))
    row = await cur.fetchone()
    return "" if row is None else str(row[0])


# Each guest's humans: channel co-subscribers (both active), and the
# participants of their conversations (a note to oneself has one: it is
# left out); the guest themselves is added by the callers.
_ACCESS_QUERY = """
    SELECT g.user_id, s.user_id
    FROM subscriptions g
    JOIN subscriptions s ON s.stream_id = g.stream_id AND s.active
    JOIN users u ON u.id = s.user_id AND u.is_active
    WHERE g.user_id = ANY(%(guests)s) AND g.active
    UNION
    SELECT user_id, partner_id FROM conversation_partners WHERE user_id = ANY(%(guests)s)
"""

# Which of some guests may see one user (the target): the same rule, asked
# from the target's side, with an index probe per guest.
_SEES_QUERY = """
    SELECT g FROM unnest(%(guests)s::bigint[]) AS g
    WHERE g = %(target)s
       OR EXISTS (SELECT 1 FROM conversation_partners c
                  WHERE c.user_id = g AND c.partner_id = %(target)s)
       OR EXISTS (SELECT 1 FROM subscriptions a
                  JOIN subscriptions b ON b.stream_id = a.stream_id AND b.active
                  JOIN users t ON t.id = b.user_id AND t.is_active
                  WHERE a.user_id = g AND a.active AND b.user_id = %(target)s)
"""


async def access_map(conn: Connection, guest_ids: Collection[int]) -> dict[int, set[int]]:
    """For each guest: the users they may see (themselves included; bots
    only where they share something, as every bot is seen anyway)."""
    seen: dict[int, set[int]] = {guest: {guest} for guest in guest_ids}
    if not seen:
        return seen
    cur = await conn.execute(_ACCESS_QUERY, {"guests": list(seen)})
    for guest, user_id in await cur.fetchall():
        seen[guest].add(user_id)
    return seen


async def _restricted_guests(conn: Connection, realm_id: int) -> list[int] | None:
    """The realm's active guests if the realm restricts them, else None."""
    cur = await conn.execute(
        """
        SELECT u.id FROM realms r JOIN users u ON u.realm_id = r.id
        WHERE r.id = %s AND NOT r.guests_see_all_users AND u.is_active AND u.role = %s
        ORDER BY u.id
        """,
        (realm_id, ROLE_GUEST),
    )
    return [row[0] for row in await cur.fetchall()] or None


async def accessible_user_ids(conn: Connection, realm_id: int, viewer_id: int) -> set[int] | None:
    """The users `viewer_id` may see (bots aside: every bot is seen), or None
    if they see everyone (a non-guest, or an unrestricted realm)."""
    cur = await conn.execute(
        """
        SELECT u.role, r.guests_see_all_users FROM users u JOIN realms r ON r.id = u.realm_id
        WHERE u.id = %s AND r.id = %s
        """,
        (viewer_id, realm_id),
    )
    row = await cur.fetchone()
    if row is None or row[0] != ROLE_GUEST or row[1]:
        return None
    return (await access_map(conn, [viewer_id]))[viewer_id]


async def inaccessible_user_ids(
    conn: Connection, realm_id: int, viewer_id: int, user_ids: Iterable[int]
) -> set[int]:
    """Which of `user_ids` (of the realm) `viewer_id` may not see."""
    wanted = set(user_ids)
    seen = await accessible_user_ids(conn, realm_id, viewer_id) if wanted else None
    if seen is None:
        return set()
    unseen = wanted - seen
    if not unseen:
        return unseen
    cur = await conn.execute(
        "SELECT id FROM users WHERE id = ANY(%s) AND NOT is_bot", (list(unseen),)
    )
    return {row[0] for row in await cur.fetchall()}


async def users_who_can_access(conn: Connection, realm_id: int, target_id: int) -> list[int]:
    """The active users of the realm who may see `target_id`: the audience
    of an event about them (`realm_user` update, `presence`, `user_status`)."""
    return (await audiences(conn, realm_id, [target_id]))[target_id]


async def guests_who_see(conn: Connection, guest_ids: Collection[int], target_id: int) -> set[int]:
    """Which of `guest_ids` (guests of a restricted realm) may see
    `target_id`, a human: one query whatever the guests' own sets."""
    if not guest_ids:
        return set()
    cur = await conn.execute(_SEES_QUERY, {"guests": list(guest_ids), "target": target_id})
    return {row[0] for row in await cur.fetchall()}


async def guests_not_seeing(conn: Connection, target_id: int, user_ids: Iterable[int]) -> list[int]:
    """Of `user_ids`, the guests who may not see `target_id` (Zulip's
    `user_ids_without_access_to_sender`): they get a message, a reaction or
    channel typing of the target with them as "Unknown user". Call only for
    a realm that restricts its guests; a bot is seen by everyone."""
    cur = await conn.execute(
        "SELECT id, role, is_bot FROM users WHERE id = ANY(%s) AND (role = %s OR id = %s)",
        (sorted(set(user_ids) | {target_id}), ROLE_GUEST, target_id),
    )
    rows = await cur.fetchall()
    if any(row[0] == target_id and row[2] for row in rows):
        return []
    guests = [row[0] for row in rows if row[0] != target_id and row[1] == ROLE_GUEST]
    seeing = await guests_who_see(conn, guests, target_id)
    return [guest for guest in guests if guest not in seeing]


async def audiences(
    conn: Connection, realm_id: int, target_ids: Collection[int]
) -> dict[int, list[int]]:
    """`users_who_can_access` for several users at once."""
    cur = await conn.execute(
        "SELECT id, role, is_bot FROM users WHERE realm_id = %s AND is_active ORDER BY id",
        (realm_id,),
    )
    active = await cur.fetchall()
    everyone = [row[0] for row in active]
    guests = await _restricted_guests(conn, realm_id)
    if guests is None:
        return {target: everyone for target in target_ids}
    cur = await conn.execute(
        "SELECT id FROM users WHERE id = ANY(%s) AND is_bot", (list(target_ids),)
    )
    bots = {row[0] for row in await cur.fetchall()}
    non_guests = [row[0] for row in active if row[1] != ROLE_GUEST]
    result: dict[int, list[int]] = {}
    for target in target_ids:
        if target in bots:
            result[target] = everyone
            continue
        viewers = set(non_guests) | await guests_who_see(conn, guests, target)
        result[target] = sorted(viewers)
    return result


async def new_conversation_for_guests(
    conn: Connection, participant_ids: Collection[int]
) -> list[int]:
    """The guests among `participant_ids` (of a direct message about to be
    written) who have not had a conversation with every other participant:
    those whom the message may let see someone new."""
    cur = await conn.execute(
        """
        SELECT DISTINCT g.id FROM users g, unnest(%(ids)s::bigint[]) AS p
        WHERE g.id = ANY(%(ids)s) AND g.role = %(guest)s AND p <> g.id
          AND NOT EXISTS (SELECT 1 FROM conversation_partners c
                          WHERE c.user_id = g.id AND c.partner_id = p)
        """,
        {"ids": list(participant_ids), "guest": ROLE_GUEST},
    )
    return [row[0] for row in await cur.fetchall()]


@dataclasses.dataclass(frozen=True, slots=True)
class AccessBefore:
    """Each restricted guest's set before a change (None: the realm restricts
    nobody)."""

    realm_id: int
    seen: Mapping[int, set[int]] | None


async def access_before(
    conn: Connection, realm_id: int, *, guests: Iterable[int] | None = None, everyone: bool = False
) -> AccessBefore:
    """Take each guest's set before a change: `guests` (those the change
    may concern), or with `everyone` every active guest of the realm, and
    also, for a change of the setting itself, every guest as if restricted."""
    if everyone:
        cur = await conn.execute(
            "SELECT id FROM users WHERE realm_id = %s AND is_active AND role = %s",
            (realm_id, ROLE_GUEST),
        )
        ids = [row[0] for row in await cur.fetchall()]
    else:
        restricted = await _restricted_guests(conn, realm_id)
        if restricted is None:
            return AccessBefore(realm_id, None)
        ids = restricted if guests is None else sorted(set(guests) & set(restricted))
    return AccessBefore(realm_id, await _guest_sets(conn, realm_id, ids))


async def _guest_sets(conn: Connection, realm_id: int, ids: Collection[int]) -> dict[int, set[int]]:
    """Each of `ids`' set now: everyone's id if the realm does not restrict
    them (or they are no longer an active guest)."""
    cur = await conn.execute(
        """
        SELECT u.id, u.is_active AND u.role = %s AND NOT r.guests_see_all_users
        FROM users u JOIN realms r ON r.id = u.realm_id WHERE u.id = ANY(%s)
        """,
        (ROLE_GUEST, list(ids)),
    )
    restricted = {row[0]: row[1] for row in await cur.fetchall()}
    seen = await access_map(conn, [guest for guest in ids if restricted.get(guest)])
    if len(seen) < len(ids):
        cur = await conn.execute("SELECT id FROM users WHERE realm_id = %s", (realm_id,))
        everyone = {row[0] for row in await cur.fetchall()}
        for guest in ids:
            seen.setdefault(guest, everyone)
    return seen


async def send_access_changes(
    conn: Connection, outbox: Outbox, before: AccessBefore
) -> dict[int, set[int]]:
    """Tell each guest of `before` the users they gained (`realm_user` add,
    the whole person) and lost (`realm_user` remove) since it was taken;
    returns what each guest gained. Bots are seen by everyone, and never
    added or removed."""
    if before.seen is None or not before.seen:
        return {}
    after = await _guest_sets(conn, before.realm_id, list(before.seen))
    gained = {guest: after[guest] - old for guest, old in before.seen.items()}
    lost = {guest: old - after[guest] for guest, old in before.seen.items()}
    changed = set().union(*gained.values(), *lost.values())
    if not changed:
        return gained
    cur = conn.cursor(row_factory=class_row(PersonRow))
    await cur.execute(
        f"SELECT {PERSON_COLUMNS} FROM users"  # noqa: S608 (fixed columns)
        " WHERE id = ANY(%s) AND realm_id = %s AND NOT is_bot",
        (list(changed), before.realm_id),
    )
    rows = {row.id: row for row in await cur.fetchall()}
    anyone_gained = sorted(set().union(*gained.values()) & rows.keys())
    profile_data = await realm_profile_data(conn, before.realm_id) if anyone_gained else {}
    extras = await _presence_and_status(conn, anyone_gained)
    for guest in sorted(before.seen):
        for user_id in sorted(lost[guest] & rows.keys()):
            outbox.send(
                before.realm_id,
                {"type": "realm_user", "op": "remove", "person": removed_person(user_id)},
                [guest],
            )
        for user_id in sorted(gained[guest] & rows.keys()):
            shown = person_of(rows[user_id])
            # All a fresh fetch shows of them: their profile field values too.
            shown["profile_data"] = profile_data.get(user_id, {})
            outbox.send(
                before.realm_id, {"type": "realm_user", "op": "add", "person": shown}, [guest]
            )
            # And what the guest was not told while they could not see them.
            for event in extras.get(user_id, ()):
                outbox.send(before.realm_id, event, [guest])
    return gained


async def _presence_and_status(conn: Connection, user_ids: list[int]) -> dict[int, list[Event]]:
    """For each of `user_ids` (humans) who is active (register shows no
    presence or status of the others): a `presence` event if they connected
    within `PRESENCE_HISTORY`, and a `user_status` event with every field
    if they ever had a status, so that a guest who can now see them holds
    what a fresh fetch shows."""
    extras: dict[int, list[Event]] = {}
    if not user_ids:
        return extras
    cur = await conn.execute(
        f"""
        SELECT u.id, u.email,
               floor(extract(epoch FROM coalesce(p.last_active_time, u.date_joined)))::bigint,
               floor(extract(epoch FROM p.last_connected_time))::bigint
        FROM presences p JOIN users u ON u.id = p.user_id AND u.is_active
        WHERE p.user_id = ANY(%s)
          AND p.last_connected_time >= now() - interval '{PRESENCE_HISTORY}'
        """,  # noqa: S608 (a constant interval)
        (user_ids,),
    )
    for user_id, email, active, connected in await cur.fetchall():
        extras.setdefault(user_id, []).append(presence_event(user_id, email, active, connected))
    cur = await conn.execute(
        """
        SELECT s.user_id, s.away, s.status_text, s.emoji_name, s.emoji_code, s.reaction_type
        FROM user_statuses s JOIN users u ON u.id = s.user_id AND u.is_active
        WHERE s.user_id = ANY(%s)
        """,
        (user_ids,),
    )
    for user_id, away, text, emoji_name, emoji_code, reaction_type in await cur.fetchall():
        extras.setdefault(user_id, []).append(
            {
                "type": "user_status",
                "user_id": user_id,
                "away": away,
                "status_text": text,
                "emoji_name": emoji_name,
                "emoji_code": emoji_code,
                "reaction_type": reaction_type,
            }
        )
    return extras
