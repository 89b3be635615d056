"""What the `eventq` command groups share: JSON on stdout, a connection to
the database, and running an action as the operator with its events
published after commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from generation import accounts
from generation.actions.base import ActionContext, EventSink
from generation.config import ProducerConfig
from generation.notice import Notice, encode_notice
from generation.send import PublishError, publish_notice
from server.config import Settings

log = logging.getLogger("eventq")

T = TypeVar("T")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def connect(settings: Settings) -> psycopg.Connection[Any]:
    return psycopg.connect(settings.database_url)


def _publishing_sink(config: ProducerConfig) -> EventSink:
    """Where the command line's actions send their events, already logged
    with their positions in the action's transaction: through RabbitMQ (or
    the server without a broker). The change is committed when a notice goes
    out, so a delivery failure is a warning: the server reads the event from
    the log's tail all the same."""

    async def sink(notice: Notice) -> None:
        try:
            publish_notice(notice, encode_notice(notice), config)
        except PublishError as exc:
            log.warning(
                "connected clients were not told (%s event): %s; the server reads it from"
                " the event log",
                notice.event["type"],
                exc,
            )

    return sink


def act(settings: Settings, action: Callable[[ActionContext], Awaitable[T]]) -> T:
    """Run an action as the operator, its events published after commit."""

    async def go() -> T:
        sink = _publishing_sink(ProducerConfig.from_env())
        async with await psycopg.AsyncConnection.connect(
            settings.database_url, autocommit=True
        ) as conn:
            return await action(ActionContext(conn, sink))

    return asyncio.run(go())


def find_realm_id(settings: Settings, subdomain: str) -> int:
    """The id of the realm with this subdomain."""
    with connect(settings) as conn:
        return accounts.realm_id_by_subdomain(conn, subdomain)
