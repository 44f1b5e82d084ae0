"""Task collaboration through real runs (two scripted chat servers), and exec."""

import json
import os
import time
import uuid

import pytest

pytestmark = pytest.mark.engines

from conftest import CANARY, audit_entries, fw, fwj, processes_with, snapshot
from fakes.chat_server import ChatServer


def provider_and_model(name, base_url):
    fwj("resource", "write", "provider", f"p-{name}", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", f"m-{name}", "--create", "--data",
        json.dumps({"provider": f"p-{name}", "model_id": f"model-{name}", "capabilities": {"tool_call": True}}))


def bound_agent(name, model, *groups, directory=None, execution=False):
    fwj("agent", "create", name, "--model", model, *sum((["--builtin-tool", g] for g in groups), []),
        *(["--execution"] if execution else []))
    fwj("principal", "create", name, "--kind", "agent")
    fwj("binding", "set", name, "--agent", name, *(["--directory", str(directory)] if directory else []))


def tool_answers(request):
    return [json.loads(m["content"]) for m in request["json"]["messages"] if m["role"] == "tool"]


def call(run_id, tool, args, code=None):
    r = fw("tool", "call", "--run", run_id, tool, "--args", json.dumps(args))
    if code is not None:
        assert r.exit_code == code, r
    return r.json


@pytest.mark.parametrize("workers", ["1", "4"])
def test_a_parent_delegates_waits_and_gets_the_childs_result_in_one_dispatch(home, workers):
    parent_script = [
        {"tool_calls": [{"name": "framework_task_delegate", "arguments": {"principal": "child", "instructions": "count to three"}}]},
        {"tool_calls": [{"name": "framework_task_report", "arguments": {"task_id": 1, "status": "done", "result": "forged"}},
                        {"name": "framework_task_wait", "arguments": {"task_id": 1, "timeout_seconds": 60}}]},
        {"content": "the child said: one two three"},
    ]
    with ChatServer(parent_script) as parent_server, ChatServer([{"content": "one two three"}]) as child_server:
        provider_and_model("parent", parent_server.base_url)
        provider_and_model("child", child_server.base_url)
        bound_agent("boss", "m-parent", "resource_management", "task_collaboration")
        bound_agent("child", "m-child")
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("session", "create", "s1", "--member", "alice", "--member", "boss")
        fwj("message", "post", "s1", "--as", "alice", "@boss get the child to count")
        summary = fwj("dispatch", "--once", "--workers", workers)
    assert summary["turns"]["answered"] == 1 and summary["tasks"] == {"run": 1, "done": 1, "failed": 0, "cancelled": 0}
    delegated = tool_answers(parent_server.requests[1])[0]["task"]
    assert delegated == {"id": 1, "status": "pending", "principal": "child", "created_by": "boss"}
    forged, waited = tool_answers(parent_server.requests[2])[-2:]
    assert forged["error"]["code"] == "denied"
    assert waited["task"]["status"] == "done" and waited["task"]["result"] == "one two three"
    child_tools = sorted(t["function"]["name"] for t in child_server.requests[0]["json"]["tools"])
    assert child_tools and not any(n.startswith("framework_resource") or n.startswith("framework_task") for n in child_tools)
    task = fwj("task", "show", "1")["task"]
    child_run = fwj("run", "show", task["run_id"])
    assert (child_run["identity"], child_run["mode"], child_run["task"]) == ("child", "managed", 1)
    assert child_run["definition"]["builtin_tools"] == []
    assert fwj("message", "list", "s1")["messages"][-1]["text"] == "the child said: one two three"


def test_only_the_creator_cancels_and_only_the_tasks_run_reports(home):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    for name in ("boss", "rival", "child"):
        bound_agent(name, "m-x", "task_collaboration")
    boss = fwj("run", "start", "--principal", "boss")["run_id"]
    rival = fwj("run", "start", "--principal", "rival")["run_id"]
    task = call(boss, "framework_task_delegate", {"principal": "child", "instructions": "work"}, code=0)["task"]
    before = snapshot(home)
    assert call(rival, "framework_task_cancel", {"task_id": task["id"]}, code=5)["error"]["code"] == "denied"
    assert call(rival, "framework_task_report", {"task_id": task["id"], "status": "done", "result": "x"}, code=5)["error"]["code"] == "denied"
    assert call(rival, "framework_task_wait", {"task_id": task["id"], "timeout_seconds": 0}, code=5)["error"]["code"] == "denied"
    after = snapshot(home)
    before.pop("audit.jsonl", None), after.pop("audit.jsonl", None)
    assert after == before
    assert [t["id"] for t in call(rival, "framework_task_list", {}, code=0)["tasks"]] == []
    assert [t["id"] for t in call(boss, "framework_task_list", {"role": "created"}, code=0)["tasks"]] == [task["id"]]
    cancelled = call(boss, "framework_task_cancel", {"task_id": task["id"]}, code=0)
    assert cancelled["task"]["status"] == "cancelled"
    waited = call(boss, "framework_task_wait", {"task_id": task["id"], "timeout_seconds": 0}, code=0)
    assert waited["task"]["status"] == "cancelled"


def test_a_task_for_a_disabled_binding_waits_in_the_backlog_until_enabled(home):
    with ChatServer([{"content": "done at last"}]) as server:
        provider_and_model("x", server.base_url)
        bound_agent("child", "m-x")
        fwj("binding", "disable", "child")
        made = json.loads(fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "child", "instructions": "later"}').stdout)
        assert made["task"]["status"] == "backlog"
        assert fwj("dispatch", "--once")["tasks"]["run"] == 0
        assert fwj("task", "show", "1")["task"]["status"] == "backlog"
        assert fwj("binding", "enable", "child")["turns"]["released"] == 1
        assert fwj("dispatch", "--once")["tasks"]["done"] == 1
    task = fwj("task", "show", "1")["task"]
    assert (task["status"], task["result"]) == ("done", "done at last")
    listed = fwj("task", "list")["tasks"]
    assert [t["id"] for t in listed] == [1]


def test_a_task_whose_model_fails_is_failed_with_a_safe_error(home):
    with ChatServer([{"status": 401, "body": f"bad key {CANARY}"}]) as server:
        provider_and_model("x", server.base_url)
        bound_agent("child", "m-x")
        fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "child", "instructions": "x"}')
        assert fwj("dispatch", "--once")["tasks"]["failed"] == 1
    task = fwj("task", "show", "1")["task"]
    assert task["status"] == "failed" and "401" in task["error"] and CANARY not in task["error"]


def test_an_operator_cancels_a_pending_task(home):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    bound_agent("child", "m-x")
    fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "child", "instructions": "x"}')
    assert fwj("task", "cancel", "1")["task"]["status"] == "cancelled"
    assert fwj("dispatch", "--once")["tasks"]["run"] == 0
    assert fw("task", "show", "99", "--json").exit_code == 3


# -- exec ---------------------------------------------------------------------------------------
@pytest.fixture
def exec_run(home, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    provider_and_model("x", "http://127.0.0.1:9/v1")
    bound_agent("worker", "m-x", "local_execution", directory=work, execution=True)
    run = fwj("run", "start", "--principal", "worker")
    assert "framework_exec" in run["tools"]
    return run["run_id"], work


def test_exec_runs_a_program_in_the_bindings_folder(exec_run):
    run_id, work = exec_run
    doc = call(run_id, "framework_exec", {"argv": ["python3", "-c", "import os, sys; print(os.getcwd()); sys.exit(3)"]}, code=0)
    assert doc == {"exit_code": 3, "stdout": f"{work}\n", "stderr": "", "timed_out": False, "truncated": False}
    fed = call(run_id, "framework_exec", {"argv": ["cat"], "stdin": "fed in"}, code=0)
    assert fed["stdout"] == "fed in"


def test_exec_gives_the_program_a_minimal_environment(exec_run, monkeypatch):
    run_id, _ = exec_run
    monkeypatch.setenv("PARENT_ONLY_SECRET", "do-not-pass-me")
    doc = call(run_id, "framework_exec", {"argv": ["env"]}, code=0)
    names = {line.split("=", 1)[0] for line in doc["stdout"].splitlines()}
    # in the sandbox, bubblewrap also sets PWD (the workspace) when it enters it
    assert "PARENT_ONLY_SECRET" not in names and names <= {"PATH", "HOME", "LANG", "TERM", "PWD"}


def test_exec_kills_the_whole_group_at_the_timeout(exec_run):
    run_id, _ = exec_run
    mark = f"fw-test-marker-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    sleeper = f"python3 -c 'import time; time.sleep(30)' {mark}"
    doc = call(run_id, "framework_exec", {"argv": ["sh", "-c", f"{sleeper} & echo started; {sleeper}"], "timeout_seconds": 1}, code=0)
    assert time.monotonic() - started < 10
    assert doc["timed_out"] is True and doc["stdout"] == "started\n"
    assert processes_with(mark) == []


def test_exec_cuts_each_stream_at_64_kib(exec_run):
    run_id, _ = exec_run
    doc = call(run_id, "framework_exec", {"argv": ["python3", "-c", "import sys; sys.stdout.write('x' * 1048576); sys.stderr.write('e')"]}, code=0)
    assert len(doc["stdout"]) == 65536 and doc["truncated"] is True and doc["stderr"] == "e"


def test_exec_redacts_a_stored_key_the_program_prints(exec_run, home):
    run_id, _ = exec_run
    doc = call(run_id, "framework_exec", {"argv": ["printf", "key=%s", CANARY]}, code=0)
    assert doc["stdout"] == "key=[redacted]"
    line = audit_entries(home)[-1]
    assert line["params"] == {"argv": "array[3]"} and "printf" not in json.dumps(line)


def test_exec_errors_never_echo_the_command(exec_run):
    run_id, _ = exec_run
    r = fw("tool", "call", "--run", run_id, "framework_exec", "--args", json.dumps({"argv": ["no-such-program-xyz", "secret-arg"]}))
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found"
    assert "no-such-program-xyz" not in r.stdout and "secret-arg" not in r.stdout


def test_exec_without_execution_enabled_is_not_granted_and_runs_nothing(home, tmp_path):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    bound_agent("worker", "m-x", "local_execution", directory=tmp_path)
    run = fwj("run", "start", "--principal", "worker")
    assert "framework_exec" not in run["tools"]
    assert {"name": "framework_exec", "reason": "execution_disabled"}.items() <= run["unavailable_tools"][0].items()
    doc = call(run["run_id"], "framework_exec", {"argv": ["touch", str(tmp_path / "marker")]}, code=5)
    assert doc["error"]["code"] == "denied"
    assert not (tmp_path / "marker").exists()


def test_exec_from_an_ended_or_expired_run_starts_nothing(exec_run, tmp_path):
    run_id, _ = exec_run
    fwj("run", "end", run_id)
    doc = call(run_id, "framework_exec", {"argv": ["touch", str(tmp_path / "ended")]}, code=5)
    assert doc["error"]["code"] == "run_ended" and not (tmp_path / "ended").exists()
    short = fwj("run", "start", "--principal", "worker", "--lease", "1")["run_id"]
    time.sleep(1.1)
    doc = call(short, "framework_exec", {"argv": ["touch", str(tmp_path / "expired")]}, code=5)
    assert doc["error"]["code"] == "lease_expired" and not (tmp_path / "expired").exists()


def test_exec_through_the_model_loop(home, tmp_path):
    script = [{"tool_calls": [{"name": "framework_exec", "arguments": {"argv": ["echo", "hello from exec"]}}]}, {"content": "ran it"}]
    with ChatServer(script) as server:
        provider_and_model("x", server.base_url)
        bound_agent("worker", "m-x", "local_execution", directory=tmp_path, execution=True)
        r = fw("agent", "run", "worker", "--principal", "worker", "--message", "run echo", "--json")
    assert r.exit_code == 0 and r.json["tool_calls"] == [{"name": "framework_exec", "outcome": "ok"}], r
    assert tool_answers(server.requests[1])[0]["stdout"] == "hello from exec\n"


def test_a_task_of_a_session_that_ends_is_cancelled_before_it_runs(home):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    bound_agent("child", "m-x")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    made = json.loads(fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "child", "instructions": "x", "session": "s1"}').stdout)
    assert made["task"]["status"] == "pending"
    fwj("session", "end", "s1")
    assert fwj("task", "show", "1")["task"]["status"] == "cancelled"
    late = json.loads(fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "child", "instructions": "x", "session": "s1"}').stdout)
    assert late["error"]["code"] == "session_ended"


def test_a_chain_of_delegations_stops_at_the_hop_limit(home):
    step = {"tool_calls": [{"name": "framework_task_delegate", "arguments": {"principal": "loop", "instructions": "again"}}]}
    with ChatServer([step], repeat_last=True) as server:
        provider_and_model("x", server.base_url)
        bound_agent("loop", "m-x", "task_collaboration")
        fwj("binding", "set", "loop", "--agent", "loop", "--max-rounds", "1")
        fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "loop", "instructions": "start"}')
        fwj("dispatch", "--once", "--timeout", "30")
    listed = fwj("task", "list")["tasks"]
    assert [t["hop"] for t in listed] == list(range(8))
    assert len(server.requests) == 8


def test_cancelling_a_running_task_stops_its_run(home, tmp_path):
    import subprocess

    child_script = [{"sleep": 3, "tool_calls": [{"name": "framework_memory_write", "arguments": {"key": "k", "value": "late"}}]},
                    {"content": "done"}]
    with ChatServer(child_script) as server:
        provider_and_model("x", server.base_url)
        bound_agent("child", "m-x")
        fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "child", "instructions": "work"}')
        from conftest import fw_bin

        proc = subprocess.Popen([fw_bin(), "dispatch", "--once"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while not server.requests and time.time() < deadline:
            time.sleep(0.05)
        assert fwj("task", "cancel", "1")["task"]["status"] == "cancelled"
        proc.communicate(timeout=60)
    assert len(server.requests) == 1  # the model's tool call was refused, and the model not asked again
    last = fwj("audit", "list")["entries"][-1]
    assert (last["outcome"], last["error"]) == ("refused", "run_ended")
    assert fwj("memory", "list", "child")["keys"] == []
    assert fwj("task", "show", "1")["task"]["status"] == "cancelled"


def test_exec_leaves_no_background_child_behind(exec_run):
    run_id, _ = exec_run
    mark = f"fw-test-marker-{uuid.uuid4().hex[:12]}"
    script = f"(python3 -c 'import time; time.sleep(300)' {mark} >/dev/null 2>&1 & echo started)"
    doc = call(run_id, "framework_exec", {"argv": ["sh", "-c", script]}, code=0)
    assert doc["stdout"] == "started\n"
    assert processes_with(mark) == []


def test_exec_refuses_a_nul_in_argv(exec_run):
    run_id, _ = exec_run
    assert call(run_id, "framework_exec", {"argv": ["ls\u0000x"]}, code=4)["error"]["code"] == "invalid"
