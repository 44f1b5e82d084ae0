"""`fw dispatch`: run pending turns and tasks as managed runs, in parallel across principals
and one at a time per principal; post each turn's answer to its session, record each task's
result.

Work is claimed in a transaction (pending -> running) only when its principal runs nothing
else, in this dispatcher or another, so many dispatchers may share a home. A claim carries
its owner (this dispatcher, a row of `dispatchers` whose heartbeat it renews) and its number
(`attempts`); every later write of the work (its run's id, its answer, its outcome) holds only
while that claim does, so work taken back from a dispatcher thought dead is never answered
twice and its status tells the truth. A dispatcher is dead when its heartbeat is older than
STALE_SECONDS, or at once when it ran on this host and its process is gone; any dispatcher,
starting or serving, then takes its work back: it ends the work's run and runs the work again
(at most MAX_ATTEMPTS claims in all), or fails it with the reason.

Each worker thread opens its own home and state store. Work whose run fails is marked `failed`
with the safe error and blocks nothing else. A worker waiting in `task_wait` lends its slot to
other work, so a parent that waits for its child in the same dispatcher never starves it. The
scheduler sleeps until work changes in this process, or for a short poll of `state.db`.
"""

from __future__ import annotations

import os
import secrets as pysecrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..domain.identities import get_binding
from ..domain.runs import run_end
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..liveness import HOST, gone_here, me
from ..runtime import sessions, tasks, work
from ..runtime.sessions import BACKLOG, CANCELLED, DONE, FAILED, PENDING, RUNNING, Claim
from ..state.store import StateStore, now_iso
from .agent_run import agent_run, check_timeout
from .external import GatewayStarter

POLL_SECONDS = 0.25  # how often the scheduler looks in state.db for work other processes added
HEARTBEAT_SECONDS = 5.0  # how often a dispatcher renews its heartbeat, and looks for dead ones
STALE_SECONDS = 30.0  # a dispatcher whose heartbeat is older than this is dead: its work is taken back
MAX_ATTEMPTS = 3  # claims of one piece of work; work whose dispatchers died that often is failed
HISTORY_MESSAGES = 40  # earlier messages of the session a turn's run is fed
TABLES = {"turn": "turns", "task": "tasks"}

OnEvent = Callable[[dict[str, Any]], None]


@dataclass
class Summary:
    turns: dict[str, int] = field(default_factory=lambda: {"run": 0, "answered": 0, "failed": 0, "cancelled": 0})
    tasks: dict[str, int] = field(default_factory=lambda: {"run": 0, "done": 0, "failed": 0, "cancelled": 0})

    def to_dict(self) -> dict[str, Any]:
        return {"turns": dict(self.turns), "tasks": dict(self.tasks)}

    def count(self, kind: str, status: str, answered: bool) -> None:
        if status == BACKLOG:
            return
        counts = self.turns if kind == "turn" else self.tasks
        counts["run"] += 1
        if status == DONE and kind == "task":
            counts["done"] += 1
        elif status == DONE and answered:
            counts["answered"] += 1
        elif status in (FAILED, CANCELLED):
            counts[status] += 1


@dataclass
class Outcome:
    status: str
    note: str | None = None  # the error of failed or cancelled work
    answered: bool = False  # a turn's answer was posted


class Dispatcher:
    def __init__(self, home: Home, workers: int = 4, on_event: OnEvent | None = None, timeout: float | None = None,
                 gateway: GatewayStarter | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise FwError("invalid", "workers must be a whole number from 1 to 64", "e.g. --workers 4")

        if timeout is not None:
            check_timeout(timeout)  # before any work is claimed
        self.root = home.root
        self.workers = workers
        self.timeout = timeout  # None: each runner's default (60 s a model answer, 600 s an external runner)
        self.gateway = gateway  # serves an external runner's run (see `agent_run`)
        self.emit = on_event or (lambda event: None)
        self.summary = Summary()
        self.id = f"{socket.gethostname()}-{os.getpid()}-{pysecrets.token_hex(4)}"
        self._threads: dict[tuple[str, int], threading.Thread] = {}  # (kind, id) -> its worker
        self._guard = threading.Lock()
        self.stopping = threading.Event()

    # -- the scheduler -----------------------------------------------------------------------
    def run(self, once: bool) -> dict[str, Any]:
        """Run until nothing is pending and nothing runs (`once`), or until stopped."""
        with StateStore(self.root / "state.db") as store:
            _register(store, self.id)
            keeper = threading.Thread(target=self._keep, name="dispatcher-heartbeat", daemon=True)
            try:
                take_back(Home(self.root), store, self.id)
                keeper.start()
                while not self.stopping.is_set():
                    seen = work.generation()
                    self._forget_finished()
                    running = bool(self._threads)  # before looking: work that ends while we look may add more
                    started = self._start_what_fits(store)
                    if once and not started and not running:
                        break  # nothing more this dispatcher can claim (another may be running the rest)
                    work.wait(seen, POLL_SECONDS)
                self._join()
            except KeyboardInterrupt:
                in_flight = bool(self._threads)
                self.stop(store)
                if in_flight:
                    raise  # runs were ended: `interrupted`
                # nothing was running: a clean stop, with the summary
            finally:
                self.stopping.set()  # the heartbeat stops too
                if keeper.is_alive():
                    keeper.join()
                with store.transaction():  # it holds nothing now: its work ended, or was cancelled by stop
                    store.execute("DELETE FROM dispatchers WHERE id = ?", (self.id,))
        return self.summary.to_dict()

    def _keep(self) -> None:
        """The heartbeat: renew this dispatcher's, and take back the work of dead ones."""
        home = Home(self.root)
        with StateStore(self.root / "state.db") as store:
            while not self.stopping.wait(HEARTBEAT_SECONDS):
                try:
                    _register(store, self.id)
                    if take_back(home, store, self.id):
                        work.changed()
                except FwError:
                    pass  # state.db busy or damaged for a moment: the next beat tries again

    def stop(self, store: StateStore) -> None:
        """Ctrl-C: claim nothing more, end every run in progress (so none of them acts again)
        and cancel its work."""
        self.stopping.set()
        for kind, item_id in list(self._threads):
            row = store.one(f"SELECT run_id, attempts FROM {TABLES[kind]} WHERE id = ? AND status = ? AND owner = ?",
                            (item_id, RUNNING, self.id))
            if row is not None:
                _end_run(self.root, row["run_id"])
                self._finish(store, kind, Claim(item_id, self.id, row["attempts"]), Outcome(CANCELLED, "the dispatcher was interrupted"))

    def _free_slots(self) -> int:
        return self.workers + tasks.waiting() - len(self._threads)

    def _start_what_fits(self, store: StateStore) -> int:
        started = 0
        while self._free_slots() > 0:
            item = self._claim(store)
            if item is None:
                break
            thread = threading.Thread(target=self._work, args=(item,), name=f"{item['kind']}-{item['id']}", daemon=True)
            with self._guard:
                self._threads[(item["kind"], item["id"])] = thread
            thread.start()
            started += 1
        return started

    def _claim(self, store: StateStore) -> dict[str, Any] | None:
        """The oldest pending turn or task whose principal runs nothing now, marked running
        and owned by this dispatcher. Looks first without the write lock: most looks find
        nothing."""
        if self._candidate(store) is None:
            return None
        with store.transaction():
            item = self._candidate(store)
            if item is None:
                return None
            store.execute(f"UPDATE {TABLES[item['kind']]} SET status = ?, started_at = ?, owner = ?, attempts = attempts + 1 "
                          "WHERE id = ? AND status = ?", (RUNNING, now_iso(), self.id, item["id"], PENDING))
        item["attempts"] += 1
        item["claim"] = Claim(item["id"], self.id, item["attempts"])
        return item

    def _candidate(self, store: StateStore) -> dict[str, Any] | None:
        busy = "SELECT principal FROM turns WHERE status = ? UNION SELECT principal FROM tasks WHERE status = ?"
        candidates = []
        for kind, table in TABLES.items():
            row = store.one(f"SELECT * FROM {table} WHERE status = ? AND principal NOT IN ({busy}) ORDER BY id LIMIT 1",
                            (PENDING, RUNNING, RUNNING))
            if row is not None:
                candidates.append({**row, "kind": kind})
        return min(candidates, key=lambda c: c["created_at"]) if candidates else None

    def _forget_finished(self) -> None:
        with self._guard:
            for key in [k for k, thread in self._threads.items() if not thread.is_alive()]:
                del self._threads[key]

    def _join(self) -> None:
        for thread in list(self._threads.values()):
            thread.join()
        self._forget_finished()

    # -- one piece of work ----------------------------------------------------------------------
    def _work(self, item: dict[str, Any]) -> None:
        home = Home(self.root)
        kind, item_id, claim = item["kind"], item["id"], item["claim"]
        where = {"session": item.get("session")} if item.get("session") else {}
        self.emit({"type": "started", "kind": kind, "id": item_id, "principal": item["principal"], **where})
        try:
            with StateStore(self.root / "state.db") as store:
                try:
                    outcome = self._run_turn(home, store, item) if kind == "turn" else self._run_task(home, item)
                except Exception as exc:  # every path ends the work: a bug fails it, never leaves it running
                    outcome = Outcome(FAILED, f"internal: unexpected error: {type(exc).__name__}")
                status = self._finish(store, kind, claim, outcome)  # unless cancelled or taken back meanwhile
            with self._guard:
                self.summary.count(kind, status, outcome.answered)
            self.emit({"type": "ended", "kind": kind, "id": item_id, "principal": item["principal"], **where, "status": status,
                       **({"error": outcome.note} if outcome.note and status != DONE else {})})
        finally:
            with self._guard:
                self._threads.pop((kind, item_id), None)
            work.changed()  # a slot and a principal are free: the scheduler looks again at once

    def _run(self, home: Home, message: str, item: dict[str, Any], context: dict[str, Any],
             history: list[dict[str, Any]] | None, started: Callable[[str], None]) -> dict[str, Any] | Outcome:
        """A managed run of the item's principal on `message`: its result document, or the
        outcome when it could not run."""

        def note(event: dict[str, Any]) -> None:
            if event.get("type") == "started":
                started(event["run"]["run_id"])

        try:
            return agent_run(home, message, principal=item["principal"], context=context, history=history,
                             timeout=self.timeout, on_event=note, gateway=self.gateway)
        except FwError as exc:
            if exc.extra.get("reason") == "binding_disabled":
                return Outcome(BACKLOG)  # disabled since it was claimed: it waits for the binding again
            reason = exc.extra.get("reason")  # e.g. unavailable (model_answer): the model answered unusably
            return Outcome(FAILED, redact(f"{exc.code}{f' ({reason})' if reason else ''}: {exc.message}"))
        except Exception as exc:  # a bug must fail this work only, never the dispatcher
            return Outcome(FAILED, f"internal: unexpected error: {type(exc).__name__}")

    def _run_turn(self, home: Home, store: StateStore, turn: dict[str, Any]) -> Outcome:
        trigger = store.one("SELECT * FROM messages WHERE id = ?", (turn["message_id"],))
        assert trigger is not None
        context = {"session": turn["session"], "turn": turn["id"], "hop": turn["hop"]}
        where, params = turn["claim"].where()

        def started(run_id: str) -> None:
            with store.transaction():
                recorded = store.execute(f"UPDATE turns SET run_id = ? WHERE {where}", (run_id, *params)).rowcount
            if not recorded:  # cancelled or taken back meanwhile: the run acts no more
                _end_run(self.root, run_id)

        doc = self._run(home, f"{trigger['author']}: {trigger['text']}", turn, context, self._history(store, turn, trigger), started)
        return doc if isinstance(doc, Outcome) else self._answer(home, turn, doc)

    def _run_task(self, home: Home, task: dict[str, Any]) -> Outcome:
        context = {"task": task["id"], "hop": task.get("hop", 0), **({"session": task["session"]} if task["session"] else {})}
        doc = self._run(home, task["instructions"], task, context, None, lambda run_id: tasks.task_started(home, task["claim"], run_id))
        if isinstance(doc, Outcome):
            return doc
        return Outcome(DONE, doc.get("answer") or "")

    def _history(self, store: StateStore, turn: dict[str, Any], trigger: dict[str, Any]) -> list[dict[str, Any]]:
        rows = store.all(
            "SELECT author, text FROM messages WHERE session = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (turn["session"], trigger["id"], HISTORY_MESSAGES),
        )
        me = turn["principal"]
        return [
            {"role": "assistant", "content": r["text"]} if r["author"] == me else {"role": "user", "content": f"{r['author']}: {r['text']}"}
            for r in reversed(rows)
        ]

    def _answer(self, home: Home, turn: dict[str, Any], doc: dict[str, Any]) -> Outcome:
        """Post the run's final answer to the session as the principal's message; the turn
        becomes `done` in the same transaction, while this dispatcher's claim holds."""
        text = (doc.get("answer") or "").strip()
        if not text:
            return Outcome(DONE)
        try:
            sessions.message_post(home, turn["session"], turn["principal"], text, hop=turn["hop"] + 1, run_id=doc["run_id"],
                                  answers=turn["claim"])
        except FwError as exc:
            status = CANCELLED if exc.code == "session_ended" else FAILED
            return Outcome(status, f"{exc.code}: the answer was not posted ({exc.message})")
        return Outcome(DONE, answered=True)

    def _finish(self, store: StateStore, kind: str, claim: Claim, outcome: Outcome) -> str:
        """Record the outcome of running work while the claim holds; the status it has now (a
        task may have been reported or cancelled, a turn answered, work taken back, meanwhile)."""
        if outcome.status == BACKLOG and _binding_enabled(self.root, item_principal(store, kind, claim.id)):
            outcome = Outcome(PENDING)  # enabled again meanwhile: its backlog was released without it
        if kind == "task":
            result = outcome.note if outcome.status == DONE else None
            error = None if outcome.status == DONE else outcome.note
            return tasks.task_finished(Home(self.root), claim, outcome.status, result, error)
        where, params = claim.where()
        with store.transaction():
            store.execute(f"UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE {where}",
                          (outcome.status, outcome.note, now_iso() if outcome.status not in (BACKLOG, PENDING) else None, *params))
            return store.one("SELECT status FROM turns WHERE id = ?", (claim.id,))["status"]  # type: ignore[index]


def item_principal(store: StateStore, kind: str, item_id: int) -> str:
    return store.one(f"SELECT principal FROM {TABLES[kind]} WHERE id = ?", (item_id,))["principal"]  # type: ignore[index]


def _binding_enabled(root: Any, principal: str) -> bool:

    try:
        binding = get_binding(Home(root), principal)
    except FwError:
        return False
    return bool(binding and binding["enabled"])


def _end_run(root: Any, run_id: str | None) -> None:

    if run_id:
        try:
            run_end(Home(root), run_id)
        except FwError:
            pass


# -- owners, heartbeats and taking work back ----------------------------------------------------
def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _register(store: StateStore, dispatcher: str) -> None:
    """Enter this dispatcher (or renew its heartbeat); a row removed by another dispatcher
    that thought it dead is entered again (its work was taken back; its claims hold no more)."""
    now = now_iso()
    with store.transaction():
        if not store.execute("UPDATE dispatchers SET heartbeat_at = ? WHERE id = ?", (now, dispatcher)).rowcount:
            store.insert("dispatchers", {"id": dispatcher, "host": HOST, "process": me(),
                                         "started_at": now, "heartbeat_at": now})


def _dead(row: dict[str, Any], stale_before: str) -> bool:
    if row["heartbeat_at"] < stale_before:  # the portable rule: its heartbeat stopped
        return True
    return row["host"] == HOST and gone_here(row["process"])


def take_back(home: Home, store: StateStore, me: str) -> int:
    """Take back the work of dead dispatchers (and running work that names no live owner):
    end its run, then run it again, or fail it when it has had MAX_ATTEMPTS claims; work of
    an ended session is cancelled. How many pieces of work were taken back."""
    stale_before = _stamp(datetime.now(timezone.utc) - timedelta(seconds=STALE_SECONDS))
    owners = {r["id"]: r for r in store.all("SELECT * FROM dispatchers")}
    dead = {d for d, row in owners.items() if d != me and _dead(row, stale_before)}
    taken = 0
    for kind, table in TABLES.items():
        for row in store.all(f"SELECT id, owner, attempts, run_id, session FROM {table} WHERE status = ?", (RUNNING,)):
            if row["owner"] == me or (row["owner"] in owners and row["owner"] not in dead):
                continue
            taken += _take_back_one(home, store, table, row)
    with store.transaction():
        for d in dead:
            store.execute("DELETE FROM dispatchers WHERE id = ?", (d,))
    return taken


def _take_back_one(home: Home, store: StateStore, table: str, row: dict[str, Any]) -> int:
    ended = row["session"] is not None and not sessions.session_is_open(home, row["session"])
    if ended:
        status, note = CANCELLED, "session_ended"
    elif row["attempts"] >= MAX_ATTEMPTS:
        status, note = FAILED, f"its dispatcher stopped before it finished, {row['attempts']} times; it is not run again"
    else:
        status, note = PENDING, "taken back from a dispatcher that stopped; run again"
    owner_is = "owner IS NULL" if row["owner"] is None else "owner = ?"
    forget_run = "run_id = NULL, started_at = NULL, " if status == PENDING else ""  # a run again starts afresh
    with store.transaction():  # only if it is still that dead owner's claim
        changed = store.execute(
            f"UPDATE {table} SET status = ?, error = ?, {forget_run}owner = NULL, ended_at = ? "
            f"WHERE id = ? AND status = ? AND attempts = ? AND {owner_is}",
            (status, note, None if status == PENDING else now_iso(), row["id"], RUNNING, row["attempts"],
             *(() if row["owner"] is None else (row["owner"],))),
        ).rowcount
    if changed:
        _end_run(home.root, row["run_id"])
    return changed


def dispatch(home: Home, *, once: bool = False, workers: int = 4, on_event: OnEvent | None = None, timeout: float | None = None,
             gateway: GatewayStarter | None = None) -> dict[str, Any]:
    return Dispatcher(home, workers, on_event, timeout, gateway).run(once)
