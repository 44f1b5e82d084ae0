"""Checking a tool call's arguments against its input schema, without importing jsonschema for
the schemas most tools have.

fw's own tools, and most MCP and plugin tools, describe their arguments with a small part of JSON
Schema (types, properties, required, enums, bounds, lengths, patterns, items). `plain_validator`
checks those itself, finding the error jsonschema (Draft 2020-12) would find and rank first
(its `best_match`), so a first tool call does not pay for importing jsonschema and the modules
it loads (about 100 ms); a schema that uses anything else (`$ref`, `anyOf`, ...) returns None,
and the caller checks it with jsonschema itself. tests/test_arguments.py compares the two on
every schema of fw's tools and on generated arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
TYPES = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})
ANNOTATIONS = {"title": str, "description": str, "$comment": str, "format": str, "readOnly": bool, "writeOnly": bool,
               "deprecated": bool, "examples": list}
COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


@dataclass
class ArgumentError:
    """What jsonschema's ValidationError says of the first error, as the tool service uses it."""

    validator: str
    validator_value: Any
    instance: Any
    schema: dict[str, Any]
    path: list[Any] = field(default_factory=list)
    message: str = ""

    @property
    def absolute_path(self) -> list[Any]:
        return self.path


class PlainValidator:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema

    def best_error(self, instance: Any) -> ArgumentError | None:
        """The error jsonschema's `best_match` would pick, or None when the arguments fit."""
        best, best_key = None, None
        for error in _errors(self.schema, instance, []):
            key = (-len(error.path), error.path, True, False, not _matches_type(error))
            try:
                better = best_key is None or key > best_key  # the first of equals stays, as max() keeps it
            except TypeError:  # an index beside a name at one depth: the first found stays
                better = False
            if better:
                best, best_key = error, key
        return best


def plain_validator(schema: Any) -> PlainValidator | None:
    """A validator for a schema within the plain subset; None for any other schema."""
    return PlainValidator(schema) if _plain(schema, top=True) else None


# -- which schemas are plain ------------------------------------------------------------------------
def _plain(schema: Any, top: bool = False) -> bool:
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key == "$schema":
            if not top or value != DRAFT_2020_12:
                return False
        elif key in ANNOTATIONS:
            if not isinstance(value, ANNOTATIONS[key]):
                return False
        elif key == "default" or key.startswith("x-"):
            continue  # an annotation; an extension (x-risk) jsonschema ignores too
        elif key == "type":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names) or not all(n in TYPES for n in names):
                return False
        elif key == "properties":
            if not isinstance(value, dict) or not all(_plain(sub) for sub in value.values()):
                return False
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value) or len(set(value)) != len(value):
                return False
        elif key == "additionalProperties":
            if not (isinstance(value, bool) or _plain(value)):
                return False
        elif key == "items":
            if not _plain(value):
                return False
        elif key == "enum":
            if not isinstance(value, list):
                return False
        elif key == "const":
            continue
        elif key in COUNTS:
            if not _whole(value) or value < 0:
                return False
        elif key in BOUNDS:
            if not _number(value):
                return False
        elif key == "pattern":
            if not isinstance(value, str):
                return False
            try:
                re.compile(value)
            except re.error:
                return False
        else:
            return False  # anything else: jsonschema decides
    return True


def _whole(value: Any) -> bool:
    return _is_type(value, "integer")


def _number(value: Any) -> bool:
    return _is_type(value, "number")


# -- checking ----------------------------------------------------------------------------------------
def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return isinstance(value, (int, float))  # number


def _matches_type(error: ArgumentError) -> bool:
    expected = error.schema.get("type")
    if expected is None:
        return False
    names = [expected] if isinstance(expected, str) else expected
    return any(_is_type(error.instance, name) for name in names)


def _equal(one: Any, two: Any) -> bool:
    """jsonschema's equality: 1 is 1.0, but True is not 1."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(_equal(one[k], two[k]) for k in one)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two))
    if isinstance(one, bool) or isinstance(two, bool):
        return type(one) is type(two) and one == two
    return bool(one == two)


def _errors(schema: dict[str, Any], instance: Any, path: list[Any]) -> Iterator[ArgumentError]:
    """Every error of `instance` against `schema`, in the order jsonschema finds them."""

    def error(keyword: str, value: Any, message: str = "") -> ArgumentError:
        return ArgumentError(keyword, value, instance, schema, list(path), message)

    for keyword, value in schema.items():
        if keyword == "type":
            names = [value] if isinstance(value, str) else value
            if not any(_is_type(instance, name) for name in names):
                yield error(keyword, value)
        elif keyword == "properties" and isinstance(instance, dict):
            for name, sub in value.items():
                if name in instance:
                    yield from _errors(sub, instance[name], [*path, name])
        elif keyword == "required" and isinstance(instance, dict):
            for name in value:
                if name not in instance:
                    yield error(keyword, value, f"{name!r} is a required property")
        elif keyword == "additionalProperties" and isinstance(instance, dict):
            extras = [name for name in instance if name not in schema.get("properties", {})]
            if isinstance(value, dict):
                for name in extras:
                    yield from _errors(value, instance[name], [*path, name])
            elif value is False and extras:
                yield error(keyword, value)
        elif keyword == "items" and isinstance(instance, list):
            for index, item in enumerate(instance):
                yield from _errors(value, item, [*path, index])
        elif keyword == "enum":
            if not any(_equal(each, instance) for each in value):
                yield error(keyword, value)
        elif keyword == "const":
            if not _equal(value, instance):
                yield error(keyword, value)
        elif keyword in ("minLength", "maxLength") and isinstance(instance, str):
            if (len(instance) < value) if keyword == "minLength" else (len(instance) > value):
                yield error(keyword, value)
        elif keyword in ("minItems", "maxItems") and isinstance(instance, list):
            if (len(instance) < value) if keyword == "minItems" else (len(instance) > value):
                yield error(keyword, value)
        elif keyword in BOUNDS and _is_type(instance, "number"):
            failed = {"minimum": instance < value, "maximum": instance > value,
                      "exclusiveMinimum": instance <= value, "exclusiveMaximum": instance >= value}[keyword]
            if failed:
                yield error(keyword, value)
        elif keyword == "pattern" and isinstance(instance, str):
            if not re.search(value, instance):
                yield error(keyword, value)
