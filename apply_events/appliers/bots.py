"""Appliers and post-processing of the `realm_bot` section: the bots the
registering user may administer (`realm_bots`: every bot of the realm for a
human administrator, their own bots for anyone else; Zulip's
`get_owned_bot_dicts`).

The intermediate state keeps every bot of the realm (`raw_bots`, {bot id:
Bot}) and who registers (`raw_bots_viewer`), and post-processing picks the
bots shown. So a user made an administrator, whom no `realm_bot` event
tells of the bots they may now administer, is shown them from what
`realm_user` events (which reach every active user) kept current: a bot's
`realm_user` add carries everything a `Bot` shows, and its later changes
(name, owner, activity) come as `realm_user` updates too. Every applier sets
values, never adds to them: correct when the change is already in the
fetched state.
"""

from __future__ import annotations

from typing import Any, TypedDict

from apply_events.section import Applier
from apply_events.state import Event, State, StateContext, event_int
from generation.events.bots import Bot, bot_entry
from generation.events.users import ROLE_ADMINISTRATOR


class RealmBotsState(TypedDict, total=False):
    """The `realm_bot` section of register's response."""

    realm_bots: list[Bot]


def viewer(user_id: int, role: int, is_bot: bool) -> dict[str, Any]:
    """`raw_bots_viewer`: who registers, and whether they administer every
    bot (a human administrator: Zulip sends `realm_bot` events to human
    administrators only, so a bot made an administrator is not one here)."""
    return {
        "user_id": user_id,
        "is_bot": is_bot,
        "is_admin": role <= ROLE_ADMINISTRATOR and not is_bot,
    }


def apply_realm_bot(state: State, event: Event, ctx: StateContext) -> None:
    raw = state.get("raw_bots")
    bot = event.get("bot")
    if not isinstance(raw, dict) or not isinstance(bot, dict):
        return  # malformed: nothing of ours to change
    user_id = event_int(bot.get("user_id"))
    if user_id is None:
        return
    op = event.get("op")
    entry = raw.get(user_id)
    if op == "add":
        # A backend's event may carry Zulip's `api_key`: never kept (eventq's
        # state has no keys, generation/events/bots.py).
        raw[user_id] = {key: value for key, value in bot.items() if key != "api_key"}
    elif op == "update" and isinstance(entry, dict):
        for key, value in bot.items():
            if key != "user_id" and key in entry:
                entry[key] = value
    elif op == "delete" and isinstance(entry, dict):
        # Only a former owner who is no administrator gets `delete`; the
        # `realm_user` update that follows names the new owner. Until then
        # (or for good, for a client without `realm_user` events) the bot is
        # nobody's here, so it is shown to no one.
        entry["owner_id"] = None


def apply_realm_bot_people(state: State, event: Event, ctx: StateContext) -> None:
    """`realm_user` events as this section sees them: a bot joining, renamed,
    given to another owner, deactivated or reactivated; and the registering
    user's own role (whether they administer every bot)."""
    raw = state.get("raw_bots")
    person = event.get("person")
    if not isinstance(raw, dict) or not isinstance(person, dict):
        return
    user_id = event_int(person.get("user_id"))
    if user_id is None:
        return
    op = event.get("op")
    if op == "add":
        bot_type = event_int(person.get("bot_type"))
        owner_id = event_int(person.get("bot_owner_id"))
        email, full_name = person.get("email"), person.get("full_name")
        if (
            person.get("is_bot") is True
            and bot_type is not None
            and owner_id is not None
            and isinstance(email, str)
            and isinstance(full_name, str)
        ):
            raw[user_id] = dict(
                bot_entry(
                    user_id=user_id,
                    email=email,
                    full_name=full_name,
                    bot_type=bot_type,
                    is_active=True,
                    owner_id=owner_id,
                )
            )
    elif op == "update":
        entry = raw.get(user_id)
        if isinstance(entry, dict):
            for source, key in (
                ("full_name", "full_name"),
                ("is_active", "is_active"),
                ("bot_owner_id", "owner_id"),
            ):
                if source in person:
                    entry[key] = person[source]
        me = state.get("raw_bots_viewer")
        role = event_int(person.get("role"))
        if isinstance(me, dict) and user_id == me.get("user_id") and role is not None:
            me.update(viewer(user_id, role, bool(me.get("is_bot"))))


def post_process_realm_bots(state: State, ctx: StateContext) -> None:
    """`raw_bots` -> `realm_bots`: in id order, every bot for a human
    administrator, their own bots (active or not) for anyone else."""
    raw = state.pop("raw_bots", None)
    me = state.pop("raw_bots_viewer", None)
    if not isinstance(raw, dict) or not isinstance(me, dict):
        return
    shown: list[dict[str, Any]] = []
    for bot_id in sorted(raw):
        entry = raw[bot_id]
        owner_id = entry.get("owner_id")
        if owner_id is not None and (me["is_admin"] or owner_id == me["user_id"]):
            shown.append(entry)
    state["realm_bots"] = shown


APPLIERS: dict[str, Applier] = {
    "realm_bot": apply_realm_bot,
    "realm_user": apply_realm_bot_people,
}
