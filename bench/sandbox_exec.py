"""The sandbox's added cost per exec call: `framework_exec` of `true` on two runs of the same
agent, one with `execution.sandbox: bubblewrap` (the default) and one with `none`, both measured
in this run on this machine, interleaved so that drift weighs on both alike:

- in-process: the tool service's `call_tool`, as the model loop calls it (the cost the
  sandbox adds to each call a model makes);
- `fw tool call --run`: a new fw process per call (what a script pays).

Also the probe a run makes once when it starts (`bwrap ... true`), against starting `true`
directly.

    python bench/sandbox_exec.py [--calls N]

Prints the medians, what the sandbox adds per call (the aim: under 20 ms over an unconfined
call) and the ratios."""

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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fw_path, timed  # noqa: E402

AIM_MS = 20.0


def fw_json(fw: str, home: Path, *args: str) -> dict:
    out = subprocess.run([fw, "--home", str(home), *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def make_home(fw: str, home: Path) -> tuple[str, str]:
    """A home with one exec agent; a run of it in the sandbox, and one outside it."""
    subprocess.run([fw, "home", "init", str(home)], check=True, stdout=subprocess.DEVNULL)
    fw_json(fw, home, "resource", "write", "provider", "p1", "--create", "--data",
            json.dumps({"base_url": "https://llm.example.test/v1", "api_key_env": "BENCH_KEY"}))
    fw_json(fw, home, "resource", "write", "model", "m1", "--create", "--data",
            json.dumps({"provider": "p1", "model_id": "x", "capabilities": {"tool_call": True}}))
    fw_json(fw, home, "agent", "create", "a1", "--model", "m1", "--builtin-tool", "local_execution", "--execution")
    boxed = fw_json(fw, home, "run", "start", "--agent", "a1", "--lease", "36000")
    fw_json(fw, home, "agent", "edit", "a1", "--execution-sandbox", "none")
    unconfined = fw_json(fw, home, "run", "start", "--agent", "a1", "--lease", "36000")
    for run in (boxed, unconfined):
        assert "framework_exec" in run["tools"], run["unavailable_tools"]
    return boxed["run_id"], unconfined["run_id"]


def in_process(home: Path, runs: list[str], calls: int) -> list[list[float]]:
    from framework_cli.domain.tool_types import Caller
    from framework_cli.home.store import Home
    from framework_cli.tools.service import call_tool

    store, times = Home(home), [[] for _ in runs]
    for run_id in runs:  # warm: the first call imports the validator
        call_tool(store, Caller("run", run_id), "framework_exec", {"argv": ["true"]})
    for _ in range(calls):
        for run_id, seen in zip(runs, times):
            start = time.perf_counter()
            done = call_tool(store, Caller("run", run_id), "framework_exec", {"argv": ["true"]})
            seen.append(time.perf_counter() - start)
            assert done["exit_code"] == 0, done
    return times


def probe_cost(calls: int) -> tuple[float, float]:
    """A run's probe (`runtime.sandbox.probe`), against starting `true` alone."""
    from framework_cli.runtime.sandbox import probe

    boxed, bare = [], []
    for _ in range(calls):
        bare.append(timed([shutil.which("true") or "/bin/true"])[0])
        start = time.perf_counter()
        assert probe() is None
        boxed.append(time.perf_counter() - start)
    return statistics.median(boxed), statistics.median(bare)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bwrap is not installed: apt-get install bubblewrap")
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        boxed, unconfined = make_home(fw, home)
        boxed_times, bare_times = (statistics.median(t) for t in in_process(home, [boxed, unconfined], args.calls))
        cli = [[fw, "--home", str(home), "tool", "call", "--run", run_id, "framework_exec", "--args", '{"argv": ["true"]}']
               for run_id in (boxed, unconfined)]
        cli_runs = max(10, args.calls // 5)
        cli_times: list[list[float]] = [[], []]
        for _ in range(cli_runs):
            for cmd, seen in zip(cli, cli_times):
                seen.append(timed(cmd)[0])
        cli_boxed, cli_bare = (statistics.median(t) for t in cli_times)
    probe_boxed, probe_bare = probe_cost(max(20, args.calls // 2))
    added = (boxed_times - bare_times) * 1000
    print(f"calls each (in-process):                 {args.calls}")
    print(f"framework_exec true, sandboxed:           {boxed_times * 1000:7.1f} ms")
    print(f"framework_exec true, unconfined:          {bare_times * 1000:7.1f} ms (the baseline)")
    print(f"the sandbox adds per call:                {added:7.1f} ms   (aim: under {AIM_MS:g} ms)")
    print(f"ratio (sandboxed / unconfined):           {boxed_times / bare_times:7.2f}")
    print(f"fw tool call --run, sandboxed:            {cli_boxed * 1000:7.1f} ms ({cli_runs} runs)")
    print(f"fw tool call --run, unconfined:           {cli_bare * 1000:7.1f} ms")
    print(f"ratio (fw tool call, sandboxed / unconfined): {cli_boxed / cli_bare:5.2f}")
    print(f"a run's probe (bwrap ... true):           {probe_boxed * 1000:7.1f} ms, against `true` alone {probe_bare * 1000:.1f} ms")


if __name__ == "__main__":
    main()
