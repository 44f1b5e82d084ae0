import json

import pytest
from conftest import fw, fwj, make_basics, snapshot


@pytest.fixture(autouse=True)
def basics(home):
    make_basics(with_key=False)


def agent_file(home):
    return home / "agents/default/a1.yaml"


def test_a_legacy_agent_without_builtin_tools_reads_as_empty(home):
    (home / "agents/default/old.yaml").write_text("# written before built-in tools existed\nmodel: m1\n")
    assert fwj("resource", "read", "agent", "old")["data"]["builtin_tools"] == []
    assert fwj("agent", "show", "old")["data"]["builtin_tools"] == []
    listed = {i["name"]: i for i in fwj("agent", "list")["items"]}
    assert listed["old"]["builtin_tools"] == []


def test_valid_mounts_save_and_load_back_unchanged(home):
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management", "--builtin-tool", "task_collaboration")
    assert fwj("agent", "show", "a1")["data"]["builtin_tools"] == ["resource_management", "task_collaboration"]
    text = agent_file(home).read_text()
    assert "resource_management" in text and "task_collaboration" in text


def test_add_and_remove_change_the_set(home):
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    fwj("agent", "edit", "a1", "--add-builtin-tool", "local_execution")
    assert fwj("agent", "show", "a1")["data"]["builtin_tools"] == ["resource_management", "local_execution"]
    fwj("agent", "edit", "a1", "--remove-builtin-tool", "resource_management")
    assert fwj("agent", "show", "a1")["data"]["builtin_tools"] == ["local_execution"]


@pytest.mark.parametrize("flag", ["--add-builtin-tool resource_management", "--remove-builtin-tool task_collaboration"])
def test_idempotent_add_or_remove_leaves_bytes_and_mtime(home, flag):
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    path = agent_file(home)
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino)
    doc = fwj("agent", "edit", "a1", *flag.split())
    assert doc["data"]["builtin_tools"] == ["resource_management"]
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino) == before


def test_removing_from_a_legacy_file_does_not_add_the_key(home):
    path = home / "agents/default/old.yaml"
    path.write_text("model: m1\n")
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    fwj("agent", "edit", "old", "--remove-builtin-tool", "resource_management")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.parametrize(
    "args",
    [
        ["agent", "edit", "a1", "--builtin-tool", "bogus"],
        ["agent", "edit", "a1", "--add-builtin-tool", "bogus"],
        ["agent", "edit", "a1", "--remove-builtin-tool", "bogus"],
        ["agent", "edit", "a1", "--builtin-tool", "resource_management", "--builtin-tool", "resource_management"],
        ["agent", "edit", "a1", "--add-builtin-tool", "task_collaboration", "--add-builtin-tool", "task_collaboration"],
        ["agent", "create", "a2", "--model", "m1", "--builtin-tool", "bogus"],
        ["agent", "create", "a2", "--model", "m1", "--builtin-tool", "local_execution", "--builtin-tool", "local_execution"],
        ["resource", "write", "agent", "a1", "--data", '{"builtin_tools": ["bogus"]}'],
        ["resource", "write", "agent", "a1", "--data", '{"builtin_tools": ["resource_management", "resource_management"]}'],
        ["resource", "write", "agent", "a2", "--create", "--data", '{"builtin_tools": ["task_collaboration", "task_collaboration"]}'],
        ["resource", "write", "agent", "a2", "--create", "--data", '{"builtin_tools": "resource_management"}'],
    ],
)
def test_unknown_or_duplicate_groups_are_refused_and_nothing_changes(home, args):
    before = snapshot(home)
    result = fw(*args, "--json")
    assert result.exit_code == 4, result
    assert result.json["error"]["code"] == "invalid"
    assert snapshot(home) == before


@pytest.mark.parametrize("content", ["builtin_tools: [bogus]\n", "builtin_tools: [resource_management, resource_management]\n"])
def test_unknown_or_duplicate_groups_in_a_file_on_disk_are_corrupt(home, content):
    path = home / "agents/default/hand.yaml"
    path.write_text("model: m1\n" + content)
    before = snapshot(home)
    assert fwj("resource", "read", "agent", "hand", code=4)["error"]["code"] == "corrupt"
    assert fwj("agent", "edit", "hand", "--add-builtin-tool", "task_collaboration", code=4)["error"]["code"] == "corrupt"
    problems = fwj("home", "check", code=4)["problems"]
    assert [p["path"] for p in problems] == ["agents/default/hand.yaml"]
    assert problems[0]["field"].startswith("builtin_tools")
    assert snapshot(home) == before


def test_agent_flags_set_and_clear_fields(home):
    fwj("resource", "write", "harness", "h1", "--create", "--data", '{"type": "local"}')
    doc = fwj("agent", "edit", "a1", "--harness", "h1", "--prompt", "default", "--description", "d", "--execution")
    assert doc["data"]["harness"] == "h1" and doc["data"]["execution"] == {"enabled": True, "sandbox": "bubblewrap", "network": False}
    doc = fwj("agent", "edit", "a1", "--harness", "")
    assert "harness" not in doc["data"]


def test_a_new_agent_is_never_reported_ready(home):
    doc = fwj("agent", "create", "fresh", "--model", "m1", "--builtin-tool", "resource_management")
    activation = doc["activation"]
    assert activation["configured"] is True and activation["enabled"] is False
    assert [s["tool"] for s in activation["next_steps"]] == ["principal_create", "agent_bind"]
    doc = fwj("resource", "write", "agent", "fresh2", "--create", "--data", '{"model": "m1"}')
    assert doc["activation"]["enabled"] is False
    human = fw("agent", "create", "fresh3", "--model", "m1")
    assert "Not enabled" in human.stdout and "fw principal create" in human.stdout
    assert "ready" not in json.dumps(doc).lower()
