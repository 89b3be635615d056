"""Unsubscribe links of the missed-message emails (Zulip's
`/accounts/unsubscribe/missed_messages/<token>`): the token names the user
and is signed with the installation's key, so a link works without a login
and cannot be made for someone else. Following it turns the user's
`enable_offline_email_notifications` off (server/handlers/unsubscribe.py)."""

from __future__ import annotations

import hashlib
import hmac

PATH = "/accounts/unsubscribe/missed_messages/"


def _signature(secret: bytes, user_id: int) -> str:
    message = f"eventq unsubscribe missed_messages {user_id}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]


def token(secret: bytes, user_id: int) -> str:
    return f"{user_id}-{_signature(secret, user_id)}"


def unsubscribe_url(site_url: str, secret: bytes, user_id: int) -> str:
    return f"{site_url}{PATH}{token(secret, user_id)}"


def user_of(secret: bytes, value: str) -> int | None:
    """The user a token was made for, or None if it is not one of ours."""
    user_part, _, signature = value.partition("-")
    if not user_part.isdigit() or len(user_part) > 19:
        return None
    user_id = int(user_part)
    if not hmac.compare_digest(signature, _signature(secret, user_id)):
        return None
    return user_id
