"""External runners: a harness of type external runs its agents with its command, which reaches
its run only through the run's own gateway. The runners are real programs; the example runner
is the one the README prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from conftest import CANARY, fw, fw_bin, fw_proc, fwj, make_basics

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gateway_runner.py"


def external(command, permissions=("detail", "call"), name="ext") -> None:
    data = {"type": "external", "command": command, "capabilities": {"tool_calling": True}, "permissions": {"tools": list(permissions)}}
    fwj("resource", "write", "harness", name, "--create", "--data", json.dumps(data))


def setup(command, *builtin: str) -> None:
    """The canary provider (on a host nobody answers: fw must call no model), and agent a1 on
    an external harness."""
    make_basics()
    external(command)
    fwj("agent", "edit", "a1", "--harness", "ext", *sum((["--builtin-tool", g] for g in builtin), []))


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def no_token_anywhere(home: Path, *outputs: str) -> None:
    for text in outputs:
        assert "fwgt_" not in text
    for path in home.rglob("*"):
        if path.is_file():
            assert b"fwgt_" not in path.read_bytes(), path


def running(marker: str) -> list[str]:
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


def test_the_example_runner_answers_through_the_gateway_audited_as_the_run(home):
    setup([sys.executable, str(EXAMPLE)], "resource_management")
    result = fw("agent", "run", "a1", "--message", 'call framework_resource_list {"kind": "harness"}', "--json")
    assert result.exit_code == 0, result
    doc = result.json
    assert doc["status"] == "completed" and doc["runner"] == "external" and doc["rounds"] == 0
    assert [i["name"] for i in json.loads(doc["answer"])["items"]] == ["ext"]
    assert doc["tool_calls"] == [{"name": "framework_resource_list", "outcome": "ok"}]
    run = fwj("run", "show", doc["run_id"])
    assert run["status"] == "ended" and run["runner"]["type"] == "external" and run["runner"]["harness"] == "ext"
    lines = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    mine = [e for e in lines if e["run_id"] == doc["run_id"]]
    assert {(e["tool"], e["caller"], e["outcome"], e.get("via")) for e in mine} == {
        ("fw_call_tool", "runtime:a1", "ok", "gateway"), ("framework_resource_list", "runtime:a1", "ok", "gateway")}
    no_token_anywhere(home, result.output)


def test_the_same_runner_trying_a_tool_its_run_does_not_have_is_refused(home):
    setup([sys.executable, str(EXAMPLE)], "resource_management")
    before = fwj("resource", "list", "agent")
    doc = fwj("agent", "run", "a1", "--message", 'call framework_exec {"argv": ["touch", "/tmp/never"]}')
    assert doc["answer"].startswith("refused: ") and json.loads(doc["answer"][9:])["error"]["code"] == "denied"
    assert doc["tool_calls"] == [{"name": "framework_exec", "outcome": "refused", "error": "denied"}]
    assert fwj("resource", "list", "agent") == before
    refused = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    assert any(e["tool"] == "framework_exec" and e["outcome"] == "refused" and e["run_id"] == doc["run_id"] for e in refused)


def test_the_runner_gets_only_its_environment_its_folder_and_the_input(home, monkeypatch):
    monkeypatch.setenv("SOME_PARENT_SECRET", "parent-only-value")
    code = ("import os, sys, json; print(json.dumps({'env': sorted(os.environ), 'cwd': os.getcwd(), 'stdin': sys.stdin.read(),"
            " 'url': os.environ['FW_GATEWAY_URL'], 'run': os.environ['FW_RUN_ID'], 'token': os.environ['FW_GATEWAY_TOKEN']}))")
    setup(python(code))
    result = fw("agent", "run", "a1", "--message", "@literal input", "--json")
    assert result.exit_code == 0, result
    seen = json.loads(result.json["answer"])
    assert set(seen["env"]) <= {"PATH", "HOME", "LANG", "TERM", "FW_GATEWAY_URL", "FW_GATEWAY_TOKEN", "FW_RUN_ID"}
    assert {"FW_GATEWAY_URL", "FW_GATEWAY_TOKEN", "FW_RUN_ID"} <= set(seen["env"])
    assert seen["stdin"] == "@literal input" and seen["run"] == result.json["run_id"]
    assert Path(seen["cwd"]).resolve() == home.resolve()  # an explicit run works in the home
    assert seen["url"].startswith("http://127.0.0.1:") and seen["url"].endswith("/mcp")
    assert seen["token"] == "[redacted]"  # the token it printed never leaves fw
    no_token_anywhere(home, result.output)


def test_a_failing_runner_is_unavailable_with_the_end_of_its_stderr_redacted(home):
    code = "import os, sys; sys.stderr.write('x' * 5000 + sys.stdin.read() + os.environ['FW_GATEWAY_TOKEN'] + ' gave up'); sys.exit(3)"
    setup(python(code))
    result = fw("agent", "run", "a1", "--message", f"key {CANARY} token ", "--json")
    assert result.exit_code == 7, result
    error = result.json["error"]
    assert error["code"] == "unavailable" and error["reason"] == "runner" and error["exit_code"] == 3
    assert error["stderr"].endswith("gave up") and "[redacted]" in error["stderr"] and len(error["stderr"]) <= 2000
    assert fwj("run", "show", error["run_id"])["status"] == "ended"
    no_token_anywhere(home, result.output)


def test_a_hanging_runner_is_stopped_at_the_timeout_and_leaves_no_process(home):
    marker = f"fw-hang-{uuid.uuid4().hex}"
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]],"
            " start_new_session=True); time.sleep(600)")
    setup(python(code, marker))
    result = fw_proc("agent", "run", "a1", "--message", "hi", "--timeout", "2", "--json", home=home, timeout=120)
    assert result.exit_code == 7, result
    error = result.json["error"]
    assert error["reason"] == "runner" and error["timed_out"] is True
    assert running(marker) == []
    assert fwj("run", "show", error["run_id"])["status"] == "ended"


def test_a_runner_whose_program_is_missing_is_unavailable(home):
    setup(["/no/such/runner-program"])
    error = fw("agent", "run", "a1", "--message", "hi", "--json").json["error"]
    assert error["code"] == "unavailable" and error["reason"] == "runner"


def test_dispatch_once_posts_an_external_runners_answer_to_the_session(home):
    setup(python("import sys; print('  runner says: ' + sys.stdin.read() + '  ')"))
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    fwj("message", "post", "s1", "--as", "alice", "hello @ops")
    summary = fwj("dispatch", "--once")
    assert summary["turns"]["answered"] == 1, summary
    texts = [(m["author"], m["text"]) for m in fwj("message", "list", "s1")["messages"]]
    assert texts == [("alice", "hello @ops"), ("ops", "runner says: alice: hello @ops")]


def test_agent_show_and_run_show_say_which_runner(home):
    setup("python3 -c 'print(1)'")
    shown = fwj("agent", "show", "a1")
    assert shown["runner"] == {"type": "external", "harness": "ext", "command": ["python3", "-c", "print(1)"]}
    assert "Runner: external (harness ext: python3 -c 'print(1)')" in fw("agent", "show", "a1").stdout
    fwj("agent", "create", "plain")
    assert fwj("agent", "show", "plain")["runner"] == {"type": "local", "harness": None}
    run = fwj("run", "start", "--agent", "a1")
    assert fwj("run", "show", run["run_id"])["runner"]["type"] == "external"
    assert "runner: external" in fw("run", "show", run["run_id"]).stdout


def test_an_external_harness_needs_a_command(home):
    for data in ({"type": "external"}, {"type": "external", "command": ""}, {"type": "external", "command": []},
                 {"type": "external", "command": "unclosed 'quote"}):
        result = fw("resource", "write", "harness", "x", "--create", "--data", json.dumps(data), "--json")
        assert result.exit_code == 4 and result.json["error"]["code"] == "invalid", data
    assert fw("resource", "read", "harness", "x", "--json").exit_code == 3


def test_the_docs_print_the_example_runner_as_shipped():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "external-runners.md").read_text()
    assert "```python\n" + EXAMPLE.read_text() + "```" in doc


def test_a_runners_program_is_found_on_path_or_from_the_folder_fw_started_in(home, tmp_path):
    """A bare name is looked up on PATH; a name with a `/` is taken from the folder fw was
    started in (not the home, where the runner then runs); a missing one names what was tried."""
    tools = tmp_path / "tools"
    tools.mkdir()
    script = tools / "answer.sh"
    script.write_text("#!/bin/sh\necho \"answered from $(pwd)\"\n")
    script.chmod(0o755)
    make_basics()
    external(["tools/answer.sh"])
    fwj("agent", "edit", "a1", "--harness", "ext")
    started_here = subprocess.run([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], cwd=tmp_path,
                                  env={**os.environ, "FW_HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert started_here.returncode == 0, started_here.stdout + started_here.stderr
    assert json.loads(started_here.stdout)["answer"] == f"answered from {home}"  # it runs in the run's folder
    elsewhere = subprocess.run([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], cwd=home,
                               env={**os.environ, "FW_HOME": str(home)}, capture_output=True, text=True, timeout=60)
    error = json.loads(elsewhere.stdout)["error"]
    assert elsewhere.returncode == 7 and error["reason"] == "runner", error
    assert f"tried {home}/tools/answer.sh" in error["message"] and "folder fw was started in" in error["message"]
    external(["no-such-runner-program-7f3a"], name="ext2")
    fwj("agent", "edit", "a1", "--harness", "ext2")
    missing = fw("agent", "run", "a1", "--message", "hi", "--json")
    assert missing.exit_code == 7 and "was not found on PATH" in missing.json["error"]["message"], missing


def test_event_handle_runs_the_external_runner_on_the_event_and_it_replies_through_the_gateway(home):
    reply = ("import asyncio, json, os, sys, httpx2\n"
             "from mcp import ClientSession\n"
             "from mcp.client.streamable_http import streamable_http_client\n"
             "async def main():\n"
             "    async with httpx2.AsyncClient(headers={'Authorization': 'Bearer ' + os.environ['FW_GATEWAY_TOKEN']}) as http:\n"
             "        async with streamable_http_client(os.environ['FW_GATEWAY_URL'], http_client=http) as (r, w, *_):\n"
             "            async with ClientSession(r, w) as s:\n"
             "                await s.initialize()\n"
             "                event = json.loads((await s.call_tool('fw_get_current_event', {})).content[0].text)\n"
             "                await s.call_tool('event_reply', {'text': 'seen: ' + event['event']['message']['text']})\n"
             "                return event['input']\n"
             "print(asyncio.run(main()))\n")
    make_basics()
    external(python(reply))
    fwj("agent", "edit", "a1", "--harness", "ext", "--event", "message.*")
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    event = {"type": "message.received", "actor": {"id": "u1"}, "message": {"id": "m1", "text": "ping"}}
    doc = fwj("event", "handle", "desk", "--event", json.dumps(event))
    assert doc["handled"] and doc["result"]["status"] == "completed" and "ping" in doc["result"]["answer"]
    assert {"name": "event_reply", "outcome": "ok"} in doc["result"]["tool_calls"]
    sent = [a for a in fwj("bot", "local", "log", "desk")["actions"] if a["api"] == "send_message"]
    assert sent and sent[-1]["params"]["text"] == "seen: ping"


HANGS = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]],"
         " start_new_session=True); time.sleep(600)")


def _wait_running(marker: str, proc: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while len(running(marker)) < 2:  # the runner and the helper it detached
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the external runner did not start"
        time.sleep(0.05)


def test_cancelling_a_task_stops_its_external_runner_and_all_it_started_at_once(home):
    """`fw task cancel` ends the task's run; the runner working on it (and the helper it
    detached) is stopped within a second or so, not when it would have finished by itself."""
    marker = f"fw-cancel-{uuid.uuid4().hex}"
    setup(python(HANGS, marker))
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1")
    fw("tool", "call", "--manager", "task_delegate", "--args", '{"principal": "ops", "instructions": "work"}')
    proc = subprocess.Popen([fw_bin(), "dispatch", "--once", "--json"], env={**os.environ, "FW_HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(marker, proc)
        assert fwj("task", "cancel", "1")["task"]["status"] == "cancelled"
        out, err = proc.communicate(timeout=30)  # the runner would sleep for 600 s
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert json.loads(out)["tasks"]["cancelled"] == 1
    assert running(marker) == []
    assert fwj("task", "show", "1")["task"]["status"] == "cancelled"


def test_ending_the_run_stops_its_external_runner(home):
    marker = f"fw-end-{uuid.uuid4().hex}"
    setup(python(HANGS, marker))
    proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], env={**os.environ, "FW_HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(marker, proc)
        run_id = fwj("run", "list", "--status", "active")["runs"][0]["run_id"]
        fwj("run", "end", run_id)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 5, (out, err)
    assert json.loads(out)["error"]["code"] == "run_ended"
    assert running(marker) == []


def test_an_external_runners_tools_are_decided_by_its_harness_not_its_model(home):
    """fw calls no model for an external runner: a model without tool calling does not take the
    runner's tools away; the harness's capabilities and permissions decide."""
    setup([sys.executable, str(EXAMPLE)], "resource_management")
    fwj("resource", "write", "model", "m1", "--data", json.dumps({"capabilities": {"tool_call": False}}))
    run = fwj("run", "start", "--agent", "a1")
    assert "framework_resource_list" in run["tools"], run
    fwj("run", "end", run["run_id"])
    external([sys.executable, str(EXAMPLE)], permissions=("detail",), name="ext2")
    fwj("agent", "edit", "a1", "--harness", "ext2")
    refused = fwj("run", "start", "--agent", "a1")
    assert refused["tools"] == [] or not any(t.startswith("framework_") for t in refused["tools"]), refused
    fwj("run", "end", refused["run_id"])


def test_the_example_runner_says_in_one_line_when_its_run_has_ended(home):
    """Against a gateway whose run has ended (its token refused), the example runner prints one
    line on standard error, no traceback, and exits 1."""
    import socket as socket_module

    setup([sys.executable, str(EXAMPLE)], "resource_management")
    run = fwj("run", "start", "--agent", "a1")
    fwj("run", "end", run["run_id"])
    with socket_module.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([fw_bin(), "mcp", "serve", "--http", "--listen", f"127.0.0.1:{port}"], env={**os.environ, "FW_HOME": str(home)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket_module.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        env = {**os.environ, "FW_GATEWAY_URL": f"http://127.0.0.1:{port}/mcp", "FW_GATEWAY_TOKEN": run["gateway_token"]}
        done = subprocess.run([sys.executable, str(EXAMPLE)], input="hello", env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.terminate()
        server.communicate(timeout=20)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "is the run still active" in done.stderr, done.stderr
    assert run["gateway_token"] not in done.stderr
    unset = subprocess.run([sys.executable, str(EXAMPLE)], input="hello", env={"PATH": os.environ["PATH"]}, capture_output=True, text=True)
    assert unset.returncode == 1 and "FW_GATEWAY_URL and FW_GATEWAY_TOKEN not set" in unset.stderr
