"""The gateway's added cost per tool call: one call of `framework_resource_list` on the same
run, three ways, all measured in this run on this machine:

- in-process: the tool service's `call_tool`, as the model loop calls it;
- through the gateway: a running `fw mcp serve --http`, with the official MCP client over
  streamable HTTP, one session, many calls (what an external runner pays per call);
- `fw tool call --run`: a new fw process per call.

    python bench/gateway.py [--calls N]

Prints the medians, and what the gateway adds per call against the in-process call and
against `fw tool call --run`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def fw_json(fw: str, home: Path, *args: str) -> dict:
    out = subprocess.run([fw, "--home", str(home), *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def make_home(fw: str, home: Path) -> dict:
    subprocess.run([fw, "home", "init", str(home)], check=True, stdout=subprocess.DEVNULL)
    fw_json(fw, home, "resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://llm.example.test/v1", "api_key_env": "BENCH_KEY"}))
    fw_json(fw, home, "resource", "write", "model", "m1", "--create", "--data",
            json.dumps({"provider": "p1", "model_id": "x", "capabilities": {"tool_call": True}}))
    fw_json(fw, home, "agent", "create", "a1", "--model", "m1", "--builtin-tool", "resource_management")
    return fw_json(fw, home, "run", "start", "--agent", "a1", "--lease", "36000")


def in_process(home: Path, run_id: str, calls: int) -> list[float]:
    from framework_cli.domain.tool_types import Caller
    from framework_cli.home.store import Home
    from framework_cli.tools.service import call_tool

    store, caller, times = Home(home), Caller("run", run_id), []
    for _ in range(calls):
        start = time.perf_counter()
        call_tool(store, caller, "framework_resource_list", {"kind": "agent"})
        times.append(time.perf_counter() - start)
    return times


async def _through_gateway(url: str, token: str, calls: int) -> list[float]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    times = []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("framework_resource_list", {"kind": "agent"})  # warm: first imports
                for _ in range(calls):
                    start = time.perf_counter()
                    result = await session.call_tool("framework_resource_list", {"kind": "agent"})
                    times.append(time.perf_counter() - start)
                    assert not result.is_error, result
    return times


def raw_posts(url: str, token: str, calls: int) -> list[float]:
    """The same call as one JSON-RPC POST each, with urllib (a new connection each): the
    gateway's own cost, without the MCP client's."""
    import urllib.request

    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "Mcp-Protocol-Version": "2025-06-18"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "framework_resource_list", "arguments": {"kind": "agent"}}}).encode()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers, method="POST")).read()
        times.append(time.perf_counter() - start)
    return times


def through_gateway(fw: str, home: Path, token: str, calls: int) -> tuple[list[float], list[float]]:
    proc = subprocess.Popen([fw, "--home", str(home), "mcp", "serve", "--http", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().split()[-1]
        return asyncio.run(_through_gateway(url, token, calls)), raw_posts(url, token, calls)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def tool_call(fw: str, home: Path, run_id: str, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        subprocess.run([fw, "--home", str(home), "tool", "call", "--run", run_id, "framework_resource_list", "--args", '{"kind": "agent"}'],
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls in-process and through the gateway (a tenth of them as processes)")
    args = parser.parse_args()
    fw = shutil.which("fw", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert fw, "install fw first (pip install -e .)"
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        run = make_home(fw, home)
        local = statistics.median(in_process(home, run["run_id"], args.calls))
        client_times, raw_times = through_gateway(fw, home, run["gateway_token"], args.calls)
        gateway, raw = statistics.median(client_times), statistics.median(raw_times)
        process = statistics.median(tool_call(fw, home, run["run_id"], max(5, args.calls // 10)))
    print(f"in-process call_tool:      {local * 1000:8.2f} ms a call (median)")
    print(f"through the gateway:       {gateway * 1000:8.2f} ms a call (median, one MCP session)")
    print(f"gateway, raw JSON-RPC:     {raw * 1000:8.2f} ms a call (median, one POST each with urllib)")
    print(f"fw tool call --run:        {process * 1000:8.2f} ms a call (median, a process each)")
    print(f"the gateway itself adds {(raw - local) * 1000:.2f} ms a call to an in-process call")
    print(f"with the official MCP client a call costs {(gateway - local) * 1000:.2f} ms more than in-process,")
    print(f"and {(process - gateway) * 1000:.2f} ms less than fw tool call --run ({process / gateway:.1f}x faster)")
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
