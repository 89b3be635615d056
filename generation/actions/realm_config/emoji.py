"""Custom emoji (Zulip's `RealmEmoji`): an image uploaded under a name.
Every active user of the realm is told of each change with all of the
realm's custom emoji, deactivated ones included (Zulip's
`get_all_custom_emoji_for_realm`).

Who may: Zulip's `can_add_custom_emoji_group` defaults to members, and
eventq has no groups, so every member, moderator, administrator and owner
may add one, and guests may not (Zulip's `require_member_or_admin`).
Administrators and the emoji's author may deactivate it (Zulip's
`check_remove_custom_emoji`). eventq has no list of Unicode emoji names,
so it cannot refuse members a name that overrides a built-in one, as Zulip
does: a custom emoji of that name wins in clients, for everyone.

The image is stored in PostgreSQL (`realm_emoji.image`), not on a disk:
several shards on several hosts serve it, and the row, its image and the
event commit together or not at all. It is served at `source_url`
(server/handlers/realm_config.py), under a random name, as is: eventq
neither resizes it nor makes a still image of an animated one (`still_url`
is null).
"""

from __future__ import annotations

import re
import secrets

from generation.actions.base import (
    ActionContext,
    ActionError,
    Connection,
    Outbox,
    active_user_ids,
    get_user,
)
from generation.actions.realm_config.common import require_member
from generation.events.realm_config import RealmEmojiInfo

# Zulip takes up to 5 MiB and resizes to 64x64; eventq serves the image as
# uploaded, on every render of the emoji, so it keeps it small: 512 KiB,
# half the default request body limit (EVENTQ_MAX_REQUEST_BYTES, 1 MiB),
# so the upload's own error, not the body limit's, is what a client meets.
MAX_EMOJI_BYTES = 512 * 1024
# Every custom emoji, deactivated ones too, is in every register and every
# `realm_emoji` event (about 200 bytes each): 1,000 keeps that under
# 200 KB. Deactivated ones count: they stay in the dict.
MAX_EMOJI = 1000
MAX_NAME_LENGTH = 100

# The image types Zulip accepts for emoji, by their first bytes.
_SIGNATURES: tuple[tuple[bytes, str, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png", "png"),
    (b"GIF87a", "image/gif", "gif"),
    (b"GIF89a", "image/gif", "gif"),
    (b"\xff\xd8\xff", "image/jpeg", "jpg"),
)
EXTENSIONS = {"image/png": "png", "image/gif": "gif", "image/jpeg": "jpg", "image/webp": "webp"}
# Zulip's RealmEmoji name rule (the model's validator).
_NAME = re.compile(r"[0-9a-z.\-_]+")


def image_type(image: bytes) -> str | None:
    """The content type of a PNG, GIF, JPEG or WebP image by its magic bytes,
    None for anything else."""
    for signature, content_type, _extension in _SIGNATURES:
        if image.startswith(signature):
            return content_type
    if len(image) >= 12 and image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_emoji_name(name: str) -> str:
    """A name as Zulip takes it: spaces become underscores; lower-case
    letters, digits, '.', '-' and '_', ending with a letter or digit."""
    name = name.strip().replace(" ", "_")
    if not name:
        raise ActionError("Emoji name is missing")
    if len(name) > MAX_NAME_LENGTH:
        raise ActionError(f"Emoji name is too long (limit: {MAX_NAME_LENGTH} characters)")
    if not _NAME.fullmatch(name):
        raise ActionError(
            "Emoji names must contain only lowercase English letters, digits, spaces,"
            " dashes, and underscores."
        )
    if name[-1] in ".-_":
        raise ActionError("Emoji names must end with either a letter or digit.")
    return name


def emoji_url(realm_id: int, file_name: str) -> str:
    """Where an emoji's image is served (Zulip's path for local uploads),
    relative to the server."""
    return f"/user_avatars/{realm_id}/emoji/images/{file_name}"


async def realm_emoji(conn: Connection, realm_id: int) -> dict[str, RealmEmojiInfo]:
    """Every custom emoji of the realm, deactivated ones included, by id as
    a string (register's `realm_emoji`, GET realm/emoji)."""
    cur = await conn.execute(
        "SELECT id, name, file_name, deactivated, author_id FROM realm_emoji"
        " WHERE realm_id = %s ORDER BY id",
        (realm_id,),
    )
    return {
        str(row[0]): RealmEmojiInfo(
            id=str(row[0]),
            name=row[1],
            source_url=emoji_url(realm_id, row[2]),
            deactivated=row[3],
            author_id=row[4],
            still_url=None,
        )
        for row in await cur.fetchall()
    }


async def _send(ctx: ActionContext, outbox: Outbox, realm_id: int) -> None:
    """The realm's custom emoji as they are now in the transaction, to every
    active user of the realm."""
    emoji = await realm_emoji(ctx.conn, realm_id)
    users = await active_user_ids(ctx.conn, realm_id)
    outbox.send(realm_id, {"type": "realm_emoji", "op": "update", "realm_emoji": emoji}, users)


async def do_add_realm_emoji(
    ctx: ActionContext, actor_id: int, realm_id: int, name: str, image: bytes
) -> RealmEmojiInfo:
    """Add a custom emoji from an uploaded PNG, GIF, JPEG or WebP image;
    any user of the realm but a guest."""
    name = check_emoji_name(name)
    if len(image) > MAX_EMOJI_BYTES:
        raise ActionError(
            f"Uploaded file is larger than the allowed limit of {MAX_EMOJI_BYTES // 1024} KiB"
        )
    content_type = image_type(image)
    if content_type is None:
        raise ActionError("Invalid image format")
    file_name = f"{secrets.token_hex(8)}.{EXTENSIONS[content_type]}"
    async with ctx.transaction() as outbox:
        await require_member(ctx.conn, actor_id, realm_id)
        # One writer at a time per realm, so that the name check and the
        # limit hold.
        await ctx.conn.execute("SELECT 1 FROM realms WHERE id = %s FOR UPDATE", (realm_id,))
        cur = await ctx.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE name = %s AND NOT deactivated)"
            " FROM realm_emoji WHERE realm_id = %s",
            (name, realm_id),
        )
        row = await cur.fetchone()
        assert row is not None
        if row[1]:
            raise ActionError("A custom emoji with this name already exists.")
        if row[0] >= MAX_EMOJI:
            raise ActionError(f"An organization has at most {MAX_EMOJI} custom emoji.")
        cur = await ctx.conn.execute(
            "INSERT INTO realm_emoji (realm_id, name, author_id, file_name, content_type, image)"
            " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (realm_id, name, actor_id, file_name, content_type, image),
        )
        inserted = await cur.fetchone()
        assert inserted is not None
        await _send(ctx, outbox, realm_id)
    return RealmEmojiInfo(
        id=str(inserted[0]),
        name=name,
        source_url=emoji_url(realm_id, file_name),
        deactivated=False,
        author_id=actor_id,
        still_url=None,
    )


async def do_remove_realm_emoji(
    ctx: ActionContext, actor_id: int | None, realm_id: int, name: str
) -> None:
    """Deactivate the active custom emoji `name`: administrators and its
    author (`actor_id` None: the operator)."""
    async with ctx.transaction() as outbox:
        cur = await ctx.conn.execute(
            "SELECT id, author_id FROM realm_emoji"
            " WHERE realm_id = %s AND name = %s AND NOT deactivated FOR UPDATE",
            (realm_id, name),
        )
        row = await cur.fetchone()
        if row is None:
            raise ActionError(f"Emoji '{name}' does not exist")
        if actor_id is not None:
            actor = await get_user(ctx.conn, actor_id, realm_id)
            if not actor.is_admin and row[1] != actor_id:
                raise ActionError("Must be an organization administrator or emoji author")
        await ctx.conn.execute("UPDATE realm_emoji SET deactivated = true WHERE id = %s", (row[0],))
        await _send(ctx, outbox, realm_id)


async def emoji_image(conn: Connection, realm_id: int, file_name: str) -> tuple[str, bytes] | None:
    """The content type and bytes of an emoji's image, None if the realm has
    no image of that name."""
    cur = await conn.execute(
        "SELECT content_type, image FROM realm_emoji WHERE realm_id = %s AND file_name = %s",
        (realm_id, file_name),
    )
    row = await cur.fetchone()
    return None if row is None else (row[0], bytes(row[1]))
