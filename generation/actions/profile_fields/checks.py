"""Zulip's checks of a field's definition (its label, hint, type and
`field_data`: a list's options, an external account's subtype and URL
pattern) and of a value of each type, with Zulip's messages
(zerver/views/custom_profile_fields.py, zerver/lib/validator.py,
zerver/lib/external_accounts.py, zerver/models/custom_profile_fields.py).
A value is named by its field's name, as Zulip's."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, cast

import orjson

from generation.actions.base import ActionError, Connection
from generation.actions.profile_fields.common import (
    _DATA_TYPES,
    _MAX_ID,
    _NOT_IN_SUMMARY,
    _SHORT_TYPES,
    DEFAULT_EXTERNAL_ACCOUNTS,
    MAX_FIELD_DATA,
    MAX_HINT,
    MAX_LONG_TEXT,
    MAX_NAME,
    MAX_SHORT_TEXT,
    MAX_URL,
    MAX_USERS_IN_VALUE,
    FieldRow,
)
from generation.events.profile_fields import (
    DATE,
    EXTERNAL_ACCOUNT,
    LONG_TEXT,
    PRONOUNS,
    SELECT,
    SHORT_TEXT,
    URL,
    USER,
)


def _text(var_name: str, value: str) -> str:
    """Text PostgreSQL can store: no NUL, no lone surrogate."""
    if "\x00" in value:
        raise ActionError(f"{var_name} must not contain null bytes")
    if any(unicodedata.category(char) == "Cs" for char in value):
        raise ActionError(f"{var_name} must be valid Unicode")
    return value


def _string(var_name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ActionError(f"{var_name} is not a string")
    return _text(var_name, value)


def _capped(var_name: str, value: object, limit: int) -> str:
    text = _string(var_name, value)
    if len(text) > limit:
        raise ActionError(f"{var_name} is too long (limit: {limit} characters)")
    return text


def _required_string(var_name: str, value: object) -> str:
    text = _string(var_name, value)
    if not text.strip():
        raise ActionError(f"{var_name} cannot be blank.")
    return text


def _only_keys(
    var_name: str, value: object, required: Sequence[str], optional: Sequence[str] = ()
) -> dict[str, Any]:
    """Zulip's check_dict_only, the shape: a dict with `required` (their
    values checked by the caller), maybe `optional`, and nothing else."""
    if not isinstance(value, dict):
        raise ActionError(f"{var_name} is not a dict")
    for key in required:
        if key not in value:
            raise ActionError(f"{key} key is missing from {var_name}")
    unexpected = sorted(set(value) - set(required) - set(optional))
    if unexpected:
        raise ActionError(f"Unexpected arguments: {', '.join(unexpected)}")
    return value


def _check_select_data(field_data: Mapping[str, Any]) -> None:
    """Zulip's validate_select_field_data: at least one option, each
    `{"text", "order"}` (non-blank strings) under a non-blank key, no two
    with the same text."""
    if len(field_data) < 1:
        raise ActionError("Field must have at least one choice.")
    texts: set[str] = set()
    for key, option in field_data.items():
        if not key.strip():
            raise ActionError("'value' cannot be blank.")
        _text("field_data", key)
        if not isinstance(option, dict):
            raise ActionError("field_data is not a dict")
        for name in ("text", "order"):
            if name not in option:
                raise ActionError(f"{name} key is missing from field_data")
            _required_string(f'field_data["{name}"]', option[name])
        _only_keys("field_data", option, ("text", "order"))
        texts.add(option["text"])
    if len(field_data) != len(texts):
        raise ActionError("Field must not have duplicate choices.")


def _check_url_pattern(var_name: str, value: object) -> None:
    """Zulip's check_external_account_url_pattern: empty, or a URL with
    `%(username)s` exactly once."""
    pattern = _string(var_name, value)
    if not pattern:
        return
    if pattern.count("%(username)s") != 1:
        raise ActionError("URL pattern must contain '%(username)s'.")
    _check_url(var_name, pattern.replace("%(username)s", "username"))


def _check_external_account_data(field_data: Mapping[str, Any]) -> None:
    """Zulip's validate_external_account_field_data."""
    if "subtype" not in field_data:
        raise ActionError("subtype key is missing from field_data")
    _required_string('field_data["subtype"]', field_data["subtype"])
    if "url_pattern" in field_data:
        _check_url_pattern('field_data["url_pattern"]', field_data["url_pattern"])
    _only_keys("field_data", dict(field_data), ("subtype",), ("url_pattern",))
    subtype = field_data["subtype"]
    if subtype not in DEFAULT_EXTERNAL_ACCOUNTS:
        if subtype != "custom":
            raise ActionError("Invalid external account type")
        if "url_pattern" not in field_data:
            raise ActionError("Custom external account must define URL pattern")


def _is_default_external(field_type: int, field_data: Mapping[str, Any]) -> bool:
    """A GitHub or Twitter account field: its name comes from Zulip's table."""
    return field_type == EXTERNAL_ACCOUNT and field_data.get("subtype") != "custom"


def _check_field(
    name: str,
    hint: str,
    field_type: int,
    field_data: Mapping[str, Any],
    display_in_profile_summary: bool,
) -> None:
    """Zulip's validate_custom_profile_field, in Zulip's order."""
    if field_type == SELECT:
        _check_select_data(field_data)
    elif field_type == EXTERNAL_ACCOUNT:
        _check_external_account_data(field_data)
    if not _is_default_external(field_type, field_data):
        if not name.strip():
            raise ActionError("Label cannot be blank.")
        _capped("hint", hint, MAX_HINT)
        _capped("name", name, MAX_NAME)
    if field_type not in range(SHORT_TEXT, PRONOUNS + 1):
        raise ActionError("Invalid field type.")
    if display_in_profile_summary and field_type in _NOT_IN_SUMMARY:
        raise ActionError("Field type not supported for display in profile summary.")


def _encoded_data(field_type: int, field_data: Mapping[str, Any]) -> str:
    """`field_data` as stored: compact JSON for the types that keep it."""
    if field_type not in _DATA_TYPES:
        return ""
    encoded = orjson.dumps(dict(field_data)).decode()
    if len(encoded) > MAX_FIELD_DATA:
        raise ActionError(f"field_data is too long (limit: {MAX_FIELD_DATA} characters)")
    return encoded


# Django's URLValidator, the part of it eventq applies: a scheme of
# http(s)/ftp(s), an optional user, a host (IPv4, [IPv6], a name with a
# top-level domain, or localhost), an optional port, then anything without
# blanks.
_HOST_LABEL = r"[a-z0-9\u00a1-\uffff](?:[a-z0-9\u00a1-\uffff-]{0,61}[a-z0-9\u00a1-\uffff])?"
_URL = re.compile(
    r"(?:https?|ftps?)://"
    r"(?:[^\s:@/]+(?::[^\s@/]*)?@)?"
    r"(?:(?P<ipv4>[0-9]{1,3}(?:\.[0-9]{1,3}){3})"
    r"|\[(?P<ipv6>[0-9a-f:.]+)\]"
    rf"|(?:{_HOST_LABEL}\.)+(?:[a-z\u00a1-\uffff]{{2,63}}|xn--[a-z0-9]{{1,59}})\.?"
    r"|localhost)"
    r"(?::[0-9]{1,5})?"
    r"(?:[/?#]\S*)?",
    re.IGNORECASE,
)


def _check_url(var_name: str, value: str) -> str:
    found = _URL.fullmatch(value) if len(value) <= MAX_URL else None
    valid = found is not None
    if found is not None and found["ipv4"]:
        valid = _is_ip(ipaddress.IPv4Address, found["ipv4"])
    elif found is not None and found["ipv6"]:
        valid = _is_ip(ipaddress.IPv6Address, found["ipv6"])
    if not valid:
        raise ActionError(f"{var_name} is not a URL")
    return value


def _is_ip(kind: type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address], text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


async def _user_ids_value(conn: Connection, realm_id: int, value: object) -> str:
    """Zulip's check_valid_user_ids: a list of active human users of the
    realm; stored as its JSON text."""
    if not isinstance(value, list):
        raise ActionError("User IDs is not a list")
    for index, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool):
            raise ActionError(f"User IDs[{index}] is not an integer")
    if len(value) > MAX_USERS_IN_VALUE:
        raise ActionError(f"User IDs has more than {MAX_USERS_IN_VALUE} items")
    ids = cast(list[int], value)
    cur = await conn.execute(
        "SELECT id, is_active, bot_type IS NOT NULL FROM users"
        " WHERE realm_id = %s AND id = ANY(%s)",
        (realm_id, [i for i in ids if 0 < i <= _MAX_ID]),
    )
    found = {row[0]: (row[1], row[2]) for row in await cur.fetchall()}
    invalid = [i for i in ids if i not in found]
    if invalid:
        raise ActionError(f"Invalid user IDs: {', '.join(map(str, invalid))}")
    for user_id in ids:
        active, bot = found[user_id]
        if not active:
            raise ActionError(f"User with ID {user_id} is deactivated")
        if bot:
            raise ActionError(f"User with ID {user_id} is a bot")
    return orjson.dumps(ids).decode()


async def _stored_value(conn: Connection, realm_id: int, field: FieldRow, value: object) -> str:
    """A value of `field` as stored, or Zulip's error for its type (named by
    the field's name, as Zulip's)."""
    name, kind = field.name, field.field_type
    if kind in _SHORT_TYPES:
        return _capped(name, value, MAX_SHORT_TEXT)
    if kind == LONG_TEXT:
        return _capped(name, value, MAX_LONG_TEXT)
    if kind == DATE:
        text = _string(name, value)
        try:
            valid = date.fromisoformat(text).isoformat() == text
        except ValueError:
            valid = False
        if not valid:
            raise ActionError(f"{name} is not a date")
        return text
    if kind == URL:
        return _check_url(name, _string(name, value))
    if kind == SELECT:
        text = _string(name, value)
        if text not in field.data():
            raise ActionError(f"'{text}' is not a valid choice for '{name}'.")
        return text
    assert kind == USER, f"field type {kind} (the table allows 1 to 8)"
    return await _user_ids_value(conn, realm_id, value)
