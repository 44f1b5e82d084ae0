import json
import os
from pathlib import Path

import pytest
from conftest import fw, fwj, snapshot

DEFINITIONS = {
    "provider": {"base_url": "https://llm.example.test/v1", "api_key_env": "LLM_KEY", "description": "p"},
    "model": {"provider": "p0", "model_id": "model-x", "capabilities": {"tool_call": True}},
    "prompt": {"description": "greets", "body": "Say hello.\n"},
    "skill": {"description": "does a thing", "body": "# Steps\n\n1. Do it.\n"},
    "mcp": {"transport": "stdio", "command": "srv", "args": ["--fast"], "env": {"TOKEN": "tok-123456789"}},
    "harness": {"type": "local", "command": "run", "capabilities": {"tool_calling": True}, "permissions": {"tools": ["detail", "call"]}},
    "agent": {"model": "m0", "prompt": "default", "builtin_tools": ["resource_management"],
              "execution": {"enabled": True, "sandbox": "bubblewrap", "network": False}},
}


@pytest.fixture
def base():
    fwj("resource", "write", "provider", "p0", "--create", "--data", '{"base_url": "https://a.test", "api_key_env": "A"}')
    fwj("resource", "write", "model", "m0", "--create", "--data", '{"provider": "p0", "model_id": "x"}')


@pytest.mark.parametrize("kind", list(DEFINITIONS))
def test_every_kind_is_written_read_listed_and_updated(kind, base, home):
    data = DEFINITIONS[kind]
    created = fwj("resource", "write", kind, "r1", "--create", "--data", json.dumps(data))
    assert created["name"] == "r1" and created["category"] == "default"
    read = fwj("resource", "read", kind, "r1")
    for key, value in data.items():
        if key == "body":
            assert read["body"] == value
        elif key == "env":
            assert read["data"]["env"] == {"TOKEN": "[redacted]"}
        else:
            assert read["data"][key] == value
    listed = fwj("resource", "list", kind)["items"]
    assert "r1" in [i["name"] for i in listed]
    updated = fwj("resource", "write", kind, "r1", "--data", '{"description": "changed"}')
    assert updated["data"]["description"] == "changed"
    assert fwj("resource", "read", kind, "r1")["data"]["description"] == "changed"
    assert fwj("home", "check")["ok"] is True


def test_skill_and_prompt_files_have_the_documented_layout(home):
    fwj("resource", "write", "skill", "s1", "--create", "--data", '{"description": "d", "body": "text\\n"}')
    text = (home / "skills/default/s1/SKILL.md").read_text()
    assert text == "---\nname: s1\ndescription: d\n---\ntext\n"
    fwj("resource", "write", "prompt", "p1", "--create", "--data", '{"body": "hi\\n"}')
    assert (home / "prompts/default/p1.md").read_text() == "---\n---\nhi\n"


def test_create_an_existing_name_is_exists_and_update_of_missing_is_not_found(base):
    result = fw("resource", "write", "model", "m0", "--create", "--data", '{"provider": "p0", "model_id": "y"}', "--json")
    assert result.exit_code == 6 and result.json["error"]["code"] == "exists"
    result = fw("resource", "write", "model", "nope", "--data", '{"model_id": "y"}', "--json")
    assert result.exit_code == 3 and result.json["error"]["code"] == "not_found"
    assert "--create" in result.json["error"]["hint"]


def test_names_are_unique_across_categories(base):
    fwj("category", "create", "model", "extra")
    doc = fwj("resource", "write", "model", "m0", "--create", "--category", "extra", "--data", '{"provider": "p0", "model_id": "y"}', code=6)
    assert doc["error"]["code"] == "exists"


def test_merge_patch_null_removes_a_field_and_lists_are_replaced(base):
    fwj("resource", "write", "model", "m0", "--data", '{"description": "d", "capabilities": {"tool_call": true}}')
    doc = fwj("resource", "write", "model", "m0", "--data", '{"description": null}')
    assert "description" not in doc["data"]
    assert doc["data"]["capabilities"] == {"tool_call": True}


def test_a_write_naming_a_missing_resource_is_invalid(home, base):
    before = snapshot(home)
    for kind, data in [
        ("agent", {"model": "ghost"}),
        ("agent", {"skills": ["nope"]}),
        ("agent", {"mcps": ["nope"]}),
        ("agent", {"harness": "nope"}),
        ("agent", {"prompt": "nope"}),
        ("model", {"provider": "ghost", "model_id": "x"}),
    ]:
        doc = fwj("resource", "write", kind, "new1", "--create", "--data", json.dumps(data), code=4)
        assert doc["error"]["code"] == "invalid"
        assert "does not exist" in doc["error"]["message"]
    doc = fwj("resource", "write", "model", "m0", "--data", '{"provider": "ghost"}', code=4)
    assert doc["error"]["code"] == "invalid" and doc["error"]["field"] == "provider"
    assert "provider 'ghost', which does not exist" in doc["error"]["message"]
    assert fwj("resource", "read", "model", "m0")["data"]["provider"] == "p0"
    assert snapshot(home) == before


@pytest.mark.parametrize("bad", ["../x", "../default/x", "A", "a/b", "", ".hidden", "x" * 64, "a b", "a\n", "_a"])
def test_bad_names_are_refused_before_any_path_is_built(bad, home):
    # A valid harness file waits exactly where the bad name would lead inside the home
    # (harnesses/default/../x.yaml is harnesses/x.yaml): nothing may read or replace it.
    planted = Path(os.path.normpath(home / "harnesses/default" / f"{bad}.yaml"))
    assert planted.is_relative_to(home)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text("type: planted-by-the-test\n")
    before = snapshot(home)
    doc = fwj("resource", "write", "harness", bad, "--create", "--data", '{"type": "t"}', code=4)
    assert doc["error"]["code"] == "invalid"
    doc = fwj("resource", "write", "harness", bad, "--data", '{"type": "t"}', code=4)
    assert doc["error"]["code"] == "invalid"
    doc = fwj("resource", "read", "harness", bad, code=4)
    assert doc["error"]["code"] == "invalid" and "planted" not in json.dumps(doc)
    doc = fwj("resource", "delete", "harness", bad, "--confirm", f"harness/{bad}", code=4)
    assert doc["error"]["code"] == "invalid"
    doc = fwj("category", "create", "harness", bad, code=4)
    assert doc["error"]["code"] == "invalid"
    assert snapshot(home) == before
    assert planted.read_text() == "type: planted-by-the-test\n"
    assert not (home / "x").exists() and not (home / "harnesses/x").exists()


def test_category_places_lists_and_moves(home, base):
    fwj("category", "create", "agent", "team")
    assert fwj("category", "list", "agent")["categories"] == ["default", "team"]
    fwj("agent", "create", "a1", "--model", "m0", "--category", "team")
    assert (home / "agents/team/a1.yaml").is_file()
    assert [i["name"] for i in fwj("resource", "list", "agent", "--category", "team")["items"]] == ["a1"]
    moved = fwj("resource", "write", "agent", "a1", "--category", "default", "--data", "{}")
    assert moved["category"] == "default"
    assert (home / "agents/default/a1.yaml").is_file() and not (home / "agents/team/a1.yaml").exists()
    fwj("category", "delete", "agent", "team")
    assert fwj("category", "list", "agent")["categories"] == ["default"]


def test_moving_a_skill_moves_its_whole_folder(home):
    fwj("resource", "write", "skill", "s1", "--create", "--data", '{"description": "d", "body": "b"}')
    (home / "skills/default/s1/helper.py").write_text("print(1)\n")
    fwj("category", "create", "skill", "tools")
    fwj("resource", "write", "skill", "s1", "--category", "tools", "--data", "{}")
    assert (home / "skills/tools/s1/helper.py").read_text() == "print(1)\n"
    assert not (home / "skills/default/s1").exists()


def test_write_into_a_missing_category_is_refused(home):
    before = snapshot(home)
    doc = fwj("resource", "write", "harness", "h1", "--create", "--category", "nope", "--data", '{"type": "t"}', code=3)
    assert doc["error"]["code"] == "not_found"
    assert "fw category create harness nope" in doc["error"]["hint"]
    assert snapshot(home) == before


def test_category_delete_refuses_default_and_non_empty(home):
    assert fwj("category", "delete", "agent", "default", code=6)["error"]["code"] == "protected"
    fwj("category", "create", "harness", "busy")
    fwj("resource", "write", "harness", "h1", "--create", "--category", "busy", "--data", '{"type": "t"}')
    before = snapshot(home)
    doc = fwj("category", "delete", "harness", "busy", code=6)
    assert doc["error"]["code"] == "not_empty" and doc["error"]["items"] == ["harness/h1"]
    assert fwj("category", "delete", "harness", "ghost", code=3)["error"]["code"] == "not_found"
    assert fwj("category", "create", "harness", "busy", code=6)["error"]["code"] == "exists"
    assert snapshot(home) == before


def test_comments_key_order_and_quotes_survive_an_edit(home):
    (home / "harnesses/default/h1.yaml").write_text(
        "# The runner.\n"
        "type: 'local'   # single quotes kept\n"
        "command: \"run-it\"\n"
        "# permissions follow\n"
        "permissions:\n"
        "  tools: [detail, call]\n"
        "description: old\n"
    )
    fwj("resource", "write", "harness", "h1", "--data", '{"description": "new"}')
    assert (home / "harnesses/default/h1.yaml").read_text() == (
        "# The runner.\n"
        "type: 'local'   # single quotes kept\n"
        "command: \"run-it\"\n"
        "# permissions follow\n"
        "permissions:\n"
        "  tools: [detail, call]\n"
        "description: new\n"
    )


def test_every_comment_line_of_the_sample_agents_survives_agent_edit(tmp_path):
    """The comments after a list hang on its last item: a list the edit replaces keeps them, and
    each item that stays keeps its own end-of-line comment."""
    import shutil

    from conftest import SAMPLE_HOME

    root = tmp_path / "sample"
    shutil.copytree(SAMPLE_HOME, root, ignore=shutil.ignore_patterns(".index*", ".lock", ".locks", "state.db*", "runs"))
    for path in sorted((root / "agents").rglob("*.yaml")):
        name = path.stem
        before = [line for line in path.read_text().splitlines() if line.lstrip().startswith("#") or "  #" in line]
        assert fw("--home", str(root), "agent", "edit", name, "--add-builtin-tool", "task_collaboration", "--json").exit_code == 0
        fw("--home", str(root), "agent", "edit", name, "--remove-builtin-tool", "local_execution", "--json")
        after = path.read_text().splitlines()
        assert [line for line in before if line not in after] == [], f"{path.name} lost comment lines"
    path = root / "agents/default/ops.yaml"
    path.write_text(path.read_text().replace("  - resource_management\n", "  - resource_management  # why it is here\n"))
    assert fw("--home", str(root), "agent", "edit", "ops", "--add-builtin-tool", "local_execution", "--json").exit_code == 0
    text = path.read_text()
    assert "  - resource_management  # why it is here\n" in text and text.index("# It also answers") > text.index("  - local_execution")


def test_prompt_front_matter_comments_survive_a_body_edit(home):
    (home / "prompts/default/p1.md").write_text("---\n# why this prompt\ndescription: 'x'\n---\nold body\n")
    fwj("resource", "write", "prompt", "p1", "--data", '{"body": "new body\\n"}')
    assert (home / "prompts/default/p1.md").read_text() == "---\n# why this prompt\ndescription: 'x'\n---\nnew body\n"


def test_a_no_op_update_rewrites_nothing(home, base):
    path = home / "models/default/m0.yaml"
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    fwj("resource", "write", "model", "m0", "--data", '{"model_id": "x"}')
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_corrupt_files_are_listed_as_corrupt_and_read_as_corrupt(home):
    (home / "harnesses/default/bad.yaml").write_text("type: [\n")
    items = fwj("resource", "list", "harness")["items"]
    assert items[0]["name"] == "bad" and items[0]["error"]["code"] == "corrupt"
    doc = fwj("resource", "read", "harness", "bad", code=4)
    assert doc["error"]["code"] == "corrupt" and doc["error"]["path"] == "harnesses/default/bad.yaml"
    human = fw("resource", "list", "harness")
    assert human.exit_code == 0 and "CORRUPT" in human.stdout and "fw home check" in human.stdout


def test_an_update_can_repair_a_file_that_parses_but_does_not_validate(home):
    (home / "harnesses/default/h1.yaml").write_text("type: local\nbogus: 1\n")
    fwj("resource", "write", "harness", "h1", "--data", '{"bogus": null}')
    assert fwj("resource", "read", "harness", "h1")["data"]["type"] == "local"


def test_mcp_transport_fields_are_checked(home):
    doc = fwj("resource", "write", "mcp", "x", "--create", "--data", '{"transport": "http"}', code=4)
    assert "url" in doc["error"]["message"]
    doc = fwj("resource", "write", "mcp", "x", "--create", "--data", '{"transport": "stdio", "command": "c", "url": "https://a.test"}', code=4)
    assert doc["error"]["code"] == "invalid" and "transport http only" in doc["error"]["message"]
    assert not (home / "mcps/default/x.yaml").exists()
    fwj("resource", "write", "mcp", "web", "--create", "--data", '{"transport": "http", "url": "https://mcp.test/x", "headers": {"Authorization": "Bearer abcdefgh"}}')
    assert fwj("resource", "read", "mcp", "web")["data"]["headers"] == {"Authorization": "[redacted]"}


def test_unknown_fields_are_invalid_and_name_the_field(home):
    doc = fwj("resource", "write", "harness", "h1", "--create", "--data", '{"type": "t", "colour": "red"}', code=4)
    assert doc["error"]["code"] == "invalid" and doc["error"]["field"] == "colour"
    assert not (home / "harnesses/default/h1.yaml").exists()


def test_skill_name_must_match_its_reference(home):
    doc = fwj("resource", "write", "skill", "s1", "--create", "--data", '{"name": "other", "description": "d"}', code=4)
    assert doc["error"]["code"] == "invalid" and doc["error"]["field"] == "name"
    assert not (home / "skills/default/s1").exists() and not (home / "skills/default/other").exists()


def test_list_of_a_large_home_uses_the_index_and_sees_changes(home):
    import os

    for i in range(30):
        path = home / f"harnesses/default/h{i:02d}.yaml"
        path.write_text(f"type: t{i}\n")
        os.utime(path, (1_700_000_000, 1_700_000_000))  # settled: old enough to be cached
    first = fwj("resource", "list", "harness")["items"]
    assert len(first) == 30
    index = json.loads((home / ".index/harnesses.json").read_text().partition("\n")[2])["files"]
    assert "harnesses/default/h05.yaml" in index
    (home / "harnesses/default/h05.yaml").write_text("type: changed-by-hand\n")
    (home / "harnesses/default/h06.yaml").unlink()
    os.utime(home / "harnesses/default/h05.yaml", (1_700_000_000, 1_700_000_000))  # same mtime as before
    items = {i["name"]: i for i in fwj("resource", "list", "harness")["items"]}
    assert items["h05"]["type"] == "changed-by-hand" and "h06" not in items


def test_restating_a_quoted_value_keeps_its_quotes(home):
    (home / "harnesses/default/h1.yaml").write_text("type: 'local'\ncommand: \"run-it\"\n")
    fwj("resource", "write", "harness", "h1", "--data", '{"type": "local", "command": "run-it", "description": "d"}')
    assert (home / "harnesses/default/h1.yaml").read_text() == "type: 'local'\ncommand: \"run-it\"\ndescription: d\n"


def test_a_long_human_listing_shows_every_row(home):
    for i in range(250):
        (home / f"harnesses/default/h{i:03d}.yaml").write_text(f"type: t{i}\ndescription: number {i}\n")
    result = fw("resource", "list", "harness")
    assert result.exit_code == 0, result
    lines = result.stdout.splitlines()  # piped: the header, then every row, as kubectl prints them
    assert lines[0].split() == ["name", "category", "type", "command", "capabilities", "description"]
    rows = [line.split() for line in lines[1:]]
    assert rows == [[f"h{i:03d}", "default", f"t{i}", "-", "tool_calling=no", "number", str(i)] for i in range(250)]


def test_yes_and_no_are_text_for_every_reader(home):
    (home / "harnesses/default/h1.yaml").write_text("type: local\ndescription: no\ncapabilities:\n  tool_calling: true\n")
    assert fwj("resource", "list", "harness")["items"][0]["description"] == "no"
    assert fwj("resource", "read", "harness", "h1")["data"]["capabilities"] == {"tool_calling": True}
    assert fwj("resource", "write", "harness", "h1", "--data", '{"command": "x"}')["data"]["description"] == "no"
    assert fwj("home", "check")["ok"] is True


def test_category_folders_made_and_removed_by_hand_are_seen_at_once(home, base):
    """fw keeps each kind folder's listing of categories while the folder is unchanged: a
    category made or removed by hand changes the folder, and the next command sees it."""
    past = os.stat(home / "agents").st_mtime - 60
    os.utime(home / "agents", (past, past))  # settled: its listing is kept (in this process, for later commands)
    assert fwj("category", "list", "agent")["categories"] == ["default"]
    (home / "agents/ops").mkdir()
    (home / "agents/ops/a9.yaml").write_text("model: m0\n")
    assert fwj("category", "list", "agent")["categories"] == ["default", "ops"]
    assert fwj("resource", "read", "agent", "a9")["category"] == "ops"
    os.utime(home / "agents", (past, past))  # settled again, as an old home is
    assert fwj("category", "list", "agent")["categories"] == ["default", "ops"]
    (home / "agents/ops/a9.yaml").unlink()
    (home / "agents/ops").rmdir()
    assert fwj("category", "list", "agent")["categories"] == ["default"]
    assert fwj("resource", "read", "agent", "a9", code=3)["error"]["code"] == "not_found"
