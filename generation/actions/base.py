"""What every action shares: a transaction whose events go out after commit,
the error an action raises for a request it refuses, and common lookups.

An action is an async function taking an `ActionContext` first:

    async def do_something(ctx: ActionContext, actor: int, ...) -> Result:
        async with ctx.transaction() as outbox:
            ...queries on ctx.conn...
            outbox.send(realm_id, event, users)

The notices are validated when `send` is called (inside the transaction),
written to the event log with their positions at the end of the outermost
transaction, and handed to the context's sink only after it commits; none is
logged or sent if it rolls back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Protocol

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row

from generation import eventlog
from generation.accounts import ROLES
from generation.events.users import is_control, person
from generation.notice import Notice, encode_notice, make_notice

Connection = psycopg.AsyncConnection[Any]

ROLE_ADMINISTRATOR = ROLES["administrator"]
ROLE_GUEST = ROLES["guest"]


class EventSink(Protocol):
    """Where an action's notices go after commit: the server's own registry,
    RabbitMQ through `send_event`, or a test's capture."""

    async def __call__(self, notice: Notice) -> None: ...


class ActionError(Exception):
    """Raised by an action for a request it refuses (unknown or inaccessible
    object, not permitted, invalid value); the HTTP layer answers `status`
    with `code` and the message."""

    def __init__(self, msg: str, code: str = "BAD_REQUEST", status: int = 400):
        super().__init__(msg)
        self.msg = msg
        self.code = code
        self.status = status


class Outbox:
    """The notices of one transaction, sent after it commits."""

    def __init__(self) -> None:
        self.notices: list[Notice] = []

    def send(
        self,
        realm_id: int,
        event: Mapping[str, Any],
        users: Sequence[object],
        notify: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        """Queue an event for `users` (ids or {"id": ..., ...} dicts); raises
        `BadNotice` now if the notice is malformed. A notice to nobody is
        dropped (there is no one to tell), unless it is for the servers
        themselves (`is_control`: it names no queue's user). `notify`: see
        generation/notice.py."""
        notice = make_notice(event, users, realm_id, notify)
        if notice.users or is_control(notice.event):
            self.notices.append(notice)


@dataclasses.dataclass
class ActionContext:
    """A database connection and where events go. One action at a time."""

    conn: Connection
    sink: EventSink
    # Write each event to the event log, in the transaction (generation/eventlog.py).
    log_events: bool = True
    _stack: list[Outbox] = dataclasses.field(default_factory=list)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Outbox]:
        """A transaction (a savepoint when nested) whose outbox is sent after
        the outermost one commits."""
        if not self._stack and self.conn.info.transaction_status != TransactionStatus.IDLE:
            raise RuntimeError("an action's outermost transaction must start outside any other")
        outbox = Outbox()
        self._stack.append(outbox)
        try:
            async with self.conn.transaction():
                yield outbox
                if len(self._stack) == 1 and self.log_events and outbox.notices:
                    # Last in the transaction, after the action's own writes.
                    entries = [(notice, encode_notice(notice)) for notice in outbox.notices]
                    positions = await eventlog.write_async(self.conn, entries)
                    outbox.notices = [
                        dataclasses.replace(notice, position=position)
                        for notice, position in zip(outbox.notices, positions, strict=True)
                    ]
        except BaseException:
            self._stack.pop()
            raise
        self._stack.pop()
        if self._stack:
            self._stack[-1].notices.extend(outbox.notices)
            return
        for notice in outbox.notices:
            await self.sink(notice)


@dataclasses.dataclass(frozen=True, slots=True)
class UserRow:
    id: int
    realm_id: int
    email: str
    full_name: str
    role: int
    is_active: bool

    @property
    def is_admin(self) -> bool:
        return self.role <= ROLE_ADMINISTRATOR

    @property
    def is_guest(self) -> bool:
        return self.role == ROLE_GUEST


@dataclasses.dataclass(frozen=True, slots=True)
class PersonRow:
    """A user of any state, with what a `Person` shows."""

    id: int
    realm_id: int
    email: str
    full_name: str
    role: int
    is_active: bool
    date_joined: datetime
    timezone: str


PERSON_COLUMNS = "id, realm_id, email, full_name, role, is_active, date_joined, timezone"


def person_of(row: PersonRow) -> dict[str, Any]:
    """The `Person` of a `realm_user` event: always with its avatar URL
    (register's appliers null it for `client_gravatar` clients)."""
    return dict(
        person(
            user_id=row.id,
            email=row.email,
            full_name=row.full_name,
            role=row.role,
            is_active=row.is_active,
            date_joined=row.date_joined,
            timezone=row.timezone,
        )
    )


async def get_user(conn: Connection, user_id: int, realm_id: int | None = None) -> UserRow:
    """An active user (of `realm_id` when given), or `ActionError`."""
    cur = conn.cursor(row_factory=class_row(UserRow))
    await cur.execute(
        "SELECT id, realm_id, email, full_name, role, is_active FROM users WHERE id = %s",
        (user_id,),
    )
    user = await cur.fetchone()
    if user is None or not user.is_active or (realm_id is not None and user.realm_id != realm_id):
        raise ActionError(f"Invalid user ID {user_id}", "BAD_REQUEST")
    return user


async def active_user_ids(conn: Connection, realm_id: int) -> list[int]:
    """Every active user of a realm: the audience of realm-wide events."""
    cur = await conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND is_active ORDER BY id", (realm_id,)
    )
    return [row[0] for row in await cur.fetchall()]
