"""Start-up speed: `fw --home sample_home resource list agent --json` against
`python -c "import typer"`, both measured in this run, on this machine.

    python bench/startup.py [--runs N]

Prints the median of each and their ratio (the aim is 1.5 or less)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import copy_sample  # noqa: E402


def timed(cmd: list[str], runs: int, env: dict[str, str]) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    fw = shutil.which("fw", path=os.path.dirname(sys.executable)) or shutil.which("fw")
    if fw is None:
        sys.exit("fw is not installed in this environment: pip install -e .")
    env = dict(os.environ)
    env.pop("FW_JSON", None)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "sample_home"
        copy_sample(home)
        fw_cmd = [fw, "--home", str(home), "resource", "list", "agent", "--json"]
        base_cmd = [sys.executable, "-c", "import typer"]
        cold = timed(fw_cmd, 1, env)[0]  # the first run builds the index
        timed(base_cmd, 3, env)  # warm the file cache
        fw_times, base_times = [], []
        for _ in range(args.runs):  # interleaved, so that drift hits both alike
            fw_times += timed(fw_cmd, 1, env)
            base_times += timed(base_cmd, 1, env)
    fw_med, base_med = statistics.median(fw_times), statistics.median(base_times)
    print(f"runs each:                        {args.runs}")
    print(f"python -c 'import typer' median:  {base_med * 1000:7.1f} ms")
    print(f"fw resource list agent --json:    {fw_med * 1000:7.1f} ms (first run, cold index: {cold * 1000:.1f} ms)")
    print(f"ratio (fw / import typer):        {fw_med / base_med:7.2f}")


if __name__ == "__main__":
    main()
