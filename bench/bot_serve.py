"""Events per second through `fw bot serve`, against an instant model and a fake OneBot.

    python bench/bot_serve.py [--events N] [--workers W]

A onebot bot acts over HTTP on a fake OneBot v11 implementation (127.0.0.1); the model, a
scripted chat-completions server that answers at once, replies to each group message through
`event_reply` (two model calls and one `send_group_msg` an event). N signed HTTP reports are
posted to `fw bot serve` as fast as it answers them, and the clock stops when the last event
has been handled. The baseline, measured in the same run on the same home: the same events
handled one at a time by `fw event handle` (a process each), as a script would without the
server. Prints both figures, `--workers 1` too, and the ratios."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

import httpx  # noqa: E402
from _common import fw_path, timed  # noqa: E402
from fakes.chat_server import ChatServer  # noqa: E402
from fakes.onebot_server import OneBotServer, group_message, signed  # noqa: E402

SECRET = "bench-secret-0000"
REPLY = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "ok"}}]}, {"content": "done"}]


class InstantModel(ChatServer):
    """Answers at once: a reply through event_reply to a new message, `done` once it is sent
    (whatever order concurrent runs ask in)."""

    def next_step(self, request):
        with self._lock:
            self.requests.append(request)
        messages = (request.get("json") or {}).get("messages") or [{}]
        return REPLY[1] if messages[-1].get("role") == "tool" else REPLY[0]


def setup(fw: str, home: str, model_url: str, onebot_url: str) -> None:
    steps = [
        ["home", "init"],
        ["resource", "write", "provider", "p", "--create", "--data", json.dumps({"base_url": model_url, "api_key_env": "BENCH_KEY"})],
        ["resource", "write", "model", "m", "--create", "--data", json.dumps({"provider": "p", "model_id": "m-1", "capabilities": {"tool_call": True}})],
        ["resource", "write", "agent", "a", "--create", "--data", json.dumps({"model": "m", "events": ["message.*"]})],
        ["principal", "create", "p1", "--kind", "agent"],
        ["binding", "set", "p1", "--agent", "a"],
        ["bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--url", onebot_url],
    ]
    for step in steps:
        timed([fw, "--home", home, *step])
    subprocess.run([fw, "--home", home, "bot", "set", "qq", "--secret-stdin"], input=SECRET, text=True, capture_output=True, check=True)


def served(fw: str, home: str, events: int, workers: int, first_id: int) -> float:
    """Seconds from the first report posted to the last event handled."""
    proc = subprocess.Popen([fw, "--home", home, "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--workers", str(workers), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["http"]
        start = time.perf_counter()
        with httpx.Client(timeout=30) as http:
            for n in range(events):
                body = json.dumps(group_message(f"hello {n}", message_id=first_id + n)).encode()
                http.post(url, content=body, headers={"Content-Type": "application/json", "X-Signature": signed(SECRET, body)})
        handled = 0
        while handled < events:
            record = json.loads(proc.stdout.readline())
            if record["type"] in ("handled", "failed"):
                assert record["type"] == "handled" and record["tool_calls"] == [{"name": "event_reply", "outcome": "ok"}], record
                handled += 1
        return time.perf_counter() - start
    finally:
        proc.send_signal(2)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:  # never leave a server behind, whatever went wrong
            proc.kill()
            proc.wait()
            raise


def one_by_one(fw: str, home: str, events: int, first_id: int) -> float:
    start = time.perf_counter()
    for n in range(events):
        event = {"type": "message.received", "actor": {"id": "20002"}, "group": {"id": "30003"},
                 "message": {"id": str(first_id + n), "text": f"hello {n}", "mentions_bot": True}}
        timed([fw, "--home", home, "event", "handle", "qq", "--event", json.dumps(event), "--json"])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"
    with tempfile.TemporaryDirectory() as tmp, InstantModel([]) as model, OneBotServer() as onebot:
        home = str(Path(tmp) / "home")
        setup(fw, home, model.base_url, onebot.url)
        served(fw, home, 2, 1, 100)  # warm the file cache and the index
        wide = served(fw, home, args.events, args.workers, 1000)
        single = served(fw, home, args.events, 1, 2000)
        baseline = one_by_one(fw, home, args.events, 3000)
        sends = len(onebot.sent("send_group_msg"))
    rate = {name: args.events / seconds for name, seconds in (("wide", wide), ("single", single), ("baseline", baseline))}
    print(f"events each:                                  {args.events} (send_group_msg answered: {sends})")
    print(f"fw bot serve --workers {args.workers}:                     {rate['wide']:7.1f} events/s")
    print(f"fw bot serve --workers 1:                     {rate['single']:7.1f} events/s")
    print(f"baseline, fw event handle one at a time:      {rate['baseline']:7.1f} events/s")
    print(f"ratio (serve --workers {args.workers} / baseline):         {rate['wide'] / rate['baseline']:7.2f}")
    print(f"ratio (serve --workers {args.workers} / --workers 1):      {rate['wide'] / rate['single']:7.2f}")


if __name__ == "__main__":
    main()
