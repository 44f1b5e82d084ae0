"""MCP start-up: `fw run start` of an agent with one stdio MCP server, against that server's
own start-up (spawned, initialised and its tools listed by a minimal client), both measured in
this run, on this machine; and `fw run start` with no MCP server, for reference.

    python bench/mcp_start.py [--runs N]

Two servers: tests/fakes/mcp_server.py (built on the MCP SDK, so its own start-up includes the
SDK's import) and tests/fakes/raw_mcp_server.py (raw JSON-RPC, starts at once). Prints the
medians and the difference fw adds (the aim: 0.5 s or less). And an http server (the raw one
with --http, started once beforehand): what connecting to it, initialising and listing its
tools adds to `fw run start`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVERS = {"sdk": REPO / "tests" / "fakes" / "mcp_server.py", "raw": REPO / "tests" / "fakes" / "raw_mcp_server.py"}


def own_start(server: Path) -> float:
    """Spawn the server, initialise it and list its tools, as any client must before a run can start."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    for message in messages:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" in message:
            while json.loads(proc.stdout.readline()).get("id") != message["id"]:
                pass
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed


def fw_start(fw: str, home: Path, agent: str) -> float:
    start = time.perf_counter()
    subprocess.run([fw, "--home", str(home), "run", "start", "--agent", agent, "--json"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def fw_json(fw: str, home: Path, *args: str) -> None:
    subprocess.run([fw, "--home", str(home), *args, "--json"], check=True, stdout=subprocess.DEVNULL)


def http_server() -> tuple[subprocess.Popen, str]:
    sys.path.insert(0, str(REPO / "tests"))
    from fakes import http_mcp

    try:
        return http_mcp.start(lambda port: [sys.executable, str(SERVERS["raw"]), "--http", str(port)], seconds=30)
    except RuntimeError as exc:
        sys.exit(str(exc))


def make_home(fw: str, root: Path) -> Path:
    home = root / "home"
    subprocess.run([fw, "home", "init", str(home)], check=True, stdout=subprocess.DEVNULL)
    fw_json(fw, home, "resource", "write", "provider", "p1", "--create", "--data",
            json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key_env": "BENCH_KEY"}))
    fw_json(fw, home, "resource", "write", "model", "m1", "--create", "--data",
            json.dumps({"provider": "p1", "model_id": "m", "capabilities": {"tool_call": True}}))
    fw_json(fw, home, "resource", "write", "agent", "none", "--create", "--data", json.dumps({"model": "m1"}))
    for name, server in SERVERS.items():
        fw_json(fw, home, "resource", "write", "mcp", name, "--create", "--data",
                json.dumps({"transport": "stdio", "command": sys.executable, "args": [str(server)]}))
        fw_json(fw, home, "resource", "write", "agent", f"with-{name}", "--create", "--data",
                json.dumps({"model": "m1", "mcps": [name]}))
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    fw = shutil.which("fw", path=os.path.dirname(sys.executable)) or shutil.which("fw")
    if fw is None:
        sys.exit("fw is not installed in this environment: pip install -e .")
    http_proc, url = http_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = make_home(fw, Path(tmp))
            fw_json(fw, home, "resource", "write", "mcp", "web", "--create", "--data", json.dumps({"transport": "http", "url": url}))
            fw_json(fw, home, "resource", "write", "agent", "with-http", "--create", "--data", json.dumps({"model": "m1", "mcps": ["web"]}))
            fw_start(fw, home, "none")  # build the index, warm the file cache
            times: dict[str, list[float]] = {"none": [], "http": []}
            for name in SERVERS:
                times[name], times[f"fw-{name}"] = [], []
                own_start(SERVERS[name])
            for _ in range(args.runs):  # interleaved, so that drift hits all alike
                times["none"].append(fw_start(fw, home, "none"))
                for name, server in SERVERS.items():
                    times[name].append(own_start(server))
                    times[f"fw-{name}"].append(fw_start(fw, home, f"with-{name}"))
                times["http"].append(fw_start(fw, home, "with-http"))
    finally:
        http_proc.terminate()
        http_proc.wait(timeout=30)
    med = {key: statistics.median(values) for key, values in times.items()}
    print(f"runs each: {args.runs}; load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"fw run start, no MCP server:            {med['none'] * 1000:7.0f} ms")
    for name in SERVERS:
        print(f"{name} server's own start-up (list tools):  {med[name] * 1000:7.0f} ms")
        print(f"fw run start with the {name} server:      {med[f'fw-{name}'] * 1000:7.0f} ms"
              f"   (+{(med[f'fw-{name}'] - med[name]) * 1000:.0f} ms over the server; aim: 500 ms or less)")
    print(f"fw run start with an http server:    {med['http'] * 1000:7.0f} ms"
          f"   (+{(med['http'] - med['none']) * 1000:.0f} ms over no server: connect, initialise, list, end the session)")


if __name__ == "__main__":
    main()
