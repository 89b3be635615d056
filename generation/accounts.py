"""Realms, users and API keys: the account actions behind `eventq realm` and
`eventq user`, and the API key format the server authenticates against.

Actions take a synchronous psycopg connection and run in its transaction; the
caller commits. (Account events for connected clients come with the domain.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
import string
from typing import Any

import psycopg
from psycopg.rows import dict_row

from generation.config import api_key_secret

# An API key is 32 characters from [A-Za-z0-9] (as Zulip's): the first 8 are its
# id, by which the server finds the user; the rest makes it unguessable
# (24 characters, 142 bits).
API_KEY_LENGTH = 32
API_KEY_ID_LENGTH = 8
_ALPHABET = string.ascii_letters + string.digits

ROLES = {"owner": 100, "administrator": 200, "moderator": 300, "member": 400, "guest": 600}
ROLE_NAMES = {number: name for name, number in ROLES.items()}
ROLE_GUEST = ROLES["guest"]

# eventq knows no host name for a realm (Zulip's `realm.host` is the
# subdomain under EXTERNAL_HOST): the addresses it makes up (a bot's, the
# one shown for a user one may not see) are the realm's subdomain under this
# reserved domain (RFC 2606), like Zulip's FAKE_EMAIL_DOMAIN.
FAKE_EMAIL_DOMAIN = "eventq.invalid"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


class AccountError(ValueError):
    """Raised by the account actions for a request that cannot be carried out
    (bad subdomain or email, unknown realm, duplicate); the message says why."""


def new_api_key() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(API_KEY_LENGTH))


def api_key_id(api_key: str) -> str:
    return api_key[:API_KEY_ID_LENGTH]


# How `users.api_key_hash` was computed (`users.api_key_hash_scheme`).
HASH_SHA256 = 1  # before migration 0004; rewritten at the next authentication
HASH_HMAC = 2
# The keyed hash of a scheme-1 hash (`wrap_legacy_hash`), written by the
# background update of migration 0009 without knowing the key.
HASH_WRAPPED = 3


def hash_api_key(api_key: str, secret: bytes | None = None) -> bytes:
    """HMAC-SHA256 of the key with the installation's API key secret
    (`generation.config.api_key_secret`), or `secret` when given."""
    key = api_key_secret() if secret is None else secret
    return hmac.digest(key, api_key.encode("utf-8"), "sha256")


def legacy_hash_api_key(api_key: str) -> bytes:
    """The plain SHA-256 of rows written before keyed hashes (scheme 1)."""
    return hashlib.sha256(api_key.encode("utf-8")).digest()


def wrap_legacy_hash(legacy: bytes, secret: bytes | None = None) -> bytes:
    """HMAC-SHA256 of a scheme-1 hash with the API key secret (scheme 3)."""
    key = api_key_secret() if secret is None else secret
    return hmac.digest(key, legacy, "sha256")


def is_well_formed_api_key(api_key: str) -> bool:
    return len(api_key) == API_KEY_LENGTH and all(c in _ALPHABET for c in api_key)


@dataclasses.dataclass(frozen=True)
class CreatedUser:
    user_id: int
    realm_id: int
    email: str
    full_name: str
    role: str
    api_key: str

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def create_realm(
    conn: psycopg.Connection[Any], subdomain: str, name: str, description: str = ""
) -> int:
    """Create a realm and return its id."""
    if not _SUBDOMAIN.match(subdomain):
        raise AccountError(
            f"invalid subdomain {subdomain!r}: use lowercase letters, digits and '-'"
        )
    if not 1 <= len(name) <= 200:
        raise AccountError("a realm name needs 1 to 200 characters")
    try:
        with conn.transaction():  # a savepoint: the caller's transaction survives a duplicate
            row = conn.execute(
                "INSERT INTO realms (subdomain, name, description)"
                " VALUES (%s, %s, %s) RETURNING id",
                (subdomain, name, description),
            ).fetchone()
    except psycopg.errors.UniqueViolation:
        raise AccountError(f"a realm with subdomain {subdomain!r} already exists") from None
    assert row is not None
    return int(row[0])


def realm_id_by_subdomain(conn: psycopg.Connection[Any], subdomain: str) -> int:
    row = conn.execute("SELECT id FROM realms WHERE subdomain = %s", (subdomain,)).fetchone()
    if row is None:
        raise AccountError(f"no realm with subdomain {subdomain!r}")
    return int(row[0])


def resolve_realm(conn: psycopg.Connection[Any], subdomain_or_id: str) -> int:
    """A realm named by its subdomain or, failing that, by its numeric id
    (subdomains may be all digits, so the subdomain is tried first)."""
    row = conn.execute("SELECT id FROM realms WHERE subdomain = %s", (subdomain_or_id,)).fetchone()
    if row is None and subdomain_or_id.isdigit():
        row = conn.execute(
            "SELECT id FROM realms WHERE id = %s", (int(subdomain_or_id),)
        ).fetchone()
    if row is None:
        raise AccountError(f"no realm with subdomain or id {subdomain_or_id!r}")
    return int(row[0])


def create_user(
    conn: psycopg.Connection[Any],
    realm_subdomain: str,
    email: str,
    full_name: str,
    role: str = "member",
) -> CreatedUser:
    """Create a user with a fresh API key; the key is returned only here."""
    if role not in ROLES:
        raise AccountError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    if not _EMAIL.match(email) or len(email) > 254:
        raise AccountError(f"invalid email address {email!r}")
    if not 1 <= len(full_name) <= 100:
        raise AccountError("a full name needs 1 to 100 characters")
    realm_id = realm_id_by_subdomain(conn, realm_subdomain)
    api_key = new_api_key()
    try:
        with conn.transaction():  # a savepoint, as in create_realm
            row = conn.execute(
                """
                INSERT INTO users (realm_id, email, full_name, role, api_key_id, api_key_hash,
                                   api_key_hash_scheme)
                VALUES (%s, %s, %s, %s, %s, %s, 2) RETURNING id
                """,
                (
                    realm_id,
                    email,
                    full_name,
                    ROLES[role],
                    api_key_id(api_key),
                    hash_api_key(api_key),
                ),
            ).fetchone()
    except psycopg.errors.UniqueViolation as exc:
        if "api_key_id" in str(exc):  # 1 in 62^8: draw again
            return create_user(conn, realm_subdomain, email, full_name, role)
        raise AccountError(f"{email} already exists in realm {realm_subdomain!r}") from None
    assert row is not None
    conn.execute("INSERT INTO user_settings (user_id) VALUES (%s)", (row[0],))
    return CreatedUser(int(row[0]), realm_id, email, full_name, role, api_key)


def rotate_api_key(conn: psycopg.Connection[Any], realm_subdomain: str, email: str) -> CreatedUser:
    """Give a user a new API key; the old one stops working (at once for new
    connections, within the server's auth cache time for existing ones)."""
    realm_id = realm_id_by_subdomain(conn, realm_subdomain)
    api_key = new_api_key()
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            """
            UPDATE users SET api_key_id = %s, api_key_hash = %s, api_key_hash_scheme = 2
            WHERE realm_id = %s AND lower(email) = lower(%s)
            RETURNING id, email, full_name, role
            """,
            (api_key_id(api_key), hash_api_key(api_key), realm_id, email),
        ).fetchone()
    if row is None:
        raise AccountError(f"no user {email} in realm {realm_subdomain!r}")
    return CreatedUser(
        row["id"], realm_id, row["email"], row["full_name"], ROLE_NAMES[row["role"]], api_key
    )


def set_user_active(
    conn: psycopg.Connection[Any], realm_subdomain: str, email: str, active: bool
) -> None:
    realm_id = realm_id_by_subdomain(conn, realm_subdomain)
    result = conn.execute(
        "UPDATE users SET is_active = %s WHERE realm_id = %s AND lower(email) = lower(%s)",
        (active, realm_id, email),
    )
    if result.rowcount == 0:
        raise AccountError(f"no user {email} in realm {realm_subdomain!r}")


def set_realm_active(conn: psycopg.Connection[Any], realm_subdomain: str, active: bool) -> None:
    result = conn.execute(
        "UPDATE realms SET deactivated = %s WHERE subdomain = %s", (not active, realm_subdomain)
    )
    if result.rowcount == 0:
        raise AccountError(f"no realm with subdomain {realm_subdomain!r}")
