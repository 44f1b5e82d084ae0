"""What the benchmarks share: the installed fw, a timed command, the sample home copied, a
large home built, and commands timed in turn. Not a benchmark itself (`bench/all.py` skips
names that start with `_`)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def copy_sample(dest: Path) -> Path:
    """A copy of the shipped sample home, without fw's own files (index, lock): the baseline."""
    shutil.copytree(REPO / "sample_home", dest, ignore=shutil.ignore_patterns(".index*", ".lock"))
    return dest


def medians(cmds: list[list[str]], runs: int, measure: Callable[[list[str]], tuple[float, Any]] = timed) -> list[float]:
    """Each command's median time over `runs`, the commands taken in turn so that a change in
    the machine's load weighs on each alike."""
    times: list[list[float]] = [[] for _ in cmds]
    for _ in range(runs):
        for cmd, seen in zip(cmds, times):
            seen.append(measure(cmd)[0])
    return [statistics.median(seen) for seen in times]


def model_home_steps(base_url: str) -> list[list[str]]:
    """The fw commands that make a new home with provider p on `base_url` (its key read from
    $BENCH_KEY) and model m that calls tools: the start of every benchmark that runs a model."""
    return [
        ["home", "init"],
        ["resource", "write", "provider", "p", "--create", "--data", json.dumps({"base_url": base_url, "api_key_env": "BENCH_KEY"})],
        ["resource", "write", "model", "m", "--create", "--data", json.dumps({"provider": "p", "model_id": "m-1", "capabilities": {"tool_call": True}})],
    ]
