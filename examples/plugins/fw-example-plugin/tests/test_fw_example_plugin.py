"""The example plugin's own tests: its functions, called as fw calls them (arguments and a
context), and the shape fw reads from the `plugin` object. They need pytest only, not fw."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fw_example_plugin import plugin  # noqa: E402

TOOLS = {tool["name"]: tool for tool in plugin["tools"]}


def context(**settings):
    return SimpleNamespace(run_id="run-20260101T000000-00000000", identity="runtime:a", agent="a", plugin="example",
                           settings=settings)


def test_word_count_counts_words_lines_and_characters():
    assert TOOLS["word_count"]["function"]({"text": "one two\nthree"}, context()) == {"words": 3, "lines": 2, "characters": 13}


def test_greet_uses_the_greeting_setting_or_its_default():
    assert TOOLS["greet"]["function"]({"name": "Ada"}, context())["text"] == "Hello, Ada!"
    assert TOOLS["greet"]["function"]({"name": "Ada"}, context(greeting="Hi"))["text"] == "Hi, Ada!"


def test_sign_signs_with_the_secret_key_and_never_returns_it():
    key = "a-signing-key-of-some-length"
    result = TOOLS["sign"]["function"]({"text": "hello"}, context(signing_key=key))
    assert result["signature"] == hmac.new(key.encode(), b"hello", hashlib.sha256).hexdigest()
    assert key not in json.dumps(result)


def test_sign_without_a_key_raises_a_message_that_says_how_to_set_one():
    with pytest.raises(ValueError, match="--secret-setting signing_key"):
        TOOLS["sign"]["function"]({"text": "hello"}, context())


def test_the_plugin_object_has_what_fw_reads():
    for tool in plugin["tools"]:
        assert set(tool) == {"name", "description", "risk", "input_schema", "function"}
        assert tool["risk"] in ("read", "write", "dangerous")
        assert tool["input_schema"]["type"] == "object" and callable(tool["function"])
        json.dumps(tool["input_schema"])
    assert plugin["settings"]["signing_key"]["secret"] is True
    assert "default" not in plugin["settings"]["signing_key"]
