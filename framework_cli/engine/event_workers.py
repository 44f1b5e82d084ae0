"""Handling a server's events in the background, a bounded number at once.

`fw bot serve` answers the platform at once and hands each event here: a fixed set of worker
threads handle events as `fw event handle` does (each in a home of its own), the rest wait in a
bounded queue. `stop` (Ctrl-C) takes nothing more, ends every run in progress so that none of
them acts again, interrupts their threads (their MCP servers close, their `exec` programs are
killed) and stops whatever process is still left below this one.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..domain.runs import run_end
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..runtime.processes import stop_descendants
from .handling import handle_event

QUEUE_LIMIT = 1000  # events waiting for a worker; beyond that an event is dropped, and said so
STOP_SECONDS = 5.0  # how long stop waits for interrupted runs to unwind

OnDone = Callable[[dict[str, Any]], None]


class EventWorkers:
    def __init__(self, home: Home, bot: str | None, workers: int = 4, on_done: OnDone | None = None,
                 handle: Callable[..., dict[str, Any]] = handle_event) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise FwError("invalid", "workers must be a whole number from 1 to 64", "e.g. --workers 4", field="workers")
        self.root = home.root
        self.bot = bot  # the bot of every event, unless `submit` names another
        self.on_done = on_done or (lambda record: None)
        self._handle = handle
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(QUEUE_LIMIT)
        self._threads = [threading.Thread(target=self._work, name=f"event-worker-{n}", daemon=True) for n in range(workers)]
        self._runs: dict[int, str | None] = {}  # worker thread ident -> the run it is in
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = False

    def start(self) -> EventWorkers:
        for thread in self._threads:
            thread.start()
        return self

    def submit(self, event: dict[str, Any], bot: str | None = None) -> bool:
        """Queue an event of `bot` (this pool's own by default); False when the server is
        stopping or the queue is full."""
        if self._stopping.is_set():
            return False
        name = bot or self.bot
        assert name is not None
        try:
            self._queue.put_nowait((name, event))
        except queue.Full:
            return False
        return True

    # -- the workers --------------------------------------------------------------------------
    def _work(self) -> None:
        try:
            while not self._stopping.is_set():
                item = self._queue.get()
                if item is None or self._stopping.is_set():
                    break
                self.on_done(self._one(*item))
        except BaseException:  # interrupted by stop: the run has been ended, the thread goes
            pass

    def _one(self, bot: str, event: dict[str, Any]) -> dict[str, Any]:
        me = threading.get_ident()

        def note(progress: dict[str, Any]) -> None:
            if progress.get("type") == "started":
                with self._guard:
                    self._runs[me] = progress["run"]["run_id"]

        record: dict[str, Any] = {"type": "handled", "bot": bot, "event": event}
        try:
            doc = self._handle(Home(self.root), bot, event, run=True, on_event=note)
        except FwError as exc:
            record.update(type="failed", error={"code": exc.code, "message": redact(exc.message), "hint": redact(exc.hint)})
            if exc.extra.get("run_id"):
                record["run_id"] = exc.extra["run_id"]
        except Exception as exc:  # a bug fails this event only, never the server
            record.update(type="failed", error={"code": "internal", "message": f"unexpected error: {type(exc).__name__}", "hint": ""})
        else:
            record["handled"] = doc["handled"]
            if not doc["handled"]:
                record["reason"] = doc["reason"]
            else:
                result = doc.get("result") or {}
                record.update(run_id=doc["run"]["run_id"], status=result.get("status"),
                              tool_calls=[{"name": c["name"], "outcome": c["outcome"]} for c in result.get("tool_calls", [])])
        finally:
            with self._guard:
                self._runs[me] = None
        return record

    # -- stopping -----------------------------------------------------------------------------
    def stop(self) -> dict[str, int]:
        """Take nothing more; end the runs in progress and stop what they started. Safe to
        call twice. How many runs were ended and how many waiting events were dropped."""
        with self._guard:
            if self._stopped:
                return {"ended_runs": 0, "dropped": 0}
            self._stopped = True
        self._stopping.set()
        dropped = self._drain()
        with self._guard:
            busy = {ident: run for ident, run in self._runs.items() if run}
        home = Home(self.root)
        for run_id in busy.values():
            try:
                run_end(home, run_id)  # from now on, every call of the run is refused
            except FwError:
                pass
        for thread in self._threads:
            with self._guard:  # only while it is still in that run: never in the middle of reporting it
                if thread.ident in busy and self._runs.get(thread.ident) == busy[thread.ident]:
                    _interrupt(thread)
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)  # wakes an idle worker
            except queue.Full:
                break
        _join_all(self._threads, STOP_SECONDS)
        stop_descendants()
        return {"ended_runs": len(busy), "dropped": dropped}

    def _drain(self) -> int:
        dropped = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return dropped
            dropped += item is not None


def _interrupt(thread: threading.Thread) -> None:
    """Raise KeyboardInterrupt inside a worker, as Ctrl-C does in a one-run command: its
    run unwinds (MCP servers closed, an `exec` program's group killed) at the next step it
    takes in Python."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))


def _join_all(threads: list[threading.Thread], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
