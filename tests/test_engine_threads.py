"""The engine's threads (engine/aio.py): short work is taken the oldest run's first, work not
started when its caller gives up never runs, and work running when its caller gives up is
finished before the loop's command returns (a write is never cut halfway)."""

from __future__ import annotations

import asyncio
import threading
import time

from framework_cli.engine.aio import Threads, first_come, run_front


def test_short_work_running_when_its_caller_is_cancelled_is_finished_before_the_command_returns(tmp_path):
    done = tmp_path / "written"

    def slow_write() -> None:
        time.sleep(0.5)
        done.write_text("whole")

    async def work(threads: Threads) -> str:
        write = asyncio.ensure_future(threads(slow_write))
        await asyncio.sleep(0.1)
        write.cancel()  # the run was cancelled (Ctrl-C) while its write ran
        return "returned"

    assert run_front(work) == "returned"
    assert done.read_text() == "whole"


def test_the_oldest_runs_short_work_goes_first_and_work_given_up_before_it_starts_never_runs():
    threads = Threads(1, name="fw-test")
    order: list[str] = []
    gate = threading.Event()

    async def main() -> None:
        blocker = asyncio.ensure_future(threads(gate.wait))  # the one thread is busy until the gate opens

        async def run(number: int, label: str) -> None:
            first_come(number)
            await threads(order.append, label)

        later = asyncio.ensure_future(run(2, "second run"))
        await asyncio.sleep(0.05)
        earlier = asyncio.ensure_future(run(1, "first run"))
        dropped = asyncio.ensure_future(run(0, "given up"))
        await asyncio.sleep(0.05)
        dropped.cancel()
        await asyncio.sleep(0.05)  # the cancel reaches the queued work on the loop's next turn
        gate.set()
        await asyncio.gather(blocker, later, earlier)

    try:
        asyncio.run(main())
    finally:
        threads.close(wait=True)
    assert order == ["first run", "second run"]  # queued later, taken first; the cancelled one never ran
