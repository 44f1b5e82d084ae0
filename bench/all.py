"""Run every benchmark of bench/ in one go, each with its defaults, one after another.

    python bench/all.py [--only NAME ...] [--skip NAME ...]

A benchmark is a script of this folder with a `__main__` block; helpers (files whose names
start with `_`, or without one) and this script are skipped, so that a benchmark added later
is picked up without a change here. Prints the machine's load (`uptime`) before each, since
a shared machine is noisy, compiles fw's bytecode first (an installed package has it), and
exits 1 if any benchmark failed."""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def benchmarks() -> list[Path]:
    found = []
    for path in sorted(BENCH.glob("*.py")):
        if path.name == Path(__file__).name or path.name.startswith("_"):
            continue
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            found.append(path)
    return found


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these (e.g. startup)")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME", help="leave these out")
    args = parser.parse_args()
    compileall.compile_dir(str(BENCH.parent / "framework_cli"), quiet=1)
    chosen = [p for p in benchmarks() if (not args.only or p.stem in args.only) and p.stem not in args.skip]
    failed = []
    for path in chosen:
        print(f"== {path.name}   ({load()})", flush=True)
        start = time.perf_counter()
        code = subprocess.run([sys.executable, str(path)]).returncode
        print(f"-- {path.name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {time.perf_counter() - start:.1f} s\n", flush=True)
        if code != 0:
            failed.append(path.name)
    print(f"{len(chosen) - len(failed)} of {len(chosen)} benchmarks ran; failed: {', '.join(failed) or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
