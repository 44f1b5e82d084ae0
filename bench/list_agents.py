"""Listing agents in a large home, against listing them in the small sample home.

    python bench/list_agents.py [--agents N] [--runs N]

Builds a home of N agents (default 10,000; the same home as bench/delete_plan.py), then
times, in one run, interleaved so that drift hits both alike:
  - `fw --home BIG resource list agent --json`
  - `fw --home sample_home resource list agent --json` (the baseline)
and prints the medians and their ratio (the aim is 3 or less), plus the first listing of the
large home, which builds its index (the cold listing)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import build_home, copy_sample, fw_path, medians, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    fw = fw_path()
    with tempfile.TemporaryDirectory() as tmp:
        big, sample = Path(tmp) / "big", Path(tmp) / "sample"
        copy_sample(sample)
        build_home(big, args.agents)
        time.sleep(2.1)  # files changed in the last 2 s are never cached: let the home settle
        big_cmd = [fw, "--home", str(big), "resource", "list", "agent", "--json"]
        small_cmd = [fw, "--home", str(sample), "resource", "list", "agent", "--json"]
        cold, out = timed(big_cmd)
        listed = out.count(b'"name"')
        timed(small_cmd)
        big_med, small_med = medians([big_cmd, small_cmd], args.runs)
    print(f"home: {args.agents} agents ({listed} listed), 50 models, 10 providers")
    print(f"big home, first listing (cold index): {cold * 1000:8.1f} ms")
    print(f"big home, median of {args.runs} (warm index):  {big_med * 1000:8.1f} ms")
    print(f"sample_home, median:                  {small_med * 1000:8.1f} ms")
    print(f"ratio (big / sample):                 {big_med / small_med:8.2f}")


if __name__ == "__main__":
    main()
