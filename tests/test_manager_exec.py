"""The Manager never has `exec` (CONTRACT section 4): not listed, not callable, not over MCP."""

import json
import os

import anyio
from conftest import fw, fw_bin, fwj
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def test_the_manager_lists_no_exec_and_calling_it_is_denied_and_runs_nothing(home, tmp_path):
    names = [t["name"] for t in fwj("tool", "list", "--manager")["tools"]]
    assert "exec" not in names and "resource_write" in names and "task_delegate" in names
    marker = tmp_path / "ran"
    r = fw("tool", "call", "--manager", "exec", "--args", json.dumps({"argv": ["touch", str(marker)]}))
    assert r.exit_code == 5 and r.json["error"]["code"] == "denied", r
    assert not marker.exists()
    line = json.loads((home / "audit.jsonl").read_text().splitlines()[-1])
    assert (line["caller"], line["tool"], line["outcome"]) == ("manager", "exec", "refused")


def test_mcp_serve_manager_offers_no_exec(home, tmp_path):
    marker = tmp_path / "ran"

    async def session():
        params = StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--manager"], env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})
        async with Client(params) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            answer = await client.call_tool("exec", {"argv": ["touch", str(marker)]})
            return listed, answer

    listed, answer = anyio.run(session)
    assert "exec" not in listed and "resource_list" in listed
    assert answer.is_error and "denied" in answer.content[0].text
    assert not marker.exists()
