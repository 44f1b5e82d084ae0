"""What `fw agent run` adds over `fw run start`, for an agent without MCP servers.

    python bench/agent_run.py [--runs N]

Both are timed in this run, on this machine, against a scripted chat-completions server on
127.0.0.1 that answers at once (one round, no tool call), so the difference is fw's own cost:
reading the model and provider, the HTTP client, the loop, and ending the run. Prints the
median of each, their difference and their ratio."""

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
sys.path.insert(0, str(REPO / "tests"))

from fakes.chat_server import ChatServer  # noqa: E402


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    fw = shutil.which("fw", path=os.path.dirname(sys.executable)) or shutil.which("fw")
    if fw is None:
        sys.exit("fw is not installed in this environment: pip install -e .")
    with tempfile.TemporaryDirectory() as tmp, ChatServer([{"content": "ok"}], repeat_last=True) as server:
        env = {**os.environ, "FW_HOME": str(Path(tmp) / "home")}
        env.pop("FW_JSON", None)
        setup = [
            ["home", "init"],
            ["resource", "write", "provider", "p", "--create", "--data", json.dumps({"base_url": server.base_url, "api_key_env": "BENCH_KEY"})],
            ["resource", "write", "model", "m", "--create", "--data", json.dumps({"provider": "p", "model_id": "m-1", "capabilities": {"tool_call": True}})],
            ["agent", "create", "a", "--model", "m", "--builtin-tool", "resource_management"],
        ]
        env["BENCH_KEY"] = "sk-bench-key-0000"
        for step in setup:
            subprocess.run([fw, *step], check=True, stdout=subprocess.DEVNULL, env=env)
        start_cmd = [fw, "run", "start", "--agent", "a", "--json"]
        run_cmd = [fw, "agent", "run", "a", "--message", "hi", "--json"]
        timed(start_cmd, env), timed(run_cmd, env)  # warm the index and the file cache
        starts, runs = [], []
        for _ in range(args.runs):  # interleaved, so that drift hits both alike
            starts.append(timed(start_cmd, env))
            runs.append(timed(run_cmd, env))
    start_med, run_med = statistics.median(starts), statistics.median(runs)
    print(f"runs each:                      {args.runs}")
    print(f"fw run start median:            {start_med * 1000:7.1f} ms")
    print(f"fw agent run median (1 round):  {run_med * 1000:7.1f} ms")
    print(f"added by agent run:             {(run_med - start_med) * 1000:7.1f} ms")
    print(f"ratio (agent run / run start):  {run_med / start_med:7.2f}")


if __name__ == "__main__":
    main()
