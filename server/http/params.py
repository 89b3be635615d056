"""Request parameters the way Zulip's API encodes them.

Every parameter arrives as a string (query string for GET, form body for POST
and DELETE); non-string values are JSON-encoded (`true`, `-1`, `["message"]`).
Each accessor raises `ApiError` with a message naming the parameter.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from typing import Any

import orjson
import tornado.httputil

from server.errors import ApiError, missing_argument

# JSON integers must fit a signed 64-bit column; beyond that is never meaningful.
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
MAX_STRING = 10_000
# A form's field names `form_fields` takes as they are (no escapes).
_PLAIN_NAME = re.compile(rb"[A-Za-z0-9_.-]+")
# At most this many fields in a form `form_fields` takes (Tornado refuses
# more than 1,000).
_FEW_FIELDS = 16


def form_fields(body: bytes) -> dict[str, list[bytes]] | None:
    """An application/x-www-form-urlencoded `body` taken apart as Tornado's
    `parse_qs_bytes(body, keep_blank_values=True)` takes it, for the common
    case only: a few fields of plain names whose values hold no backslash;
    None for any other body (Tornado's parser then takes it).

    The values' escapes are decoded by C code in one pass: each `%` becomes
    `\\x` and `codecs.escape_decode` decodes those; an escape it refuses
    (`%` not followed by two hex digits, which Tornado keeps as it is)
    sends the body to Tornado's parser. A notice posted to the notify
    endpoint is such a body: its JSON escaped whole, some 300 escapes per
    kilobyte, decoded three times faster than Tornado decodes them."""
    if body.count(b"&") >= _FEW_FIELDS or b"\\" in body:
        return None
    fields: dict[str, list[bytes]] = {}
    for field in body.split(b"&"):
        if not field:
            continue
        name, _, value = field.partition(b"=")
        if not _PLAIN_NAME.fullmatch(name):
            return None
        if b"%" in value or b"+" in value:
            try:
                value = codecs.escape_decode(value.replace(b"+", b" ").replace(b"%", b"\\x"))[0]
            except ValueError:
                return None
        fields.setdefault(name.decode("ascii"), []).append(value)
    return fields


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def request_params(
    query: Mapping[str, list[bytes]],
    body: bytes,
    content_type: str,
    headers: tornado.httputil.HTTPHeaders | None = None,
) -> Params:
    """A request's parameters: its query string's, then its form body's
    (which win); a body that is not a form is refused (415). `headers`: the
    request's, for Tornado's refusal of an encoded form."""
    raw: dict[str, list[bytes]] = {k: list(v) for k, v in query.items()}
    if body:
        if not content_type.startswith(FORM_TYPES):
            raise ApiError(
                "Unsupported Content-Type: send parameters form-encoded"
                " (application/x-www-form-urlencoded)",
                "UNSUPPORTED_MEDIA_TYPE",
                415,
            )
        body_args = (
            form_fields(body)
            if content_type.startswith(FORM_TYPES[0])
            and (headers is None or "Content-Encoding" not in headers)
            else None
        )
        if body_args is None:
            body_args = {}
            try:
                tornado.httputil.parse_body_arguments(content_type, body, body_args, {}, headers)
            except tornado.httputil.HTTPInputError as exc:
                raise ApiError(f"Malformed request body: {exc}") from None
        for name, values in body_args.items():
            raw.setdefault(name, []).extend(values)
    return Params(raw)


def decode_json(name: str, value: str) -> Any:
    """A parameter's JSON value; the error names the parameter."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ApiError(f'Argument "{name}" is not valid JSON.') from None


def optional_boolean(name: str, raw: str) -> bool | None:
    """A JSON boolean parameter (a `Param(parse=...)`); JSON null is "not
    given"."""
    value = decode_json(name, raw)
    if value is not None and not isinstance(value, bool):
        raise ApiError(f"{name} is not a boolean")
    return value


def check_length(name: str, value: str, max_length: int) -> str:
    """`value`, refused when longer than `max_length` characters."""
    if len(value) > max_length:
        raise ApiError(f"{name} is too long (limit: {max_length} characters)")
    return value


class Params:
    """The parameters of one request; remembers which ones were read so that
    the rest can be reported as `ignored_parameters_unsupported`."""

    def __init__(self, raw: Mapping[str, list[bytes]]):
        self._values: dict[str, str] = {}
        for name, values in raw.items():
            if not values:
                continue
            try:
                # Repeated parameters: the last one wins, as in Django's QueryDict.
                self._values[name] = values[-1].decode("utf-8")
            except UnicodeDecodeError:
                raise ApiError(f"Argument '{name}' is not valid UTF-8") from None
        self._read: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def unread(self) -> list[str]:
        return sorted(set(self._values) - self._read)

    def raw(self, name: str) -> str | None:
        self._read.add(name)
        return self._values.get(name)

    def string(self, name: str, *, max_length: int = MAX_STRING) -> str | None:
        value = self.raw(name)
        if value is None:
            return None
        return check_length(name, value, max_length)

    def required_string(self, name: str, *, max_length: int = MAX_STRING) -> str:
        value = self.string(name, max_length=max_length)
        if value is None:
            raise missing_argument(name)
        return value

    def json(self, name: str) -> Any:
        """The decoded JSON value, or None when absent."""
        value = self.raw(name)
        return None if value is None else decode_json(name, value)

    def boolean(self, name: str, default: bool) -> bool:
        """`default` when absent; JSON null is not a boolean (as in Zulip)."""
        if name not in self._values:
            self._read.add(name)
            return default
        value = self.json(name)
        if not isinstance(value, bool):
            raise ApiError(f"{name} is not a boolean")
        return value

    def integer(
        self,
        name: str,
        default: int | None = None,
        *,
        minimum: int = INT_MIN,
        maximum: int = INT_MAX,
    ) -> int | None:
        """`default` when absent; JSON null is not an integer (as in Zulip)."""
        if name not in self._values:
            self._read.add(name)
            return default
        value = self.json(name)
        if isinstance(value, float) and abs(value) >= 2**63:
            # orjson decodes integers beyond 64 bits as floats, which may round
            # onto -2**63 (-2**63 - 1 does): such a number is beyond any bound.
            value = minimum - 1 if value < 0 else maximum + 1
        if not isinstance(value, int) or isinstance(value, bool):
            raise ApiError(f"{name} is not an integer")
        if value < minimum:
            raise ApiError(f"{name} is too small (minimum: {minimum})")
        if value > maximum:
            raise ApiError(f"{name} is too large (maximum: {maximum})")
        return value

    def string_list(self, name: str, *, max_items: int = 1000) -> list[str] | None:
        value = self.json(name)
        if value is None:
            return None
        if not isinstance(value, list):
            raise ApiError(f"{name} is not a list")
        if len(value) > max_items:
            raise ApiError(f"{name} has more than {max_items} items")
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise ApiError(f"{name}[{index}] is not a string")
            if len(item) > 100:
                raise ApiError(f"{name}[{index}] is too long")
        return value

    def json_object(self, name: str) -> dict[str, Any] | None:
        value = self.json(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ApiError(f"{name} is not a dict")
        return value
