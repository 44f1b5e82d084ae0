"""SIGTERM does what Ctrl-C does for every command that runs things: the runs end, every
process they started stops, fw exits 130 and, in JSON mode, prints the `interrupted` error
(CONTRACT section 2). After SIGKILL of fw no exec child survives either. Each case is the
installed `fw` in a subprocess, with an exec child found in `ps` by a unique marker."""

import json
import os
import signal
import subprocess
import time

import anyio
import pytest
from conftest import fw_bin, fwj, processes_with, wait_until_gone
from fakes.chat_server import ChatServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_exec_supervision import marker, sleeper
from test_tasks_exec import bound_agent, provider_and_model


def fw_popen(home, *args, input=None):
    proc = subprocess.Popen([fw_bin(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "FW_HOME": str(home)})
    if input is not None:
        proc.stdin.write(input)
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() has nothing to send
    return proc


def wait_for(mark, proc=None, seconds=60):
    deadline = time.monotonic() + seconds
    while not processes_with(mark):
        assert time.monotonic() < deadline, "the exec child never started"
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.05)


def exec_script(mark):
    """A model that asks for one exec of a program that starts a `setsid` child and waits."""
    argv = ["sh", "-c", f"setsid {sleeper(mark)} & {sleeper(mark)}"]
    return [{"tool_calls": [{"name": "framework_exec", "arguments": {"argv": argv, "timeout_seconds": 600}}]},
            {"content": "never reached"}]


def exec_worker(base_url, tmp_path, **agent):
    provider_and_model("x", base_url)
    bound_agent("worker", "m-x", "local_execution", directory=tmp_path, execution=True)
    if agent:
        fwj("resource", "write", "agent", "worker", "--data", json.dumps(agent))


def interrupted(proc, sig):
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err
    return out, err


EVENT = {"type": "message.received", "actor": {"id": "u1"}, "message": {"id": "m1", "text": "go"}}
RUNNING_COMMANDS = {
    "agent run": ["agent", "run", "worker", "--principal", "worker", "--message", "go", "--json"],
    "event handle": ["event", "handle", "desk", "--event", json.dumps(EVENT), "--json"],
    "bot local say": ["bot", "local", "say", "desk", "--from", "u1", "go", "--json"],
}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", list(RUNNING_COMMANDS))
def test_a_signal_during_exec_ends_the_run_stops_its_processes_and_says_interrupted(home, tmp_path, command, sig):
    mark = marker()
    with ChatServer(exec_script(mark)) as server:
        exec_worker(server.base_url, tmp_path, events=["message.*"])
        fwj("bot", "add", "desk", "--adapter", "local", "--principal", "worker")
        proc = fw_popen(home, *RUNNING_COMMANDS[command])
        wait_for(mark, proc)
        out, _ = interrupted(proc, sig)
    error = json.loads(out)["error"]
    assert error["code"] == "interrupted" and error["message"] and error["hint"]
    assert processes_with(mark) == []  # stopped before fw exited, not some time later
    assert [r["status"] for r in fwj("run", "list")["runs"]] == ["ended"]


def test_sigterm_of_tool_call_stops_its_exec(home, tmp_path):
    mark = marker()
    exec_worker("http://127.0.0.1:9/v1", tmp_path)
    run_id = fwj("run", "start", "--principal", "worker")["run_id"]
    # the arguments on standard input: the marker must be in the exec child's command line only
    proc = fw_popen(home, "tool", "call", "--run", run_id, "framework_exec", "--args", "-",
                    input=json.dumps({"argv": ["sh", "-c", f"setsid {sleeper(mark)} & {sleeper(mark)}"]}))
    wait_for(mark, proc)
    out, _ = interrupted(proc, signal.SIGTERM)
    assert json.loads(out)["error"]["code"] == "interrupted"  # fw tool call always answers in JSON
    assert processes_with(mark) == []


def test_in_human_mode_an_interruption_says_so_on_stderr(home, tmp_path):
    mark = marker()
    with ChatServer(exec_script(mark)) as server:
        exec_worker(server.base_url, tmp_path)
        proc = fw_popen(home, "agent", "run", "worker", "--principal", "worker", "--message", "go")
        wait_for(mark, proc)
        out, err = interrupted(proc, signal.SIGTERM)
    assert "Error: interrupted" in err and "interrupted" not in out


def test_after_sigkill_of_fw_no_exec_child_survives(home, tmp_path):
    mark = marker()
    with ChatServer(exec_script(mark)) as server:
        exec_worker(server.base_url, tmp_path)
        proc = fw_popen(home, "agent", "run", "worker", "--principal", "worker", "--message", "go", "--json")
        wait_for(mark, proc)
        proc.kill()
        proc.communicate(timeout=30)
        # the supervisor hears of fw's death from the kernel and stops the tree: it takes a moment
        assert wait_until_gone(mark) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_a_serving_dispatch_leaves_no_exec_child(home, tmp_path, sig):
    mark = marker()
    with ChatServer(exec_script(mark)) as server:
        exec_worker(server.base_url, tmp_path)
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("session", "create", "s1", "--member", "alice", "--member", "worker")
        fwj("message", "post", "s1", "--as", "alice", "@worker go")
        proc = fw_popen(home, "dispatch", "--workers", "2", "--json")
        wait_for(mark, proc)
        out, _ = interrupted(proc, sig)
    assert json.loads(out)["error"]["code"] == "interrupted"
    assert processes_with(mark) == []
    assert all(r["status"] == "ended" for r in fwj("run", "list")["runs"])


def test_sigterm_of_mcp_serve_stops_the_exec_it_is_running(home, tmp_path):
    mark = marker()
    exec_worker("http://127.0.0.1:9/v1", tmp_path)
    run_id = fwj("run", "start", "--principal", "worker")["run_id"]
    params = StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--run", run_id],
                                   env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})
    outcome = {}

    def terminate_fw_once_exec_runs():
        wait_for(mark)
        [line] = [line for line in processes_with(run_id) if "mcp serve" in line]
        os.kill(int(line.split()[0]), signal.SIGTERM)
        outcome["fw_gone"] = wait_until_gone(f"--run {run_id}") == []

    async def scenario():
        async with Client(params) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.to_thread.run_sync, terminate_fw_once_exec_runs)
                try:
                    await client.call_tool("framework_exec", {"argv": ["sh", "-c", f"setsid {sleeper(mark)} & {sleeper(mark)}"]})
                except Exception:
                    pass  # the server went away mid-call: that is the point

    try:
        anyio.run(scenario)
    except BaseException:  # the client may report the closed connection as it leaves
        pass
    assert outcome.get("fw_gone") is True
    assert processes_with(mark) == []
