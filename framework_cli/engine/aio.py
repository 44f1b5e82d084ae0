"""The event loop of the engine, and the threads it lends blocking work.

Turns, tasks and event runs run as tasks of one event loop a process: a run waiting for its
model (or an MCP server's answer, or a child task) holds no thread. Work that blocks (YAML,
SQLite, a file, a program) goes through `Threads`, pools of the engine's own: pools that a
one-run command does not wait for when it is interrupted (the programs it runs are stopped by
the command line's boundary), unlike asyncio's default one.

Two pools, for two kinds of blocking work. Short work (a run's start and end, reading its
input, store writes) takes a few milliseconds of the interpreter each: a few threads do it as
fast as many, and many threads that all want the interpreter at once only fight over it (32 of
them cost a run a third more CPU than 4 in `bench/engine_load.py`). Long work (a blocking tool
call such as `exec`, an external runner, a platform action over plain HTTP) mostly waits, for
seconds or minutes: it goes to `threads.blocking`, a pool of its own, so that however many of
those are waiting the short work of every other run goes on.

The short pool takes the oldest run's work first (`first_come(n)`, set by the engine as each
piece of work starts): with hundreds of runs starting at once, the first runs go on to ask
their models while later ones wait to start, rather than every run taking each step in turn
(all starts, then all model requests), which would hold every answer back behind the last start.

`run_front(work)` runs one coroutine on a new loop for a command that drives one run (`fw agent
run`, `fw event handle`); the serving commands keep a loop of their own for as long as they serve.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import queue
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, TypeVar

from ..http_client import close_async_clients
from ..state.store import keep_stores_open

T = TypeVar("T")
FRONT_THREADS = 8  # for one run's short blocking work
ENGINE_THREADS = 4  # for a serving engine's short blocking work: its runs' starts and ends, store work
BLOCKING_THREADS = 256  # for long blocking work (threads are made as they are needed, up to this)
INTERRUPTED = "fw was interrupted while the call was running"  # what a cancelled call tells its server


_ORDER: ContextVar[int] = ContextVar("fw_work_order", default=0)  # work of a lower number is taken first


def first_come(order: int) -> None:
    """The current task's short work is taken before that of tasks with a higher `order`
    (the engine numbers its runs as they start; its own work, 0, goes first)."""
    _ORDER.set(order)


class _FirstComePool:
    """A fixed number of threads taking work by (order, arrival): `submit` gives a future as
    concurrent.futures does (cancelled before it starts, the work never runs)."""

    def __init__(self, size: int, name: str) -> None:
        self._queue: queue.PriorityQueue[tuple[float, int, Any, Any]] = queue.PriorityQueue()
        self._arrivals = itertools.count()
        self._size, self._name = size, name
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, order: int, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine's threads are closed")
            if len(self._threads) < self._size:  # made as work comes, up to the size
                thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._queue.put((order, next(self._arrivals), fn, future))
        return future

    def _work(self) -> None:
        keep_stores_open()
        while True:
            _, _, fn, future = self._queue.get()
            if fn is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def close(self, wait: bool) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        while True:  # work not started is cancelled
            try:
                _, _, fn, future = self._queue.get_nowait()
            except queue.Empty:
                break
            if future is not None:
                future.cancel()
        for _ in threads:
            self._queue.put((float("-inf"), next(self._arrivals), None, None))
        if wait:
            for thread in threads:
                thread.join()


class Threads:
    """The engine's threads: `await threads(fn, *args)` runs short work `fn` on one of them,
    `await threads.blocking(fn, *args)` work that may wait long (see the module's text)."""

    def __init__(self, size: int = ENGINE_THREADS, name: str = "fw-engine", blocking_size: int = BLOCKING_THREADS) -> None:
        self.pool = _FirstComePool(size, name)
        self.long_pool = ThreadPoolExecutor(blocking_size, thread_name_prefix=f"{name}-blocking", initializer=keep_stores_open)

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.wrap_future(self.pool.submit(_ORDER.get(), functools.partial(fn, *args, **kwargs)))

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.long_pool, functools.partial(fn, *args, **kwargs))

    def close(self, wait: bool = False) -> None:
        """Work not started is cancelled; with `wait`, short work running is waited for (long
        work, as a thread pool's, is waited for when the interpreter exits)."""
        self.pool.close(wait)
        self.long_pool.shutdown(wait=False, cancel_futures=True)


def run_front(work: Callable[[Threads], Awaitable[T]], threads: int = FRONT_THREADS) -> T:
    """Run `work(threads)` on a new event loop until it returns. Ctrl-C or SIGTERM cancels it
    (its `finally` blocks run: the run is ended, its MCP servers closed), then comes through as
    KeyboardInterrupt. The loop's HTTP clients are closed at the end."""
    return run_loop(lambda pool, stopped: work(pool), threads)[0]


def run_loop(work: Callable[[Threads, asyncio.Event], Awaitable[T]], threads: int = FRONT_THREADS,
             on_stop: Callable[[asyncio.Task[Any]], None] | None = None) -> tuple[T, bool]:
    """Run `work(threads, stopped)` on a new event loop until it returns: (its result, whether
    a signal stopped it). Ctrl-C or SIGTERM sets `stopped` and calls `on_stop(task)` (a serving
    engine stops gently, then returns); without `on_stop` the work is cancelled, and
    KeyboardInterrupt comes through once it has unwound."""
    pool = Threads(threads)
    signalled = False

    async def main() -> T:
        nonlocal signalled
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        stopped = asyncio.Event()

        def stop() -> None:
            nonlocal signalled
            signalled = True
            stopped.set()
            (on_stop or (lambda t: t.cancel(INTERRUPTED)))(task)

        restore = _take_signals(loop, stop)
        try:
            return await work(pool, stopped)
        finally:
            restore()
            await close_async_clients()

    try:
        result = asyncio.run(main())
    except asyncio.CancelledError:
        if signalled:
            raise KeyboardInterrupt from None
        raise
    finally:
        pool.close(wait=True)  # a write that was running when the work was cancelled is finished, not cut
    return result, signalled


def _take_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> Callable[[], None]:
    """Ctrl-C and SIGTERM call `stop` on the loop, while it runs; what puts the handlers back.
    Only the main thread may take signals (a test running a command in a thread keeps them)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    numbers = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.getsignal(number) for number in numbers}
    for number in numbers:
        loop.add_signal_handler(number, stop)

    def restore() -> None:
        for number in numbers:
            loop.remove_signal_handler(number)
            signal.signal(number, previous[number])

    return restore
