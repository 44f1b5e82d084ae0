"""Planning a recursive delete in a large home, against listing the small sample home.

    python bench/delete_plan.py [--agents N] [--runs N]

Builds a home of N agents (default 10,000) spread over 50 models of 10 providers, where
provider `big` has two models used by about 200 agents, then times, in one run:
  - `fw resource delete provider big --recursive --json` (the plan; deletes nothing)
  - `fw --home sample_home resource list agent --json` (the baseline)
and prints the medians and their ratio, plus the first (cold index) run of the plan."""

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


def build_home(root: Path, agents: int) -> int:
    fw = fw_path()
    subprocess.run([fw, "home", "init", str(root)], check=True, stdout=subprocess.DEVNULL)
    providers = ["big"] + [f"prov{i}" for i in range(9)]
    for p in providers:
        (root / f"providers/default/{p}.yaml").write_text(f"base_url: https://{p}.example.test/v1\napi_key_env: KEY_{p.upper()}\n")
    models = []
    for i in range(50):
        provider = "big" if i < 2 else providers[1 + i % 9]
        name = f"model{i:02d}"
        models.append(name)
        (root / f"models/default/{name}.yaml").write_text(f"provider: {provider}\nmodel_id: m-{i}\ncapabilities:\n  tool_call: true\n")
    dependents = 0
    for i in range(agents):
        model = models[i % 50]
        if model in ("model00", "model01") and dependents >= 200:
            model = models[2 + i % 48]
        if model in ("model00", "model01"):
            dependents += 1
        (root / f"agents/default/agent{i:05d}.yaml").write_text(
            f"description: agent number {i}\nmodel: {model}\nprompt: default\nbuiltin_tools: []\n"
        )
    return dependents


def fw_path() -> str:
    found = shutil.which("fw", path=os.path.dirname(sys.executable)) or shutil.which("fw")
    if not found:
        sys.exit("fw is not installed in this environment: pip install -e .")
    return found


def timed(cmd: list[str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    fw = fw_path()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big"
        sample = Path(tmp) / "sample"
        shutil.copytree(REPO / "sample_home", sample, ignore=shutil.ignore_patterns(".index*", ".lock"))
        start = time.perf_counter()
        dependents = build_home(big, args.agents)
        built = time.perf_counter() - start
        time.sleep(2.1)  # files changed in the last 2 s are never cached: let the home settle
        plan_cmd = [fw, "--home", str(big), "resource", "delete", "provider", "big", "--recursive", "--json"]
        list_cmd = [fw, "--home", str(sample), "resource", "list", "agent", "--json"]
        cold, out = timed(plan_cmd)
        plan = json.loads(out)["plan"]
        timed(list_cmd)
        plan_times, list_times = [], []
        for _ in range(args.runs):
            plan_times.append(timed(plan_cmd)[0])
            list_times.append(timed(list_cmd)[0])
    plan_med, list_med = statistics.median(plan_times), statistics.median(list_times)
    print(f"home: {args.agents} agents, 50 models, 10 providers (built in {built:.1f} s)")
    print(f"plan size: {len(plan)} items ({dependents} dependent agents, 2 models, 1 provider)")
    print(f"plan, first run (cold index):     {cold * 1000:8.1f} ms")
    print(f"plan, median of {args.runs} (warm index): {plan_med * 1000:8.1f} ms")
    print(f"list sample_home, median:         {list_med * 1000:8.1f} ms")
    print(f"ratio (plan / list):              {plan_med / list_med:8.2f}")


if __name__ == "__main__":
    main()
