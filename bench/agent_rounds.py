"""What each tool round costs `fw agent run`, and `fw agent run` beside `llm` on the same server.

    python bench/agent_rounds.py [--runs N] [--rounds R] [--llm PATH]

Everything is timed in this run, on this machine, against a scripted chat-completions server
on 127.0.0.1 that answers at once, so the figures are the programs' own cost:
- `fw agent run` with no tool round (one model call) is the baseline; with 1 and with R tool
  rounds (each a model call asking for `framework_resource_list`, then the tool call). The
  first round adds the first tool call's one-off costs (aim: under 15 ms more than a further one); what each
  further round adds is (R rounds - 1 round) / (R - 1);
- `llm` (Simon Willison's, with a `--functions` tool and `--chain-limit 0`) runs the same
  rounds against the same kind of server; the ratio fw / llm is printed. Without `llm`
  installed (found on PATH, in /tmp/llm-venv/bin, or given with --llm) that comparison is
  skipped with a note.
Runs are interleaved, so that drift on a shared machine hits every measure alike; the load
average is printed with the figures."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from _common import fw_path, model_home_steps, timed  # noqa: E402
from fakes.chat_server import ChatServer  # noqa: E402

LLM_TOOL = "def list_agents() -> str:\n    \"Names of the agents.\"\n    return 'a'\n"


def script(tool: str, rounds: int, arguments: dict) -> list[dict]:
    return [{"tool_calls": [{"name": tool, "arguments": arguments}]}] * rounds + [{"content": "done"}]


def find_llm(given: str | None) -> str | None:
    for candidate in (given, shutil.which("llm"), "/tmp/llm-venv/bin/llm"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class Measure:
    """One command, run against a fresh copy of its script each time."""

    def __init__(self, name: str, server: ChatServer, steps: list[dict], cmd: list[str], env: dict | None = None) -> None:
        self.name, self.server, self.steps, self.cmd, self.env = name, server, steps, cmd, env
        self.times: list[float] = []

    def once(self) -> float:
        self.server.script = list(self.steps)
        if self.env is None:
            return timed(self.cmd)[0]
        saved = dict(os.environ)
        os.environ.update(self.env)
        try:
            return timed(self.cmd)[0]
        finally:
            os.environ.clear()
            os.environ.update(saved)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def fw_measures(fw: str, home: str, server: ChatServer, rounds: int) -> list[Measure]:
    setup = [*model_home_steps(server.base_url), ["agent", "create", "a", "--model", "m", "--builtin-tool", "resource_management"]]
    for step in setup:
        timed([fw, "--home", home, *step])
    cmd = [fw, "--home", home, "agent", "run", "a", "--message", "hi", "--json"]
    tool, arguments = "framework_resource_list", {"kind": "agent"}
    return [Measure(f"fw, {n} tool round{'s' if n != 1 else ''}", server, script(tool, n, arguments), cmd)
            for n in sorted({0, 1, rounds})]


def llm_measures(llm: str, user_dir: str, server: ChatServer, rounds: int) -> list[Measure]:
    Path(user_dir).mkdir(parents=True, exist_ok=True)
    (Path(user_dir) / "extra-openai-models.yaml").write_text(
        f"- model_id: scripted\n  model_name: m-1\n  api_base: {server.base_url}\n  supports_tools: true\n")
    env = {"LLM_USER_PATH": user_dir, "OPENAI_API_KEY": "sk-bench-key-0000"}
    cmd = [llm, "prompt", "-m", "scripted", "--no-stream", "--functions", LLM_TOOL, "--chain-limit", "0", "hi"]
    return [Measure(f"llm, {n} tool round{'s' if n != 1 else ''}", server, script("list_agents", n, {}), cmd, env)
            for n in sorted({0, rounds})]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--llm", help="the llm program to compare with")
    parser.add_argument("--no-llm", action="store_true", help="skip the comparison with llm")
    args = parser.parse_args()
    fw, llm = fw_path(), None if args.no_llm else find_llm(args.llm)
    os.environ.pop("FW_JSON", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"  # the provider reads its key from here
    with tempfile.TemporaryDirectory() as tmp, ChatServer([]) as fw_server, ChatServer([]) as llm_server:
        measures = fw_measures(fw, str(Path(tmp) / "home"), fw_server, args.rounds)
        if llm:
            measures += llm_measures(llm, str(Path(tmp) / "llm"), llm_server, args.rounds)
        for measure in measures:  # warm the index, the file cache and llm's database
            measure.once()
        for _ in range(args.runs):  # interleaved, so that drift hits every measure alike
            for measure in measures:
                measure.times.append(measure.once())
    report(measures, args, llm)


def report(measures: list[Measure], args: argparse.Namespace, llm: str | None) -> None:
    by_name = {m.name: m.median for m in measures}
    plural = "s" if args.rounds != 1 else ""
    base, one, many = by_name["fw, 0 tool rounds"], by_name["fw, 1 tool round"], by_name[f"fw, {args.rounds} tool round{plural}"]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores; runs each: {args.runs}")
    for measure in measures:
        print(f"{measure.name + ' median:':34} {measure.median * 1000:8.1f} ms")
    print(f"{'fw: the first tool round adds:':34} {(one - base) * 1000:8.1f} ms (its one-off costs; aim: under 15 ms more than a further round)")
    print(f"{'fw: each further round adds:':34} {(many - one) / max(args.rounds - 1, 1) * 1000:8.1f} ms (aim <= 10 ms)")
    print(f"{f'fw: {args.rounds} rounds / no round:':34} {many / base:8.2f}")
    if args.no_llm:
        print("llm: comparison skipped (--no-llm)")
        return
    if not llm:
        print("llm: not installed, comparison skipped (pip install llm into /tmp/llm-venv, or pass --llm PATH)")
        return
    llm_base, llm_many = by_name["llm, 0 tool rounds"], by_name[f"llm, {args.rounds} tool round{plural}"]
    print(f"{f'llm: each of {args.rounds} rounds adds:':34} {(llm_many - llm_base) / args.rounds * 1000:8.1f} ms")
    print(f"{'ratio fw / llm, no tool round:':34} {base / llm_base:8.2f}")
    print(f"{f'ratio fw / llm, {args.rounds} tool rounds:':34} {many / llm_many:8.2f} (aim <= 0.4)")


if __name__ == "__main__":
    main()
