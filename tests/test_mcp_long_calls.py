"""Long MCP tool calls (issue 29, items 2 and 3): an MCP server's `timeout_seconds` is a call's
idle limit, restarted by each progress notification up to `max_seconds`; a call given up on,
or interrupted, sends `notifications/cancelled` for its request id; progress shows on stderr
(`fw agent run`, `fw tool call`) and is relayed by `fw mcp serve`, which stops within 2 s of the
end of its input or SIGTERM.

The server is real (the SDK's MCPServer, tests/fakes/slow_mcp_server.py): it sleeps, reports
progress, and records each call and each `notifications/cancelled` it receives in a file.
"A 90 s tool with progress under timeout_seconds 30" is shown scaled down: a 3 s tool that
reports progress every 0.5 s under timeout_seconds 1.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import CANARY, fw, fw_bin, fw_proc, fwj, processes_with, wait_until_gone
from fakes import http_mcp
from fakes.chat_server import ChatServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters

SLOW = str(Path(__file__).parent / "fakes" / "slow_mcp_server.py")
RAW = str(Path(__file__).parent / "fakes" / "raw_mcp_server.py")


def slow_server(tmp_path, name="slow", *, transport="stdio", url=None, **limits):
    """The slow server as an mcp of the home; its record file and a marker that finds its process."""
    record = tmp_path / f"{name}.record"
    marker = f"--fw-test-{name}-{os.getpid()}-{time.monotonic_ns()}"
    if transport == "stdio":
        data = {"transport": "stdio", "command": sys.executable, "args": [SLOW, marker],
                "env": {"FAKE_MCP_RECORD": str(record)}, **limits}
    else:
        data = {"transport": "http", "url": url, **limits}
    fwj("resource", "write", "mcp", name, "--create", "--data", json.dumps(data))
    return record, marker


def agent(base_url="https://llm.example.test/v1", mcps=("slow",)):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "mcps": list(mcps)}))


def recorded(record):
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def wait_for(condition, seconds=20, what="the condition"):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


def the_call_was_cancelled(record, tool):
    """The server saw exactly one call of the tool, and a notifications/cancelled for its id."""
    events = recorded(record)
    calls = [e for e in events if e["event"] == "call" and e["tool"] == tool]
    cancels = [e for e in events if e["event"] == "cancelled"]
    assert len(calls) == 1, events
    assert [c["request_id"] for c in cancels] == [calls[0]["request_id"]], events
    assert not [e for e in events if e["event"] == "finished" and e["tool"] == tool], events
    return cancels[0]


# -- the idle limit, progress and the hard limit ------------------------------------------------
def test_a_long_tool_with_progress_finishes_under_a_shorter_idle_limit_and_shows_its_progress(home, tmp_path):
    record, _ = slow_server(tmp_path, timeout_seconds=1)
    script = [{"tool_calls": [{"name": "mcp__slow__work", "arguments": {"seconds": 3, "every": 0.5}}]}, {"content": "all done"}]
    with ChatServer(script) as server:
        agent(server.base_url)
        started = time.monotonic()
        r = fw_proc("agent", "run", "a1", "--message", "work", home=home)
        took = time.monotonic() - started
    assert r.exit_code == 0, r
    assert "all done" in r.stdout and took > 3
    lines = r.stderr.splitlines()
    assert "  tool mcp__slow__work ..." in lines  # as it starts
    progress = [line for line in lines if line.startswith("  tool mcp__slow__work: ") and "step" in line]
    assert progress[0] == "  tool mcp__slow__work: 1/6: step 1 of 6" and progress[-1] == "  tool mcp__slow__work: 6/6: step 6 of 6"
    ended = [line for line in lines if line.startswith("  tool mcp__slow__work: ok in ")]
    assert len(ended) == 1 and float(ended[0].split(" in ")[1].removesuffix(" s")) >= 3  # the outcome and the time
    answer = json.loads(server.requests[1]["json"]["messages"][-1]["content"])
    assert answer["content"] == ["worked 3 s"]
    [call] = [e for e in recorded(record) if e["event"] == "call"]
    assert call["progress_token"] is not None  # fw asked for progress
    assert not [e for e in recorded(record) if e["event"] == "cancelled"]


def test_tool_call_shows_progress_on_stderr_and_keeps_stdout_json(home, tmp_path):
    slow_server(tmp_path, timeout_seconds=1)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    r = fw_proc("tool", "call", "--run", run["run_id"], "mcp__slow__work", "--args", '{"seconds": 2, "every": 0.5}', home=home)
    assert r.exit_code == 0 and r.json["content"] == ["worked 2 s"], r
    assert "  tool mcp__slow__work: 4/4: step 4 of 4" in r.stderr.splitlines()


def test_a_silent_tool_is_given_up_at_its_idle_limit_and_cancelled_at_the_server(home, tmp_path):
    record, _ = slow_server(tmp_path, timeout_seconds=1)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    started = time.monotonic()
    r = fw("tool", "call", "--run", run["run_id"], "mcp__slow__sleep", "--args", '{"seconds": 30}')
    assert time.monotonic() - started < 10
    assert r.exit_code == 7, r
    error = r.json["error"]
    assert (error["code"], error["reason"]) == ("unavailable", "mcp_timeout") and "timeout_seconds" in error["message"]
    assert "timeout_seconds" in error["hint"]
    cancelled = the_call_was_cancelled(record, "sleep")
    assert "time limit" in cancelled["reason"]
    assert [a["outcome"] for a in map(json.loads, (home / "audit.jsonl").read_text().splitlines())][-1] == "error"


def test_max_seconds_cuts_a_tool_that_keeps_reporting_progress(home, tmp_path):
    record, _ = slow_server(tmp_path, timeout_seconds=1, max_seconds=2)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    started = time.monotonic()
    r = fw("tool", "call", "--run", run["run_id"], "mcp__slow__work", "--args", '{"seconds": 20, "every": 0.3}')
    took = time.monotonic() - started
    assert r.exit_code == 7 and r.json["error"]["reason"] == "mcp_timeout" and "max_seconds" in r.json["error"]["message"], r
    assert took < 10
    the_call_was_cancelled(record, "work")


def test_max_seconds_defaults_to_ten_times_the_idle_limit(home, tmp_path):
    record, _ = slow_server(tmp_path, timeout_seconds=0.2)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    started = time.monotonic()
    r = fw("tool", "call", "--run", run["run_id"], "mcp__slow__work", "--args", '{"seconds": 20, "every": 0.1}')
    took = time.monotonic() - started
    assert r.exit_code == 7 and "within 2 s (the mcp's max_seconds)" in r.json["error"]["message"], r
    assert 2 <= took < 10
    the_call_was_cancelled(record, "work")


@pytest.mark.parametrize("startup_seconds,offered", [(1, False), (8, True)])
def test_startup_seconds_is_how_long_a_server_gets_to_start(home, tmp_path, startup_seconds, offered):
    data = {"transport": "stdio", "command": sys.executable, "args": [RAW, "--delay", "2"], "startup_seconds": startup_seconds}
    fwj("resource", "write", "mcp", "late", "--create", "--data", json.dumps(data))
    agent(mcps=("late",))
    run = fwj("run", "start", "--agent", "a1")
    assert ("mcp__late__plain" in run["tools"]) is offered
    if not offered:
        [left_out] = run["unavailable_tools"]
        assert left_out["reason"] == "source_unavailable" and "within 1 s (the mcp's startup_seconds)" in left_out["detail"]


def test_limits_and_progress_hold_over_streamable_http_too(home, tmp_path, monkeypatch):
    record = tmp_path / "http.record"
    monkeypatch.setenv("FAKE_MCP_RECORD", str(record))
    proc, url = http_mcp.start(lambda port: [sys.executable, SLOW, "--http", str(port)])
    try:
        slow_server(tmp_path, transport="http", url=url, timeout_seconds=1)
        agent()
        run = fwj("run", "start", "--agent", "a1")
        worked = fw_proc("tool", "call", "--run", run["run_id"], "mcp__slow__work", "--args", '{"seconds": 2, "every": 0.4}', home=home)
        assert worked.exit_code == 0 and worked.json["content"] == ["worked 2 s"], worked
        assert "  tool mcp__slow__work: 5/5: step 5 of 5" in worked.stderr.splitlines()
        silent = fw("tool", "call", "--run", run["run_id"], "mcp__slow__sleep", "--args", '{"seconds": 30}')
        assert silent.exit_code == 7 and silent.json["error"]["reason"] == "mcp_timeout", silent
        wait_for(lambda: [e for e in recorded(record) if e["event"] == "cancelled"], what="the cancellation at the server")
        the_call_was_cancelled(record, "sleep")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- an interrupted run ---------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_cancels_its_call_at_the_server_and_stops_it(home, tmp_path, sig):
    record, marker = slow_server(tmp_path)
    script = [{"tool_calls": [{"name": "mcp__slow__sleep", "arguments": {"seconds": 60}}]}, {"content": "never"}]
    with ChatServer(script) as server:
        agent(server.base_url)
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "sleep", "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "FW_HOME": str(home)})
        wait_for(lambda: [e for e in recorded(record) if e["event"] == "call"], what="the call at the server")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, (out, err)
    assert json.loads(out)["error"]["code"] == "interrupted" and "Traceback" not in err
    cancelled = the_call_was_cancelled(record, "sleep")
    assert "interrupted" in cancelled["reason"]
    assert wait_until_gone(marker) == []
    assert [r["status"] for r in fwj("run", "list")["runs"]] == ["ended"]


# -- fw mcp serve: relays progress, leaves at once ------------------------------------------------
def serve_params(home, run_id):
    return StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--run", run_id],
                                 env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})


def test_mcp_serve_relays_an_upstream_calls_progress_to_its_client(home, tmp_path):
    slow_server(tmp_path, timeout_seconds=1)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    heard = []

    async def scenario():
        async def progress(value, total, message):
            heard.append((value, total, message))

        async with Client(serve_params(home, run["run_id"])) as client:
            return await client.call_tool("mcp__slow__work", {"seconds": 2, "every": 0.4}, progress_callback=progress)

    result = anyio.run(scenario)
    assert result.is_error is False and json.loads(result.content[0].text)["content"] == ["worked 2 s"]
    assert heard == [(float(n), 5.0, f"step {n} of 5") for n in range(1, 6)]
    assert CANARY not in result.content[0].text


class Serving:
    """`fw mcp serve --run` in a subprocess, spoken to in raw JSON-RPC lines, so that the test
    decides exactly when its input ends."""

    def __init__(self, home, run_id):
        self.proc = subprocess.Popen([fw_bin(), "mcp", "serve", "--run", run_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, "FW_HOME": str(home)})
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert json.loads(self.proc.stdout.readline())["id"] == 1
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, request_id, name, arguments):
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})

    def end_input(self):
        """Close its input; how long it took to exit, and what it wrote."""
        started = time.monotonic()
        out, err = self.proc.communicate(timeout=30)  # closes its input first
        return time.monotonic() - started, out.decode(), err.decode()


@pytest.mark.parametrize("server", ["sdk", "raw"])
def test_mcp_serve_exits_within_2_s_of_eof_with_a_call_in_flight_and_stops_what_it_started(home, tmp_path, server):
    """The SDK's server stops its tool when cancelled; the raw one sleeps on regardless and
    must be stopped (it holds its stdin open, too)."""
    if server == "sdk":
        record, marker = slow_server(tmp_path)
        tool, args = "mcp__slow__sleep", {"seconds": 60}
    else:
        marker = f"--marker=fw-test-raw-{os.getpid()}-{time.monotonic_ns()}"
        data = {"transport": "stdio", "command": sys.executable, "args": [RAW, marker]}
        fwj("resource", "write", "mcp", "slow", "--create", "--data", json.dumps(data))
        tool, args = "mcp__slow__sleep", {"seconds": 60}
    agent()
    run = fwj("run", "start", "--agent", "a1")
    serving = Serving(home, run["run_id"])
    serving.call(2, tool, args)
    wait_for(lambda: processes_with(marker), what="the MCP server started")
    if server == "sdk":
        wait_for(lambda: [e for e in recorded(record) if e["event"] == "call"], what="the call at the server")
    else:
        time.sleep(0.5)
    took, out, err = serving.end_input()
    assert serving.proc.returncode == 0, err
    assert took < 2.0, took
    assert processes_with(marker) == []  # every process it started is stopped
    assert "Traceback" not in err and CANARY not in out + err
    if server == "sdk":
        assert the_call_was_cancelled(record, "sleep")["reason"]
    assert fwj("run", "show", run["run_id"])["status"] == "active"  # the run lives on by its lease


def test_mcp_serve_exits_at_once_after_a_call_its_client_cancelled(home, tmp_path):
    """The old hang: a call the client cancelled is never answered, and the server waited for
    its answer for 120 s after its input closed. The cancel also reaches the upstream server."""
    record, marker = slow_server(tmp_path)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    serving = Serving(home, run["run_id"])
    serving.call(2, "mcp__slow__sleep", {"seconds": 60})
    wait_for(lambda: [e for e in recorded(record) if e["event"] == "call"], what="the call at the server")
    serving.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "changed my mind"}})
    wait_for(lambda: [e for e in recorded(record) if e["event"] == "cancelled"], what="the cancel relayed upstream")
    took, out, err = serving.end_input()
    assert serving.proc.returncode == 0 and took < 2.0, (took, err)
    assert '"id":2' not in out.replace(" ", "")  # a cancelled request is never answered
    the_call_was_cancelled(record, "sleep")
    assert processes_with(marker) == []


def test_mcp_serve_stops_within_2_s_of_sigterm_with_a_call_in_flight(home, tmp_path):
    record, marker = slow_server(tmp_path)
    agent()
    run = fwj("run", "start", "--agent", "a1")
    serving = Serving(home, run["run_id"])
    serving.call(2, "mcp__slow__sleep", {"seconds": 60})
    wait_for(lambda: [e for e in recorded(record) if e["event"] == "call"], what="the call at the server")
    started = time.monotonic()
    serving.proc.send_signal(signal.SIGTERM)
    serving.proc.wait(timeout=30)
    assert time.monotonic() - started < 2.0
    assert serving.proc.returncode == 130
    the_call_was_cancelled(record, "sleep")
    assert processes_with(marker) == []
    serving.proc.stdin.close()
    serving.proc.stdout.close()
    serving.proc.stderr.close()
