"""JSON Schema from the TypedDicts that define events and responses.

Each event type is declared once, as a `TypedDict` (the contract producers
build against, checked by mypy); this module turns it into a strict JSON
Schema (every declared key typed, required keys required, unknown keys
refused) for the OpenAPI document and the tests' validation.

Supported annotations: str, int, float, bool, None, Any, list[X], dict[str, X],
tuple[X, ...], Literal[...], X | Y, nested TypedDicts, NotRequired/Required.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin, is_typeddict

JsonSchema = dict[str, Any]

_SCALARS: dict[object, JsonSchema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def schema_of(annotation: object, definitions: dict[str, JsonSchema] | None = None) -> JsonSchema:
    """The JSON Schema of a type annotation. Nested TypedDicts are inlined
    unless `definitions` is given, where they are collected by name and
    referenced as `#/components/schemas/<name>`."""
    if annotation is Any or annotation is object:
        return {}
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    if is_typeddict(annotation):
        assert isinstance(annotation, type)
        if definitions is None:
            return _object_schema(annotation, None)
        name = annotation.__name__
        python_name = f"{annotation.__module__}.{annotation.__qualname__}"
        if name not in definitions:
            definitions[name] = {"x-python": python_name}  # placeholder against recursion
            definitions[name] = {**_object_schema(annotation, definitions), "x-python": python_name}
        elif definitions[name].get("x-python") != python_name:
            raise TypeError(
                f"two schemas named {name}: {python_name} and {definitions[name]['x-python']}"
            )
        return {"$ref": f"#/components/schemas/{name}"}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (Required, NotRequired):
        return schema_of(args[0], definitions)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [schema_of(arg, definitions) for arg in args]}
    if origin in (list, typing.Sequence) or (origin is tuple and len(args) == 2 and args[1] is ...):
        return {"type": "array", "items": schema_of(args[0], definitions)}
    if origin is dict:
        return {"type": "object", "additionalProperties": schema_of(args[1], definitions)}
    raise TypeError(f"no JSON Schema for {annotation!r}")


def _object_schema(cls: type, definitions: dict[str, JsonSchema] | None) -> JsonSchema:
    hints = typing.get_type_hints(cls, include_extras=True)
    # Not `__required_keys__`: on Python 3.11 it cannot see NotRequired in
    # postponed (string) annotations; the resolved hints keep the wrappers.
    total: bool = cls.__total__  # type: ignore[attr-defined]
    required = sorted(
        name
        for name, hint in hints.items()
        if get_origin(hint) is Required or (total and get_origin(hint) is not NotRequired)
    )
    schema: JsonSchema = {
        "type": "object",
        "properties": {name: schema_of(hint, definitions) for name, hint in hints.items()},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split())
    return schema
