"""Every refusal leaves the home byte-for-byte as it was, and never prints a traceback."""

import json

import pytest
from conftest import CANARY, fw, fw_proc, make_basics, snapshot

REFUSALS = [
    # (arguments, exit code)
    (["resource", "write", "agent", "ops", "--create", "--data", '{"model": "gpt-4o"}'], 6),
    (["resource", "write", "agent", "ghost", "--data", '{"description": "x"}'], 3),
    (["resource", "write", "agent", "ops", "--data", '{"model": "ghost"}'], 4),
    (["resource", "write", "agent", "ops", "--data", '{"unknown": 1}'], 4),
    (["resource", "write", "agent", "ops", "--data", '[1, 2]'], 4),
    (["resource", "write", "agent", "ops", "--data", '"text"'], 4),
    (["resource", "write", "agent", "ops", "--data", "{not json"], 4),
    (["resource", "write", "agent", "ops", "--data", "@/nonexistent/file.json"], 3),
    (["resource", "write", "agent", "ops"], 2),
    (["resource", "write", "agent", "ops", "--category", "nowhere", "--data", "{}"], 3),
    (["resource", "write", "model", "gpt-4o", "--data", '{"capabilities": {"tool_call": "maybe"}}'], 4),
    (["resource", "write", "provider", "openai", "--data", '{"base_url": "ftp://x"}'], 4),
    (["resource", "write", "provider", "openai", "--data", json.dumps({"api_key": CANARY})], 4),
    (["resource", "write", "prompt", "operator", "--data", '{"body": 5}'], 4),
    (["resource", "write", "skill", "summarize", "--data", '{"name": "other"}'], 4),
    (["resource", "write", "mcp", "filesystem", "--data", '{"transport": "http"}'], 4),
    (["resource", "write", "thing", "x", "--data", "{}"], 4),
    (["resource", "write", "agent", "../etc", "--create", "--data", "{}"], 4),
    (["resource", "read", "agent", "ghost"], 3),
    (["resource", "read", "agent", "Ops"], 4),
    (["resource", "list", "agent", "--category", "ghost"], 3),
    (["agent", "edit", "ops", "--add-builtin-tool", "bogus"], 4),
    (["agent", "edit", "ops", "--builtin-tool", "task_collaboration", "--builtin-tool", "task_collaboration"], 4),
    (["agent", "edit", "ghost", "--add-builtin-tool", "task_collaboration"], 3),
    (["agent", "create", "ops"], 6),
    (["agent", "create", "new", "--model", "ghost"], 4),
    (["agent", "create", "new", "--skill", "summarize", "--skill", "summarize"], 4),
    (["category", "delete", "agent", "default"], 6),
    (["category", "delete", "agent", "research"], 6),
    (["category", "delete", "agent", "ghost"], 3),
    (["category", "create", "agent", "research"], 6),
    (["category", "create", "agent", "Bad"], 4),
    (["resource", "list", "--category", "ghost"], 3),
    (["resource", "read"], 2),
    (["no-such-command"], 2),
    (["resource", "write", "agent", "ops", "--data", "{}", "--bogus-flag"], 2),
]


@pytest.mark.parametrize("args,code", REFUSALS, ids=[" ".join(a)[:60] for a, _ in REFUSALS])
def test_refusal_changes_nothing(sample, args, code):
    fw("resource", "write", "provider", "keyed", "--create", "--data", json.dumps({"base_url": "https://k.test", "api_key": CANARY}))
    before = snapshot(sample)
    human = fw(*args)
    assert human.exit_code == code, human
    assert human.stderr.startswith("Error:") and "Hint:" in human.stderr
    machine = fw(*args, "--json")
    assert machine.exit_code == code, machine
    doc = machine.json
    assert set(doc) == {"error"} and {"code", "message", "hint"} <= set(doc["error"])
    for result in (human, machine):
        assert "Traceback" not in result.output and CANARY not in result.output
    assert snapshot(sample) == before


def test_json_env_var_turns_on_json_mode_for_usage_errors(home, monkeypatch):
    monkeypatch.setenv("FW_JSON", "1")
    result = fw("resource", "frobnicate")
    assert result.exit_code == 2
    assert result.json["error"]["code"] == "usage"
    assert result.stderr == ""


def test_json_env_var_turns_on_json_mode_for_results_and_every_error(home, monkeypatch):
    monkeypatch.setenv("FW_JSON", "1")
    # results
    result = fw("resource", "list", "prompt")
    assert result.exit_code == 0, result
    assert result.json == {"kind": "prompt", "items": [{"name": "default", "category": "default", "description": result.json["items"][0]["description"]}]}
    result = fw("resource", "write", "harness", "h1", "--create", "--data", '{"type": "local"}')
    assert result.exit_code == 0, result
    assert (result.json["kind"], result.json["name"], result.json["data"]["type"]) == ("harness", "h1", "local")
    assert fw("home", "check").json["ok"] is True
    # errors of every kind: one JSON document on stdout, nothing on stderr
    for args, code, exit_code in (
        (["resource", "read", "harness", "ghost"], "not_found", 3),
        (["resource", "write", "harness", "h1", "--data", '{"colour": "red"}'], "invalid", 4),
        (["resource", "write", "harness", "h1", "--create", "--data", '{"type": "local"}'], "exists", 6),
        (["run", "start", "--agent", "a1", "--principal", "p"], "usage", 2),
    ):
        result = fw(*args)
        assert result.exit_code == exit_code, result
        assert set(result.json) == {"error"} and result.json["error"]["code"] == code, result
        assert result.stderr == ""
    (home / "harnesses/default/bad.yaml").write_text("type: [\n")
    result = fw("home", "check")
    assert result.exit_code == 4 and [p["path"] for p in result.json["problems"]] == ["harnesses/default/bad.yaml"]
    # and without it, the same commands speak to people
    monkeypatch.delenv("FW_JSON")
    result = fw("resource", "read", "harness", "ghost")
    assert result.exit_code == 3 and result.stdout == "" and result.stderr.startswith("Error: no harness named 'ghost'")
    assert not fw("resource", "list", "prompt").stdout.lstrip().startswith("{")


def boom(*args, **kwargs):
    raise RuntimeError(f"boom: something broke near {CANARY}")


def test_an_unexpected_failure_is_internal_in_json_mode(home, monkeypatch):
    import framework_cli.cli.resource

    fw("resource", "write", "provider", "keyed", "--create", "--data", json.dumps({"base_url": "https://k.test", "api_key": CANARY}))
    monkeypatch.setattr(framework_cli.cli.resource, "resource_list", boom)
    result = fw("resource", "list", "harness", "--json")
    assert result.exit_code == 1, result
    error = result.json["error"]  # the whole of stdout is one JSON document
    assert error["code"] == "internal"
    assert "RuntimeError" in error["message"] and "boom" in error["message"]
    assert "bug" in error["hint"]
    assert result.stderr == ""
    assert "Traceback" not in result.output and CANARY not in result.output


def test_an_unexpected_failure_is_internal_in_human_mode(home, monkeypatch):
    import framework_cli.cli.resource

    fw("resource", "write", "provider", "keyed", "--create", "--data", json.dumps({"base_url": "https://k.test", "api_key": CANARY}))
    monkeypatch.setattr(framework_cli.cli.resource, "resource_list", boom)
    result = fw("resource", "list", "harness")
    assert result.exit_code == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Error: unexpected error: RuntimeError: boom")
    assert lines[1].startswith("Hint: ") and "bug" in lines[1]
    assert "Traceback" not in result.output and CANARY not in result.output


def test_an_unexpected_failure_inside_a_tool_is_internal_and_audited(home, monkeypatch):
    import framework_cli.tools.resource_management

    make_basics()  # the canary is a stored secret: the error must not show it
    monkeypatch.setattr(framework_cli.tools.resource_management, "resource_list", boom)
    result = fw("tool", "call", "--manager", "resource_list", "--args", '{"kind": "agent"}')
    assert result.exit_code == 1, result
    assert result.json["error"]["code"] == "internal"
    assert result.stderr == "" and "Traceback" not in result.output
    entry = json.loads((home / "audit.jsonl").read_text().splitlines()[-1])
    assert (entry["tool"], entry["caller"], entry["outcome"], entry["error"]) == ("resource_list", "manager", "error", "internal")


def test_the_installed_fw_never_prints_a_traceback(home):
    for args, code in ((["resource", "write", "agent", "x", "--data", "{"], "invalid"), (["--home"], "usage"), (["agent", "show"], "usage")):
        for extra in ([], ["--json"]):
            result = fw_proc(*args, *extra, home=home)
            assert result.exit_code == {"usage": 2, "invalid": 4}[code], result
            assert "Traceback" not in result.output
            if extra:
                assert json.loads(result.stdout)["error"]["code"] == code
            else:
                assert result.stdout == "" and result.stderr.startswith("Error:") and "Hint:" in result.stderr


def test_a_missing_data_file_is_not_found_and_an_unreadable_one_invalid(home, tmp_path):
    data = tmp_path / "data.json"
    data.write_text('{"type": "local"}')
    assert fw("resource", "write", "harness", "h1", "--create", "--data", f"@{data}").exit_code == 0
    result = fw("resource", "write", "harness", "h2", "--create", "--data", "-", input='{"type": "x"}')
    assert result.exit_code == 0, result
    listed = {i["name"]: i["type"] for i in json.loads(fw("resource", "list", "harness", "--json").stdout)["items"]}
    assert listed == {"h1": "local", "h2": "x"}
    before = snapshot(home)
    result = fw("resource", "write", "harness", "h3", "--create", "--data", f"@{tmp_path / 'missing.json'}", "--json")
    assert result.exit_code == 3 and result.json["error"]["code"] == "not_found"
    assert "missing.json" in result.json["error"]["message"]
    result = fw("resource", "write", "harness", "h3", "--create", "--data", f"@{tmp_path}", "--json")  # a folder
    assert result.exit_code == 4 and result.json["error"]["code"] == "invalid"
    assert snapshot(home) == before


def test_a_group_alone_shows_its_help(home):
    for runner in (lambda *a: fw(*a), lambda *a: fw_proc(*a, home=home)):
        result = runner("resource")
        assert result.exit_code == 0 and "Usage" in result.stdout and "write" in result.stdout
        result = runner("resource", "--json")
        assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "usage"


def test_help_explains_every_command(home):
    for args in (["--help"], ["resource", "--help"], ["resource", "write", "--help"], ["agent", "edit", "--help"], ["home", "check", "--help"]):
        result = fw(*args)
        assert result.exit_code == 0 and "Usage" in result.stdout
    assert "merge patch" in fw("resource", "write", "--help").stdout


def test_json_before_the_command_is_json_mode(home):
    result = fw("--json", "resource", "list", "prompt")
    assert result.exit_code == 0 and result.json["items"][0]["name"] == "default"
    assert fw("resource", "list", "prompt").stdout.lstrip()[0] != "{"
    result = fw("--json", "resource", "read", "prompt", "ghost")
    assert result.exit_code == 3 and result.json["error"]["code"] == "not_found"
