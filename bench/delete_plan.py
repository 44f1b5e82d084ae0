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
import tempfile
import time
from pathlib import Path

from _common import build_home, copy_sample, fw_path, medians, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    fw = fw_path()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big"
        sample = Path(tmp) / "sample"
        copy_sample(sample)
        start = time.perf_counter()
        dependents = build_home(big, args.agents)
        built = time.perf_counter() - start
        time.sleep(2.1)  # files changed in the last 2 s are never cached: let the home settle
        plan_cmd = [fw, "--home", str(big), "resource", "delete", "provider", "big", "--recursive", "--json"]
        list_cmd = [fw, "--home", str(sample), "resource", "list", "agent", "--json"]
        cold, out = timed(plan_cmd)
        plan = json.loads(out)["plan"]
        timed(list_cmd)
        plan_med, list_med = medians([plan_cmd, list_cmd], args.runs)
    print(f"home: {args.agents} agents, 50 models, 10 providers (built in {built:.1f} s)")
    print(f"plan size: {len(plan)} items ({dependents} dependent agents, 2 models, 1 provider)")
    print(f"plan, first run (cold index):     {cold * 1000:8.1f} ms")
    print(f"plan, median of {args.runs} (warm index): {plan_med * 1000:8.1f} ms")
    print(f"list sample_home, median:         {list_med * 1000:8.1f} ms")
    print(f"ratio (plan / list):              {plan_med / list_med:8.2f}")


if __name__ == "__main__":
    main()
