"""The initial state costs a bounded number of queries, whatever the size of
the realm (no query per user, stream or message)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from apply_events.engine import fetch_initial_state
from apply_events.state import StateContext, make_want
from generation import accounts
from tests.domain.harness import MODERN, Domain


class CountingConnection:
    """A real AsyncConnection that counts the statements sent through it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self._conn = conn
        self.statements = 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return await self._conn.execute(*args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return CountingCursor(self._conn.cursor(*args, **kwargs), self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class CountingCursor:
    def __init__(self, cursor: Any, counter: CountingConnection):
        self._cursor = cursor
        self._counter = counter

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._counter.statements += 1
        await self._cursor.execute(*args, **kwargs)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    async def __aenter__(self) -> CountingCursor:
        await self._cursor.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._cursor.__aexit__(*exc)


def _count(domain: Domain, user: str) -> tuple[int, dict[str, Any]]:
    async def go() -> tuple[int, dict[str, Any]]:
        ctx = StateContext(
            user_id=domain.id(user),
            realm_id=domain.realm_id,
            queue_id="q",
            include_subscribers=True,
            capabilities=MODERN,
        )
        async with await psycopg.AsyncConnection.connect(
            domain.database_url, autocommit=True
        ) as conn:
            counting = CountingConnection(conn)
            state = await fetch_initial_state(counting, ctx, make_want(None))
            return counting.statements, state

    return asyncio.run(go())


def test_the_fetch_does_not_grow_with_the_realm(domain):
    small, _ = _count(domain, "hamlet")
    with psycopg.connect(domain.database_url, autocommit=True) as conn:
        for n in range(30):
            accounts.create_user(conn, domain.subdomain, f"extra{n}@x.example", f"Extra {n}")
        for n in range(30):
            row = conn.execute(
                "INSERT INTO streams (realm_id, name) VALUES (%s, %s) RETURNING id",
                (domain.realm_id, f"extra-{n}"),
            ).fetchone()
            assert row is not None
            conn.execute(
                "INSERT INTO subscriptions (user_id, stream_id) VALUES (%s, %s)",
                (domain.id("hamlet"), row[0]),
            )
    large, state = _count(domain, "hamlet")
    assert large == small, f"{small} queries for the small realm, {large} for the large one"
    assert small <= 40
    assert state  # something was fetched
