"""MCP tools' names and content kept across front doors (issue 29, items 4 and 5): tools that
must run as MCP tasks are listed as unavailable, optional ones called plainly; `fw mcp serve`
keeps an upstream tool's title; a result's resource links, embedded text and binary content
reach the model, `fw tool call` and MCP clients alike, the bytes only through MCP."""

import base64
import json
import os
import sys
from pathlib import Path

import anyio
from conftest import CANARY, fw, fw_bin, fwj
from fakes.chat_server import ChatServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters

RAW = str(Path(__file__).parent / "fakes" / "raw_mcp_server.py")
TOKEN = "raw-token-5e8a1f0c"  # the raw server's secret env value
BLOB = bytes(range(256)) * 4


def setup(base_url="https://llm.example.test/v1"):
    data = {"transport": "stdio", "command": sys.executable, "args": [RAW], "env": {"RAW_TOKEN": TOKEN}}
    fwj("resource", "write", "mcp", "raw", "--create", "--data", json.dumps(data))
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "mcps": ["raw"]}))


def serve_params(home, run_id):
    return StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--run", run_id],
                                 env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})


def no_secret_in(text):
    assert CANARY not in text and TOKEN not in text


EXPECTED_ITEMS = [
    "here they are",
    {"type": "resource_link", "uri": "file:///data/report.csv", "name": "report.csv", "mimeType": "text/csv"},
    "embedded notes",
    {"type": "resource", "uri": "file:///data/blob.bin", "mimeType": "application/octet-stream", "size": len(BLOB)},
    {"type": "image", "mimeType": "image/png", "size": 32},
]


# -- item 4: tools that must run as tasks ----------------------------------------------------
def test_a_task_required_tool_is_unavailable_and_a_task_optional_one_is_called_plainly(home):
    setup()
    run = fwj("run", "start", "--agent", "a1")
    why = {u["name"]: u for u in run["unavailable_tools"]}
    assert why["mcp__raw__needs_task"]["reason"] == "task_required" and "task" in why["mcp__raw__needs_task"]["detail"]
    assert "mcp__raw__needs_task" not in run["tools"] and "mcp__raw__may_task" in run["tools"]
    listed = [t["name"] for t in fwj("tool", "list", "--run", run["run_id"])["tools"]]
    assert "mcp__raw__needs_task" not in listed
    called = fw("tool", "call", "--run", run["run_id"], "mcp__raw__may_task")
    assert called.exit_code == 0 and called.json["content"] == ["may_task done"], called
    refused = fw("tool", "call", "--run", run["run_id"], "mcp__raw__needs_task")
    assert refused.exit_code == 5 and refused.json["error"]["code"] == "denied", refused  # never offered, never called


# -- item 5: titles --------------------------------------------------------------------------
def test_mcp_serve_keeps_an_upstream_title_and_names_the_tool_by_its_prefixed_name(home):
    setup()
    run = fwj("run", "start", "--agent", "a1")
    listed = {t["name"]: t for t in fwj("tool", "list", "--run", run["run_id"])["tools"]}
    assert listed["mcp__raw__titled"]["title"] == "A Friendly Title"

    async def scenario():
        async with Client(serve_params(home, run["run_id"])) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = anyio.run(scenario)
    assert tools["mcp__raw__titled"].title == "A Friendly Title"
    assert tools["mcp__raw__titled"].annotations.title == "A Friendly Title"
    assert tools["mcp__raw__plain"].title == "mcp__raw__plain"  # none upstream: its name, as before


# -- item 5: content items -------------------------------------------------------------------
def test_content_items_are_the_same_for_the_model_and_tool_call(home):
    script = [{"tool_calls": [{"name": "mcp__raw__items", "arguments": {}}]}, {"content": "seen"}]
    with ChatServer(script) as server:
        setup(server.base_url)
        doc = fwj("agent", "run", "a1", "--message", "show me")
    assert doc["tool_calls"] == [{"name": "mcp__raw__items", "outcome": "ok"}]
    read = json.loads(server.requests[1]["json"]["messages"][-1]["content"])
    assert read["content"] == EXPECTED_ITEMS and read["truncated"] is False
    run = fwj("run", "start", "--agent", "a1")
    called = fw("tool", "call", "--run", run["run_id"], "mcp__raw__items")
    assert called.exit_code == 0 and called.json["content"] == EXPECTED_ITEMS, called
    assert base64.b64encode(BLOB).decode()[:40] not in called.stdout + json.dumps(read)  # no bytes but through MCP


def test_mcp_serve_passes_links_and_bytes_on_as_mcp_content(home):
    setup()
    run = fwj("run", "start", "--agent", "a1")

    async def scenario():
        async with Client(serve_params(home, run["run_id"])) as client:
            return await client.call_tool("mcp__raw__items", {}), await client.call_tool("mcp__raw__items", {"secret": True})

    result, with_secret = anyio.run(scenario)
    assert result.is_error is False
    text, link, blob, image = result.content
    assert json.loads(text.text)["content"] == EXPECTED_ITEMS  # the same document as every other door
    assert (link.type, str(link.uri), link.name, link.mime_type) == ("resource_link", "file:///data/report.csv", "report.csv", "text/csv")
    assert blob.type == "resource" and str(blob.resource.uri) == "file:///data/blob.bin"
    assert base64.b64decode(blob.resource.blob) == BLOB and blob.resource.mime_type == "application/octet-stream"
    assert image.type == "image" and image.mime_type == "image/png" and len(base64.b64decode(image.data)) == 32
    # Bytes that hold a secret value are withheld, and the document says so.
    shown = json.loads(with_secret.content[0].text)["content"][3]
    assert shown["withheld"] == "it holds a secret value" and shown["size"] == len(BLOB) + len(TOKEN)
    assert [c.type for c in with_secret.content] == ["text", "resource_link", "image"]
    no_secret_in(json.dumps([c.model_dump(mode="json") for c in with_secret.content]))


def test_embedded_text_is_its_text_cut_at_64_kib(home):
    setup()
    run = fwj("run", "start", "--agent", "a1")
    cut = fw("tool", "call", "--run", run["run_id"], "mcp__raw__items", "--args", '{"embedded_bytes": 100000}')
    assert cut.exit_code == 0, cut
    content = cut.json["content"]
    assert cut.json["truncated"] is True and content[:2] == EXPECTED_ITEMS[:2]
    assert content[2] == "e" * (64 * 1024 - len("here they are") - len(json.dumps(EXPECTED_ITEMS[1]))) and len(content) == 3
