"""The actions the register race test draws from: each makes one random,
valid change to the Domain realm (actions that fail validation are part of
life: they change nothing and send nothing)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

from generation.actions.base import ActionContext
from generation.actions.realm import do_set_message_edit_limit, do_set_realm_property
from tests.domain.harness import Domain

RaceAction = Callable[[ActionContext, Domain, random.Random], Awaitable[Any]]


async def rename_realm(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    await do_set_realm_property(ctx, None, domain.realm_id, "name", f"Realm {rng.randint(0, 9999)}")


async def toggle_realm_setting(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    prop = rng.choice(["allow_message_editing", "mandatory_topics"])
    await do_set_realm_property(ctx, None, domain.realm_id, prop, rng.random() < 0.5)


async def edit_limit(ctx: ActionContext, domain: Domain, rng: random.Random) -> None:
    await do_set_message_edit_limit(ctx, None, domain.realm_id, rng.choice([None, 60, 3600]))


ACTIONS: list[RaceAction] = [rename_realm, toggle_realm_setting, edit_limit]
