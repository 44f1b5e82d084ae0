"""The JSON Schemas under schemas/ are generated from the pydantic models; they must not drift."""

import json

import jsonschema
import pytest
from conftest import REPO, fwj

from framework_cli.schemagen import generated


def test_schema_files_match_the_models():
    expected = generated()
    on_disk = {p.relative_to(REPO / "schemas").as_posix(): p.read_text() for p in (REPO / "schemas").rglob("*.json")}
    assert sorted(on_disk) == sorted(expected), "run `python -m framework_cli.schemagen`"
    for rel, text in expected.items():
        assert on_disk[rel] == text, f"schemas/{rel} drifted: run `python -m framework_cli.schemagen`"


@pytest.mark.parametrize(
    "kind,good,bad",
    [
        ("agent", {"builtin_tools": ["resource_management"]}, {"builtin_tools": ["bogus"]}),
        ("agent", {"model": "m1"}, {"colour": "red"}),
        ("provider", {"base_url": "https://x.test", "api_key_env": "K"}, {"base_url": "ftp://x"}),
        ("harness", {"type": "t", "permissions": {"tools": ["call"]}}, {"type": "t", "permissions": {"tools": ["run"]}}),
    ],
)
def test_schema_and_model_agree_on_examples(kind, good, bad):
    schema = json.loads((REPO / "schemas" / f"{kind}.json").read_text())
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    from framework_cli.errors import FwError
    from framework_cli.home.models import validate

    validate(kind, good)
    with pytest.raises(FwError):
        validate(kind, bad)


def test_every_sample_home_file_fits_its_schema(sample):
    for kind in ("provider", "model", "mcp", "harness", "agent"):
        schema = json.loads((REPO / "schemas" / f"{kind}.json").read_text())
        for item in fwj("resource", "list", kind)["items"]:
            data = fwj("resource", "read", kind, item["name"])["data"]
            data.pop("api_key_set", None)
            jsonschema.validate(data, schema)
