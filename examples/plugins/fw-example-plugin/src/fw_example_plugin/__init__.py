"""An example fw plugin: text tools.

fw finds it through the entry point `example` of group `fw.plugins` (see pyproject.toml), which
names the object `plugin` below. That object lists the plugin's tools and the settings it
reads. fw loads it in a process of its own, never in fw's, and calls a tool's function with
the call's arguments (already checked against the tool's input schema) and a context holding
`run_id`, `identity`, `agent`, `plugin` and `settings`. What the function returns (anything
JSON can hold) is the tool's result; what it raises is the call's error, which the model reads.
Nothing here imports fw.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any


def word_count(arguments: dict[str, Any], context: Any) -> dict[str, int]:
    text = arguments["text"]
    return {"words": len(text.split()), "lines": len(text.splitlines()), "characters": len(text)}


def greet(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    greeting = context.settings.get("greeting") or "Hello"
    return {"text": f"{greeting}, {arguments['name']}!"}


def sign(arguments: dict[str, Any], context: Any) -> dict[str, str]:
    key = context.settings.get("signing_key")
    if not key:  # the model reads this message: say how to fix it
        raise ValueError("no signing key is set; an operator sets one with `fw plugin enable example --secret-setting signing_key`")
    digest = hmac.new(key.encode("utf-8"), arguments["text"].encode("utf-8"), hashlib.sha256).hexdigest()
    return {"algorithm": "hmac-sha256", "signature": digest}


def _text_schema(name: str, description: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string", "description": description}},
            "required": [name], "additionalProperties": False}


plugin = {
    "settings": {
        "greeting": {"description": "how greet starts its answer", "default": "Hello"},
        "signing_key": {"description": "the key sign signs with (HMAC-SHA256)", "secret": True},
    },
    "tools": [
        {"name": "word_count", "description": "Count the words, lines and characters of a text.", "risk": "read",
         "input_schema": _text_schema("text", "the text to count"), "function": word_count},
        {"name": "greet", "description": "Greet someone by name.", "risk": "read",
         "input_schema": _text_schema("name", "who to greet"), "function": greet},
        {"name": "sign", "description": "Sign a text with the plugin's secret key (HMAC-SHA256); the key is never shown.",
         "risk": "read", "input_schema": _text_schema("text", "the text to sign"), "function": sign},
    ],
}
