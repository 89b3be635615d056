"""An operation's parameters, declared once and typed, in the spirit of
Zulip's `typed_endpoint`: the declaration parses the request (through
`Params`, so with its messages) and is what the OpenAPI document says.

A declaration is a frozen dataclass whose fields are the parameters, in the
order they are parsed; each field's type is what the handler gets, and its
`Annotated` metadata (`Param`) the description and bounds:

    @dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
    class SendMessage:
        type: Annotated[str, Param("stream or direct", max_length=20)]
        local_id: Annotated[str | None, Param("The client's token", max_length=100)] = None

The type says how a parameter arrives:

- `str` or `str | None`: as is, at most `max_length` characters (None: no
  limit but the request's);
- `int` or `int | None`: a JSON integer in [`minimum`, `maximum`];
- `bool`: a JSON boolean;
- anything else needs `parse(name, raw)`, which decodes the raw string, and
  `schema`, the JSON Schema of what it accepts (`json`: the value is
  JSON-encoded, else it is documented as a plain string).

A field without a default is required (`Missing 'x' argument`); an absent
optional one keeps its default. JSON null is neither a boolean nor an
integer, as in Zulip. Parameters nobody declared stay unread, for
`ignored_parameters_unsupported`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from server.errors import missing_argument
from server.http.params import INT_MAX, INT_MIN, MAX_STRING, Params

A = TypeVar("A")
JsonSchema = dict[str, Any]
Kind = Literal["string", "integer", "boolean", "parsed"]

# The document places every parameter in the query string, whose request line
# is refused past 64 KiB (URI_TOO_LONG), and a character may take 12 bytes
# there (percent-encoded UTF-8). A value just past a longer bound than this
# could not be sent there at all, so such a bound is stated in the
# description rather than as `maxLength` (sent in the body, the value gets
# the parameter's own error). Likewise the sizes inside a JSON value (a
# custom `Param.schema`'s `maxItems`, `maxLength`): a list of long strings
# fits no request line, so they are stated in words; its types, required
# keys and numbers' bounds are the schema's.
QUERY_MAX_LENGTH = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class Nothing:
    """The declaration of an operation without parameters."""


@dataclasses.dataclass(frozen=True, slots=True)
class Param:
    """How one parameter is described and bounded (see the module's docstring)."""

    description: str = ""
    max_length: int | None = MAX_STRING
    minimum: int = INT_MIN
    maximum: int = INT_MAX
    parse: Callable[[str, str], object] | None = None
    schema: JsonSchema | None = None
    json: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One declared parameter, resolved from its field: what parsing it and
    documenting it need."""

    name: str
    kind: Kind
    required: bool
    default: object
    param: Param

    def read(self, params: Params) -> object:
        """The value of a parameter the request carries."""
        name, param = self.name, self.param
        if self.kind == "string":
            if param.max_length is None:
                return params.raw(name)
            return params.string(name, max_length=param.max_length)
        if self.kind == "integer":
            return params.integer(name, minimum=param.minimum, maximum=param.maximum)
        if self.kind == "boolean":
            return params.boolean(name, False)
        assert param.parse is not None
        raw = params.raw(name)
        assert raw is not None
        return param.parse(name, raw)

    @property
    def json_encoded(self) -> bool:
        """Whether the value is JSON-encoded (else it is taken as is)."""
        return self.kind != "string" and (self.kind != "parsed" or self.param.json)

    @property
    def description(self) -> str:
        """What the document says of the parameter: its `Param`'s description
        (else its name), with a bound `schema` cannot carry."""
        text = self.param.description or self.name
        if self._long:
            text += f" (at most {self.param.max_length:,} characters)"
        return text

    @property
    def _long(self) -> bool:
        max_length = self.param.max_length
        return self.kind == "string" and max_length is not None and max_length > QUERY_MAX_LENGTH

    @property
    def schema(self) -> JsonSchema:
        """The JSON Schema of the (decoded) value, with the bounds parsing
        applies (a string's longer than `QUERY_MAX_LENGTH` in `description`)."""
        param = self.param
        schema: JsonSchema
        if self.kind == "string":
            schema = {"type": "string"}
            if param.max_length is not None and not self._long:
                schema["maxLength"] = param.max_length
        elif self.kind == "integer":
            schema = {"type": "integer", "minimum": param.minimum, "maximum": param.maximum}
        elif self.kind == "boolean":
            schema = {"type": "boolean"}
        else:
            schema = dict(param.schema or {})
        if not self.required and isinstance(self.default, bool | int | str):
            schema["default"] = self.default
        return schema


def _kind(annotation: object, param: Param) -> tuple[Kind, bool]:
    """The kind of a field's type, and whether None is one of its values."""
    if param.parse is not None:
        return "parsed", False
    optional = False
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        annotation = members[0] if len(members) == 1 else annotation
    kinds: dict[object, Kind] = {str: "string", int: "integer", bool: "boolean"}
    kind = kinds.get(annotation)
    if kind is None or (kind == "boolean" and optional):
        raise TypeError(f"{annotation!r} needs a Param(parse=..., schema=...)")
    return kind, optional


_FIELDS: dict[type, tuple[Field, ...]] = {}


def fields_of(declared: type) -> tuple[Field, ...]:
    """The parameters `declared` declares, in the order they are parsed."""
    fields = _FIELDS.get(declared)
    if fields is None:
        fields = _FIELDS[declared] = _resolve(declared)
    return fields


def _resolve(declared: type) -> tuple[Field, ...]:
    hints = typing.get_type_hints(declared, include_extras=True)
    fields = []
    for field in dataclasses.fields(declared):
        hint = hints[field.name]
        params = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Param)]
        if len(params) != 1:
            raise TypeError(f"{declared.__name__}.{field.name}: one Param in Annotated[...]")
        param = params[0]
        kind, optional = _kind(typing.get_args(hint)[0], param)
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if kind != "parsed" and not required and field.default is None and not optional:
            raise TypeError(f"{declared.__name__}.{field.name}: None is not of its type")
        fields.append(Field(field.name, kind, required, field.default, param))
    return tuple(fields)


def parse(declared: type[A], params: Params) -> A:
    """The request's parameters as `declared` declares them; the first one
    missing or invalid, in the declared order, is the error."""
    values: dict[str, object] = {}
    for field in fields_of(declared):
        if field.name in params:
            values[field.name] = field.read(params)
        elif field.required:
            raise missing_argument(field.name)
    return declared(**values)
