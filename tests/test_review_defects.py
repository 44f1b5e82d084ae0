"""The defects a close review found: leaks, crashes, wrong codes, silent corruption and
permission gaps. Each test failed before its fix."""

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import CANARY, fw, fw_bin, fw_proc, fwj, make_basics, snapshot

KEY2 = "sk-SECOND-key-0c4e8d2a9b71"


def write_file(home, rel, text):
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- secrets ---------------------------------------------------------------------------------
@pytest.mark.hand_written_canary('providers/default/p1.yaml', 'mcps/default/m1.yaml')
def test_a_duplicate_key_is_corrupt_everywhere_and_no_value_is_quoted(home):
    write_file(home, "providers/default/p1.yaml", f"base_url: https://x.test/v1\napi_key: {CANARY}\napi_key: {KEY2}\n")
    write_file(home, "mcps/default/m1.yaml", f"transport: stdio\ncommand: srv\nenv:\n  TOKEN: {CANARY}\n  TOKEN: {KEY2}\n")
    before = snapshot(home)
    for kind, name in (("provider", "p1"), ("mcp", "m1")):
        r = fw("resource", "write", kind, name, "--data", '{"description": "d"}', "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
        assert "duplicate key" in r.json["error"]["message"]
        read = fw("resource", "read", kind, name, "--json")
        assert read.exit_code == 4 and read.json["error"]["code"] == "corrupt", read
        listed = fwj("resource", "list", kind)
        assert "duplicate key" in listed["items"][0]["error"]["message"]
        called = fw("tool", "call", "--manager", "resource_read", "--args", json.dumps({"kind": kind, "reference": name}))
        assert called.json["error"]["code"] == "corrupt", called
        for out in (r.output, read.output, json.dumps(listed), called.output):
            assert KEY2 not in out
    check = fw("home", "check", "--json")
    assert check.exit_code == 4
    assert sum("duplicate key" in p["message"] for p in check.json["problems"]) == 2
    assert KEY2 not in check.output
    after = snapshot(home)
    after.pop("audit.jsonl")
    assert after == before


@pytest.mark.hand_written_canary('providers/default/p2.yaml')
def test_a_stored_key_never_prints_even_where_this_command_did_not_load_it(home):
    make_basics()
    # copied by mistake into another provider's description, by hand
    write_file(home, "providers/default/p2.yaml", f"base_url: https://y.test/v1\napi_key_env: K\ndescription: use {CANARY}\n")
    # fresh processes: nothing of the write that stored the key is remembered
    listed = fw_proc("resource", "list", "provider", "--json", home=home)
    assert listed.exit_code == 0 and "[redacted]" in listed.stdout
    # a later command's error that quotes what it was given
    shown = fw_proc("run", "show", CANARY, "--json", home=home)
    assert shown.exit_code == 4 and "[redacted]" in shown.json["error"]["message"]


def test_a_write_that_copies_a_stored_key_into_a_plain_field_is_refused(home):
    make_basics()
    before = snapshot(home)
    for args in (
        ["resource", "write", "agent", "a1", "--data", json.dumps({"description": f"key is {CANARY}"})],
        ["resource", "write", "prompt", "p9", "--create", "--data", json.dumps({"body": f"say {CANARY}"})],
        ["resource", "write", "mcp", "m1", "--create", "--data", json.dumps({"transport": "stdio", "command": "x", "args": [CANARY]})],
    ):
        r = fw(*args, "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
        assert r.json["error"]["field"] in ("description", "body", "args[0]")
        assert "secret value" in r.json["error"]["message"]
    assert snapshot(home) == before
    fwj("principal", "create", "a1", "--kind", "agent")
    after_principal = snapshot(home)
    r = fw("binding", "set", "a1", "--agent", "a1", "--directory", f"/srv/{CANARY}", "--json")
    assert r.exit_code == 4 and r.json["error"]["field"] == "directory", r
    assert snapshot(home) == after_principal


def test_known_secrets_do_not_carry_over_from_one_in_process_invocation_to_the_next(home):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://x.test", "api_key": KEY2}))
    (home / "secrets/provider/p1.json").unlink()  # the home no longer holds the value
    r = fw("run", "show", KEY2, "--json")
    # Nothing remembered from the first invocation: had it carried over, a leak of a value
    # this command never saw would be hidden from every later test.
    assert KEY2 in r.stdout


@pytest.mark.hand_written_canary('providers/default/p1.yaml')
def test_a_hand_written_key_is_never_lost_when_the_secret_store_fails(home):
    path = write_file(home, "providers/default/p1.yaml", f"base_url: https://x.test/v1\napi_key: {CANARY}\n")
    (home / "secrets").rmdir()
    (home / "secrets").write_text("not a folder")  # the secret store cannot be written
    original = path.read_bytes()
    r = fw("resource", "write", "provider", "p1", "--data", '{"description": "d"}', "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    assert path.read_bytes() == original  # the key is still where it was


def test_resource_test_checks_the_name_before_building_a_path(home):
    write_file(home, "providers/x.yaml", "base_url: https://x.test\napi_key_env: K\n")  # where ../x would lead
    for ref in ("../x", "../../x", "x/../../y"):
        r = fw("resource", "test", "provider", ref, "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r


# -- crashes and wrong codes -----------------------------------------------------------------
def test_a_closed_stdout_is_no_traceback(home):
    for args in (["--json", "resource", "read", "agent", "nope"], ["resource", "list", "agent"], ["--json", "home", "check"]):
        cmd = " ".join([fw_bin(), *args]) + " | head -c0"
        proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env={**os.environ, "FW_HOME": str(home)}, timeout=60)
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_user_values_are_text_never_markup(home, tmp_path, monkeypatch):
    make_basics()
    fwj("principal", "create", "b", "--kind", "agent")
    monkeypatch.chdir(tmp_path)
    folder = Path("srv/[/red]")  # a binding's directory must exist; short, so the table does not wrap it
    folder.mkdir(parents=True)
    r = fw("binding", "set", "b", "--agent", "a1", "--directory", str(folder))
    assert r.exit_code == 0, r
    assert f"{folder}" in r.stdout.replace("\n", "")
    assert "[/red]" in fw("binding", "list").stdout  # the table may wrap the long path, never render it as markup
    fwj("resource", "write", "agent", "a1", "--data", json.dumps({"description": "[bold]loud[/bold] [/]"}))
    shown = fw("resource", "read", "agent", "a1")
    assert shown.exit_code == 0 and "[bold]loud[/bold] [/]" in shown.stdout, shown


@pytest.mark.parametrize("where", ["file", "proc"])
def test_home_init_where_no_folder_can_be_made_is_invalid(home, tmp_path, where):
    target = (tmp_path / "a-file" / "home") if where == "file" else "/proc/fw-home-test"
    (tmp_path / "a-file").write_text("x")
    r = fw("home", "init", str(target), "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    assert "cannot create a framework home" in r.json["error"]["message"]


def test_data_and_args_files_that_are_not_utf8_are_invalid(home, tmp_path):
    make_basics()
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{\"description\": 1}")
    before = snapshot(home)
    r = fw("resource", "write", "agent", "a1", "--data", f"@{bad}", "--json")
    assert r.exit_code == 4 and "not UTF-8" in r.json["error"]["message"], r
    r = fw("tool", "call", "--manager", "resource_list", "--args", f"@{bad}")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    assert snapshot(home) == before


def test_data_nested_5000_deep_is_invalid(home, tmp_path):
    make_basics()
    deep = tmp_path / "deep.json"
    deep.write_text('{"description": ' + "[" * 5000 + "]" * 5000 + "}")
    before = snapshot(home)
    r = fw("resource", "write", "agent", "a1", "--data", f"@{deep}", "--json")
    assert r.exit_code == 4 and "nested" in r.json["error"]["message"], r
    r = fw("tool", "call", "--manager", "resource_write", "--args", '{"kind": "agent", "reference": "a1", "create": false, "data": {"x": ' + "[" * 100 + "]" * 100 + "}}")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    assert snapshot(home) == before


def test_a_huge_lease_is_invalid(home):
    make_basics()
    r = fw("run", "start", "--agent", "a1", "--lease", "999999999999", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    assert not any((home / "runs").iterdir())


def test_a_folder_named_like_a_resource_file_is_corrupt_not_a_crash(home):
    (home / "agents/default/x.yaml").mkdir()
    (home / "skills/default/s1/SKILL.md").mkdir(parents=True)
    for kind, name in (("agent", "x"), ("skill", "s1")):
        r = fw("resource", "read", kind, name, "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
        items = fwj("resource", "list", kind)["items"]
        assert items[0]["name"] == name and "error" in items[0]
        r = fw("resource", "write", kind, name, "--data", '{"description": "d"}', "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    check = fw("home", "check", "--json")
    assert check.exit_code == 4
    assert {p["path"] for p in check.json["problems"]} >= {"agents/default/x.yaml", "skills/default/s1/SKILL.md"}


@pytest.mark.parametrize("index", [
    {"version": 5, "files": []},
    {"version": 5, "files": {"agents/default/a1.yaml": 7}},
    {"version": 5, "files": {"agents/default/a1.yaml": [[1, 2, 3], "x"]}},
    {"version": 5, "files": {"agents/default/a1.yaml": [None, {"name": 1}]}},
    [1, 2, 3],
])
def test_an_index_of_the_wrong_shape_is_only_a_cold_cache(home, index):
    make_basics()
    expected = fwj("resource", "list", "agent")
    (home / ".index").mkdir(exist_ok=True)
    for name in ("agents", "models"):
        (home / f".index/{name}.json").write_text(json.dumps(index))
    assert fwj("resource", "list", "agent") == expected
    assert fwj("resource", "delete", "model", "m1", "--recursive")["plan"] == ["agent/a1", "model/m1"]


def test_an_index_entry_with_a_stale_shape_under_a_matching_stamp_is_not_trusted(home):
    make_basics()
    expected = fwj("resource", "list", "agent")
    time.sleep(2.1)  # let the file settle so that it is cached
    fwj("resource", "list", "agent")
    doc = json.loads((home / ".index/agents.json").read_text().partition("\n")[2])  # after the checksum line
    stamp = doc["files"]["agents/default/a1.yaml"][0]
    doc["files"]["agents/default/a1.yaml"] = [stamp, {"summary": {}, "refs": [["model"]]}]
    (home / ".index/agents.json").write_text(json.dumps(doc))  # edited by hand: no checksum, each entry checked
    assert fwj("resource", "list", "agent") == expected


def _damage_run(home, run_id, change):
    path = home / f"runs/{run_id}.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("damage", ["missing_fields", "unknown_tool", "not_an_object"])
def test_a_damaged_run_record_is_corrupt_everywhere(home, damage):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    run_id = fwj("run", "start", "--agent", "a1")["run_id"]
    if damage == "missing_fields":
        _damage_run(home, run_id, lambda r: (r.pop("tools"), r.pop("identity")))
    elif damage == "unknown_tool":
        _damage_run(home, run_id, lambda r: r["tools"].append("framework_teleport"))
    else:
        (home / f"runs/{run_id}.json").write_text("[1, 2]")
    before = snapshot(home)
    r = fw("tool", "call", "--run", run_id, "framework_teleport")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    r = fw("tool", "list", "--run", run_id, "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    if damage == "unknown_tool":
        # the record is whole: it shows, and only the tool service, which knows the tools,
        # refuses to act on a name it cannot resolve
        assert fwj("run", "show", run_id)["tools"][-1] == "framework_teleport"
        return
    for args in (["run", "show", run_id], ["run", "end", run_id]):
        r = fw(*args, "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    listed = fwj("run", "list")["runs"]
    assert [(x["run_id"], x["status"]) for x in listed] == [(run_id, "corrupt")]
    assert "Traceback" not in fw("run", "list").output
    check = fw("home", "check", "--json")
    assert check.exit_code == 4 and any(p["path"] == f"runs/{run_id}.json" for p in check.json["problems"])
    after = snapshot(home)
    before.pop("audit.jsonl", None), after.pop("audit.jsonl", None)
    assert after == before


def test_an_audit_line_that_is_not_an_object_is_shown_as_corrupt(home):
    (home / "audit.jsonl").write_text('[1, 2]\n"text"\n{"time": "t", "caller": "manager", "tool": "x", "outcome": "ok"}\nnot json\n')
    entries = fwj("audit", "list")["entries"]
    assert entries[:2] == [{"corrupt_line": True}, {"corrupt_line": True}]
    assert entries[2]["caller"] == "manager" and entries[3] == {"corrupt_line": True}
    human = fw("audit", "list")
    assert human.exit_code == 0 and "Traceback" not in human.output


@pytest.mark.parametrize("env,args", [({}, ["--json", "resource"]), ({"FW_JSON": "1"}, ["agent"]), ({}, ["--json"])])
def test_a_group_without_its_command_in_json_mode_is_one_usage_document(home, env, args):
    r = fw(*args, env=env)
    assert r.exit_code == 2, r
    doc = json.loads(r.stdout)  # exactly one JSON document: no help text around it
    assert doc["error"]["code"] == "usage" and doc["error"]["message"]


def test_a_lease_of_one_second_lasts_about_a_second(home):
    make_basics()
    asked = time.time()
    run = fwj("run", "start", "--agent", "a1", "--lease", "1")
    ends = datetime.fromisoformat(run["lease_expires_at"].replace("Z", "+00:00")).timestamp()
    assert 0.95 <= ends - asked <= 1.5  # not cut to what was left of the second it started in


def test_the_audit_never_stores_a_malformed_run_id_raw(home):
    for given in ("x" * 5000, "run-sk-pasted-by-mistake", "../../etc/passwd"):
        fw("tool", "call", "--run", given, "framework_resource_list", "--args", '{"kind": "agent"}')
    lines = [json.loads(l) for l in (home / "audit.jsonl").read_text().splitlines()]
    assert [l["run_id"] for l in lines] == ["(malformed)"] * 3
    assert all(l["caller"] == "(unknown run)" for l in lines)
    assert "pasted" not in (home / "audit.jsonl").read_text()


# -- validation and corrupt files ------------------------------------------------------------
@pytest.mark.parametrize("value", ["yes", 1, "on", "true", 0, "false"])
def test_booleans_are_strict_on_write(home, value):
    make_basics()
    before = snapshot(home)
    r = fw("resource", "write", "model", "m1", "--data", json.dumps({"capabilities": {"tool_call": value}}), "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and r.json["error"]["field"] == "capabilities.tool_call", r
    assert snapshot(home) == before


def test_numbers_and_booleans_written_by_hand_as_text_are_corrupt(home):
    make_basics()
    fwj("principal", "create", "b", "--kind", "agent")
    fwj("binding", "set", "b", "--agent", "a1")
    (home / "bindings/b.yaml").write_text('agent: a1\nenabled: "true"\nmax_rounds: "3"\n')
    item = fwj("binding", "list")["bindings"][0]
    assert item["error"]["code"] == "corrupt", item
    r = fw("run", "start", "--principal", "b", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r


def test_a_hand_written_yes_is_not_true_on_read(home):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    write_file(home, "models/default/m1.yaml", "provider: p1\nmodel_id: m-1\ncapabilities:\n  tool_call: yes\n")
    item = fwj("resource", "list", "model")["items"][0]
    assert item["error"]["code"] == "corrupt" and item["error"].get("field") == "capabilities.tool_call"
    r = fw("run", "start", "--agent", "a1", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r  # no tools granted from "yes"


def test_every_file_fw_writes_validates_against_the_published_schemas(home):
    import jsonschema
    import yaml
    from conftest import REPO

    make_basics()
    fwj("resource", "write", "mcp", "m1", "--create", "--data", json.dumps({"transport": "http", "url": "https://m.test/mcp", "headers": {"X-Key": KEY2}}))
    fwj("resource", "write", "harness", "h1", "--create", "--data", json.dumps({"type": "local", "capabilities": {"tool_calling": True}, "permissions": {"tools": ["call"]}}))
    fwj("resource", "write", "prompt", "p1", "--create", "--data", json.dumps({"description": "d", "body": "text"}))
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "d", "body": "text"}))
    fwj("agent", "edit", "a1", "--execution", "--builtin-tool", "local_execution", "--mcp", "m1", "--harness", "h1", "--skill", "s1", "--prompt", "p1")
    fwj("principal", "create", "b", "--kind", "agent")
    fwj("binding", "set", "b", "--agent", "a1", "--max-rounds", "3", "--policy", "all")
    checked = 0
    for folder, kind in (("providers", "provider"), ("models", "model"), ("mcps", "mcp"), ("harnesses", "harness"), ("agents", "agent"), ("principals", "principal"), ("bindings", "binding")):
        schema = json.loads((REPO / "schemas" / f"{kind}.json").read_text())
        for path in (home / folder).rglob("*.yaml"):
            jsonschema.validate(yaml.safe_load(path.read_text()) or {}, schema)
            checked += 1
    for kind, rel in (("prompt", "prompts/default/p1.md"), ("skill", "skills/default/s1/SKILL.md")):
        front = (home / rel).read_text().split("---\n")[1]
        jsonschema.validate(yaml.safe_load(front) or {}, json.loads((REPO / "schemas" / f"{kind}.json").read_text()))
        checked += 1
    assert checked == 9


def test_a_damaged_secret_file_is_corrupt_never_no_key(home):
    make_basics()
    (home / "secrets/provider/p1.json").write_text("{not json")
    item = fwj("resource", "list", "provider")["items"][0]
    assert item["error"]["code"] == "corrupt" and item["error"]["path"] == "secrets/provider/p1.json"
    r = fw("resource", "read", "provider", "p1", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt" and r.json["error"]["path"] == "secrets/provider/p1.json", r
    before = snapshot(home)
    r = fw("resource", "write", "provider", "p1", "--data", '{"description": "harmless"}', "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    assert snapshot(home) == before
    check = fw("home", "check", "--json")
    assert check.exit_code == 4 and any(p["path"] == "secrets/provider/p1.json" for p in check.json["problems"])
    assert fw("resource", "test", "provider", "p1", "--json").json["ok"] is False
    # the hint works: store the key again
    hint = r.json["error"]["hint"]
    assert "--api-key-stdin" in hint
    fixed = fw("resource", "write", "provider", "p1", "--api-key-stdin", "--json", input=KEY2)
    assert fixed.exit_code == 0 and fixed.json["data"]["api_key_set"] is True, fixed
    assert fwj("home", "check")["ok"] is True


def test_a_damaged_principal_stops_a_managed_run(home):
    make_basics()
    fwj("principal", "create", "b", "--kind", "agent")
    fwj("binding", "set", "b", "--agent", "a1")
    (home / "principals/b.yaml").write_text("kind: [oops\n")
    r = fw("run", "start", "--principal", "b", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "corrupt", r
    (home / "principals/b.yaml").unlink()
    r = fw("run", "start", "--principal", "b", "--json")
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found", r
    assert not any((home / "runs").iterdir())


@pytest.mark.parametrize("hidden", ["file", "folder"])
def test_category_delete_refuses_hidden_entries_it_never_listed(home, hidden):
    fwj("category", "create", "agent", "team")
    target = home / "agents/team/.notes"
    target.mkdir() if hidden == "folder" else target.write_text("mine")
    r = fw("category", "delete", "agent", "team", "--json")
    assert r.exit_code == 6 and r.json["error"]["code"] == "not_empty", r
    assert target.exists()


def test_category_delete_removes_only_fw_temp_files_left_behind(home):
    fwj("category", "create", "agent", "team")
    (home / "agents/team/.x.yaml.abc123.tmp").write_text("half")
    assert fwj("category", "delete", "agent", "team")["deleted"] is True
    assert not (home / "agents/team").exists()


# -- permissions -----------------------------------------------------------------------------
def test_an_ended_or_expired_run_lists_no_tools(home):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    ended = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("run", "end", ended)
    r = fw("tool", "list", "--run", ended, "--json")
    assert r.exit_code == 5 and r.json["error"]["code"] == "run_ended", r
    expiring = fwj("run", "start", "--agent", "a1", "--lease", "1")["run_id"]
    time.sleep(1.1)
    r = fw("tool", "list", "--run", expiring, "--json")
    assert r.exit_code == 5 and r.json["error"]["code"] == "lease_expired", r
    served = fw_proc("mcp", "serve", "--run", ended, "--json", home=home)
    assert served.exit_code == 5 and json.loads(served.stdout)["error"]["code"] == "run_ended"


@pytest.mark.parametrize("name", ["manager", "runtime", "runtime-a1", "runtimex"])
def test_reserved_principal_names_are_refused(home, name):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    run_id = fwj("run", "start", "--agent", "a1")["run_id"]
    before = snapshot(home)
    r = fw("principal", "create", name, "--kind", "agent", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    r = fw("tool", "call", "--run", run_id, "framework_principal_create", "--args", json.dumps({"name": name, "kind": "agent"}))
    assert r.json["error"]["code"] == "invalid", r
    after = snapshot(home)
    before.pop("audit.jsonl", None), after.pop("audit.jsonl", None)
    assert after == before


def test_a_hand_written_reserved_principal_is_corrupt(home):
    (home / "principals/manager.yaml").write_text("kind: agent\n")
    assert fwj("principal", "list")["principals"][0]["error"]["code"] == "corrupt"
    assert fw("home", "check").exit_code == 4


def test_a_refused_call_of_an_ended_run_is_audited_as_its_identity(home):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    run_id = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("run", "end", run_id)
    r = fw("tool", "call", "--run", run_id, "framework_resource_list", "--args", '{"kind": "agent"}')
    assert r.json["error"]["code"] == "run_ended"
    line = json.loads((home / "audit.jsonl").read_text().splitlines()[-1])
    assert (line["caller"], line["run_id"], line["outcome"], line["error"]) == ("runtime:a1", run_id, "refused", "run_ended")


def test_mcp_serve_answers_every_call_it_read_before_input_closed(home):
    make_basics()
    calls = 20
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ] + [{"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call", "params": {"name": "resource_list", "arguments": {"kind": "agent"}}} for i in range(calls)]
    proc = subprocess.run(
        [fw_bin(), "mcp", "serve", "--manager"],
        input="".join(json.dumps(m) + "\n" for m in messages),
        capture_output=True, text=True, timeout=60, env={**os.environ, "FW_HOME": str(home)},
    )
    assert proc.returncode == 0, proc.stderr
    answered = sorted(json.loads(line)["id"] for line in proc.stdout.splitlines() if line.strip())
    assert answered == [1] + [100 + i for i in range(calls)]


def test_an_audit_entry_holding_a_line_separator_is_one_entry(home):
    """JSON keeps U+2028 and U+2029 as they are inside strings; an entry ends only at its newline."""
    r = fw("tool", "call", "--manager", "resource_list", "--args", json.dumps({"kind": "agent", "a\u2028b": "c\u2029d"}, ensure_ascii=False))
    assert r.exit_code != 0  # refused (an unknown argument), and audited as such
    entries = fwj("audit", "list")["entries"]
    assert len(entries) == 1 and entries[0]["tool"] == "resource_list" and entries[0]["outcome"] in ("refused", "error")
