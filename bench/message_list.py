"""Listing a session of 100,000 messages, in human mode and in JSON: time and peak memory.

    python bench/message_list.py [--messages N] [--runs N]

Builds a session of N messages (default 100,000; written straight into state.db after fw
created the session, since posting them one by one would take minutes), then times, in one
run, interleaved:
  - `fw message list s1` (human mode, written to a pipe)
  - `fw message list s1 --json`
  - `fw --home sample_home resource list agent --json` (the baseline)
Each child's peak memory (maximum resident set) is read from its own resource usage
(`os.wait4`). Prints medians of time and of peak memory, and the ratios to the baseline.
Aims: human mode 3 s or less and 60 MiB or less; JSON 1.6 s or less and 60 MiB or less.
Figures assume compiled bytecode, as an installed package has."""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import copy_sample, fw_path, timed  # noqa: E402


def usage(cmd: list[str]) -> tuple[float, float, int]:
    """(seconds, peak memory in MiB, bytes written) of one child, its output read from a pipe."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    size = 0
    while chunk := proc.stdout.read(1 << 16):
        size += len(chunk)
    _, status, rusage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}")
    return elapsed, rusage.ru_maxrss / 1024, size  # ru_maxrss is in KiB on Linux


def count_messages(json_cmd: list[str], expected: int) -> None:
    """Check that the JSON is one valid document holding every message. Read in a child: a
    parent grown by a large document would show in its children's peak memory (on Linux a
    child's maximum resident set includes what it was forked or spawned from)."""
    fw = subprocess.Popen(json_cmd, stdout=subprocess.PIPE)
    count = subprocess.run([sys.executable, "-c", "import json, sys; print(len(json.load(sys.stdin)['messages']))"],
                           stdin=fw.stdout, capture_output=True, text=True, check=True).stdout
    fw.wait()
    assert fw.returncode == 0 and int(count) == expected, (fw.returncode, count)


def build_session(fw: str, home: Path, messages: int) -> None:
    for step in (["home", "init"], ["principal", "create", "alice", "--kind", "user"],
                 ["principal", "create", "bob", "--kind", "user"], ["session", "create", "s1", "--member", "alice", "--member", "bob"]):
        timed([fw, "--home", str(home), *step])
    db = sqlite3.connect(home / "state.db")
    rows = (
        ("s1", "alice" if i % 2 else "bob", f"message number {i}: the quick brown fox jumps over the lazy dog @bob",
         '["bob"]', 0, None, f"2025-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z")
        for i in range(messages)
    )
    with db:
        db.executemany("INSERT INTO messages (session, author, text, mentions, hop, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    with tempfile.TemporaryDirectory() as tmp:
        home, sample = Path(tmp) / "home", Path(tmp) / "sample"
        copy_sample(sample)
        build_session(fw, home, args.messages)
        human_cmd = [fw, "--home", str(home), "message", "list", "s1"]
        json_cmd = [*human_cmd, "--json"]
        list_cmd = [fw, "--home", str(sample), "resource", "list", "agent", "--json"]
        count_messages(json_cmd, args.messages)
        usage(human_cmd), usage(list_cmd)  # warm the file cache
        human, as_json, base = [], [], []
        for _ in range(args.runs):
            human.append(usage(human_cmd))
            as_json.append(usage(json_cmd))
            base.append(usage(list_cmd))

    def med(samples: list[tuple[float, float, int]], i: int) -> float:
        return statistics.median(s[i] for s in samples)

    print(f"session: {args.messages} messages; runs each: {args.runs}")
    print(f"human mode:  {med(human, 0):6.2f} s, peak {med(human, 1):6.1f} MiB, {med(human, 2) / 2**20:6.1f} MiB written   (aim: 3 s, 60 MiB)")
    print(f"JSON:        {med(as_json, 0):6.2f} s, peak {med(as_json, 1):6.1f} MiB, {med(as_json, 2) / 2**20:6.1f} MiB written   (aim: 1.6 s, 60 MiB)")
    print(f"baseline:    {med(base, 0):6.2f} s, peak {med(base, 1):6.1f} MiB   (resource list agent --json on sample_home)")
    print(f"ratio to the baseline, human: {med(human, 0) / med(base, 0):6.1f} x time, {med(human, 1) / med(base, 1):4.2f} x memory")
    print(f"ratio to the baseline, JSON:  {med(as_json, 0) / med(base, 0):6.1f} x time, {med(as_json, 1) / med(base, 1):4.2f} x memory")


if __name__ == "__main__":
    main()
