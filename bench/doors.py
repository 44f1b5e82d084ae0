"""`fw bot serve` under idle connections: report latency, memory and refusals.

    python bench/doors.py [--reports N] [--idle N] [--over N]

A onebot bot (signed reports) acts over HTTP on a fake OneBot v11 implementation, its agent on
an instant scripted model. Three rounds, each on a fresh server: the baseline with no idle
connection; `--idle` idle TCP connections open (under the cap of 512) while N signed reports
arrive from 8 clients at once; `--over` idle connections (over the cap: the server closes the
extra ones at once). For each: every report's answer and its latency (median, p99, worst), the
server's peak memory (VmHWM), lines of its stderr and tracebacks, and the time until the last
report was handled. Aims (issue 27): under the cap, p99 under 200 ms and memory under 150 MiB;
over it, every report answered within 15 s, no traceback."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

import httpx  # noqa: E402
from _common import fw_path  # noqa: E402
from bot_serve import SECRET, InstantModel, setup  # noqa: E402
from fakes.onebot_server import OneBotServer, group_message, signed  # noqa: E402


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def round_of(fw: str, home: str, reports: int, idle: int, first_id: int) -> dict:
    proc = subprocess.Popen([fw, "--home", home, "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sockets: list[socket.socket] = []
    handled = 0
    done = threading.Event()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = json.loads(proc.stdout.readline())["http"]
        port = int(url.rsplit(":", 1)[1].strip("/"))

        def count() -> None:
            nonlocal handled
            for line in proc.stdout:  # type: ignore[union-attr]
                if json.loads(line)["type"] in ("handled", "failed"):
                    handled += 1
                    if handled == reports:
                        done.set()

        threading.Thread(target=count, daemon=True).start()
        for _ in range(idle):
            try:
                sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        time.sleep(0.5)  # the server has taken (or closed) them all

        http = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=8))  # kept alive, as an implementation posts

        def post(n: int) -> tuple[int, float]:
            body = json.dumps(group_message(f"hello {n}", message_id=first_id + n)).encode()
            started = time.perf_counter()
            try:
                answer = http.post(url, content=body, headers={"Content-Type": "application/json", "X-Signature": signed(SECRET, body)})
            except httpx.HTTPError:
                return 0, time.perf_counter() - started
            return answer.status_code, time.perf_counter() - started

        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(post, range(reports)))
        http.close()
        answered_in = time.perf_counter() - started
        done.wait(120)
        handled_in = time.perf_counter() - started
        memory = peak_mib(proc.pid)
    finally:
        for sock in sockets:
            sock.close()
        proc.send_signal(2)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # never leave a server behind
            proc.kill()
            _, err = proc.communicate()
    latencies = sorted(seconds for _, seconds in answers)
    return {
        "answered": sum(code == 204 for code, _ in answers), "statuses": sorted({code for code, _ in answers}),
        "median_ms": statistics.median(latencies) * 1000, "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
        "worst_ms": latencies[-1] * 1000, "answered_in": answered_in, "handled": handled, "handled_in": handled_in,
        "memory_mib": memory, "stderr_lines": len(err.splitlines()), "tracebacks": err.count("Traceback"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=100)
    parser.add_argument("--idle", type=int, default=400)
    parser.add_argument("--over", type=int, default=1100)
    args = parser.parse_args()
    fw = fw_path()
    os.environ.pop("FW_JSON", None)
    os.environ["BENCH_KEY"] = "sk-bench-key-0000"
    with tempfile.TemporaryDirectory() as tmp, InstantModel([]) as model, OneBotServer() as onebot:
        home = str(Path(tmp) / "home")
        setup(fw, home, model.base_url, onebot.url)
        rounds = {
            "no idle connection (baseline)": round_of(fw, home, args.reports, 0, 10_000),
            f"{args.idle} idle connections (under the cap)": round_of(fw, home, args.reports, args.idle, 20_000),
            f"{args.over} idle connections (over the cap)": round_of(fw, home, args.reports, args.over, 30_000),
        }
    print(f"{args.reports} signed reports from 8 clients at once, each round on a fresh fw bot serve")
    for name, r in rounds.items():
        print(f"{name}:")
        print(f"  answered 204: {r['answered']}/{args.reports} (statuses {r['statuses']}), all within {r['answered_in']:.2f} s")
        print(f"  latency: median {r['median_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, worst {r['worst_ms']:.1f} ms")
        print(f"  handled: {r['handled']}/{args.reports} within {r['handled_in']:.2f} s")
        print(f"  peak memory: {r['memory_mib']:.1f} MiB; stderr: {r['stderr_lines']} lines, {r['tracebacks']} tracebacks")
    base = rounds["no idle connection (baseline)"]
    idle = rounds[f"{args.idle} idle connections (under the cap)"]
    print(f"ratio of p99 latency (under the cap / baseline): {idle['p99_ms'] / base['p99_ms']:.2f}")
    print(f"ratio of peak memory (under the cap / baseline): {idle['memory_mib'] / base['memory_mib']:.2f}")


if __name__ == "__main__":
    main()
