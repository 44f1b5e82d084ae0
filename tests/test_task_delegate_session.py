"""`task_delegate` with a session the calling run is not a member of is `denied`, alike whether
the session exists or not, and creates no task (CONTRACT section 8)."""

import json

import pytest
from conftest import CANARY, fw, fwj, snapshot

pytestmark = pytest.mark.engines


def setup():
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m", "capabilities": {"tool_call": True}}))
    for name in ("boss", "child"):
        fwj("agent", "create", name, "--model", "m1", "--builtin-tool", "task_collaboration")
        fwj("principal", "create", name, "--kind", "agent")
        fwj("binding", "set", name, "--agent", name)
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "theirs", "--member", "alice", "--member", "child")
    fwj("session", "create", "ours", "--member", "alice", "--member", "boss")
    return fwj("run", "start", "--principal", "boss")["run_id"]


def delegate(run_id, session):
    args = {"principal": "child", "instructions": "do it", "session": session}
    return fw("tool", "call", "--run", run_id, "framework_task_delegate", "--args", json.dumps(args))


def test_a_session_the_caller_is_not_in_is_denied_whether_or_not_it_exists(home):
    run_id = setup()
    before = snapshot(home)
    refused = [delegate(run_id, name) for name in ("theirs", "nosuch")]
    for r in refused:
        assert r.exit_code == 5 and r.json["error"]["code"] == "denied", r
    strip = lambda e: {k: v.replace("theirs", "S").replace("nosuch", "S") for k, v in e.items()}  # noqa: E731
    assert strip(refused[0].json["error"]) == strip(refused[1].json["error"])  # the same answer: existence is not revealed
    after = snapshot(home)
    assert {k: v for k, v in after.items() if k != "audit.jsonl"} == {k: v for k, v in before.items() if k != "audit.jsonl"}
    assert fwj("task", "list")["tasks"] == []


def test_a_member_delegates_in_its_session_and_the_manager_in_any(home):
    run_id = setup()
    mine = delegate(run_id, "ours")
    assert mine.exit_code == 0 and mine.json["task"]["status"] == "pending", mine
    managed = fw("tool", "call", "--manager", "task_delegate", "--args", json.dumps({"principal": "child", "instructions": "x", "session": "theirs"}))
    assert managed.exit_code == 0, managed
    explicit = fwj("run", "start", "--agent", "boss")["run_id"]
    assert delegate(explicit, "ours").json["error"]["code"] == "denied"  # runtime:boss is nobody's member
    assert [t["session"] for t in fwj("task", "list")["tasks"]] == ["ours", "theirs"]
