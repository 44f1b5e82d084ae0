"""An MCP server's own helper processes stop with the run (CONTRACT section 6): each stdio
server runs under fw's process supervisor, which stops everything it started."""

import json
import sys

from conftest import fw, fwj, processes_with, wait_until_gone
from fakes.chat_server import ChatServer
from test_agent_run import FAKE_MCP, setup_agent
from test_exec_supervision import marker, sleeper


def server_with_a_helper(mark, *, detached=False):
    """A stdio server started by a shell that first starts a helper: in the server's process
    group, or in a session of its own."""
    helper = f"setsid {sleeper(mark)}" if detached else sleeper(mark)
    script = f"{helper} & exec {sys.executable} {FAKE_MCP}"
    fwj("resource", "write", "mcp", "m1", "--create", "--data", json.dumps({"transport": "stdio", "command": "sh", "args": ["-c", script]}))


def test_the_helpers_of_an_mcp_server_stop_when_the_run_ends(home):
    marks = [marker(), marker()]
    with ChatServer([{"content": "done"}], repeat_last=True) as server:
        setup_agent(server.base_url)
        for mark, detached in zip(marks, (False, True)):
            server_with_a_helper(mark, detached=detached)
            fwj("resource", "write", "agent", "a1", "--data", json.dumps({"mcps": ["m1"]}))
            r = fw("agent", "run", "a1", "--message", "hi", "--json")
            assert r.exit_code == 0 and r.json["answer"] == "done", r
            assert "mcp__m1__echo" in fwj("run", "show", r.json["run_id"])["tools"]
            assert processes_with(mark) == [], "a helper of the MCP server outlived the run"
            fwj("resource", "write", "agent", "a1", "--data", json.dumps({"mcps": []}))
            fwj("resource", "delete", "mcp", "m1", "--confirm", "mcp/m1")
    assert all(wait_until_gone(mark) == [] for mark in marks)
