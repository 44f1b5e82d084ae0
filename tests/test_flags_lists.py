"""Issue 21, item 13: lists are cleared and edited alike on every flag, repeated flags and
commas mean the same, contradictory flags are usage errors, and durations are taken wherever
a length of time is."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import fw, fwj, make_basics, snapshot


def agent_file(home):
    return yaml.safe_load((home / "agents/default/a1.yaml").read_text())


def skills(*names):
    for name in names:
        fwj("resource", "write", "skill", name, "--create", "--data", json.dumps({"description": "d", "body": "text"}))


def test_an_empty_builtin_tool_clears_the_set_as_an_empty_event_does(home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management", "--event", "message.*")
    doc = fwj("agent", "edit", "a1", "--builtin-tool", "", "--event", "")
    assert doc["data"]["builtin_tools"] == []
    assert "events" not in agent_file(home)


def test_skills_and_mcps_are_cleared_added_and_removed(home):
    make_basics()
    skills("s1", "s2", "s3")
    for name in ("x1", "x2"):
        fwj("resource", "write", "mcp", name, "--create", "--data", json.dumps({"transport": "stdio", "command": "true"}))
    fwj("agent", "edit", "a1", "--skill", "s1,s2", "--mcp", "x1")
    assert agent_file(home)["skills"] == ["s1", "s2"]
    fwj("agent", "edit", "a1", "--add-skill", "s3", "--remove-skill", "s1", "--add-mcp", "x2", "--remove-mcp", "x1")
    data = agent_file(home)
    assert data["skills"] == ["s2", "s3"] and data["mcps"] == ["x2"]
    fwj("agent", "edit", "a1", "--skill", "", "--mcp", "")
    data = agent_file(home)
    assert not data.get("skills") and not data.get("mcps")


def test_create_takes_commas_and_repeats_alike(home):
    make_basics()
    skills("s1", "s2")
    doc = fwj("agent", "create", "a2", "--model", "m1", "--skill", "s1,s2", "--builtin-tool", "resource_management,task_collaboration")
    assert doc["data"]["skills"] == ["s1", "s2"]
    assert doc["data"]["builtin_tools"] == ["resource_management", "task_collaboration"]
    doc = fwj("agent", "create", "a3", "--model", "m1", "--skill", "s1", "--skill", "s2", "--skill", "")
    assert doc["data"]["skills"] == ["s1", "s2"]


@pytest.mark.parametrize("flags", [
    ["--builtin-tool", "resource_management", "--remove-builtin-tool", "resource_management"],
    ["--add-builtin-tool", "task_collaboration", "--remove-builtin-tool", "task_collaboration"],
    ["--add-skill", "s1", "--remove-skill", "s1"],
    ["--event", "message.*", "--remove-event", "message.*"],
    ["--mcp", "x1,x2", "--remove-mcp", "x2"],
])
def test_asking_for_and_removing_the_same_entry_is_a_usage_error(home, flags):
    make_basics()
    skills("s1")
    before = snapshot(home)
    doc = fwj("agent", "edit", "a1", *flags, code=2)
    assert doc["error"]["code"] == "usage" and "--remove-" in doc["error"]["message"]
    assert snapshot(home) == before


def test_session_members_take_commas(home):
    for name in ("alice", "bob"):
        fwj("principal", "create", name, "--kind", "user")
    doc = fwj("session", "create", "s1", "--member", "alice,bob")
    assert sorted(doc["session"]["members"]) == ["alice", "bob"]


def test_bot_unsupported_apis_take_commas(home):
    make_basics()
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    fwj("bot", "set", "desk", "--unsupported-api", "send_message,delete_message")
    assert yaml.safe_load((home / "bots/desk.yaml").read_text())["unsupported_apis"] == ["send_message", "delete_message"]


def test_a_lease_takes_a_duration(home):
    make_basics()
    run = fwj("run", "start", "--agent", "a1", "--lease", "1h")
    assert run["lease_seconds"] == 3600
    run = fwj("run", "start", "--agent", "a1", "--lease", "90s")
    assert run["lease_seconds"] == 90


@pytest.mark.parametrize("lease", ["1.5s", "soon", "-1m"])
def test_a_lease_that_is_no_whole_duration_is_invalid(home, lease):
    make_basics()
    doc = fwj("run", "start", "--agent", "a1", "--lease", lease, code=4)
    assert "--lease" in doc["error"]["message"]
    assert fwj("run", "list")["runs"] == []


def test_timeouts_take_a_duration(home):
    make_basics()
    r = fw("agent", "run", "a1", "--message", "x", "--timeout", "soon", "--json")
    assert r.exit_code == 4 and "--timeout" in r.json["error"]["message"], r
    assert fwj("dispatch", "--once", "--timeout", "2m")["turns"]["run"] == 0
