"""Dispatchers on PostgreSQL: turns/s with 1, 2 and 4 `fw dispatch` processes sharing one
database, against one dispatcher on the home's own state.db, in one run.

    python bench/pg_dispatch.py [--turns N] [--agents A] [--rounds R] [--sleep S]

A throwaway PostgreSQL cluster (Debian's `initdb`, a Unix socket in a temporary folder, as the
tests make it) holds the state; each dispatcher runs on a copy of the home's folder, as each host
has one. A scripted model on 127.0.0.1 answers after `--sleep` seconds (default 0.2). `--turns`
messages (default 400) each mention one of `--agents` agent principals (default 64), each in a
session of its own with the user, so the work spreads over principals (one principal runs one turn
at a time, whichever host claims it). Each dispatcher runs `--concurrency 8`.
Each figure is the median of `--rounds` rounds (default 3), interleaved; a round's dispatchers
start together and the time is until the last one exits (`--once`). Every round checks that each
turn was answered exactly once. Prints turns/s, the ratios against SQLite's one dispatcher, and
the machine's load. The cluster runs with fsync off (it is thrown away): PostgreSQL's figures
leave out the disk's flush, SQLite's include its own (WAL, synchronous=NORMAL)."""

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

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from _common import fw_path, model_home_steps, timed  # noqa: E402
from fakes.chat_server import ChatServer  # noqa: E402


def post_turns(home: Path, agents: list[str], count: int, state: str | None) -> None:
    from framework_cli.home.store import Home
    from framework_cli.runtime.sessions import message_post

    if state:
        os.environ["FW_STATE"] = state
    try:
        for i in range(count):
            agent = agents[i % len(agents)]
            message_post(Home(home), f"s-{agent}", "alice", f"@{agent} question {i}")
    finally:
        os.environ.pop("FW_STATE", None)


CPU: dict[str, list[float]] = {}


def dispatch(fw: str, homes: list[Path], state: str | None, turns: int, key: str) -> float:
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {k: v for k, v in os.environ.items() if k != "FW_STATE"}
    if state:
        env["FW_STATE"] = state
    start = time.perf_counter()
    procs = [subprocess.Popen([fw, "--home", str(h), "dispatch", "--once", "--concurrency", "8", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for h in homes]
    outs = [p.communicate(timeout=600) for p in procs]
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(key, []).append((after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime) / turns)
    if any(p.returncode for p in procs):
        sys.exit(f"a dispatcher failed: {[err[-500:] for _, err in outs]}")
    answered = sum(json.loads(out)["turns"]["answered"] for out, _ in outs)
    if answered != turns:
        sys.exit(f"{len(homes)} dispatchers answered {answered} of {turns} turns")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.2)
    args = parser.parse_args()
    from pg import Cluster, binaries

    if binaries() is None:
        sys.exit("no PostgreSQL binaries here (Debian: apt-get install postgresql)")
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    os.environ.pop("FW_STATE", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"
    agents = [f"a{i}" for i in range(args.agents)]
    cluster = Cluster()
    try:
        with tempfile.TemporaryDirectory() as tmp, ChatServer([{"content": "ok", "sleep": args.sleep}], repeat_last=True) as server:
            home = Path(tmp) / "home"
            setup = [*model_home_steps(server.base_url), ["principal", "create", "alice", "--kind", "user"]]
            for name in agents:
                setup += [["agent", "create", name, "--model", "m"], ["principal", "create", name, "--kind", "agent"],
                          ["binding", "set", name, "--agent", name]]
            for step in setup:
                timed([fw, "--home", str(home), *step])
            copies = []
            for n in range(4):
                copy = Path(tmp) / f"host{n}"
                shutil.copytree(home, copy, ignore=shutil.ignore_patterns(".lock", ".locks", "state.db*"))
                copies.append(copy)
            url = cluster.url(cluster.new_database())
            for agent in agents:  # a conversation each, as users have
                for where, env in ((home, os.environ), (copies[0], {**os.environ, "FW_STATE": url})):
                    subprocess.run([fw, "--home", str(where), "session", "create", f"s-{agent}", "--member", "alice", "--member", agent],
                                   check=True, stdout=subprocess.DEVNULL, env=env)
            times: dict[str, list[float]] = {"sqlite 1": [], "postgresql 1": [], "postgresql 2": [], "postgresql 4": []}
            for _ in range(args.rounds):
                post_turns(home, agents, args.turns, None)
                times["sqlite 1"].append(dispatch(fw, [home], None, args.turns, "sqlite 1"))
                for count in (1, 2, 4):
                    post_turns(copies[0], agents, args.turns, url)
                    times[f"postgresql {count}"].append(dispatch(fw, copies[:count], url, args.turns, f"postgresql {count}"))
    finally:
        cluster.stop()
    rate = {k: args.turns / statistics.median(v) for k, v in times.items()}
    load = os.getloadavg()
    print(f"turns, agents, rounds, model delay:  {args.turns}, {args.agents}, {args.rounds}, {args.sleep:g} s")
    print(f"load average (1, 5, 15 min):         {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    for key, value in rate.items():
        print(f"{key:<12} dispatcher(s): {value:7.1f} turns/s   ({value / rate['sqlite 1']:.2f} x SQLite's one), "
              f"{statistics.median(CPU[key]) * 1000:5.1f} ms of CPU a turn in the dispatchers")


if __name__ == "__main__":
    main()
