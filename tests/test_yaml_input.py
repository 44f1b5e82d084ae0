"""Issue 21, item 14: YAML is taken wherever JSON is (JSON is YAML): --data, --args, --event."""

from __future__ import annotations

import json

from conftest import CANARY, fw, fwj, make_basics, snapshot


def test_data_takes_a_yaml_file_such_as_the_homes_own(home, tmp_path):
    make_basics()
    spec = tmp_path / "agent.yaml"
    spec.write_text("# a comment\nmodel: m1\ndescription: no\nbuiltin_tools:\n  - resource_management\n")
    doc = fwj("resource", "write", "agent", "a2", "--create", "--data", f"@{spec}")
    assert doc["data"]["description"] == "no"  # read as the home's files are: only true/false are booleans
    assert doc["data"]["builtin_tools"] == ["resource_management"]


def test_data_takes_yaml_inline_and_on_stdin(home):
    make_basics()
    assert fwj("resource", "write", "agent", "a1", "--data", "description: inline")["data"]["description"] == "inline"
    assert fwj("resource", "write", "agent", "a1", "--data", "-", input="description: piped\n")["data"]["description"] == "piped"


def test_args_take_yaml(home):
    make_basics()
    doc = json.loads(fw("tool", "call", "--manager", "resource_list", "--args", "kind: agent").stdout)
    assert [item["name"] for item in doc["items"]] == ["a1"]


def test_an_event_takes_yaml(home):
    make_basics()
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    doc = fwj("event", "handle", "desk", "--event", "type: friend.request_received\nactor: {id: bob}\nrequest_id: r1\n")
    assert doc == {"handled": False, "reason": "event_not_selected"}


def test_text_that_is_neither_is_invalid_and_changes_nothing(home):
    make_basics()
    before = snapshot(home)
    r = fw("resource", "write", "agent", "a1", "--data", "description: [unclosed " + CANARY)
    assert r.exit_code == 4 and r.stderr.startswith("Error: --data is not valid JSON or YAML: line "), r
    r = fw("resource", "write", "agent", "a1", "--data", "a: 1\na: 2\n", "--json")
    assert r.exit_code == 4 and "duplicate key 'a'" in r.json["error"]["message"], r
    assert snapshot(home) == before


def test_a_file_that_is_not_there_is_named_in_plain_words(home, tmp_path):
    missing = str(tmp_path / "nofile.txt")
    for args, what in ((["resource", "write", "agent", "a1", "--create", "--data", "@" + missing], "--data file"),
                       (["message", "post", "s1", "--as", "alice", "--file", missing], "the message file")):
        error = fwj(*args, code=3)["error"]
        assert error["code"] == "not_found" and error["message"] == f"{what} {missing!r} does not exist", error


def test_an_unclosed_bracket_is_reported_on_its_own_line_with_an_example_of_the_option(home, tmp_path):
    r = fw("tool", "call", "--manager", "resource_list", "--args", "kind: [agent")
    error = r.json["error"]
    assert error["code"] == "invalid" and "line 1: a flow sequence begun here is not closed" in error["message"], error
    assert '{"kind": "agent"}' in error["hint"] and "description" not in error["hint"], error
    (tmp_path / "a.yaml").write_text("description: ok\nmodel: [m1\n")
    r = fw("resource", "write", "agent", "a9", "--create", "--data", f"@{tmp_path / 'a.yaml'}", "--json")
    assert r.exit_code != 0
    assert "line 2: a flow sequence begun here is not closed" in r.json["error"]["message"], r  # the line of the [, not past the end
