"""`fw agent run` end to end: a scripted chat-completions server on 127.0.0.1, a real stdio
MCP server, and the real fw between them; one projection of a run's tools at every door."""

import json
import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import CANARY, fw, fw_bin, fw_proc, fwj, snapshot
from fakes.chat_server import ChatServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters

FAKE_MCP = str(Path(__file__).parent / "fakes" / "mcp_server.py")


def setup_agent(base_url, *, tool_call=True, builtin=("resource_management",), **agent_fields):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": tool_call}}))
    data = {"model": "m1", "builtin_tools": list(builtin), **agent_fields}
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps(data))


def mcp_server(name, tmp_path, *flags, env=None):
    pid_file = tmp_path / f"{name}.pid"
    data = {"transport": "stdio", "command": sys.executable, "args": [FAKE_MCP, *flags],
            "env": {"FAKE_MCP_PID_FILE": str(pid_file), **(env or {})}}
    fwj("resource", "write", "mcp", name, "--create", "--data", json.dumps(data))
    return pid_file


def gone(pid_file):
    """The server process whose pid the file holds has exited (and was reaped)."""
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return status == "Z"  # a zombie is gone but for its parent's wait


def run_agent(*args, code=0, input=None):
    r = fw("agent", "run", "a1", *args, "--json", input=input)
    assert r.exit_code == code, r
    return r.json


def sent_tools(request):
    return sorted(t["function"]["name"] for t in request["json"].get("tools", []))


def audit_lines(home):
    path = home / "audit.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("stream", [False, True])
def test_two_rounds_a_real_tool_result_then_the_answer(home, stream):
    script = [
        {"tool_calls": [{"name": "framework_resource_list", "arguments": {"kind": "agent"}}], "stream": stream},
        {"content": "There is one agent: a1.", "stream": stream},
    ]
    with ChatServer(script) as server:
        setup_agent(server.base_url)
        doc = run_agent("--message", "@list the agents")
    assert doc["status"] == "completed" and doc["rounds"] == 2
    assert doc["answer"] == "There is one agent: a1."
    assert doc["tool_calls"] == [{"name": "framework_resource_list", "outcome": "ok"}]
    first, second = server.requests
    assert first["headers"]["authorization"] == f"Bearer {CANARY}"
    assert first["json"]["model"] == "model-x"
    assert first["json"]["messages"][-1] == {"role": "user", "content": "@list the agents"}  # literal text
    run = fwj("run", "show", doc["run_id"])
    assert sent_tools(first) == sorted(run["tools"])
    from framework_cli.tools.service import GROUP_TOOLS

    assert sent_tools(first) == sorted("framework_" + n for n in GROUP_TOOLS["resource_management"])  # no other group
    tool_message = second["json"]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert json.loads(tool_message["content"])["items"][0]["name"] == "a1"
    assert run["status"] == "ended"
    assert [l["tool"] for l in audit_lines(home)] == ["framework_resource_list"]


def test_a_forged_call_is_denied_nothing_is_written_and_the_loop_goes_on(home):
    script = [
        {"tool_calls": [{"name": "framework_resource_write", "arguments": {"kind": "harness", "reference": "h9", "create": True, "data": {"type": "x"}}}]},
        {"content": "I could not."},
    ]
    with ChatServer(script) as server:
        setup_agent(server.base_url, builtin=())
        before = snapshot(home)
        doc = run_agent("--message", "make a harness")
    assert sent_tools(server.requests[0]) == [] and "tools" not in server.requests[0]["json"]
    assert doc["status"] == "completed" and doc["answer"] == "I could not."
    assert doc["tool_calls"] == [{"name": "framework_resource_write", "outcome": "refused", "error": "denied"}]
    refusal = json.loads(server.requests[1]["json"]["messages"][-1]["content"])
    assert refusal["error"]["code"] == "denied"
    assert not (home / "harnesses/default/h9.yaml").exists()
    after = snapshot(home)
    changed = {k for k in after if after[k] != before.get(k)}
    # the audit, the run's record, and the conversation an explicit run keeps for --continue
    assert all(k == "audit.jsonl" or k.startswith(("runs", "state.db")) for k in changed), changed
    line = audit_lines(home)[-1]
    assert (line["caller"], line["tool"], line["outcome"], line["error"]) == ("runtime:a1", "framework_resource_write", "refused", "denied")


def test_max_rounds_stops_a_model_that_never_stops_calling_tools(home):
    with ChatServer([{"content": "still working", "tool_calls": [{"name": "framework_resource_list", "arguments": {"kind": "model"}}]}], repeat_last=True) as server:
        setup_agent(server.base_url)
        doc = run_agent("--message", "go", "--max-rounds", "3")
    assert (doc["status"], doc["rounds"], len(server.requests)) == ("max_rounds", 3, 3)
    assert fwj("run", "show", doc["run_id"])["status"] == "ended"


def test_the_binding_limits_rounds_of_a_managed_run(home):
    with ChatServer([{"tool_calls": [{"name": "framework_binding_list", "arguments": {}}]}], repeat_last=True) as server:
        setup_agent(server.base_url)
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1", "--max-rounds", "2")
        doc = run_agent("--principal", "ops", "--message", "go")
    assert (doc["status"], doc["rounds"]) == ("max_rounds", 2)
    run = fwj("run", "show", doc["run_id"])
    assert (run["mode"], run["identity"]) == ("managed", "ops")


@pytest.mark.parametrize("harness", [
    {"type": "local", "capabilities": {"tool_calling": False}, "permissions": {"tools": ["detail", "call"]}},
    {"type": "local", "capabilities": {"tool_calling": True}, "permissions": {"tools": ["detail"]}},
])
def test_the_harness_gate_leaves_the_run_without_tools(home, tmp_path, harness):
    fwj("resource", "write", "skill", "notes", "--create", "--data", json.dumps({"description": "d", "body": "text"}))
    with ChatServer([{"content": "no tools here"}]) as server:
        setup_agent(server.base_url, skills=["notes"])
        fwj("resource", "write", "harness", "h1", "--create", "--data", json.dumps(harness))
        fwj("agent", "edit", "a1", "--harness", "h1")
        doc = run_agent("--message", "hi")
    assert "tools" not in server.requests[0]["json"]
    run = fwj("run", "show", doc["run_id"])
    assert run["tools"] == []
    reasons = {u["name"]: u["reason"] for u in run["unavailable_tools"]}
    assert reasons["framework_resource_list"] == "runner_call_permission_missing"
    assert reasons["skill__notes"] == "runner_call_permission_missing"
    assert set(reasons.values()) == {"runner_call_permission_missing"}


def test_a_model_without_tool_calling_gets_no_tools_and_says_why(home):
    with ChatServer([{"content": "ok"}]) as server:
        setup_agent(server.base_url, tool_call=False)
        doc = run_agent("--message", "hi")
    run = fwj("run", "show", doc["run_id"])
    assert run["tools"] == [] and run["unavailable_tools"][0]["reason"] == "runner_call_permission_missing"


def test_an_mcp_tool_is_offered_called_and_answers_and_its_server_is_stopped(home, tmp_path):
    pid_file = mcp_server("fake", tmp_path)
    script = [
        {"tool_calls": [{"name": "mcp__fake__echo", "arguments": {"text": "ping"}}]},
        {"content": "it said ping"},
    ]
    with ChatServer(script) as server:
        setup_agent(server.base_url, builtin=(), mcps=["fake"])
        doc = run_agent("--message", "echo ping")
    offered = {t["function"]["name"]: t["function"] for t in server.requests[0]["json"]["tools"]}
    assert {"mcp__fake__echo", "mcp__fake__add"} <= set(offered)
    assert offered["mcp__fake__echo"]["parameters"]["required"] == ["text"]  # the server's own schema
    assert doc["tool_calls"] == [{"name": "mcp__fake__echo", "outcome": "ok"}]
    answer = json.loads(server.requests[1]["json"]["messages"][-1]["content"])
    assert "ping" in json.dumps(answer)
    assert gone(pid_file)


def test_allowed_tools_hides_mcp_and_skill_tools(home, tmp_path):
    mcp_server("fake", tmp_path)
    fwj("resource", "write", "skill", "notes", "--create", "--data", json.dumps({"description": "d", "body": "text"}))
    with ChatServer([{"content": "ok"}]) as server:
        setup_agent(server.base_url, builtin=("resource_management",), mcps=["fake"], skills=["notes"], allowed_tools=["mcp__fake__add"])
        doc = run_agent("--message", "hi")
    run = fwj("run", "show", doc["run_id"])
    assert "mcp__fake__add" in run["tools"] and "framework_resource_list" in run["tools"]
    assert "mcp__fake__echo" not in run["tools"] and "skill__notes" not in run["tools"]
    reasons = {u["name"]: u["reason"] for u in run["unavailable_tools"]}
    assert reasons["mcp__fake__echo"] == "not_allowed" and reasons["skill__notes"] == "not_allowed"
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    fwj("resource", "write", "agent", "a1", "--data", '{"allowed_tools": []}')
    empty = fwj("run", "start", "--agent", "a1")
    assert [n for n in empty["tools"] if not n.startswith("framework_")] == []


def test_a_server_that_cannot_start_is_source_unavailable_and_the_run_goes_on(home, tmp_path):
    crash_pid = mcp_server("broken", tmp_path, "--crash")
    fwj("resource", "write", "mcp", "missing", "--create", "--data", json.dumps({"transport": "stdio", "command": "no-such-command-fw"}))
    with ChatServer([{"content": "fine without it"}]) as server:
        setup_agent(server.base_url, builtin=(), mcps=["broken", "missing"])
        doc = run_agent("--message", "hi")
    assert doc["status"] == "completed" and doc["answer"] == "fine without it"
    run = fwj("run", "show", doc["run_id"])
    reasons = {u["name"]: u["reason"] for u in run["unavailable_tools"]}
    assert reasons == {"mcp__broken__*": "source_unavailable", "mcp__missing__*": "source_unavailable"}
    assert gone(crash_pid)


def test_a_skill_tool_answers_with_the_skill_text(home):
    fwj("resource", "write", "skill", "notes", "--create", "--data", json.dumps({"description": "How to write notes", "body": "Write short notes.\n"}))
    script = [{"tool_calls": [{"name": "skill__notes", "arguments": ""}]}, {"content": "done"}]
    with ChatServer(script) as server:
        setup_agent(server.base_url, builtin=(), skills=["notes"])
        doc = run_agent("--message", "hi")
    offered = server.requests[0]["json"]["tools"][0]["function"]
    assert offered["name"] == "skill__notes" and offered["description"] == "How to write notes"
    assert offered["parameters"]["properties"] == {}
    assert doc["tool_calls"] == [{"name": "skill__notes", "outcome": "ok"}]
    assert json.loads(server.requests[1]["json"]["messages"][-1]["content"])["text"] == "Write short notes.\n"


def test_an_ambiguous_name_is_offered_by_neither_source(home, tmp_path):
    mcp_server("s", tmp_path, "--alias", "t__echo")  # offers mcp__s__t__echo
    mcp_server("s__t", tmp_path)                                        # offers mcp__s__t__echo too
    with ChatServer([{"content": "ok"}]) as server:
        setup_agent(server.base_url, builtin=(), mcps=["s", "s__t"])
        doc = run_agent("--message", "hi")
    run = fwj("run", "show", doc["run_id"])
    assert "mcp__s__t__echo" not in run["tools"], run
    assert "mcp__s__echo" in run["tools"] and "mcp__s__t__add" in run["tools"]
    assert [u["reason"] for u in run["unavailable_tools"] if u["name"] == "mcp__s__t__echo"] == ["ambiguous_name"], run["unavailable_tools"]


def test_a_401_that_echoes_the_key_is_unavailable_and_shows_it_nowhere(home):
    with ChatServer([{"status": 401, "body": f"invalid key {CANARY}, try again"}], repeat_last=True) as server:
        setup_agent(server.base_url)
        r = fw("agent", "run", "a1", "--message", "hi", "--json")
        human = fw("agent", "run", "a1", "--message", "hi")
    assert r.exit_code == 7 and r.json["error"]["code"] == "unavailable", r
    assert r.json["error"]["reason"] == "model" and r.json["error"]["status"] == 401
    assert "[redacted]" in r.json["error"]["message"]
    assert human.exit_code == 7 and "401" in human.stderr
    run = fwj("run", "show", r.json["error"]["run_id"])
    assert run["status"] == "ended"
    for path in home.rglob("*"):
        if path.is_file() and "secrets" not in path.relative_to(home).parts:
            assert CANARY.encode() not in path.read_bytes(), path


def test_the_installed_fw_runs_an_agent_and_shows_progress(home):
    script = [{"tool_calls": [{"name": "framework_resource_list", "arguments": {"kind": "agent"}}]}, {"content": "Done: a1."}]
    with ChatServer(script) as server:
        setup_agent(server.base_url)
        r = fw_proc("agent", "run", "a1", "--message", "-", input="what agents exist?", home=home)
    assert r.exit_code == 0, r
    assert "Done: a1." in r.stdout
    assert "framework_resource_list: ok" in r.stderr
    assert server.requests[0]["json"]["messages"][-1]["content"] == "what agents exist?"


def test_bad_invocations_start_no_run(home):
    with ChatServer([{"content": "x"}]) as server:
        setup_agent(server.base_url)
        for args, code in ((["--message", "a", "--message-file", "f"], 2), ([], 2), (["--message", "a", "--max-rounds", "0"], 4),
                           (["--message", ""], 4), (["--message", "  \n"], 4)):
            r = fw("agent", "run", "a1", *args, "--json")
            assert r.exit_code == code, r
        r = fw("agent", "run", "nope", "--message", "hi", "--json")
        assert r.exit_code == 3 and r.json["error"]["code"] == "not_found", r
    assert not [p for p in (home / "runs").iterdir()]


def test_every_front_door_offers_exactly_the_runs_tools(home, tmp_path):
    pid_file = mcp_server("fake", tmp_path)
    fwj("resource", "write", "skill", "notes", "--create", "--data", json.dumps({"description": "d", "body": "the text"}))
    setup_agent("http://127.0.0.1:9/v1", builtin=("resource_management",), mcps=["fake"], skills=["notes"])
    run = fwj("run", "start", "--agent", "a1")
    assert gone(pid_file)  # listed at the start, then stopped
    listed = fwj("tool", "list", "--run", run["run_id"])["tools"]
    assert [t["name"] for t in listed] == run["tools"]
    echo = next(t for t in listed if t["name"] == "mcp__fake__echo")
    assert echo["input_schema"]["required"] == ["text"]
    # a one-off call starts the server for the call and stops it after
    called = fw("tool", "call", "--run", run["run_id"], "mcp__fake__echo", "--args", '{"text": "pong"}')
    assert called.exit_code == 0 and "pong" in called.stdout, called
    assert gone(pid_file)
    bad = fw("tool", "call", "--run", run["run_id"], "mcp__fake__echo", "--args", '{"nope": 1}')
    assert bad.json["error"]["code"] == "invalid", bad
    skill = fw("tool", "call", "--run", run["run_id"], "skill__notes")
    assert json.loads(skill.stdout)["text"] == "the text\n"  # fw ends a skill file with a newline

    async def over_mcp():
        params = StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--run", run["run_id"]],
                                       env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == run["tools"]
            assert next(t for t in tools if t.name == "mcp__fake__echo").input_schema["required"] == ["text"]
            first = await client.call_tool("mcp__fake__echo", {"text": "one"})
            second = await client.call_tool("mcp__fake__add", {"a": 2, "b": 3})
            assert not first.is_error and "one" in first.content[0].text
            assert not second.is_error and "5" in second.content[0].text

    anyio.run(over_mcp)
    deadline = time.time() + 10
    while not gone(pid_file) and time.time() < deadline:
        time.sleep(0.1)
    assert gone(pid_file)


def test_agent_show_says_plainly_when_a_mounted_group_grants_nothing(home):
    setup_agent("http://127.0.0.1:9/v1", builtin=("resource_management", "task_collaboration", "local_execution"))
    notes = {n["group"]: n for n in fwj("agent", "show", "a1")["activation"]["tool_groups"]}
    assert notes["resource_management"] == {"group": "resource_management", "grants": True}
    assert notes["task_collaboration"] == {"group": "task_collaboration", "grants": True}
    assert notes["local_execution"]["grants"] is False and "execution.enabled" in notes["local_execution"]["why"]
    assert "agent edit a1 --execution" in notes["local_execution"]["why"]  # the agent's own name, ready to run
    human = fw("agent", "show", "a1")
    assert "Mounted local_execution grants no tools: execution.enabled is false" in human.stdout
    assert "{agent}" not in human.stdout
    fwj("resource", "write", "model", "m1", "--data", '{"capabilities": {"tool_call": false}}')
    written = fwj("agent", "edit", "a1", "--description", "x")["activation"]["tool_groups"]
    assert all(n["grants"] is False and "tool_call" in n["why"] for n in written)


def test_the_groups_without_tools_are_those_the_registry_has_none_for():
    from framework_cli.home.kinds import GROUPS_WITHOUT_TOOLS
    from framework_cli.tools.service import GROUP_TOOLS

    assert {g for g, tools in GROUP_TOOLS.items() if not tools} == set(GROUPS_WITHOUT_TOOLS)


def test_ctrl_c_ends_the_run(home):
    import signal
    import subprocess

    with ChatServer([{"content": "late", "sleep": 30}]) as server:
        setup_agent(server.base_url)
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "FW_HOME": str(home)})
        deadline = time.time() + 20
        while not server.requests and time.time() < deadline:  # the model has been asked
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    runs = fwj("run", "list")["runs"]
    assert [r["status"] for r in runs] == ["ended"]


def test_a_model_that_cannot_be_asked_refuses_the_run_before_it_starts(home, monkeypatch):
    """No key for the provider, or no model at all: nothing is started, recorded or audited,
    by `fw agent run` or by a dispatched turn (which fails, saying why)."""
    monkeypatch.delenv("FW_TEST_UNSET_KEY", raising=False)
    fwj("resource", "write", "provider", "nokey", "--create", "--data",
        json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key_env": "FW_TEST_UNSET_KEY"}))
    fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps({"provider": "nokey", "model_id": "x"}))
    fwj("agent", "create", "a1", "--model", "m1")
    fwj("agent", "create", "silent")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "bob", "--kind", "agent")
    fwj("binding", "set", "bob", "--agent", "a1")
    fwj("session", "create", "s1", "--member", "alice", "--member", "bob")
    before = snapshot(home)
    error = run_agent("--message", "hi", code=4)["error"]
    assert error["code"] == "invalid" and "$FW_TEST_UNSET_KEY" in error["message"] and "run_id" not in error
    human = fw("agent", "run", "a1", "--message", "hi")
    assert human.exit_code == 4 and "started" not in human.output and "is not set" in human.output
    error = fwj("agent", "run", "silent", "--message", "hi", code=4)["error"]
    assert "no model" in error["message"] and "fw agent edit silent --model m1" in error["hint"]
    assert fwj("run", "list")["runs"] == [] and snapshot(home) == before
    fwj("message", "post", "s1", "--as", "alice", "@bob hello")
    assert fwj("dispatch", "--once")["turns"] == {"run": 1, "answered": 0, "failed": 1, "cancelled": 0}
    turn = fwj("session", "show", "s1")["session"]["turns"][0]
    assert turn["status"] == "failed" and "$FW_TEST_UNSET_KEY" in turn["error"] and turn.get("run_id") is None
    assert fwj("run", "list")["runs"] == []
    fwj("message", "post", "s1", "--as", "alice", "@bob again")
    human = fw("dispatch", "--once")  # says where to see why, and how to run it again
    assert human.exit_code == 0 and "failed: 1" in human.stdout and "`fw turn list --status failed`" in human.stdout
    assert fwj("turn", "list", "--status", "failed")["turns"][-1]["error"].startswith("invalid (no_key): provider 'nokey'")
    fwj("task", "create", "bob", "--instructions", "tidy up")
    human = fw("dispatch", "--once")
    assert "Tasks run: 1, done: 0, failed: 1" in human.stdout and "`fw task show ID`" in human.stdout
    listed = fw("task", "list").stdout  # why it failed, in the list as for turns
    assert listed.splitlines()[0].split()[-1] == "error" and "provider 'nokey'" in listed
