"""The engine: runs pending work (turns, tasks, event runs) as tasks of one event loop, a
bounded number in flight, one piece at a time per lane, and takes back the work of processes
that died.

Each kind of work is a `WorkSource`: it claims pieces of work in a short transaction (each with
its lane, `runtime/lanes.py`), runs one (awaiting its model, holding no thread), and records
its outcome while its claim and its lane's fence still hold. The engine only schedules: it
claims what fits under `--concurrency`, wakes when work ends here or changes in this process,
looks in the store every POLL_SECONDS for work of other processes, renews the leases of its
lanes and its owner row every HEARTBEAT_SECONDS, and takes back the work of owners found dead
(on this host: their process is gone; elsewhere: their heartbeat is older than STALE_SECONDS).

`fw dispatch` runs it over turns and tasks; `fw bot serve` over its bots' events, on the
server's own loop. Stopped (Ctrl-C, SIGTERM), it ends the runs in flight, so that none of them
acts again, and puts their work back or cancels it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets as pysecrets
import socket
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from ..domain.run_records import run_end, runner_outcome
from ..errors import FwError
from ..home.store import Home
from ..http_client import warm
from ..liveness import HOST, gone_here, me
from ..runtime import lanes, tasks, work
from ..state.store import StateStore, now_iso
from .aio import Threads, first_come
from .shares import check_concurrency

POLL_SECONDS = 0.25  # how often the store is looked in for work other processes added
HEARTBEAT_SECONDS = 5.0  # how often the owner row and the lanes' leases are renewed, and dead owners looked for
STALE_SECONDS = 30.0  # an owner whose heartbeat is older than this is dead: its work is taken back

OnEvent = Callable[[dict[str, Any]], None]


@dataclass
class Item:
    """A piece of work claimed: its kind and id, the lane and fence it holds, its claim number."""

    kind: str
    id: int
    lane: str
    fence: int
    attempts: int
    row: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    status: str
    note: str | None = None  # the error of failed or cancelled work
    answered: bool = False  # a turn's answer was posted
    recorded: bool = False  # the outcome is in the store already (with the answer): `finish` is not asked
    record: dict[str, Any] = field(default_factory=dict)  # what the engine's events say of it


class WorkSource(Protocol):
    kinds: tuple[str, ...]

    def claim(self, store: StateStore, owner: str, limit: int) -> list[Item]: ...

    async def run(self, item: Item, engine: Engine) -> Outcome: ...

    def finish(self, store: StateStore, owner: str, item: Item, outcome: Outcome) -> str: ...

    def stopped(self, store: StateStore, owner: str, item: Item, run_id: str | None) -> bool: ...
    # whether the stop cancelled the work: False when it had finished meanwhile, or was put back

    def take_back(self, home: Home, store: StateStore, owner: str, live: Container[str]) -> int: ...


class Engine:
    def __init__(self, home: Home, sources: list[WorkSource], *, concurrency: int = 256, on_event: OnEvent | None = None,
                 threads: Threads | None = None, role: str = "dispatch", others: Callable[[], int] | None = None) -> None:
        self.root = home.root
        self.sources = sources
        self.concurrency = check_concurrency(concurrency)
        self.emit = on_event or (lambda event: None)
        self.threads = threads or Threads()
        self.owner = f"{role}-{socket.gethostname()}-{os.getpid()}-{pysecrets.token_hex(4)}"
        self.running: dict[asyncio.Task[Any], Item] = {}
        self.runs: dict[tuple[str, int], str] = {}  # (kind, id) -> the run it is in, once started
        self.ended_runs = 0  # ended by a stop
        self.stopped_starting = 0  # work stopped before its run had started (put back or cancelled, as its source decides)
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._order = itertools.count(1)
        self.others = others  # how many other processes of the same dispatch still work (their runs may add work here)

    def home(self) -> Home:
        return Home(self.root)

    # -- the scheduler -----------------------------------------------------------------------
    async def serve(self, once: bool = False) -> None:
        """Run until nothing is pending and nothing runs (`once`), or until stopped (cancelled:
        the runs in flight are ended, their work put back or cancelled)."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        stop_listening = work.listen(lambda: loop.call_soon_threadsafe(self._wake.set))  # type: ignore[union-attr]
        # what the first runs need loaded (the network stack, the definitions' models), on a
        # thread while the engine registers and claims, rather than on the loop or in the first run
        warming = asyncio.ensure_future(self.threads(_warm))
        await self.threads(self._register)
        beat = asyncio.ensure_future(self._heartbeat())
        try:
            await self.threads(self._take_back)
            others = self.others() if self.others else 0
            while not self._stopping:
                self._wake.clear()
                running = bool(self.running)  # before looking: work that ends while we look may add more
                started = await self._start_what_fits()
                still = self.others() if self.others else 0
                if still < others:  # one of the others has gone: what it left running is taken back now
                    others = still
                    await self.threads(self._take_back)
                    continue
                if once and not started and not running and not self.running and not still:
                    break  # nothing more this engine can claim (another may be running the rest)
                try:
                    await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            await asyncio.shield(self.stop())
            raise
        finally:
            stop_listening()
            beat.cancel()
            warming.cancel()
            if not self.running:
                await self.threads(self._unregister)

    async def stop(self) -> None:
        """Claim nothing more; end every run in flight (so none of them acts again) and put its
        work back or cancel it; wait for the tasks to unwind. Work whose run is still starting
        (its MCP servers slow to answer, say) is counted in `stopped_starting` (its source puts
        it back or cancels it):
        the command that stops then stops the programs those starts began."""
        if self._stopping:
            return  # stopped already (a bot server stops its runs before its connections close, then its app stops)
        self._stopping = True
        items = dict(self.running)
        run_ids = {task: self.runs.get((item.kind, item.id)) for task, item in items.items()}
        for task, item in items.items():
            if run_ids[task] is not None:
                await self.threads(end_run, self.root, run_ids[task], outcome=runner_outcome("interrupted"))
            else:
                self.stopped_starting += 1
            task.cancel()
        if items:
            await asyncio.wait(list(items), timeout=10)
        for task, item in items.items():
            source = self._source(item.kind)
            cancelled = await self.threads(self._with_store, source.stopped, self.owner, item, run_ids[task])
            if run_ids[task] is not None and cancelled:
                self.ended_runs += 1  # a run that finished its work as the stop came is not counted: its outcome stands
        await self.threads(self._unregister)

    def _source(self, kind: str) -> WorkSource:
        return next(s for s in self.sources if kind in s.kinds)

    async def _start_what_fits(self) -> int:
        started = 0
        for source in self.sources:
            free = self.concurrency + tasks.waiting() - len(self.running)
            if free <= 0 or self._stopping:
                break
            for item in await self.threads(self._with_store, source.claim, self.owner, free):
                if self._stopping:  # stopped while it was being claimed: never started, put back or cancelled by its source
                    self.stopped_starting += 1
                    await self.threads(self._with_store, source.stopped, self.owner, item, None)
                    continue
                task = asyncio.ensure_future(self._work(source, item))
                self.running[task] = item
                started += 1
        return started

    async def _work(self, source: WorkSource, item: Item) -> None:
        first_come(next(self._order))  # this run's short work waits behind that of the runs started before it
        self.emit({"type": "started", "kind": item.kind, "id": item.id, **_where(item)})
        try:
            try:
                outcome = await source.run(item, self)
            except asyncio.CancelledError:
                raise
            except FwError as exc:
                outcome = Outcome("failed", f"{exc.code}: {exc.message}")
            except Exception as exc:  # a bug fails this work only, never the engine
                outcome = Outcome("failed", f"internal: unexpected error: {type(exc).__name__}")
            if outcome.recorded:
                status = outcome.status
            else:
                status = await self.threads(self._with_store, source.finish, self.owner, item, outcome)
            self.emit({"type": "ended", "kind": item.kind, "id": item.id, **_where(item), "status": status,
                       **({"error": outcome.note} if outcome.note and status != "done" else {}),
                       **({"answered": True} if outcome.answered else {}), **outcome.record})
        finally:
            self.running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self.runs.pop((item.kind, item.id), None)
            if self._wake is not None:
                self._wake.set()  # a slot and a lane are free: look again at once

    def started_run(self, item: Item, run_id: str) -> None:
        """A piece of work's run started (so that a stop ends it)."""
        self.runs[(item.kind, item.id)] = run_id

    # -- owner, heartbeat, taking back ------------------------------------------------------------
    def _with_store(self, fn: Callable[..., Any], *args: Any) -> Any:
        with StateStore.open(self.home()) as store:
            return fn(store, *args)

    def _register(self) -> None:
        with StateStore.open(self.home()) as store:
            register(store, self.owner)

    def _unregister(self) -> None:
        with StateStore.open(self.home()) as store, store.transaction():
            store.execute("DELETE FROM dispatchers WHERE id = ?", (self.owner,))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self.threads(self._beat)
                if await self.threads(self._take_back) and self._wake is not None:
                    self._wake.set()
            except FwError:
                pass  # the store busy or damaged for a moment: the next beat tries again

    def _beat(self) -> None:
        with StateStore.open(self.home()) as store:
            register(store, self.owner)
            lanes.renew(store, self.owner)

    def _take_back(self) -> int:
        """Take back the work of dead owners, then free their lanes."""
        home = self.home()
        with StateStore.open(home) as store:
            stale_before = _stamp(datetime.now(timezone.utc) - timedelta(seconds=STALE_SECONDS))
            owners = {r["id"]: r for r in store.all("SELECT * FROM dispatchers")}
            dead = {o for o, row in owners.items() if o != self.owner and _dead(row, stale_before)}
            live = _Live(store, {o for o in owners if o not in dead}, dead)
            taken = sum(source.take_back(home, store, self.owner, live) for source in self.sources)
            orphaned = {o for o in (r["owner"] for r in store.all("SELECT DISTINCT owner FROM lanes WHERE owner IS NOT NULL"))
                        if o not in live}
            with store.transaction():
                lanes.free_lanes_of(store, orphaned)
                for owner in dead:
                    store.execute("DELETE FROM dispatchers WHERE id = ?", (owner,))
        return taken


class _Live:
    """The owners alive as a take-back looks at each piece of work or lane: those it read alive,
    and any that entered itself since (a dispatcher registers before it claims anything, so
    work or a lane of an owner not read yet is never taken from it). An owner read dead, or
    with no row at all, is not alive."""

    def __init__(self, store: StateStore, alive: set[str], dead: set[str]) -> None:
        self.store, self.alive, self.dead = store, alive, dead

    def __contains__(self, owner: object) -> bool:
        if owner in self.alive:
            return True
        if not isinstance(owner, str) or owner in self.dead:
            return False
        return self.store.one("SELECT 1 AS x FROM dispatchers WHERE id = ?", (owner,)) is not None


async def serve_until_stopped(engine: Engine, once: bool, stopped: asyncio.Event) -> None:
    """Serve until done (`once`) or until `stopped` is set (a signal): then stop gently, ending
    the runs in flight."""
    serving = asyncio.ensure_future(engine.serve(once))
    waiter = asyncio.ensure_future(stopped.wait())
    await asyncio.wait([serving, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not serving.done():
        await engine.stop()
        serving.cancel()
    try:
        await serving
    except asyncio.CancelledError:
        pass


def _where(item: Item) -> dict[str, Any]:
    keys = ("principal", "session", "bot", "conversation")
    return {k: item.row[k] for k in keys if item.row.get(k)}


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def register(store: StateStore, owner: str) -> None:
    """Enter this owner (or renew its heartbeat); a row removed by another process that thought
    it dead is entered again (its work was taken back; its claims hold no more)."""
    now = now_iso()
    with store.transaction():
        if not store.execute("UPDATE dispatchers SET heartbeat_at = ? WHERE id = ?", (now, owner)).rowcount:
            store.insert("dispatchers", {"id": owner, "host": HOST, "process": me(), "started_at": now, "heartbeat_at": now})


def _dead(row: dict[str, Any], stale_before: str) -> bool:
    if row["heartbeat_at"] < stale_before:  # the portable rule: its heartbeat stopped
        return True
    return row["host"] == HOST and gone_here(row["process"])


def end_run(root: Any, run_id: str | None, *, reason: str | None = None, outcome: dict[str, Any] | None = None) -> None:
    """End a run the engine's work started, if it has one (a damaged record cannot act anyway)."""
    if run_id:
        try:
            run_end(Home(root), run_id, reason, outcome=outcome)
        except FwError:
            pass


def _warm() -> None:
    """Load what a run's start and its model request need: the network stack and the models
    that check a definition (about 0.15 s each, once a process). Only a head start: what fails
    here fails again, and is reported, where a run needs it."""
    try:
        from ..home import models  # noqa: F401  # lazy: start-up speed

        warm()
    except Exception:
        pass
