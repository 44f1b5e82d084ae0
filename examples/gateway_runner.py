#!/usr/bin/env python3
"""A small external runner for fw: an agent program that reaches its run only through the
gateway (MCP over streamable HTTP), with the official MCP SDK.

fw starts it for each run of an agent whose harness has `type: external` and
`command: [examples/gateway_runner.py]`, with FW_GATEWAY_URL, FW_GATEWAY_TOKEN and
FW_RUN_ID in its environment and the input text on standard input. What it prints is the
run's answer. Input `call TOOL {"param": ...}` calls that tool of the run; anything else is
answered with the names of the run's tools. A real runner would hand the tools to its model.
When the gateway refuses it (its run has ended, its token is wrong) it says so in one line on
standard error and exits 1.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main(text: str) -> str:
    headers = {"Authorization": f"Bearer {os.environ['FW_GATEWAY_TOKEN']}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with streamable_http_client(os.environ["FW_GATEWAY_URL"], http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                if text.startswith("call "):
                    _, name, *rest = text.split(" ", 2)
                    arguments = {"tool_name": name, "parameters": json.loads(rest[0]) if rest else {}}
                    result = await session.call_tool("fw_call_tool", arguments)
                    return ("refused: " if result.is_error else "") + result.content[0].text
                listed = await session.list_tools()
                return "tools: " + ", ".join(tool.name for tool in listed.tools)


def first_cause(exc: BaseException) -> BaseException:
    """The error under the MCP client's exception groups."""
    while getattr(exc, "exceptions", None):  # an exception group
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    missing = [name for name in ("FW_GATEWAY_URL", "FW_GATEWAY_TOKEN") if not os.environ.get(name)]
    if missing:
        sys.exit(f"gateway_runner: {' and '.join(missing)} not set: fw sets them when it starts this runner for a run")
    try:
        print(asyncio.run(main(sys.stdin.read().strip())))
    except Exception as exc:
        cause = first_cause(exc)
        status = getattr(getattr(cause, "response", None), "status_code", None)
        said = (str(cause).splitlines() or [""])[0][:200].replace(os.environ["FW_GATEWAY_TOKEN"], "***")
        why = f"HTTP {status}" if status else f"{type(cause).__name__}: {said}" if said else type(cause).__name__
        sys.exit(f"gateway_runner: the gateway at {os.environ['FW_GATEWAY_URL']} failed ({why}): is the run still active, "
                 "and its token right?")
