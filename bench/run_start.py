"""Starting a run of an agent without MCP servers, against listing the small sample home.

    python bench/run_start.py [--runs N]

Builds a home with an agent (model, provider, the default prompt, the resource_management
group; no MCP server), then times, in one run, interleaved so that drift hits both alike:
  - `fw run start --agent a --json` (explicit) and `fw run start --principal ops --json` (managed)
  - `fw --home sample_home resource list agent --json` (the baseline: a listing)
and prints the medians and their ratios (the aim is 1.8 or less). Figures assume compiled
bytecode, as an installed package has."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import copy_sample, fw_path, timed  # noqa: E402
from message_post import build_session_home, settle  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    with tempfile.TemporaryDirectory() as tmp:
        home, sample = Path(tmp) / "home", Path(tmp) / "sample"
        copy_sample(sample)
        build_session_home(fw, str(home))
        settle(home)
        explicit = [fw, "--home", str(home), "run", "start", "--agent", "a", "--json"]
        managed = [fw, "--home", str(home), "run", "start", "--principal", "ops", "--json"]
        list_cmd = [fw, "--home", str(sample), "resource", "list", "agent", "--json"]
        timed(explicit), timed(managed), timed(list_cmd)  # warm the index and the file cache
        explicit_times, managed_times, lists = [], [], []
        for _ in range(args.runs):
            explicit_times.append(timed(explicit)[0])
            managed_times.append(timed(managed)[0])
            lists.append(timed(list_cmd)[0])
    exp_med, man_med, list_med = statistics.median(explicit_times), statistics.median(managed_times), statistics.median(lists)
    print(f"runs each:                              {args.runs}")
    print(f"fw run start --agent a median:          {exp_med * 1000:7.1f} ms")
    print(f"fw run start --principal ops median:    {man_med * 1000:7.1f} ms")
    print(f"fw resource list agent --json:          {list_med * 1000:7.1f} ms (sample_home, the baseline)")
    print(f"ratio (run start --agent / listing):    {exp_med / list_med:7.2f}   (aim: 1.8 or less)")
    print(f"ratio (run start --principal / listing): {man_med / list_med:6.2f}")


if __name__ == "__main__":
    main()
