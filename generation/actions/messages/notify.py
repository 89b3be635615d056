"""Who may be notified of a new message if they are away: the `notify` part
of its notice (generation/notice.py), decided where the settings are, at send.

Zulip's rules (its `UserMessageNotificationsData`), by email and by push
separately, for each recipient other than the sender who is an active human
and did not get the message already read (a muted sender's message):
- a direct message: by their `enable_offline_email_notifications` /
  `enable_offline_push_notifications`;
- a channel message that mentions them (`mentioned`: by name or through a
  group), or holds one of their alert words (`has_alert_word`): the same two
  settings;
- a wildcard mention (@**all**, @**channel**, @**topic**): the same, when
  `wildcard_mentions_notify` of the subscription (or, unset, the user's) is on;
- any message of a channel whose `email_notifications` / `push_notifications`
  (or, unset, the user's `enable_stream_email_notifications` /
  `enable_stream_push_notifications`) is on, unless they muted the channel.

Whether they are away is the server's to decide (server/notifications/), and
whether the message is still unread when a notification would go out, the
worker's (docs/notifications.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from generation.actions.base import Connection

# One row per recipient for whom the message is notifiable one way or another.
_NOTIFIABLE = """
SELECT id, personal AND offline_email OR channel_email, personal AND offline_push OR channel_push
FROM (
    SELECT u.id,
           coalesce(s.enable_offline_email_notifications, true) AS offline_email,
           coalesce(s.enable_offline_push_notifications, true) AS offline_push,
           (%(direct)s OR u.id = ANY(%(mentioned)s) OR u.id = ANY(%(alerted)s)
            OR u.id = ANY(%(wildcard)s)
              AND coalesce(sub.wildcard_mentions_notify, s.wildcard_mentions_notify, true))
               AS personal,
           NOT %(direct)s AND NOT coalesce(sub.is_muted, false)
               AND coalesce(sub.email_notifications, s.enable_stream_email_notifications, false)
               AS channel_email,
           NOT %(direct)s AND NOT coalesce(sub.is_muted, false)
               AND coalesce(sub.push_notifications, s.enable_stream_push_notifications, false)
               AS channel_push
    FROM users u
    LEFT JOIN user_settings s ON s.user_id = u.id
    LEFT JOIN subscriptions sub ON sub.user_id = u.id AND sub.stream_id = %(stream_id)s
    WHERE u.id = ANY(%(ids)s) AND u.is_active AND NOT u.is_bot
) AS recipient
WHERE personal AND (offline_email OR offline_push) OR channel_email OR channel_push
ORDER BY id
"""


async def notifiable(
    conn: Connection,
    sender_id: int,
    flags: Mapping[int, Sequence[str]],
    stream_id: int | None,
) -> dict[str, list[int]] | None:
    """The message's `notify`: kind -> the recipients (of `flags`, their
    flags on it) it is notifiable for that way; None when nobody.
    `stream_id` None: a direct message."""
    ids = [user for user, own in flags.items() if user != sender_id and "read" not in own]
    if not ids:
        return None
    cur = await conn.execute(
        _NOTIFIABLE,
        {
            "direct": stream_id is None,
            "stream_id": stream_id,
            "ids": ids,
            "mentioned": [u for u in ids if "mentioned" in flags[u]],
            "wildcard": [u for u in ids if "wildcard_mentioned" in flags[u]],
            "alerted": [u for u in ids if "has_alert_word" in flags[u]],
        },
    )
    email: list[int] = []
    push: list[int] = []
    for user_id, by_email, by_push in await cur.fetchall():
        if by_email:
            email.append(user_id)
        if by_push:
            push.append(user_id)
    if not email and not push:
        return None
    return {"email": email, "push": push}
