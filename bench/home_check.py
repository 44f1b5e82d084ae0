"""`fw home check` of a large home, against checking the small sample home.

    python bench/home_check.py [--agents N] [--runs N]

Builds a home of N agents (default 10,000; the same home as bench/delete_plan.py), then
times, in one run, interleaved so that drift hits both alike:
  - `fw --home BIG home check --json`
  - `fw --home sample_home home check --json` (the baseline)
and prints the medians and their ratio (the aim is 3 or less), plus the first check of the
large home, which reads every file and builds the index (the cold check). Figures assume
compiled bytecode, as an installed package has."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import build_home, copy_sample, fw_path, medians  # noqa: E402


def check(cmd: list[str]) -> tuple[float, dict]:
    """Time one check; exit 4 (problems found) is an answer too."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 4):
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}")
    return elapsed, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    fw = fw_path()
    with tempfile.TemporaryDirectory() as tmp:
        big, sample = Path(tmp) / "big", Path(tmp) / "sample"
        copy_sample(sample)
        build_home(big, args.agents)
        time.sleep(2.1)  # files changed in the last 2 s are never cached: let the home settle
        big_cmd = [fw, "--home", str(big), "home", "check", "--json"]
        small_cmd = [fw, "--home", str(sample), "home", "check", "--json"]
        cold, doc = check(big_cmd)
        check(small_cmd)
        big_med, small_med = medians([big_cmd, small_cmd], args.runs, check)
    print(f"home: {doc['counts'].get('agent')} agents, 50 models, 10 providers; ok: {doc['ok']}")
    print(f"big home, first check (cold index): {cold * 1000:8.1f} ms")
    print(f"big home, median of {args.runs} (warm index): {big_med * 1000:8.1f} ms")
    print(f"sample_home, median:                {small_med * 1000:8.1f} ms")
    print(f"ratio (big / sample):               {big_med / small_med:8.2f}   (aim: 3 or less)")


if __name__ == "__main__":
    main()
