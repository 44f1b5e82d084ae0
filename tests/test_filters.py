"""Issue 21, item 19: filters (`run list --status --agent`, `audit list --run --tool --since`,
`task list --status --principal`), `session delete` confirmed as deletes are, `task create`
(the operator's task_delegate), and `turn list` / `turn retry` for failed or cancelled turns."""

from __future__ import annotations

import json

from conftest import CANARY, fw, fwj, make_basics, snapshot
from fakes.chat_server import ChatServer


def setup(base_url, *agents):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("principal", "create", "alice", "--kind", "user")
    for name in agents:
        fwj("agent", "create", name, "--model", "m1")
        fwj("principal", "create", name, "--kind", "agent")
        fwj("binding", "set", name, "--agent", name)


def test_run_list_filters_by_status_and_agent(home):
    make_basics()
    fwj("agent", "create", "a2", "--model", "m1")
    first = fwj("run", "start", "--agent", "a1")["run_id"]
    second = fwj("run", "start", "--agent", "a2")["run_id"]
    fwj("run", "end", first)
    assert [r["run_id"] for r in fwj("run", "list", "--status", "active")["runs"]] == [second]
    assert [r["run_id"] for r in fwj("run", "list", "--status", "ended", "--agent", "a1")["runs"]] == [first]
    assert fwj("run", "list", "--agent", "a2", "--status", "ended")["runs"] == []
    error = fwj("run", "list", "--status", "activ", code=4)["error"]
    assert error["did_you_mean"] == "active"


def test_audit_list_filters_by_run_tool_and_time(home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    run = fwj("run", "start", "--agent", "a1")["run_id"]
    fw("tool", "call", "--run", run, "framework_resource_list", "--args", '{"kind": "agent"}')
    fw("tool", "call", "--run", run, "framework_principal_list", "--args", "{}")
    fw("tool", "call", "--manager", "resource_list", "--args", '{"kind": "model"}')
    assert len(fwj("audit", "list")["entries"]) == 3
    assert [e["tool"] for e in fwj("audit", "list", "--run", run)["entries"]] == ["framework_resource_list", "framework_principal_list"]
    assert [e["tool"] for e in fwj("audit", "list", "--run", run[-8:])["entries"]] == ["framework_resource_list", "framework_principal_list"]
    assert [e["caller"] for e in fwj("audit", "list", "--tool", "resource_list")["entries"]] == ["manager"]
    typo = fwj("audit", "list", "--tool", "framework_principal_lst")
    assert typo["entries"] == [] and typo["did_you_mean"] == "framework_principal_list"
    assert "did you mean framework_principal_list?" in fw("audit", "list", "--tool", "framework_principal_lst").stdout
    assert len(fwj("audit", "list", "--since", "1h")["entries"]) == 3
    lines = (home / "audit.jsonl").read_text().splitlines()
    old = json.loads(lines[0])
    old["time"] = "2020-01-01T00:00:00.000Z"
    (home / "audit.jsonl").write_text("\n".join([json.dumps(old), *lines[1:]]) + "\n")
    assert len(fwj("audit", "list", "--since", "2h")["entries"]) == 2
    assert fwj("audit", "list", "--since", "soon", code=4)["error"]["code"] == "invalid"


def test_task_create_is_the_operators_task_delegate_and_task_list_filters(home):
    setup("http://127.0.0.1:9/v1", "worker", "helper")
    one = fwj("task", "create", "worker", "--instructions", "sum the numbers")["task"]
    assert one["status"] == "pending" and one["principal"] == "worker" and one["created_by"] == "operator"
    fwj("binding", "disable", "helper")
    two = fwj("task", "create", "helper", "--instructions", "-", input="tidy up")["task"]
    assert two["status"] == "backlog"
    assert [t["id"] for t in fwj("task", "list", "--principal", "helper")["tasks"]] == [two["id"]]
    assert [t["id"] for t in fwj("task", "list", "--status", "pending")["tasks"]] == [one["id"]]
    assert fwj("task", "list", "--status", "backlog", "--principal", "worker")["tasks"] == []
    assert fwj("task", "show", str(two["id"]))["task"]["instructions"] == "tidy up"
    before = snapshot(home)
    assert fwj("task", "create", "alice", "--instructions", "x", code=3)["error"]["code"] == "not_found"
    assert snapshot(home) == before


def test_session_delete_plans_first_then_deletes_exactly_the_plan(home):
    setup("http://127.0.0.1:9/v1", "ops")
    fwj("session", "create", "s1", "--member", "alice,ops")
    fwj("message", "post", "s1", "--as", "alice", "hello @ops")
    plan = fwj("session", "delete", "s1")
    assert plan["status"] == "plan" and plan["plan"] == ["session/s1"] and plan["messages"] == 1 and plan["turns"] == 1
    assert fwj("session", "show", "s1")["session"]["messages"] == 1
    assert "--confirm session/s1" in fw("session", "delete", "s1").stdout
    stale = fwj("session", "delete", "s1", "--confirm", "session/s2", code=6)["error"]
    assert stale["code"] == "stale_confirmation" and stale["plan"] == ["session/s1"] and stale["reason"] == "not_a_plan"
    bare = fwj("session", "delete", "s1", "--confirm", "s1", code=6)["error"]
    assert bare["reason"] == "not_a_plan" and "items are kind/name, e.g. session/s1" in bare["message"], bare
    done = fwj("session", "delete", "s1", "--confirm", "session/s1")
    assert done["status"] == "deleted" and done["deleted"] == ["session/s1"]
    assert fwj("session", "list")["sessions"] == [] and fwj("turn", "list")["turns"] == []
    assert fwj("session", "show", "s1", code=3)["error"]["code"] == "not_found"


def test_a_failed_turn_is_listed_and_retried(home):
    with ChatServer([{"status": 400, "body": "bad request"}, {"content": "hello alice"}]) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        fwj("message", "post", "s1", "--as", "alice", "hello @ops")
        fwj("dispatch", "--once")
        failed = fwj("turn", "list", "--status", "failed")["turns"]
        assert len(failed) == 1 and failed[0]["session"] == "s1" and failed[0]["error"]
        assert "failed" in fw("turn", "list").stdout
        turn = fwj("turn", "retry", str(failed[0]["id"]))["turn"]
        assert turn["status"] == "pending" and turn["error"] is None
        assert fwj("turn", "retry", str(turn["id"]), code=4)["error"]["code"] == "invalid"  # pending: nothing to retry
        fwj("dispatch", "--once")
    assert fwj("turn", "list", "--session", "s1")["turns"][0]["status"] == "done"
    assert [m["text"] for m in fwj("message", "list", "s1")["messages"]] == ["hello @ops", "hello alice"]
    assert fwj("turn", "retry", "999", code=3)["error"]["code"] == "not_found"
    assert fwj("turn", "list", "--status", "faild", code=4)["error"]["did_you_mean"] == "failed"


def test_a_cancelled_turn_of_an_ended_session_is_not_retried(home):
    setup("http://127.0.0.1:9/v1", "ops")
    fwj("session", "create", "s1", "--member", "alice,ops")
    fwj("message", "post", "s1", "--as", "alice", "hello @ops")
    fwj("session", "end", "s1")
    turn = fwj("turn", "list", "--status", "cancelled")["turns"][0]
    assert fwj("turn", "retry", str(turn["id"]), code=5)["error"]["code"] == "session_ended"
