"""Hundreds of slow conversations at once: `fw dispatch` and `fw bot serve` against a model that
takes seconds to answer.

    python bench/engine_load.py [--principals N] [--busy N] [--sleep S] [--baseline-principals N]
                                [--bot-messages N] [--skip-dispatch] [--skip-bot]

Dispatch: N principals (500) each with one pending turn in a session of its own, plus one busy
principal with --busy (20) messages in a row; the model (a scripted server on 127.0.0.1) answers
each request after --sleep (5) seconds. `fw dispatch --once --concurrency 1000` runs them (by
default in two processes on a machine of two cores or more); printed: when the single turns
were answered (p50, p99, last, from the start), the busy principal's order and whether any two
of its runs overlapped, lost or doubled turns, peak memory (all its processes together). In the
same run: the same single turns in one process (`--processes 1`), and the baseline,
`--concurrency 4` over --baseline-principals (40 by default: at 4 at a time and 5 s each, 500
would take over ten minutes; give 500 to measure them all). Then the sustained rate: 2 turns
each for N principals, the model answering after 0.1 s (aim: 100 turns/s or more).

Bot: `fw bot serve` with its defaults, a fake NapCat on the reverse WebSocket; --bot-messages
(200) group messages mentioning the bot, from as many users in as many groups, sent at once; the
model replies through event_reply after --sleep seconds. Printed: reply latency p50/p99/last from
each message's send, lost or doubled replies, peak memory; then five messages in one group 0.1 s
apart: answered in order, one at a time.

Aims (issue 31): single turns p99 within 7 s of the start; the busy principal in order with no
overlap; 100 turns/s with a 0.1 s model; peak memory under 600 MiB (dispatch) and 150 MiB (bot);
bot replies p99 within 8 s; nothing lost or doubled."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from _common import fw_path, timed  # noqa: E402
from fakes.chat_server import ChatServer  # noqa: E402

TOKEN = "bench-token-5d7f9b1c"
SELF_ID = 10001


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def rows(home: Path, sql: str) -> list[dict]:
    db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql)]
    finally:
        db.close()


def base_home(fw: str, home: Path, model_url: str, events: bool = False) -> None:
    agent = {"model": "m", **({"events": ["message.*"]} if events else {})}
    for step in (["home", "init"],
                 ["resource", "write", "provider", "p", "--create", "--data", json.dumps({"base_url": model_url, "api_key_env": "BENCH_KEY"})],
                 ["resource", "write", "model", "m", "--create", "--data", json.dumps({"provider": "p", "model_id": "m-1", "capabilities": {"tool_call": True}})],
                 ["resource", "write", "agent", "a", "--create", "--data", json.dumps(agent)],
                 ["principal", "create", "alice", "--kind", "user"]):
        timed([fw, "--home", str(home), *step])


def dispatch_home(fw: str, home: Path, model_url: str, principals: int, busy: int, per_principal: int = 1) -> None:
    """`principals` agent principals written as files (as a home grows by hand or by script),
    each in a session with alice, with `per_principal` messages; and `busy` messages to one more."""
    from framework_cli.home.store import Home
    from framework_cli.runtime.sessions import message_post, session_create

    base_home(fw, home, model_url)
    names = [f"p{i:04d}" for i in range(principals)] + (["busy"] if busy else [])
    for name in names:
        (home / "principals" / f"{name}.yaml").write_text("kind: agent\n")
        (home / "bindings" / f"{name}.yaml").write_text("agent: a\n")
    past = time.time() - 60
    for folder in ("principals", "bindings"):
        for path in (home / folder).iterdir():
            os.utime(path, (past, past))
    h = Home(home)
    for name in names:
        session_create(h, f"s-{name}", ["alice", name])
        for n in range(busy if name == "busy" else per_principal):
            message_post(h, f"s-{name}", "alice", f"@{name} m{n}")


def tree_mib(pid: int) -> tuple[float, int]:
    """The resident memory of a process and all its descendants (MiB), and how many they are."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parents[int(name)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, total = {pid}, 0.0
    for _ in range(4):  # a few levels down
        tree |= {child for child, parent in parents.items() if parent in tree}
    for member in tree:
        try:
            with open(f"/proc/{member}/status") as status:
                total += next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0) / 1024
        except OSError:
            pass
    return total, len(tree)


def run_dispatch(fw: str, home: Path, concurrency: int, processes: int | None = None) -> tuple[float, float, dict]:
    """(start time, seconds, summary) and the peak memory of all its processes together in the
    summary's `peak_mib` (their resident memory summed, every 20 ms), how many processes in
    `processes`; the start on the monotonic clock (the model's requests are stamped on it) in
    `start_monotonic`."""
    start, start_monotonic = time.time(), time.monotonic()
    extra = ["--processes", str(processes)] if processes is not None else []
    proc = subprocess.Popen([fw, "--home", str(home), "dispatch", "--once", "--concurrency", str(concurrency), *extra, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0.0, 1]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            mib, count = tree_mib(proc.pid)
            peak[0], peak[1] = max(peak[0], mib), max(peak[1], count)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out = proc.stdout.read()  # type: ignore[union-attr]
    proc.stderr.read()  # type: ignore[union-attr]
    done.set()
    sampler.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.time() - start
    summary = json.loads(out)
    summary["peak_mib"] = max(peak[0], usage.ru_maxrss / 1024)
    summary["processes"] = peak[1]
    summary["start_monotonic"] = start_monotonic
    return start, seconds, summary


def dispatch_figures(fw: str, tmp: Path, model_url: str, principals: int, busy: int, concurrency: int, model: ChatServer,
                     processes: int | None = None) -> dict:
    home = tmp / f"dispatch-{concurrency}-{processes or 'default'}"
    dispatch_home(fw, home, model_url, principals, busy)
    seen = len(model.requests)
    start, seconds, summary = run_dispatch(fw, home, concurrency, processes)
    turns = rows(home, "SELECT principal, started_at, ended_at, status FROM turns ORDER BY id")
    singles = [stamp(t["ended_at"]) - start for t in turns if t["principal"] != "busy" and t["ended_at"]]
    busy_turns = [t for t in turns if t["principal"] == "busy"]
    spans = [(stamp(t["started_at"]), stamp(t["ended_at"])) for t in busy_turns if t["started_at"] and t["ended_at"]]
    overlaps = sum(1 for (a0, a1), (b0, b1) in zip(spans, spans[1:]) if b0 < a1)
    answers = rows(home, "SELECT text FROM messages WHERE session = 's-busy' AND author = 'busy' ORDER BY id")
    in_order = [a["text"] for a in answers] == [f"re: alice: @busy m{n}" for n in range(busy)]
    all_answers = rows(home, "SELECT COUNT(*) AS n FROM messages WHERE author != 'alice'")[0]["n"]
    # when the single turns' model requests arrived: fw's own time before each model is asked
    asked = [r["started"] - summary["start_monotonic"] for r in model.requests[seen:] if "@busy" not in str(r.get("json"))]
    return {"concurrency": concurrency, "principals": principals, "seconds": seconds, "p50": pct(singles, 50), "p99": pct(singles, 99),
            "last": max(singles), "done": sum(t["status"] == "done" for t in turns), "turns": len(turns), "answers": all_answers,
            "requests": len(model.requests) - seen, "busy_in_order": in_order, "busy_overlaps": overlaps,
            "busy_last": max(e for _, e in spans) - start if spans else 0.0, "peak_mib": summary["peak_mib"],
            "processes": summary["processes"], "processes_asked": processes,
            "asked_first": min(asked, default=0.0), "asked_p99": pct(asked, 99) if asked else 0.0}


def print_dispatch(f: dict, busy: int) -> None:
    lost = f["turns"] - f["done"]
    doubled = f["requests"] - f["turns"]
    how = f"--processes {f['processes_asked']}" if f["processes_asked"] else f"{f['processes']} process{'es' if f['processes'] > 1 else ''}"
    also = f" + {busy} of one busy principal" if busy else ""
    print(f"  --concurrency {f['concurrency']:<5} ({how}) {f['principals']} single turns{also}: {f['seconds']:.1f} s in all")
    print(f"    single turns answered after  p50 {f['p50']:.2f} s   p99 {f['p99']:.2f} s   last {f['last']:.2f} s")
    print(f"    their models asked after     first {f['asked_first']:.2f} s   p99 {f['asked_p99']:.2f} s "
          "(fw's start and its runs' own work before each request)")
    if busy:
        print(f"    busy principal: {'in order' if f['busy_in_order'] else 'OUT OF ORDER'}, {f['busy_overlaps']} overlapping runs, "
              f"last answered after {f['busy_last']:.1f} s")
    print(f"    turns done {f['done']}/{f['turns']} (lost {lost}), answers posted {f['answers']}, model requests {f['requests']} "
          f"(doubled {max(0, doubled)}); peak memory {f['peak_mib']:.0f} MiB (all its processes)")


def dispatch_bench(fw: str, tmp: Path, args: argparse.Namespace) -> None:
    print(f"fw dispatch --once, a model that answers after {args.sleep:g} s:")
    with ChatServer([{"echo": "re: ", "sleep": args.sleep}], repeat_last=True) as model:
        wide = dispatch_figures(fw, tmp, model.base_url, args.principals, args.busy, 1000, model)
        print_dispatch(wide, args.busy)
        single = dispatch_figures(fw, tmp, model.base_url, args.principals, 0, 1000, model, processes=1)
        print_dispatch(single, 0)
        narrow = dispatch_figures(fw, tmp, model.base_url, args.baseline_principals, args.busy, 4, model)
        print_dispatch(narrow, args.busy)
    per_turn = (single["peak_mib"] - narrow["peak_mib"]) / max(1, min(1000, args.principals) - 4)
    print(f"    memory per turn in flight: about {per_turn * 1024:.0f} KiB ((peak of one process at 1000 - peak at 4) / extra turns in flight)")
    with ChatServer([{"echo": "re: ", "sleep": 0.1}], repeat_last=True) as quick:
        home = tmp / "rate"
        dispatch_home(fw, home, quick.base_url, args.principals, 0, per_principal=2)
        _, seconds, summary = run_dispatch(fw, home, 1000)
        turns = rows(home, "SELECT started_at, ended_at FROM turns WHERE status = 'done'")
        first = min(stamp(t["started_at"]) for t in turns)
        last = max(stamp(t["ended_at"]) for t in turns)
    print(f"  sustained, a 0.1 s model, {len(turns)} turns of {args.principals} principals: {len(turns) / (last - first):.1f} turns/s "
          f"(first start to last answer; {seconds:.1f} s with fw's own start; peak {summary['peak_mib']:.0f} MiB)")


# -- the bot ------------------------------------------------------------------------------------------
class ReplyingModel(ChatServer):
    def __init__(self, sleep: float) -> None:
        super().__init__([])
        self.sleep = sleep

    def next_step(self, request):
        with self._lock:
            self.requests.append(request)
        messages = (request.get("json") or {}).get("messages") or [{}]
        if messages[-1].get("role") == "tool":
            return {"content": "done"}
        users = [m for m in messages if m.get("role") == "user"]
        said = str(users[-1]["content"]).rsplit(": ", 1)[-1].strip() if users else ""
        return {"sleep": self.sleep, "tool_calls": [{"name": "event_reply", "arguments": {"text": f"re {said}"}}]}


class Napcat:
    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}", "X-Self-ID": str(SELF_ID),
                                                   "X-Client-Role": "Universal"}, open_timeout=10, max_size=None).__enter__()
        self.sent: list[tuple[float, dict]] = []
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.ids = iter(range(10**6, 10**9))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for frame in self.ws:
                doc = json.loads(frame)
                if "action" in doc:
                    with self.lock:
                        self.sent.append((time.time(), doc))
                        number = next(self.ids)
                    with self.send_lock:
                        self.ws.send(json.dumps({"status": "ok", "retcode": 0, "data": {"message_id": number}, "echo": doc["echo"]}))
        except Exception:
            pass

    def message(self, text: str, group: int, user: int, message_id: int) -> None:
        doc = {"time": int(time.time()), "self_id": SELF_ID, "post_type": "message", "message_type": "group", "sub_type": "normal",
               "message_id": message_id, "group_id": group, "user_id": user, "font": 0, "sender": {"user_id": user, "nickname": "U"},
               "message": [{"type": "at", "data": {"qq": str(SELF_ID)}}, {"type": "text", "data": {"text": f" {text}"}}]}
        with self.send_lock:
            self.ws.send(json.dumps(doc))

    def replies(self) -> list[tuple[float, str, int]]:
        with self.lock:
            return [(at, "".join(s["data"]["text"] for s in doc["params"]["message"] if s["type"] == "text"), doc["params"]["group_id"])
                    for at, doc in self.sent if doc["action"] == "send_group_msg"]


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def bot_bench(fw: str, tmp: Path, args: argparse.Namespace) -> None:
    print(f"fw bot serve (its defaults), a fake NapCat on the reverse WebSocket, a model that replies after {args.sleep:g} s:")
    with ReplyingModel(args.sleep) as model:
        home = tmp / "bot"
        base_home(fw, home, model.base_url, events=True)
        for step in (["principal", "create", "p1", "--kind", "agent"], ["binding", "set", "p1", "--agent", "a"]):
            timed([fw, "--home", str(home), *step])
        subprocess.run([fw, "--home", str(home), "bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--access-token-stdin"],
                       input=TOKEN, text=True, check=True, capture_output=True)
        started = time.time()
        proc = subprocess.Popen([fw, "--home", str(home), "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            listening = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            print(f"  listening after {time.time() - started:.2f} s")
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            napcat = Napcat(listening["websocket"])
            time.sleep(0.3)
            sent_at = {}
            for n in range(args.bot_messages):
                sent_at[f"re m{n}"] = time.time()
                napcat.message(f"m{n}", group=100000 + n, user=200000 + n, message_id=300000 + n)
            deadline = time.time() + args.sleep * 4 + 60
            while len(napcat.replies()) < args.bot_messages and time.time() < deadline:
                time.sleep(0.1)
            replies = napcat.replies()
            latency = [at - sent_at[text] for at, text, _ in replies if text in sent_at]
            texts = [text for _, text, _ in replies]
            lost = len(set(sent_at) - set(texts))
            doubled = len(texts) - len(set(texts))
            print(f"  {args.bot_messages} messages in {args.bot_messages} groups at once: replies after p50 {pct(latency, 50):.2f} s   "
                  f"p99 {pct(latency, 99):.2f} s   last {max(latency):.2f} s; lost {lost}, doubled {doubled}")
            model_before = len(model.requests)
            for n in range(5):
                napcat.message(f"g{n}", group=42, user=4200 + n, message_id=400000 + n)
                time.sleep(0.1)
            deadline = time.time() + args.sleep * 5 + 60
            while len([r for r in napcat.replies() if r[2] == 42]) < 5 and time.time() < deadline:
                time.sleep(0.1)
            in_group = [text for _, text, group in napcat.replies() if group == 42]
            runs = sorted((r for r in model.requests[model_before:] if r["json"]["messages"][-1]["role"] == "user"), key=lambda r: r["started"])
            overlaps = sum(1 for a, b in zip(runs, runs[1:]) if b["started"] < a.get("ended", 0))
            print(f"  five messages in one group 0.1 s apart: {'in order' if in_group == [f're g{n}' for n in range(5)] else in_group}, "
                  f"{overlaps} overlapping runs")
            print(f"  peak memory of fw bot serve: {peak_mib(proc.pid):.0f} MiB")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--principals", type=int, default=500)
    parser.add_argument("--busy", type=int, default=20)
    parser.add_argument("--sleep", type=float, default=5.0)
    parser.add_argument("--baseline-principals", type=int, default=40)
    parser.add_argument("--bot-messages", type=int, default=200)
    parser.add_argument("--skip-dispatch", action="store_true")
    parser.add_argument("--skip-bot", action="store_true")
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_dispatch:
            dispatch_bench(fw, Path(tmp), args)
        if not args.skip_bot:
            bot_bench(fw, Path(tmp), args)


if __name__ == "__main__":
    main()
