"""The dispatcher's rate: `fw dispatch --once` over 200 turns against an instant model.

    python bench/dispatch.py [--turns N] [--rounds R]

Eight agent principals in one session, each mentioned in turn by a user's message, so the
turns spread over principals (one principal runs one turn at a time). Timed in this run, on
this machine, against a scripted chat-completions server on 127.0.0.1 that answers at once:
`--workers 4` (the aim: 100 turns/s or more) against `--workers 1`, and a listing
(`fw session list`) for what starting fw costs. The messages are posted in-process between
rounds, so only the dispatch is timed. Prints the medians, turns/s and the ratios, and the
machine's load."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from _common import fw_path, model_home_steps, timed  # noqa: E402
from fakes.chat_server import ChatServer  # noqa: E402

AGENTS = [f"a{i}" for i in range(8)]


def post_turns(home: str, count: int) -> None:
    from framework_cli.home.store import Home
    from framework_cli.runtime.sessions import message_post

    for i in range(count):
        message_post(Home(Path(home)), "s1", "alice", f"@{AGENTS[i % len(AGENTS)]} question {i}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"  # the provider reads its key from here
    with tempfile.TemporaryDirectory() as tmp, ChatServer([{"content": "ok"}], repeat_last=True) as server:
        home = str(Path(tmp) / "home")
        setup = [*model_home_steps(server.base_url), ["principal", "create", "alice", "--kind", "user"]]
        for name in AGENTS:
            setup += [["agent", "create", name, "--model", "m"], ["principal", "create", name, "--kind", "agent"],
                      ["binding", "set", name, "--agent", name]]
        setup.append(["session", "create", "s1", "--member", "alice", *sum((["--member", a] for a in AGENTS), [])])
        for step in setup:
            timed([fw, "--home", home, *step])
        listing = [fw, "--home", home, "session", "list", "--json"]
        timed(listing)
        times: dict[str, list[float]] = {"list": [], "1": [], "4": []}
        for _ in range(args.rounds):  # interleaved, so that drift hits each alike
            times["list"].append(timed(listing)[0])
            for workers in ("1", "4"):
                post_turns(home, args.turns)
                seconds, out = timed([fw, "--home", home, "dispatch", "--once", "--concurrency", workers, "--json"])
                done = json.loads(out)["turns"]
                if done["answered"] != args.turns:
                    sys.exit(f"dispatch answered {done['answered']} of {args.turns} turns: {done}")
                times[workers].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {w: args.turns / med[w] for w in ("1", "4")}
    load = os.getloadavg()
    print(f"turns per dispatch, rounds:          {args.turns}, {args.rounds}")
    print(f"load average (1, 5, 15 min):         {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print(f"fw session list median:              {med['list'] * 1000:7.1f} ms")
    print(f"dispatch --once --concurrency 1 :  {med['1']:7.2f} s   {rate['1']:6.1f} turns/s")
    print(f"dispatch --once --concurrency 4 :  {med['4']:7.2f} s   {rate['4']:6.1f} turns/s (aim: 100 or more)")
    print(f"ratio (4 workers / 1 worker rate):   {rate['4'] / rate['1']:7.2f}")
    print(f"one turn, 4 workers / a listing:     {med['4'] / args.turns / med['list']:7.3f}")


if __name__ == "__main__":
    main()
