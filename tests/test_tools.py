"""The tool service: callers, runs and their snapshots, authorisation at call time, audit."""

import json
import time

import pytest
from conftest import CANARY, REPO, fw, fw_proc, fwj, make_basics, snapshot

ALL_RM_TOOLS = [
    "resource_list", "resource_read", "resource_write", "resource_delete", "provider_models", "resource_test",
    "resource_category_list", "resource_category_create", "resource_category_delete", "principal_list",
    "principal_create", "binding_list", "agent_bind", "agent_set_enabled", "agent_unbind",
    "harness_session_list", "harness_session_end",
]


def call(caller, tool, args, code=0):
    result = fw("tool", "call", *caller, tool, "--args", json.dumps(args))
    assert result.exit_code == code, result
    return result.json


def start(*args):
    return fwj("run", "start", *args)


@pytest.fixture
def mounted(home):
    make_basics(with_key=True)
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    return home


def test_the_manager_has_every_tool_with_schemas(home):
    tools = fwj("tool", "list", "--manager")["tools"]
    task_tools = ["task_delegate", "task_wait", "task_report", "task_list", "task_cancel"]
    assert [t["name"] for t in tools] == ALL_RM_TOOLS + task_tools  # never exec (CONTRACT section 4)
    for t in tools:
        assert t["risk"] in ("read", "write", "dangerous") and t["description"]
        assert t["input_schema"]["additionalProperties"] is False
        on_disk = json.loads((REPO / "schemas/tools" / f"{t['name']}.json").read_text())
        assert on_disk["properties"] == t["input_schema"]["properties"]


def test_a_forged_call_without_the_mount_is_denied_changes_nothing_and_is_audited(home):
    make_basics(with_key=True)
    run = start("--agent", "a1")
    assert run["tools"] == [] and run["identity"] == "runtime:a1" and run["mode"] == "explicit"
    before = snapshot(home)
    audit_before = (home / "audit.jsonl").read_text() if (home / "audit.jsonl").exists() else ""
    doc = call(["--run", run["run_id"]], "framework_resource_write",
               {"kind": "agent", "reference": "evil", "create": True, "data": {"model": "m1"}}, code=5)
    assert doc["error"]["code"] == "denied"
    after = snapshot(home)
    after.pop("audit.jsonl", None)
    before.pop("audit.jsonl", None)
    assert after == before
    lines = (home / "audit.jsonl").read_text()[len(audit_before):].splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["tool"] == "framework_resource_write" and entry["outcome"] == "refused" and entry["error"] == "denied"
    assert entry["run_id"] == run["run_id"] and entry["caller"] == "runtime:a1"
    # the bare name is no way around it either
    assert call(["--run", run["run_id"]], "resource_write", {"kind": "agent", "reference": "evil", "create": True, "data": {}}, code=5)["error"]["code"] == "denied"


def test_with_the_mount_every_kind_is_created_read_updated_and_deleted_from_a_run(mounted):
    run = start("--agent", "a1")
    assert sorted(run["tools"]) == sorted("framework_" + n for n in ALL_RM_TOOLS)
    r = ["--run", run["run_id"]]
    definitions = {
        "provider": {"base_url": "https://q.test", "api_key": "sk-run-created-123456"},
        "model": {"provider": "p1", "model_id": "x"},
        "prompt": {"body": "hello"},
        "skill": {"description": "d", "body": "b"},
        "mcp": {"transport": "http", "url": "https://mcp.test"},
        "harness": {"type": "local"},
        "agent": {"model": "m1"},
    }
    for kind, data in definitions.items():
        created = call(r, "framework_resource_write", {"kind": kind, "reference": "t1", "create": True, "data": data})
        assert created["name"] == "t1"
        assert call(r, "framework_resource_read", {"kind": kind, "reference": "t1"})["name"] == "t1"
        updated = call(r, "framework_resource_write", {"kind": kind, "reference": "t1", "create": False, "data": {"description": "via run"}})
        assert updated["data"]["description"] == "via run"
        assert "t1" in [i["name"] for i in call(r, "framework_resource_list", {"kind": kind})["items"]]
    for kind in ["agent", "model", "provider", "prompt", "skill", "mcp", "harness"]:
        plan = call(r, "framework_resource_delete", {"kind": kind, "reference": "t1"})
        assert plan["plan"] == [f"{kind}/t1"] and plan["blocked"] == []
        done = call(r, "framework_resource_delete", {"kind": kind, "reference": "t1", "confirm": plan["plan"]})
        assert done == {"status": "deleted", "deleted": [f"{kind}/t1"]}
    assert fwj("home", "check")["ok"] is True


def test_a_model_without_tool_calling_gets_no_framework_tools(mounted):
    fwj("resource", "write", "model", "m1", "--data", '{"capabilities": {"tool_call": false}}')
    run = start("--agent", "a1")
    assert run["tools"] == []
    assert fwj("tool", "list", "--run", run["run_id"])["tools"] == []
    assert call(["--run", run["run_id"]], "framework_resource_list", {"kind": "agent"}, code=5)["error"]["code"] == "denied"


def test_an_edit_during_a_run_changes_only_the_next_run(mounted):
    first = start("--agent", "a1")
    fwj("agent", "edit", "a1", "--remove-builtin-tool", "resource_management")
    second = start("--agent", "a1")
    assert first["fingerprint"] != second["fingerprint"]
    assert second["tools"] == []
    assert "framework_resource_list" in first["tools"]
    assert call(["--run", first["run_id"]], "framework_resource_list", {"kind": "agent"})["kind"] == "agent"
    assert call(["--run", second["run_id"]], "framework_resource_list", {"kind": "agent"}, code=5)["error"]["code"] == "denied"
    assert fwj("run", "show", first["run_id"])["definition"]["builtin_tools"] == ["resource_management"]
    # and a run may change its own agent's later configuration, not its own snapshot
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    third = start("--agent", "a1")
    call(["--run", third["run_id"]], "framework_resource_write", {"kind": "agent", "reference": "a1", "create": False, "data": {"builtin_tools": []}})
    assert "framework_resource_write" in fwj("run", "show", third["run_id"])["tools"]
    assert call(["--run", third["run_id"]], "framework_binding_list", {})["bindings"] == []


def test_inside_a_run_only_agent_identities_can_be_created(mounted):
    run = start("--agent", "a1")
    r = ["--run", run["run_id"]]
    for kind in ("user", "manager"):
        before = snapshot(mounted)
        assert call(r, "framework_principal_create", {"name": "x" + kind, "kind": kind}, code=5)["error"]["code"] == "denied"
        before.pop("audit.jsonl", None)
        after = snapshot(mounted)
        after.pop("audit.jsonl", None)
        assert after == before
    assert call(r, "framework_principal_create", {"name": "bot", "kind": "agent"})["principal"] == {"name": "bot", "kind": "agent"}
    bound = call(r, "framework_agent_bind", {"principal": "bot", "agent": "a1"})
    assert bound["enabled"] is True and bound["next_step"]
    disabled = call(r, "framework_agent_set_enabled", {"principal": "bot", "enabled": False})
    noted = disabled["binding"].pop("enabled_at")
    assert noted >= bound["binding"].pop("enabled_at")
    assert bound["binding"]["enabled_by"] == "runtime:a1 (run)"  # the run's identity bound it
    assert disabled == {"binding": {**bound["binding"], "enabled": False}, "enabled": False, "turns": {"released": 0, "cancelled": 0, "held": 0}}
    assert call(r, "framework_binding_list", {})["bindings"][0]["enabled"] is False
    assert call(r, "framework_principal_list", {})["principals"] == [{"name": "bot", "kind": "agent"}]
    # the Manager may create any kind
    assert call(["--manager"], "principal_create", {"name": "alice", "kind": "user"})["principal"]["kind"] == "user"


def test_a_managed_run_needs_an_enabled_binding_and_runs_as_the_principal(mounted):
    assert fwj("run", "start", "--principal", "bot", code=3)["error"]["code"] == "not_found"
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    run = start("--principal", "bot")
    assert run["mode"] == "managed" and run["identity"] == "bot" and run["agent"] == "a1"
    fwj("binding", "disable", "bot")
    assert fwj("run", "start", "--principal", "bot", code=5)["error"]["code"] == "denied"


def test_ended_and_expired_runs_refuse_calls(mounted):
    run = start("--agent", "a1")
    r = ["--run", run["run_id"]]
    assert call(r, "framework_resource_list", {"kind": "agent"})["kind"] == "agent"
    assert fwj("run", "end", run["run_id"])["status"] == "ended"
    assert call(r, "framework_resource_list", {"kind": "agent"}, code=5)["error"]["code"] == "run_ended"
    short = start("--agent", "a1", "--lease", "1")
    time.sleep(1.2)
    assert fwj("run", "show", short["run_id"])["status"] == "expired"
    before = snapshot(mounted)
    doc = call(["--run", short["run_id"]], "framework_resource_write", {"kind": "harness", "reference": "h9", "create": True, "data": {"type": "x"}}, code=5)
    assert doc["error"]["code"] == "lease_expired"
    before.pop("audit.jsonl", None)
    after = snapshot(mounted)
    after.pop("audit.jsonl", None)
    assert after == before
    statuses = {r["run_id"]: r["status"] for r in fwj("run", "list")["runs"]}
    assert statuses[run["run_id"]] == "ended" and statuses[short["run_id"]] == "expired"


def test_ending_a_run_again_changes_nothing(mounted, monkeypatch):
    import framework_cli.domain.run_records as records

    run = start("--agent", "a1")
    first = fwj("run", "end", run["run_id"])
    assert first["status"] == "ended" and first["ended_at"]
    path = mounted / "runs" / f"{run['run_id']}.json"
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino)
    # an hour later, the same run is ended again
    later = records.utc_now() + records.timedelta(hours=1)
    monkeypatch.setattr(records, "utc_now", lambda: later)
    second = fwj("run", "end", run["run_id"])
    assert second == first
    assert fwj("run", "show", run["run_id"])["ended_at"] == first["ended_at"]
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino) == before


@pytest.mark.parametrize("lease", ["0", "-5"])
def test_a_lease_under_one_second_is_refused(mounted, lease):
    before = snapshot(mounted)
    doc = fwj("run", "start", "--agent", "a1", "--lease", lease, code=4)
    assert doc["error"]["code"] == "invalid" and "lease" in doc["error"]["message"]
    assert snapshot(mounted) == before
    assert fwj("run", "list")["runs"] == []


def test_a_lease_of_one_second_is_the_shortest(mounted):
    run = start("--agent", "a1", "--lease", "1")
    assert run["lease_seconds"] == 1 and run["status"] == "active"


@pytest.mark.parametrize("run_id,code", [("run-20260101T000000-00000000", "not_found"), ("../../etc/passwd", "invalid")])
def test_a_call_for_an_unknown_run_is_never_audited_as_the_manager(mounted, run_id, code):
    doc = call(["--run", run_id], "framework_resource_list", {"kind": "agent"}, code={"not_found": 3, "invalid": 4}[code])
    assert doc["error"]["code"] == code
    entry = json.loads((mounted / "audit.jsonl").read_text().splitlines()[-1])
    assert entry["caller"] != "manager"
    recorded = run_id if run_id.startswith("run-") else "(malformed)"  # a malformed id is never stored raw
    assert (entry["run_id"], entry["tool"], entry["outcome"], entry["error"]) == (recorded, "framework_resource_list", "error", code)


def test_unknown_runs_and_bad_parameters_are_refused(mounted):
    assert call(["--run", "run-20260101T000000-00000000"], "framework_resource_list", {"kind": "agent"}, code=3)["error"]["code"] == "not_found"
    assert call(["--run", "../../etc/passwd"], "framework_resource_list", {"kind": "agent"}, code=4)["error"]["code"] == "invalid"
    run = start("--agent", "a1")
    r = ["--run", run["run_id"]]
    before = snapshot(mounted)
    for args in ({"kind": "gizmo"}, {"kind": "agent", "extra": 1}, {}, {"kind": "agent", "reference": "../x"}, [1]):
        tool = "framework_resource_read" if isinstance(args, dict) and "reference" in args else "framework_resource_list"
        assert call(r, tool, args, code=4)["error"]["code"] == "invalid"
    assert call(r, "framework_resource_write", {"kind": "agent", "reference": "a1", "data": {}}, code=4)["error"]["code"] == "invalid"
    assert call(["--manager"], "no_such_tool", {}, code=3)["error"]["code"] == "not_found"
    assert call(["--manager"], "framework_resource_list", {"kind": "agent"}, code=3)["error"]["code"] == "not_found"
    result = fw("tool", "call", "--manager", "resource_list", "--args", "{bad")
    assert result.exit_code == 4 and result.json["error"]["code"] == "invalid"
    result = fw("tool", "call", "resource_list", "--args", "{}")
    assert result.exit_code == 2 and result.json["error"]["code"] == "usage"
    before.pop("audit.jsonl", None)
    after = snapshot(mounted)
    after.pop("audit.jsonl", None)
    assert after == before


def test_tool_call_resource_delete_gives_the_same_plan_as_the_command(mounted):
    fwj("agent", "create", "a2", "--model", "m1")
    cli = fwj("resource", "delete", "provider", "p1", "--recursive")
    tool = call(["--manager"], "resource_delete", {"kind": "provider", "reference": "p1", "recursive": True})
    assert tool == cli
    assert tool["plan"] == ["agent/a1", "agent/a2", "model/m1", "provider/p1"]
    stale = call(["--manager"], "resource_delete", {"kind": "provider", "reference": "p1", "recursive": True, "confirm": "provider/p1"}, code=6)
    assert stale["error"]["code"] == "stale_confirmation"
    done = call(["--manager"], "resource_delete", {"kind": "provider", "reference": "p1", "recursive": True, "confirm": tool["plan"]})
    assert done["deleted"] == tool["plan"]


def test_operator_commands_and_tools_answer_alike(mounted):
    for args, tool, params in [
        (["resource", "list", "agent"], "resource_list", {"kind": "agent"}),
        (["resource", "read", "provider", "p1"], "resource_read", {"kind": "provider", "reference": "p1"}),
        (["category", "list", "model"], "resource_category_list", {"kind": "model"}),
        (["principal", "list"], "principal_list", {}),
        (["binding", "list"], "binding_list", {}),
        (["resource", "test", "provider", "p1"], "resource_test", {"kind": "provider", "reference": "p1"}),
    ]:
        assert fwj(*args) == call(["--manager"], tool, params)


def test_the_audit_log_holds_shapes_only(mounted):
    body = "SECRET PROMPT BODY that must not be logged"
    call(["--manager"], "resource_write", {"kind": "prompt", "reference": "pp", "create": True, "data": {"body": body}})
    call(["--manager"], "resource_write", {"kind": "provider", "reference": "p2", "create": True, "data": {"base_url": "https://z.test", "api_key": CANARY}})
    call(["--manager"], "resource_write", {"kind": "provider", "reference": "p3", "create": True, "data": {"base_url": "https://z.test", "api_key": CANARY, "api_key_env": "X"}}, code=4)
    text = (mounted / "audit.jsonl").read_text()
    assert CANARY not in text and body not in text and "https://z.test" not in text
    entries = fwj("audit", "list", "--limit", "3")["entries"]
    assert [e["outcome"] for e in entries] == ["ok", "ok", "error"]
    assert entries[0]["params"] == {"kind": "string", "reference": "string", "create": "boolean", "data": {"body": "string"}}
    assert entries[2]["error"] == "invalid" and entries[0]["caller"] == "manager"
    human = fw("audit", "list")
    assert human.exit_code == 0 and CANARY not in human.output and "resource_write" in human.stdout


def test_tool_call_always_prints_json_with_the_installed_fw(mounted):
    result = fw_proc("tool", "call", "--manager", "resource_read", "--args", '{"kind": "agent", "reference": "ghost"}', home=mounted)
    assert result.exit_code == 3
    assert json.loads(result.stdout)["error"]["code"] == "not_found"
    result = fw_proc("tool", "call", "--manager", "resource_list", "--args", "-", input='{"kind": "model"}', home=mounted)
    assert result.exit_code == 0 and json.loads(result.stdout)["items"][0]["name"] == "m1"
