"""What `fw agent run` adds over `fw run start`, for an agent without MCP servers.

    python bench/agent_run.py [--runs N]

Both are timed in this run, on this machine, against a scripted chat-completions server on
127.0.0.1 that answers at once (one round, no tool call), so the difference is fw's own cost:
reading the model and provider, the HTTP client, the loop, and ending the run. Prints the
median of each, their difference and their ratio."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from _common import fw_path, model_home_steps, timed  # noqa: E402
from fakes.chat_server import ChatServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"  # the provider reads its key from here
    with tempfile.TemporaryDirectory() as tmp, ChatServer([{"content": "ok"}], repeat_last=True) as server:
        home = str(Path(tmp) / "home")
        setup = [*model_home_steps(server.base_url), ["agent", "create", "a", "--model", "m", "--builtin-tool", "resource_management"]]
        for step in setup:
            timed([fw, "--home", home, *step])
        start_cmd = [fw, "--home", home, "run", "start", "--agent", "a", "--json"]
        run_cmd = [fw, "--home", home, "agent", "run", "a", "--message", "hi", "--json"]
        timed(start_cmd), timed(run_cmd)  # warm the index and the file cache
        starts, runs = [], []
        for _ in range(args.runs):  # interleaved, so that drift hits both alike
            starts.append(timed(start_cmd)[0])
            runs.append(timed(run_cmd)[0])
    start_med, run_med = statistics.median(starts), statistics.median(runs)
    print(f"runs each:                      {args.runs}")
    print(f"fw run start median:            {start_med * 1000:7.1f} ms")
    print(f"fw agent run median (1 round):  {run_med * 1000:7.1f} ms")
    print(f"added by agent run:             {(run_med - start_med) * 1000:7.1f} ms")
    print(f"ratio (agent run / run start):  {run_med / start_med:7.2f}")


if __name__ == "__main__":
    main()
