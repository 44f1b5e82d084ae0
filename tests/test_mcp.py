"""fw mcp serve, driven by the official MCP client over stdio."""

import json
import os

import anyio
from conftest import CANARY, fw_bin, fwj, make_basics, snapshot
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def params(home, *args):
    return StdioServerParameters(command=fw_bin(), args=["mcp", "serve", *args], env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})


def run(coro):
    return anyio.run(coro)


def test_manager_over_mcp_lists_and_calls_tools(home):
    make_basics(with_key=True)

    async def scenario():
        async with Client(params(home, "--manager")) as client:
            tools = await client.list_tools()
            names = [t.name for t in tools.tools]
            assert "resource_delete" in names and "agent_bind" in names
            schema = next(t for t in tools.tools if t.name == "resource_write").input_schema
            assert schema["additionalProperties"] is False
            listed = await client.call_tool("resource_list", {"kind": "provider"})
            assert listed.is_error is False
            doc = json.loads(listed.content[0].text)
            assert doc["items"][0]["api_key_set"] is True
            read = await client.call_tool("resource_read", {"kind": "provider", "reference": "p1"})
            assert CANARY not in read.content[0].text
            plan = await client.call_tool("resource_delete", {"kind": "model", "reference": "m1", "recursive": True})
            return json.loads(plan.content[0].text)

    plan = run(scenario)
    assert plan == fwj("resource", "delete", "model", "m1", "--recursive")


def test_a_run_over_mcp_sees_only_its_tools_and_is_refused_the_rest(home):
    make_basics(with_key=True)
    bare = fwj("run", "start", "--agent", "a1")
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    mounted = fwj("run", "start", "--agent", "a1")

    async def scenario():
        async with Client(params(home, "--run", bare["run_id"])) as client:
            assert (await client.list_tools()).tools == []
            before = snapshot(home)
            forged = await client.call_tool("framework_resource_write", {"kind": "agent", "reference": "x", "create": True, "data": {}})
            assert forged.is_error is True
            assert json.loads(forged.content[0].text)["error"]["code"] == "denied"
            after = snapshot(home)
            before.pop("audit.jsonl", None)
            after.pop("audit.jsonl", None)
            assert after == before
        async with Client(params(home, "--run", mounted["run_id"])) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names and all(n.startswith("framework_") for n in names)
            made = await client.call_tool("framework_resource_write", {"kind": "harness", "reference": "h1", "create": True, "data": {"type": "local"}})
            assert made.is_error is False
            bad = await client.call_tool("framework_resource_list", {"kind": "gizmo"})
            assert bad.is_error is True and json.loads(bad.content[0].text)["error"]["code"] == "invalid"
            fwj("run", "end", mounted["run_id"])
            ended = await client.call_tool("framework_resource_list", {"kind": "agent"})
            assert json.loads(ended.content[0].text)["error"]["code"] == "run_ended"

    run(scenario)
    assert fwj("resource", "read", "harness", "h1")["name"] == "h1"
    tools = [json.loads(l)["tool"] for l in (home / "audit.jsonl").read_text().splitlines()]
    assert tools == ["framework_resource_write", "framework_resource_write", "framework_resource_list", "framework_resource_list"]


def test_serving_a_missing_run_is_an_error(home):
    from conftest import fw_proc

    result = fw_proc("mcp", "serve", "--run", "run-20260101T000000-00000000", "--json", home=home)
    assert result.exit_code == 3 and json.loads(result.stdout)["error"]["code"] == "not_found"
