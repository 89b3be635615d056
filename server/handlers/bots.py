"""Endpoints of bots, at Zulip's paths (see server/handlers/domain.py):

- `GET bots`: the user's own active bots; `POST bots`: create one (its API
  key is in the answer, and nowhere else);
- `PATCH bots/{bot_id}` (`full_name`, `bot_owner_id`), `DELETE
  bots/{bot_id}` (deactivate): the bot's owner or an administrator;
- `POST bots/{bot_id}/api_key/regenerate`: a new key, in the answer only.

A bot is reactivated, like any user, by `POST users/{id}/reactivate`.
Parameters are decoded as Zulip clients encode them; the rules and the
events are the actions' (`generation/actions/bots.py`). Zulip's parameters
eventq does not model (services, default streams, avatars) are reported
back in `ignored_parameters_unsupported`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from generation.actions import bots as actions
from generation.actions.base import ActionContext
from generation.events.bots import BOT_GENERIC
from generation.events.users import gravatar_url
from server.handlers.actions import ActionHandler, Body, operation
from server.http.auth import AuthUser
from server.http.declared import Nothing, Param
from server.http.params import INT_MAX

# Longer than any name or short name the action accepts (100 characters, an
# address of 254): the action's own message refuses what is longer.
MAX_NAME_CHARS = 1000

# Zulip's fields of a bot that eventq has no setting for: always these.
_NO_DEFAULTS: dict[str, Any] = {
    "default_sending_stream": None,
    "default_events_register_stream": None,
    "default_all_public_streams": False,
}


def _bot_id(raw: str) -> int:
    return ActionHandler.path_id(raw, "No such bot")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CreateBot:
    full_name: Annotated[str, Param("The bot's name", max_length=MAX_NAME_CHARS)]
    short_name: Annotated[
        str, Param("The bot's address is <short_name>-bot@<realm>", max_length=MAX_NAME_CHARS)
    ]
    bot_type: Annotated[int, Param("1 generic, 2 incoming webhook")] = BOT_GENERIC


class BotsHandler(ActionHandler):
    """`GET bots`: the user's active bots, oldest first, as Zulip lists them
    (without `api_key`: eventq keeps only a hash of it); `POST bots`: a new
    bot owned by the user (members and above), answered with its `user_id`
    and `api_key`."""

    SUPPORTED_METHODS = ("GET", "POST")

    @operation(Nothing)
    async def get(self, user: AuthUser, args: Nothing) -> Body:
        bots = await self.act(lambda ctx: actions.own_bots(ctx, user.user_id, user.realm_id))
        return {
            "bots": [
                {
                    "username": bot.email,
                    "full_name": bot.full_name,
                    "avatar_url": gravatar_url(bot.email),
                    **_NO_DEFAULTS,
                }
                for bot in bots
            ]
        }

    @operation(CreateBot)
    async def post(self, user: AuthUser, args: CreateBot) -> Body:
        created = await self.act(
            lambda ctx: actions.do_create_bot(
                ctx, user.user_id, user.realm_id, args.full_name, args.short_name, args.bot_type
            )
        )
        return {
            "user_id": created.user_id,
            "api_key": created.api_key,
            "avatar_url": gravatar_url(created.email),
            **_NO_DEFAULTS,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpdateBot:
    full_name: Annotated[str | None, Param("The bot's new name", max_length=MAX_NAME_CHARS)] = None
    bot_owner_id: Annotated[
        int | None, Param("The user who owns the bot from now on", minimum=1, maximum=INT_MAX)
    ] = None


class BotHandler(ActionHandler):
    """`PATCH bots/{bot_id}`: its name and owner, in one transaction,
    answered with the bot as it is then; `DELETE bots/{bot_id}`: deactivate
    it (an inactive bot is left alone, as Zulip does)."""

    SUPPORTED_METHODS = ("PATCH", "DELETE")

    @operation(UpdateBot)
    async def patch(self, user: AuthUser, args: UpdateBot, raw_id: str) -> Body:
        bot_id = _bot_id(raw_id)

        async def update(ctx: ActionContext) -> tuple[actions.BotRow, str]:
            async with ctx.transaction():
                # Checked first: a request that changes nothing reads the bot too.
                await actions.access_bot(ctx, user.user_id, user.realm_id, bot_id)
                if args.full_name is not None:
                    await actions.do_change_bot_full_name(
                        ctx, user.user_id, user.realm_id, bot_id, args.full_name
                    )
                if args.bot_owner_id is not None:
                    await actions.do_change_bot_owner(
                        ctx, user.user_id, user.realm_id, bot_id, args.bot_owner_id
                    )
                # The acting user may have just given the bot away.
                bot = await actions.bot_row(ctx, user.realm_id, bot_id)
                owner = await ctx.conn.execute(
                    "SELECT email FROM users WHERE id = %s", (bot.bot_owner_id,)
                )
                row = await owner.fetchone()
                assert row is not None
                return bot, str(row[0])

        bot, owner_email = await self.act(update)
        return {
            "full_name": bot.full_name,
            "avatar_url": gravatar_url(bot.email),
            # Zulip's answer always carries these three; eventq's bots have
            # no services or configuration.
            "service_interface": 1,
            "service_payload_url": None,
            "config_data": None,
            **_NO_DEFAULTS,
            "bot_owner": owner_email,
        }

    @operation(Nothing)
    async def delete(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        bot_id = _bot_id(raw_id)
        await self.act(
            lambda ctx: actions.do_deactivate_bot(ctx, user.user_id, user.realm_id, bot_id)
        )
        return None


class BotApiKeyHandler(ActionHandler):
    """`POST bots/{bot_id}/api_key/regenerate`: the bot's new API key; the
    old one is refused from then on, on every shard."""

    SUPPORTED_METHODS = ("POST",)

    @operation(Nothing)
    async def post(self, user: AuthUser, args: Nothing, raw_id: str) -> Body:
        bot_id = _bot_id(raw_id)
        api_key = await self.act(
            lambda ctx: actions.do_regenerate_bot_api_key(ctx, user.user_id, user.realm_id, bot_id)
        )
        return {"api_key": api_key}


ROUTES: list[tuple[str, Any]] = [
    (r"bots", BotsHandler),
    (r"bots/([0-9]+)", BotHandler),
    (r"bots/([0-9]+)/api_key/regenerate", BotApiKeyHandler),
]
