"""A user's alert words, and which recipients of a new message they alert.

Words are kept in the order they were added, each once whatever its letter
case (the first spelling stays). Every change sends the whole list
(`alert_words`) to the user only. A message sent afterwards gets the
`has_alert_word` flag for each recipient whose word it contains
(`alerted_user_ids`, read by message sending), and an edit of its content
recounts the flag for everyone who holds it (`alerted_recipient_ids`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from generation.actions.base import ActionContext, ActionError, Connection, get_user
from generation.actions.personal.common import _lock_user

# Zulip's limit on one alert word.
MAX_ALERT_WORD_LENGTH = 100
# Words per user. Zulip has no limit; each is matched against every message
# the user receives, and every change sends the whole list, so 1,000 (at
# most about 100 KB) is far above a person's use and keeps both bounded.
MAX_ALERT_WORDS = 1000

# Zulip's word boundaries for an alert word (its Markdown processor's
# `allowed_before_punctuation` and `allowed_after_punctuation`): a match
# counts only at the start of the message or after one of these, and at its
# end or before one of these.
_BEFORE = frozenset(" \n(\".,';[*`>")
_AFTER = frozenset(" \n)\"?:.,';]!*`")


def contains_alert_word(content: str, word: str) -> bool:
    """Whether `content` contains `word`, ignoring letter case, between
    Zulip's word boundaries."""
    text, needle = content.lower(), word.lower()
    if not needle:
        return False
    start = text.find(needle)
    while start != -1:
        end = start + len(needle)
        if (start == 0 or text[start - 1] in _BEFORE) and (end == len(text) or text[end] in _AFTER):
            return True
        start = text.find(needle, start + 1)
    return False


def clean_alert_words(words: Sequence[str]) -> list[str]:
    """Zulip's cleaning: surrounding blanks removed, empty words dropped;
    then each checked."""
    cleaned = [word.strip() for word in words]
    cleaned = [word for word in cleaned if word]
    for index, word in enumerate(cleaned):
        if len(word) > MAX_ALERT_WORD_LENGTH:
            raise ActionError(
                f"alert_words[{index}] is too long (limit: {MAX_ALERT_WORD_LENGTH} characters)"
            )
        if "\x00" in word:
            raise ActionError(f"alert_words[{index}] must not contain null bytes")
    return cleaned


async def user_alert_words(conn: Connection, user_id: int) -> list[str]:
    """The user's words, in the order they were added."""
    cur = await conn.execute(
        "SELECT word FROM alert_words WHERE user_id = %s ORDER BY id", (user_id,)
    )
    return [str(row[0]) for row in await cur.fetchall()]


async def alerted_user_ids(conn: Connection, user_ids: Collection[int], content: str) -> set[int]:
    """Of `user_ids`, those with an alert word that `content` contains.
    PostgreSQL returns only the words the content holds somewhere; the word
    boundaries are checked here."""
    cur = await conn.execute(
        "SELECT user_id, word FROM alert_words WHERE user_id = ANY(%s) AND strpos(%s, folded) > 0",
        (list(user_ids), content.lower()),
    )
    return {
        int(user_id) for user_id, word in await cur.fetchall() if contains_alert_word(content, word)
    }


async def alerted_recipient_ids(conn: Connection, message_id: int, content: str) -> set[int]:
    """Of the users who hold `message_id` (a row in `user_messages`), those
    with an alert word that `content` contains: an edit's recount, with the
    prefilter of `alerted_user_ids`, in one query."""
    cur = await conn.execute(
        "SELECT a.user_id, a.word FROM user_messages um"
        " JOIN alert_words a ON a.user_id = um.user_id"
        " WHERE um.message_id = %s AND strpos(%s, a.folded) > 0",
        (message_id, content.lower()),
    )
    return {
        int(user_id) for user_id, word in await cur.fetchall() if contains_alert_word(content, word)
    }


async def do_add_alert_words(ctx: ActionContext, user_id: int, words: Sequence[str]) -> list[str]:
    """Add the words (cleaned; those the user has in any letter case are
    skipped); returns the user's words, which the `alert_words` event
    carries, sent even when nothing was new (as Zulip)."""
    new = clean_alert_words(words)
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        await _lock_user(ctx.conn, user.id)
        known = {word.lower() for word in await user_alert_words(ctx.conn, user.id)}
        added = []
        for word in new:
            if word.lower() not in known:
                known.add(word.lower())
                added.append(word)
        if len(known) > MAX_ALERT_WORDS:
            raise ActionError(f"You can have at most {MAX_ALERT_WORDS} alert words.")
        if added:
            await ctx.conn.execute(
                "INSERT INTO alert_words (user_id, word, folded)"
                " SELECT %s, word, folded"
                " FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t (word, folded, n)"
                " ORDER BY n"
                # A spelling PostgreSQL's lower() equates and Python's does not.
                " ON CONFLICT DO NOTHING",
                (user.id, added, [word.lower() for word in added]),
            )
        result = await user_alert_words(ctx.conn, user.id)
        outbox.send(user.realm_id, {"type": "alert_words", "alert_words": result}, [user.id])
    return result


async def do_remove_alert_words(
    ctx: ActionContext, user_id: int, words: Sequence[str]
) -> list[str]:
    """Remove the words, in any letter case (unknown ones are ignored);
    returns the user's words, which the `alert_words` event carries."""
    if len(words) > MAX_ALERT_WORDS:
        raise ActionError(f"alert_words has more than {MAX_ALERT_WORDS} items")
    lowered = sorted({word.strip().lower() for word in words if "\x00" not in word})
    async with ctx.transaction() as outbox:
        user = await get_user(ctx.conn, user_id)
        await _lock_user(ctx.conn, user.id)
        await ctx.conn.execute(
            "DELETE FROM alert_words WHERE user_id = %s AND lower(word) = ANY(%s)",
            (user.id, lowered),
        )
        result = await user_alert_words(ctx.conn, user.id)
        outbox.send(user.realm_id, {"type": "alert_words", "alert_words": result}, [user.id])
    return result
