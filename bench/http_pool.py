"""What a model request costs the event loop of a serving process, by how many HTTP clients
the loop spreads its requests over (`framework_cli.http_client.SHARDS`).

    python bench/http_pool.py [--requests 500] [--shards 16,128]

A scripted chat-completions server on 127.0.0.1 answers each request after 1 s. N requests at
once, as N runs of an engine send them (each run its own shard, round robin), twice: on fresh
connections, then again on the connections kept alive from the first wave (as a serving
process's later runs do). Printed for each number of clients: the event loop's CPU a request
(its thread's CPU time) and the wave's wall time. The first number given is the baseline, in
the same run. httpcore's pool looks over every connection it holds for each request: the more
connections a client holds, the more each request costs."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))

from fakes.chat_server import ChatServer  # noqa: E402

from framework_cli import http_client  # noqa: E402


async def waves(url: str, requests: int) -> list[tuple[float, float]]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}

    async def one(shard: int) -> int:
        answer = await http_client.async_http_client("http", shard).post(url + "/chat/completions", content=body, headers=headers,
                                                                          timeout=60)
        await answer.aread()
        return answer.status_code

    figures = []
    for _ in range(2):  # fresh connections, then kept-alive ones
        cpu, wall = time.thread_time(), time.perf_counter()
        codes = await asyncio.gather(*(one(n) for n in range(requests)))
        assert set(codes) == {200}, set(codes)
        figures.append(((time.thread_time() - cpu) * 1000 / requests, time.perf_counter() - wall))
    await http_client.close_async_clients()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--shards", default="16,128")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; "
          f"{args.requests} requests at once, a server that answers after 1 s")
    counts = [int(n) for n in args.shards.split(",")]
    results = {}
    with ChatServer([{"content": "ok", "sleep": 1}], repeat_last=True) as server:
        for count in counts:
            http_client.SHARDS = count
            results[count] = asyncio.run(waves(server.base_url, args.requests))
    base = results[counts[0]]
    for count, ((fresh, fresh_wall), (kept, kept_wall)) in results.items():
        print(f"  {count:>4} clients: fresh connections {fresh:.2f} ms of the loop a request ({fresh_wall:.2f} s), "
              f"kept-alive {kept:.2f} ms ({kept_wall:.2f} s); kept-alive against {counts[0]} clients: {kept / base[1][0]:.2f}")


if __name__ == "__main__":
    main()
