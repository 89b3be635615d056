"""Saved snippets: message content a user keeps to reuse (Zulip's saved
snippets). Every change sends a `saved_snippets` event (add, update,
remove) to the user only."""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg.rows import class_row

from generation.actions.base import ActionContext, ActionError, Connection, get_user
from generation.actions.messages.common import MAX_MESSAGE_LENGTH
from generation.actions.personal.common import _lock_user

# Zulip's SavedSnippet.MAX_TITLE_LENGTH; content as long as a message.
MAX_TITLE_LENGTH = 60
MAX_CONTENT_LENGTH = MAX_MESSAGE_LENGTH
# Snippets per user. Zulip has no limit; register sends them all, each up
# to 10,000 characters, so 100 (at most about 1 MB) bounds register's
# answer while being far above a person's collection of canned replies.
MAX_SAVED_SNIPPETS = 100


@dataclasses.dataclass(frozen=True, slots=True)
class _SnippetRow:
    id: int
    title: str
    content: str
    date_created: int

    def as_dict(self) -> dict[str, Any]:
        """Zulip's saved snippet object."""
        return dataclasses.asdict(self)


_COLUMNS = "id, title, content, floor(extract(epoch FROM date_created))::bigint AS date_created"


def _check(name: str, value: str, limit: int) -> str:
    """Zulip's checks: surrounding blanks removed, then 1 to `limit`
    characters."""
    value = value.strip()
    if not value:
        raise ActionError(f"{name} cannot be blank.")
    if len(value) > limit:
        raise ActionError(f"{name} is too long (limit: {limit} characters)")
    if "\x00" in value:
        raise ActionError(f"{name} must not contain null bytes")
    return value


async def user_saved_snippets(conn: Connection, user_id: int) -> list[dict[str, Any]]:
    """The user's snippets, by id (the order they were saved)."""
    cur = conn.cursor(row_factory=class_row(_SnippetRow))
    await cur.execute(
        f"SELECT {_COLUMNS} FROM saved_snippets WHERE user_id = %s ORDER BY id",  # noqa: S608 (fixed columns)
        (user_id,),
    )
    return [row.as_dict() for row in await cur.fetchall()]


def _not_found() -> ActionError:
    return ActionError("Saved snippet does not exist.", "BAD_REQUEST", 404)


async def do_create_saved_snippet(
    ctx: ActionContext, user_id: int, title: str, content: str
) -> int:
    """Save a snippet; returns its id. A `saved_snippets` add event."""
    title = _check("title", title, MAX_TITLE_LENGTH)
    content = _check("content", content, MAX_CONTENT_LENGTH)
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        await _lock_user(ctx.conn, user.id)
        cur = await ctx.conn.execute(
            "SELECT count(*) FROM saved_snippets WHERE user_id = %s", (user.id,)
        )
        counted = await cur.fetchone()
        assert counted is not None
        if counted[0] >= MAX_SAVED_SNIPPETS:
            raise ActionError(f"You can have at most {MAX_SAVED_SNIPPETS} saved snippets.")
        rows = ctx.conn.cursor(row_factory=class_row(_SnippetRow))
        await rows.execute(
            f"INSERT INTO saved_snippets (user_id, title, content) VALUES (%s, %s, %s)"  # noqa: S608 (fixed columns)
            f" RETURNING {_COLUMNS}",
            (user.id, title, content),
        )
        row = await rows.fetchone()
        assert row is not None
        event = {"type": "saved_snippets", "op": "add", "saved_snippet": row.as_dict()}
        outbox.send(user.realm_id, event, [user.id])
    return row.id


async def do_edit_saved_snippet(
    ctx: ActionContext, user_id: int, snippet_id: int, title: str | None, content: str | None
) -> bool:
    """Change a snippet's title and/or content; a `saved_snippets` update
    event. Neither given: nothing changes, no event (as Zulip); returns
    whether it was changed."""
    new_title = None if title is None else _check("title", title, MAX_TITLE_LENGTH)
    new_content = None if content is None else _check("content", content, MAX_CONTENT_LENGTH)
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        rows = ctx.conn.cursor(row_factory=class_row(_SnippetRow))
        await rows.execute(
            f"""
            UPDATE saved_snippets SET title = coalesce(%s, title), content = coalesce(%s, content)
            WHERE id = %s AND user_id = %s RETURNING {_COLUMNS}
            """,  # noqa: S608 (fixed columns)
            (new_title, new_content, snippet_id, user.id),
        )
        row = await rows.fetchone()
        if row is None:
            raise _not_found()
        if new_title is None and new_content is None:
            return False
        event = {"type": "saved_snippets", "op": "update", "saved_snippet": row.as_dict()}
        outbox.send(user.realm_id, event, [user.id])
    return True


async def do_delete_saved_snippet(ctx: ActionContext, user_id: int, snippet_id: int) -> None:
    """Delete a snippet; a `saved_snippets` remove event."""
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        cur = await ctx.conn.execute(
            "DELETE FROM saved_snippets WHERE id = %s AND user_id = %s", (snippet_id, user.id)
        )
        if not cur.rowcount:
            raise _not_found()
        event = {"type": "saved_snippets", "op": "remove", "saved_snippet_id": snippet_id}
        outbox.send(user.realm_id, event, [user.id])
