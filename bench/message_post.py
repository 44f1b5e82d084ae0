"""Posting a message, against listing the small sample home.

    python bench/message_post.py [--runs N]

Builds a home with a user, an agent principal bound to an agent, and a session of both, then
times, in one run, interleaved so that drift hits both alike:
  - `fw message post s1 --as alice 'hello @ops'` (human output, and again with --json)
  - `fw --home sample_home resource list agent --json` (the baseline: a listing)
and prints the medians and their ratios (the aim is 1.5 or less); and the same post in a
home that also holds --people other principals (users, each with a file), which a post should
not read. Each post writes one
message and one turn to state.db, as in real use. Figures assume compiled bytecode, as an
installed package has (`python -m compileall framework_cli` when PYTHONDONTWRITEBYTECODE is set)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import copy_sample, fw_path, timed  # noqa: E402


def build_session_home(fw: str, home: str) -> None:
    """A user `alice`, an agent principal `ops` bound to agent `a`, and session `s1` of both."""
    steps = [
        ["home", "init"],
        ["resource", "write", "provider", "p", "--create", "--data", json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key_env": "BENCH_KEY"})],
        ["resource", "write", "model", "m", "--create", "--data", json.dumps({"provider": "p", "model_id": "m-1", "capabilities": {"tool_call": True}})],
        ["agent", "create", "a", "--model", "m", "--builtin-tool", "resource_management"],
        ["principal", "create", "alice", "--kind", "user"],
        ["principal", "create", "ops", "--kind", "agent"],
        ["binding", "set", "ops", "--agent", "a"],
        ["session", "create", "s1", "--member", "alice", "--member", "ops"],
    ]
    for step in steps:
        timed([fw, "--home", home, *step])


def settle(home: Path) -> None:
    """Files changed in the last 2 s are never cached: date the home's files back a minute,
    as a home that was set up earlier is."""
    past = time.time() - 60
    for path in home.rglob("*"):
        if path.is_file() and not path.name.startswith(".") and path.name != "state.db" and "runs" not in path.parts:
            os.utime(path, (past, past))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--people", type=int, default=5000, help="principals in the large home")
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    with tempfile.TemporaryDirectory() as tmp:
        home, sample = Path(tmp) / "home", Path(tmp) / "sample"
        copy_sample(sample)
        build_session_home(fw, str(home))
        crowd = Path(tmp) / "crowd"
        build_session_home(fw, str(crowd))
        for i in range(args.people):
            (crowd / "principals" / f"user{i:05d}.yaml").write_text("kind: user\n")
        settle(home)
        settle(crowd)
        crowd_cmd = [fw, "--home", str(crowd), "message", "post", "s1", "--as", "alice", "hello @ops", "--json"]
        timed(crowd_cmd)  # the index of the large home, built once
        post_cmd = [fw, "--home", str(home), "message", "post", "s1", "--as", "alice", "hello @ops"]
        post_json_cmd = [*post_cmd, "--json"]
        list_cmd = [fw, "--home", str(sample), "resource", "list", "agent", "--json"]
        turns = json.loads(timed(post_json_cmd)[1])["turns"]  # warms the index, and checks a turn is made
        assert len(turns) == 1, turns
        timed(post_cmd), timed(list_cmd)
        posts, posts_json, lists, crowded = [], [], [], []
        for _ in range(args.runs):  # interleaved, so that drift hits all alike
            posts.append(timed(post_cmd)[0])
            posts_json.append(timed(post_json_cmd)[0])
            lists.append(timed(list_cmd)[0])
            crowded.append(timed(crowd_cmd)[0])
    post_med, json_med, list_med = statistics.median(posts), statistics.median(posts_json), statistics.median(lists)
    crowd_med = statistics.median(crowded)
    print(f"runs each:                         {args.runs}")
    print(f"fw message post median:            {post_med * 1000:7.1f} ms")
    print(f"fw message post --json median:     {json_med * 1000:7.1f} ms")
    print(f"fw resource list agent --json:     {list_med * 1000:7.1f} ms (sample_home, the baseline)")
    print(f"ratio (post / listing):            {post_med / list_med:7.2f}   (aim: 1.5 or less)")
    print(f"ratio (post --json / listing):     {json_med / list_med:7.2f}")
    print(f"post --json, {args.people} more principals: {crowd_med * 1000:7.1f} ms  ({crowd_med / json_med:.2f} x the small home's)")


if __name__ == "__main__":
    main()
