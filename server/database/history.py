"""Message history from the domain's tables: which messages a narrow
(server/database/narrow.py) matches for a reader, and the messages as
Zulip's clients read them.

Who may read what (docs/behaviour.md, "Message history"), the same rule
the message actions apply (generation/actions/messages/common.py,
`_can_see`): a user reads the messages they received (a `user_messages`
row: a direct message they are in, a channel message sent while they were
subscribed), and the whole history of the channels they are subscribed to
and, unless a guest, of every public channel.

Where a narrow reads, as in Zulip: a narrow with a (not negated) `channel`
or `channels` term reads the channels' history (`shared`), from `messages`;
any other narrow reads the user's own messages, from their `user_messages`
rows, by the primary key's order. Either way each condition is one of the
query, so a page is an index scan that stops after the rows it needs
(the indexes: deploy/migrations/0013_message_history.sql and
server/database/updates.py `message_history_indexes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from generation.accounts import ROLE_GUEST
from server.database.narrow import Term, bad_narrow

Connection = psycopg.AsyncConnection[Any]

# Zulip's anchor for "newest": past any message id.
LARGER_THAN_MAX_MESSAGE_ID = 10_000_000_000_000_000
RESOLVED_PREFIX = "\u2714 "
# The text search configuration of `search` (and of its index).
SEARCH_CONFIG = "english"


@dataclasses.dataclass(frozen=True, slots=True)
class Reader:
    user_id: int
    realm_id: int
    is_guest: bool


async def reader_of(conn: Connection, user_id: int) -> Reader:
    cur = await conn.execute("SELECT realm_id, role FROM users WHERE id = %s", (user_id,))
    row = await cur.fetchone()
    assert row is not None, "an authenticated user exists"
    return Reader(user_id, int(row[0]), row[1] == ROLE_GUEST)


@dataclasses.dataclass(slots=True)
class Matcher:
    """A narrow made SQL for one reader: the table it reads (`shared`: the
    channels' history; else the reader's own rows) and its conditions."""

    reader: Reader
    shared: bool
    conditions: list[sql.Composable]
    params: dict[str, Any]

    @property
    def id_column(self) -> sql.Composable:
        # The driving table's column: its index gives the order.
        return sql.SQL("m.id" if self.shared else "um.message_id")

    def query(self, select: sql.Composable, *extra: sql.Composable) -> sql.Composed:
        if self.shared:
            source = sql.SQL(
                "FROM messages m LEFT JOIN user_messages um"
                " ON um.message_id = m.id AND um.user_id = %(me)s"
            )
        else:
            source = sql.SQL(
                "FROM user_messages um JOIN messages m ON m.id = um.message_id"
                " WHERE um.user_id = %(me)s"
            )
        where = [*self.conditions, *extra]
        if self.shared:
            where.insert(0, sql.SQL("m.realm_id = %(realm)s"))
            return sql.SQL("SELECT {} {} WHERE {}").format(
                select, source, sql.SQL(" AND ").join(where)
            )
        if not where:
            return sql.SQL("SELECT {} {}").format(select, source)
        return sql.SQL("SELECT {} {} AND {}").format(select, source, sql.SQL(" AND ").join(where))

    def add(self, condition: str, value: object = None) -> None:
        """A condition with at most one parameter, written `%(p)s`."""
        name = f"p{len(self.params)}"
        self.params[name] = value
        self.conditions.append(sql.SQL(condition.replace("%(p)s", f"%({name})s")))


# -- what the terms name ---------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Channel:
    id: int
    invite_only: bool
    subscribed: bool


async def _channel(conn: Connection, reader: Reader, operand: str | int) -> _Channel:
    by = "s.id = %(operand)s" if isinstance(operand, int) else "lower(s.name) = lower(%(operand)s)"
    cur = await conn.execute(
        sql.SQL(
            """
            SELECT s.id, s.invite_only, sub.user_id IS NOT NULL
            FROM streams s LEFT JOIN subscriptions sub
              ON sub.stream_id = s.id AND sub.user_id = %(me)s AND sub.active
            WHERE s.realm_id = %(realm)s AND {}
            ORDER BY s.deactivated, s.id LIMIT 1
            """
        ).format(sql.SQL(by)),
        {"me": reader.user_id, "realm": reader.realm_id, "operand": operand},
    )
    row = await cur.fetchone()
    if row is None:
        raise bad_narrow(f"unknown channel {operand}")
    return _Channel(int(row[0]), bool(row[1]), bool(row[2]))


def _reads_whole(reader: Reader, channel: _Channel) -> bool:
    """Whether the reader may read the channel's whole history."""
    return channel.subscribed or (not channel.invite_only and not reader.is_guest)


async def _readable_public(conn: Connection, reader: Reader) -> list[int]:
    """The public channels whose whole history the reader may read."""
    cur = await conn.execute(
        """
        SELECT s.id FROM streams s
        WHERE s.realm_id = %(realm)s AND NOT s.invite_only
          AND (NOT %(guest)s OR EXISTS (
                SELECT 1 FROM subscriptions sub
                WHERE sub.stream_id = s.id AND sub.user_id = %(me)s AND sub.active))
        """,
        {"realm": reader.realm_id, "guest": reader.is_guest, "me": reader.user_id},
    )
    return [int(row[0]) for row in await cur.fetchall()]


async def user_ids(
    conn: Connection, reader: Reader, operand: str | int | list[int], *, several: bool = False
) -> list[int]:
    """The users an operand names (an id, a list of ids, comma-separated
    e-mails, or `me`), all of the reader's realm; `bad_narrow` for one
    that is not (Zulip's wording: "unknown user in" the whole operand of a
    term that names `several`)."""
    unknown = bad_narrow(f"unknown user in {operand}" if several else f"unknown user {operand}")
    if isinstance(operand, int):
        operand = [operand]
    if isinstance(operand, str):
        emails = [e.strip().lower() for e in operand.split(",") if e.strip()]
        if not emails or (len(emails) > 1 and not several):
            raise unknown
        me = "me" in emails
        emails = [e for e in emails if e != "me"]
        cur = await conn.execute(
            "SELECT lower(email), id FROM users WHERE realm_id = %s AND lower(email) = ANY(%s)",
            (reader.realm_id, emails),
        )
        found = {row[0]: int(row[1]) for row in await cur.fetchall()}
        if any(email not in found for email in emails):
            raise unknown
        return sorted({*found.values(), *([reader.user_id] if me else [])})
    cur = await conn.execute(
        "SELECT id FROM users WHERE realm_id = %s AND id = ANY(%s)",
        (reader.realm_id, list(operand)),
    )
    found_ids = {int(row[0]) for row in await cur.fetchall()}
    if any(user_id not in found_ids for user_id in operand):
        raise unknown
    return sorted(found_ids)


# -- the terms as conditions -----------------------------------------------------


async def _with_conversation(conn: Connection, reader: Reader, terms: list[Term]) -> list[Term]:
    """Zulip's `with`: the term gives way to the conversation of its message
    (channel and topic, or the direct message's users), which replaces the
    narrow's own channel, topic and dm terms, when the reader may see it.
    A message they may not see drops the term if the narrow names a
    conversation anyway, and is refused if not."""
    with_ids = [t.operand for t in terms if t.operator == "with"]
    rest = [t for t in terms if t.operator != "with"]
    if not with_ids:
        return terms
    assert isinstance(with_ids[0], int)
    found = await visible_messages(conn, reader, [with_ids[0]])
    if not found:
        named = {t.operator for t in rest if not t.negated}
        if {"channel", "topic"} <= named or "dm" in named:
            return rest
        raise bad_narrow("Invalid 'with' operator")
    stream_id, topic, participants = found[0][1:]
    kept = [t for t in rest if t.operator not in ("channel", "topic", "dm")]
    if stream_id is not None:
        return [Term("channel", stream_id), Term("topic", topic), *kept]
    others = [u for u in participants if u != reader.user_id] or [reader.user_id]
    return [Term("dm", others), *kept]


async def visible_messages(
    conn: Connection, reader: Reader, ids: Sequence[int]
) -> list[tuple[int, int | None, str, list[int]]]:
    """Of `ids`, the messages the reader may see: (id, channel, topic,
    direct message participants)."""
    cur = await conn.execute(
        """
        SELECT m.id, m.stream_id, m.topic, m.participant_ids
        FROM messages m
        LEFT JOIN streams s ON s.id = m.stream_id
        LEFT JOIN user_messages um ON um.message_id = m.id AND um.user_id = %(me)s
        LEFT JOIN subscriptions sub
          ON sub.stream_id = m.stream_id AND sub.user_id = %(me)s AND sub.active
        WHERE m.realm_id = %(realm)s AND m.id = ANY(%(ids)s)
          AND (um.user_id IS NOT NULL OR sub.user_id IS NOT NULL
               OR (s.id IS NOT NULL AND NOT s.invite_only AND NOT %(guest)s))
        ORDER BY m.id
        """,
        {
            "me": reader.user_id,
            "realm": reader.realm_id,
            "ids": list(ids),
            "guest": reader.is_guest,
        },
    )
    return [(int(r[0]), r[1], r[2], list(r[3] or [])) for r in await cur.fetchall()]


async def matcher(
    conn: Connection, reader: Reader, terms: list[Term], *, own_only: bool = False
) -> Matcher:
    """The narrow's SQL for the reader; `bad_narrow` for a term that names
    what does not exist. It reads a channel's history (Zulip's
    `include_history`) when a term names, not negated, a channel whose
    whole history the reader may read, or `channels:public` for a member,
    and no `is` term (but `is:resolved`) asks about the reader's own flags;
    else, or with `own_only`, the reader's own messages."""
    terms = await _with_conversation(conn, reader, terms)
    channels = {}
    for term in terms:
        if term.operator == "channel":
            assert isinstance(term.operand, str | int)
            channels[term.operand] = await _channel(conn, reader, term.operand)
    history = any(
        not t.negated
        and (
            (t.operator == "channel" and _reads_whole(reader, channels[t.operand]))  # type: ignore[index]
            or (t.operator == "channels" and not reader.is_guest)
        )
        for t in terms
    )
    own_flags = any(t.operator == "is" and t.operand != "resolved" for t in terms)
    shared = history and not own_flags and not own_only
    found = Matcher(reader, shared, [], {"me": reader.user_id, "realm": reader.realm_id})
    searched = [str(t.operand) for t in terms if t.operator == "search" and not t.negated]
    if searched:
        found.add(_SEARCH, " ".join(searched))
    for term in terms:
        if term.operator == "search" and not term.negated:
            continue  # all in one condition, as Zulip applies them
        before = len(found.conditions)
        await _condition(conn, found, term, channels)
        if term.negated and len(found.conditions) > before:
            condition = found.conditions.pop()
            found.conditions.append(sql.SQL("NOT COALESCE(({}), false)").format(condition))
    return found


def search_document(prefix: str = "") -> str:
    """The text `search` looks in, as SQL: the expression of its GIN index
    (server/database/updates.py), which a query must repeat to use it."""
    return f"to_tsvector('{SEARCH_CONFIG}', {prefix}topic || ' ' || {prefix}content)"


_SEARCH = f"{search_document('m.')} @@ websearch_to_tsquery('{SEARCH_CONFIG}', %(p)s)"


async def _condition(
    conn: Connection, found: Matcher, term: Term, channels: dict[str | int, _Channel]
) -> None:
    reader, operator, operand = found.reader, term.operator, term.operand
    if operator == "channel":
        assert isinstance(operand, str | int)
        found.add("m.stream_id = %(p)s", channels[operand].id)
    elif operator == "channels":
        found.add("m.stream_id = ANY(%(p)s)", await _readable_public(conn, reader))
    elif operator == "topic":
        found.add("(m.stream_id IS NOT NULL AND lower(m.topic) = lower(%(p)s))", operand)
    elif operator == "dm" and operand == []:
        found.add("false")  # no conversation is among nobody (as Zulip)
    elif operator == "dm":
        assert not isinstance(operand, int)
        users = await user_ids(conn, reader, operand, several=True)
        found.add("m.participant_ids = %(p)s::bigint[]", sorted({*users, reader.user_id}))
    elif operator in ("dm-including", "group-pm-with"):
        assert not isinstance(operand, list)
        [user] = await user_ids(conn, reader, operand)
        group = " AND cardinality(m.participant_ids) > 2" if operator == "group-pm-with" else ""
        found.add(f"(%(p)s = ANY(m.participant_ids){group})", user)
    elif operator == "sender":
        assert not isinstance(operand, list)
        [user] = await user_ids(conn, reader, operand)
        found.add("m.sender_id = %(p)s", user)
    elif operator == "id":
        found.add("m.id = %(p)s", operand)
    elif operator == "is":
        _is_condition(found, str(operand))
    elif operator == "has":
        _has_condition(found, str(operand))
    elif operator == "in" and operand == "home":
        found.add(_NOT_MUTED)
    elif operator == "search":  # negated: each its own condition
        found.add(_SEARCH, operand)
    # near: the client's anchor hint; in:all: everything (as in Zulip).


# Not in a channel the reader muted.
_NOT_MUTED = (
    "NOT EXISTS (SELECT 1 FROM subscriptions muted WHERE muted.user_id = %(me)s"
    " AND muted.stream_id = m.stream_id AND muted.is_muted)"
)


def _has_condition(found: Matcher, operand: str) -> None:
    if operand == "reaction":
        found.add("EXISTS (SELECT 1 FROM reactions r WHERE r.message_id = m.id)")
    elif operand == "link":
        found.add("strpos(m.rendered_content, '<a href=') > 0")
    elif operand == "image":
        found.add("strpos(m.rendered_content, '<img ') > 0")
    else:  # attachment: eventq stores no uploads
        found.add("false")


def _is_condition(found: Matcher, operand: str) -> None:
    if operand == "dm":
        found.add("m.participant_ids IS NOT NULL")
    # These read the reader's own rows (`matcher`): `um` is there, and the
    # bare column lets the partial indexes (unread, starred) serve them.
    elif operand == "starred":
        found.add("um.starred")
    elif operand == "mentioned":
        found.add("(um.mentioned OR um.wildcard_mentioned)")
    elif operand == "alerted":
        found.add("um.has_alert_word")  # Zulip's is:alerted
    elif operand == "unread":
        found.add("NOT um.read")
    elif operand == "resolved":
        found.add("(m.stream_id IS NOT NULL AND starts_with(m.topic, %(p)s))", RESOLVED_PREFIX)
    else:  # parse_narrow admits no other
        raise AssertionError(operand)


# -- pages -------------------------------------------------------------------------


async def ids_around(
    conn: Connection, found: Matcher, *, below: int | None, above: int | None, limit: int
) -> list[int]:
    """Up to `limit` ids of matching messages: the highest at or below
    `below`, or the lowest at or above `above`."""
    column = found.id_column
    if below is not None:
        bound, order = sql.SQL("{} <= %(bound)s").format(column), sql.SQL("DESC")
    else:
        bound, order = sql.SQL("{} >= %(bound)s").format(column), sql.SQL("ASC")
    query = sql.SQL("{} ORDER BY {} {} LIMIT %(limit)s").format(
        found.query(column, bound), column, order
    )
    params = {**found.params, "bound": below if below is not None else above, "limit": limit}
    cur = await conn.execute(query, params)
    return [int(row[0]) for row in await cur.fetchall()]


async def first_unread(conn: Connection, found: Matcher, names_channel: bool) -> int | None:
    """The lowest id of the narrow's messages the reader has not read, not
    counting those of channels they muted unless the narrow names one (as
    Zulip's first_unread anchor)."""
    column = found.id_column
    unread = "um.user_id IS NOT NULL AND NOT um.read"
    if not names_channel:
        unread += f" AND {_NOT_MUTED}"
    query = sql.SQL("{} ORDER BY {} LIMIT 1").format(found.query(column, sql.SQL(unread)), column)
    cur = await conn.execute(query, found.params)
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def matching(conn: Connection, found: Matcher, ids: Sequence[int]) -> list[int]:
    """Of `ids`, those the narrow matches (and the reader may see)."""
    column = found.id_column
    query = sql.SQL("{} ORDER BY {}").format(
        found.query(column, sql.SQL("{} = ANY(%(ids)s)").format(column)), column
    )
    cur = await conn.execute(query, {**found.params, "ids": list(ids)})
    return [int(row[0]) for row in await cur.fetchall()]


async def topics(conn: Connection, reader: Reader, stream_id: int) -> list[tuple[str, int]] | None:
    """The channel's topics the reader may read, each by its newest
    message's name and id, newest first; None if the reader may not see the
    channel (or it is not of their realm)."""
    cur = await conn.execute(
        """
        SELECT s.invite_only, sub.user_id IS NOT NULL
        FROM streams s LEFT JOIN subscriptions sub
          ON sub.stream_id = s.id AND sub.user_id = %(me)s AND sub.active
        WHERE s.id = %(stream)s AND s.realm_id = %(realm)s
        """,
        {"me": reader.user_id, "stream": stream_id, "realm": reader.realm_id},
    )
    row = await cur.fetchone()
    if row is None:
        return None
    if not _reads_whole(reader, _Channel(stream_id, bool(row[0]), bool(row[1]))):
        # Not theirs to read: Zulip's access_stream_by_id refuses it. An
        # archived channel stays readable (docs/behaviour.md), as in GET messages.
        return None
    cur = await conn.execute(
        """
        SELECT name, max_id FROM (
            SELECT DISTINCT ON (lower(m.topic)) m.topic AS name, m.id AS max_id
            FROM messages m WHERE m.stream_id = %s
            ORDER BY lower(m.topic) DESC, m.id DESC
        ) t ORDER BY max_id DESC
        """,
        (stream_id,),
    )
    return [(str(r[0]), int(r[1])) for r in await cur.fetchall()]


def _html_escaped(column: str) -> str:
    """SQL of `column` HTML-escaped as Zulip escapes a topic: & < > " '."""
    for char, entity in (
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ('"', "&quot;"),
        ("'", "&#x27;"),
    ):
        quoted = char.replace("'", "''")
        column = f"replace({column}, '{quoted}', '{entity}')"
    return column


_ESCAPED_TOPIC = _html_escaped("m.topic")


async def highlights(
    conn: Connection, ids: Sequence[int], terms: Sequence[Term]
) -> dict[int, tuple[str, str]]:
    """A search's `match_content` and `match_subject` of each message: its
    HTML and its (escaped) topic, the words the narrow's `search` terms
    match set in `<span class="highlight">`; unmarked without a search."""
    searched = " ".join(str(t.operand) for t in terms if t.operator == "search" and not t.negated)
    options = 'HighlightAll=true, StartSel="<span class=""highlight"">", StopSel=</span>'
    if searched:
        query = f"websearch_to_tsquery('{SEARCH_CONFIG}', %(search)s)"
        content = f"ts_headline('{SEARCH_CONFIG}', m.rendered_content, {query}, %(options)s)"
        subject = f"ts_headline('{SEARCH_CONFIG}', {_ESCAPED_TOPIC}, {query}, %(options)s)"
    else:
        content, subject = "m.rendered_content", _ESCAPED_TOPIC
    cur = await conn.execute(
        f"SELECT m.id, {content}, {subject} FROM messages m WHERE m.id = ANY(%(ids)s)",  # noqa: S608
        {"ids": list(ids), "search": searched, "options": options},
    )
    return {int(r[0]): (str(r[1]), str(r[2])) for r in await cur.fetchall()}
