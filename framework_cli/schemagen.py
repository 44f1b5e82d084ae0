"""Generate the JSON Schemas under `schemas/` from the pydantic models.

    python -m framework_cli.schemagen [DIR]     (default: ./schemas)

A test regenerates them and fails when a file and its model have drifted apart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .domain.catalogue import CATALOGUE
from .tools.service import SANDBOX_TOOLS, TOOLS


def generated() -> dict[str, str]:
    """File name (relative to schemas/) -> exact text."""
    from .home.models import MODELS, json_schema  # lazy: start-up speed

    out = {f"{kind}.json": json.dumps(json_schema(kind), indent=2, sort_keys=True) + "\n" for kind in MODELS}
    for name, tool in {**TOOLS, **SANDBOX_TOOLS}.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"tools/{name}.json",
                  "title": name, "description": tool.description, **tool.input_schema}
        out[f"tools/{name}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"

    for name, tool in CATALOGUE.items():  # the event and platform tools, with their API and risk
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"tools/{name}.json", "title": name,
                  "description": tool.description, "x-api": tool.api, "x-risk": tool.risk, **tool.input_schema}
        out[f"tools/{name}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write(folder: Path) -> list[Path]:
    written = []
    for rel, text in generated().items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")
    for path in write(target):
        print(f"wrote {path}")
