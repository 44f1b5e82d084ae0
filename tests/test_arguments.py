"""A tool call's arguments are checked without importing jsonschema when the schema is plain
(issue 31, item 8), and the error found is the one jsonschema would rank first: compared here
on every schema of fw's tools and on schemas that use every keyword of the plain subset, with
generated arguments, right and wrong."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest
from conftest import fw

from framework_cli.tools.arguments import plain_validator

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas" / "tools"

EXTRA = [
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 1, "maxItems": 3},
                                      "n": {"type": ["integer", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 10},
                                      "mode": {"enum": [1, True, "one", None]}, "fixed": {"const": 1.0},
                                      "inner": {"type": "object", "properties": {"k": {"type": "boolean"}}, "required": ["k"],
                                                "additionalProperties": {"type": "number", "maximum": 5}}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$", "maxLength": 3},
                                      "ratio": {"type": "number", "minimum": 0.5, "maximum": 2}},
     "additionalProperties": {"type": "string"}},
    {"properties": {"a": {"description": "no type at all", "default": 3}}, "required": ["a", "b"]},
]

VALUES = [None, True, False, 0, 1, -3, 2.5, 7.0, 11, 10**20, "", "a", "ABC", "abcd", "one", "x" * 300, [], ["ab"], ["a", "bc"],
          ["ab", "cd", "ef", "gh"], [1, 2], {}, {"k": True}, {"k": "no"}, {"k": False, "z": 4}, {"k": True, "z": 9}]


def tool_schemas():
    found = []
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text())
        schema.pop("$id", None)
        found.append(schema)
    return found


def arguments_for(schema, rng):
    """Arguments near the schema: its properties with values right and wrong, some left out,
    some unknown added."""
    props = list((schema.get("properties") or {}).items())
    doc = {}
    for name, sub in props:
        if rng.random() < 0.25:
            continue
        if "enum" in sub and rng.random() < 0.6:
            doc[name] = rng.choice(sub["enum"])
        else:
            doc[name] = rng.choice(VALUES)
    if rng.random() < 0.2:
        doc[rng.choice(["extra", "zz", "aa", "tags_"])] = rng.choice(VALUES)
    return doc if rng.random() > 0.05 else rng.choice(VALUES)


def reference(schema, args):
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is None:
        return None
    return (error.validator, list(error.absolute_path), json.dumps(error.validator_value, default=str), repr(error.instance),
            error.message if error.validator == "required" else "")


def plain(schema, args):
    error = plain_validator(schema).best_error(args)
    if error is None:
        return None
    return (error.validator, list(error.absolute_path), json.dumps(error.validator_value, default=str), repr(error.instance),
            error.message if error.validator == "required" else "")


def test_every_schema_of_fws_tools_is_plain():
    schemas = tool_schemas()
    assert len(schemas) > 50
    # all but one: resource_delete's confirm takes a list or a string (anyOf), checked by jsonschema
    assert [s.get("title") for s in schemas if plain_validator(s) is None] == ["resource_delete"]


@pytest.mark.parametrize("index", range(len(EXTRA)))
def test_the_plain_check_finds_the_error_jsonschema_ranks_first_on_every_keyword(index):
    schema = EXTRA[index]
    assert plain_validator(schema) is not None
    rng = random.Random(index)
    for _ in range(3000):
        args = arguments_for(schema, rng)
        if isinstance(args, dict) and "inner" in args and rng.random() < 0.5:
            args["inner"] = rng.choice([{"k": True, "q": 3}, {"q": 9}, {"k": 1}, {}])
        assert plain(schema, args) == reference(schema, args), args


def test_the_plain_check_agrees_with_jsonschema_on_fws_tools():
    rng = random.Random(31)
    for schema in [s for s in tool_schemas() if plain_validator(s) is not None]:
        for _ in range(300):
            args = arguments_for(schema, rng)
            assert plain(schema, args) == reference(schema, args), (schema.get("title"), args)


@pytest.mark.parametrize("schema", [
    {"type": "object", "anyOf": [{"required": ["a"]}]},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"},
    {"type": "object", "properties": {"a": {"pattern": "("}}},
    {"type": "thing"},
    {"type": "object", "properties": {"a": True}},
    {"type": "object", "minProperties": 1},
])
def test_any_other_schema_is_left_to_jsonschema(schema):
    assert plain_validator(schema) is None


def test_a_required_parameter_given_a_typo_away_is_named_with_the_one_meant(home):
    r = fw("tool", "call", "--manager", "resource_read", "--args", '{"kind": "agent", "refrence": "a1"}')
    error = r.json["error"]
    assert error["code"] == "invalid" and "reference is a required property, and 'refrence' is not a parameter" in error["message"], error
    assert error["did_you_mean"] == "reference" and error["hint"].startswith("did you mean 'reference'?"), error
    plain = fw("tool", "call", "--manager", "resource_read", "--args", '{"kind": "agent"}').json["error"]
    assert plain["message"].endswith("reference is a required property") and "did_you_mean" not in plain, plain
