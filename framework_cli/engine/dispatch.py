"""`fw dispatch`: run pending turns and tasks as managed runs, in parallel across principals
and one at a time per principal; post each turn's answer to its session, record each task's
result.

Work is claimed in a transaction (pending -> running) only when its principal runs nothing
else, in this dispatcher or another, so many dispatchers may share a home. Each worker thread
opens its own home and state store. Work whose run fails is marked `failed` with the safe
error and blocks nothing else. A worker waiting in `task_wait` lends its slot to other work,
so a parent that waits for its child in the same dispatcher never starves it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..domain.identities import get_binding
from ..domain.runs import RUN_ID_RE, load_run, present, run_end
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..runtime import sessions, tasks
from ..runtime.sessions import BACKLOG, CANCELLED, DONE, FAILED, PENDING, RUNNING
from ..state.store import StateStore, now_iso
from .agent_run import agent_run, check_timeout

POLL_SECONDS = 0.5  # how often a serving dispatcher looks for new work
STARTING_SECONDS = 120  # a claimed turn or task whose run has not started by then was left by a killed dispatcher
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
    def __init__(self, home: Home, workers: int = 4, on_event: OnEvent | None = None, timeout: float = 60.0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise FwError("invalid", "workers must be a whole number from 1 to 64", "e.g. --workers 4")

        check_timeout(timeout)  # before any work is claimed
        self.root = home.root
        self.workers = workers
        self.timeout = timeout
        self.emit = on_event or (lambda event: None)
        self.summary = Summary()
        self._threads: dict[tuple[str, int], threading.Thread] = {}  # (kind, id) -> its worker
        self._guard = threading.Lock()
        self.stopping = threading.Event()

    # -- the scheduler -----------------------------------------------------------------------
    def run(self, once: bool) -> dict[str, Any]:
        """Run until nothing is pending and nothing runs (`once`), or until stopped."""
        with StateStore(self.root / "state.db") as store:
            self._reap_interrupted(store)
            try:
                while not self.stopping.is_set():
                    self._forget_finished()
                    started = self._start_what_fits(store)
                    if once and not started and not self._threads:
                        break  # nothing more this dispatcher can claim (another may be running the rest)
                    time.sleep(0.05 if started or self._threads else POLL_SECONDS)
            except KeyboardInterrupt:
                self.stop(store)
                raise
            self._join()
        return self.summary.to_dict()

    def stop(self, store: StateStore) -> None:
        """Ctrl-C: claim nothing more, end every run in progress (so none of them acts again)
        and cancel its work."""
        self.stopping.set()
        for kind, item_id in list(self._threads):
            row = store.one(f"SELECT run_id FROM {TABLES[kind]} WHERE id = ? AND status = ?", (item_id, RUNNING))
            if row is not None:
                _end_run(self.root, row["run_id"])
                self._finish(store, kind, item_id, Outcome(CANCELLED, "the dispatcher was interrupted"))

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
        """The oldest pending turn or task whose principal runs nothing now, marked running."""
        busy = "SELECT principal FROM turns WHERE status = ? UNION SELECT principal FROM tasks WHERE status = ?"
        with store.transaction():
            candidates = []
            for kind, table in TABLES.items():
                row = store.one(f"SELECT * FROM {table} WHERE status = ? AND principal NOT IN ({busy}) ORDER BY id LIMIT 1",
                                (PENDING, RUNNING, RUNNING))
                if row is not None:
                    candidates.append({**row, "kind": kind})
            if not candidates:
                return None
            item = min(candidates, key=lambda c: c["created_at"])
            store.execute(f"UPDATE {TABLES[item['kind']]} SET status = ?, started_at = ? WHERE id = ?", (RUNNING, now_iso(), item["id"]))
        return item

    def _forget_finished(self) -> None:
        with self._guard:
            for key in [k for k, thread in self._threads.items() if not thread.is_alive()]:
                del self._threads[key]

    def _join(self) -> None:
        for thread in list(self._threads.values()):
            thread.join()
        self._forget_finished()

    def _reap_interrupted(self, store: StateStore) -> None:
        """Work left `running` by a dispatcher that was killed: its run is not active any
        more, so it is marked failed."""

        home = Home(self.root)
        for kind, table in TABLES.items():
            for row in store.all(f"SELECT id, run_id, started_at FROM {table} WHERE status = ?", (RUNNING,)):
                if row["run_id"] is None:  # claimed, but its run never started
                    alive = _age_seconds(row["started_at"]) < STARTING_SECONDS
                else:
                    try:
                        alive = bool(RUN_ID_RE.fullmatch(row["run_id"])) and present(load_run(home, row["run_id"]))["status"] == "active"
                    except FwError:
                        alive = False
                if not alive:
                    self._finish(store, kind, row["id"], Outcome(FAILED, "its dispatcher stopped before it finished"))

    # -- one piece of work ----------------------------------------------------------------------
    def _work(self, item: dict[str, Any]) -> None:
        home = Home(self.root)
        kind, item_id = item["kind"], item["id"]
        where = {"session": item.get("session")} if item.get("session") else {}
        self.emit({"type": "started", "kind": kind, "id": item_id, "principal": item["principal"], **where})
        with StateStore(self.root / "state.db") as store:
            try:
                outcome = self._run_turn(home, store, item) if kind == "turn" else self._run_task(home, item)
            except Exception as exc:  # every path ends the work: a bug fails it, never leaves it running
                outcome = Outcome(FAILED, f"internal: unexpected error: {type(exc).__name__}")
            status = self._finish(store, kind, item_id, outcome)  # unless cancelled meanwhile
        with self._guard:
            self.summary.count(kind, status, outcome.answered)
        self.emit({"type": "ended", "kind": kind, "id": item_id, "principal": item["principal"], **where, "status": status,
                   **({"error": outcome.note} if outcome.note and status != DONE else {})})

    def _run(self, home: Home, message: str, item: dict[str, Any], context: dict[str, Any],
             history: list[dict[str, Any]] | None, started: Callable[[str], None]) -> dict[str, Any] | Outcome:
        """A managed run of the item's principal on `message`: its result document, or the
        outcome when it could not run."""

        def note(event: dict[str, Any]) -> None:
            if event.get("type") == "started":
                started(event["run"]["run_id"])

        try:
            return agent_run(home, message, principal=item["principal"], context=context, history=history,
                             timeout=self.timeout, on_event=note)
        except FwError as exc:
            if exc.extra.get("reason") == "binding_disabled":
                return Outcome(BACKLOG)  # disabled since it was claimed: it waits for the binding again
            return Outcome(FAILED, redact(f"{exc.code}: {exc.message}"))
        except Exception as exc:  # a bug must fail this work only, never the dispatcher
            return Outcome(FAILED, f"internal: unexpected error: {type(exc).__name__}")

    def _run_turn(self, home: Home, store: StateStore, turn: dict[str, Any]) -> Outcome:
        trigger = store.one("SELECT * FROM messages WHERE id = ?", (turn["message_id"],))
        assert trigger is not None
        context = {"session": turn["session"], "turn": turn["id"], "hop": turn["hop"]}

        def started(run_id: str) -> None:
            with store.transaction():
                store.execute("UPDATE turns SET run_id = ? WHERE id = ?", (run_id, turn["id"]))

        doc = self._run(home, f"{trigger['author']}: {trigger['text']}", turn, context, self._history(store, turn, trigger), started)
        return doc if isinstance(doc, Outcome) else self._answer(home, turn, doc)

    def _run_task(self, home: Home, task: dict[str, Any]) -> Outcome:
        context = {"task": task["id"], "hop": task.get("hop", 0), **({"session": task["session"]} if task["session"] else {})}
        doc = self._run(home, task["instructions"], task, context, None, lambda run_id: tasks.task_started(home, task["id"], run_id))
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
        """Post the run's final answer to the session as the principal's message."""
        text = (doc.get("answer") or "").strip()
        if not text:
            return Outcome(DONE)
        try:
            sessions.message_post(home, turn["session"], turn["principal"], text, hop=turn["hop"] + 1, run_id=doc["run_id"])
        except FwError as exc:
            status = CANCELLED if exc.code == "session_ended" else FAILED
            return Outcome(status, f"{exc.code}: the answer was not posted ({exc.message})")
        return Outcome(DONE, answered=True)

    def _finish(self, store: StateStore, kind: str, item_id: int, outcome: Outcome) -> str:
        """Record the outcome of running work; the status it has now (a task may have been
        reported, or cancelled, meanwhile)."""
        if outcome.status == BACKLOG and _binding_enabled(self.root, item_principal(store, kind, item_id)):
            outcome = Outcome(PENDING)  # enabled again meanwhile: its backlog was released without it
        if kind == "task":
            result = outcome.note if outcome.status == DONE else None
            error = None if outcome.status == DONE else outcome.note
            return tasks.task_finished(Home(self.root), item_id, outcome.status, result, error)
        with store.transaction():
            store.execute("UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE id = ? AND status = ?",
                          (outcome.status, outcome.note, now_iso() if outcome.status not in (BACKLOG, PENDING) else None, item_id, RUNNING))
            return store.one("SELECT status FROM turns WHERE id = ?", (item_id,))["status"]  # type: ignore[index]


def item_principal(store: StateStore, kind: str, item_id: int) -> str:
    return store.one(f"SELECT principal FROM {TABLES[kind]} WHERE id = ?", (item_id,))["principal"]  # type: ignore[index]


def _binding_enabled(root: Any, principal: str) -> bool:

    try:
        binding = get_binding(Home(root), principal)
    except FwError:
        return False
    return bool(binding and binding["enabled"])


def _age_seconds(stamp: str | None) -> float:
    from datetime import datetime, timezone

    if not stamp:
        return float("inf")
    return (datetime.now(timezone.utc) - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


def _end_run(root: Any, run_id: str | None) -> None:

    if run_id:
        try:
            run_end(Home(root), run_id)
        except FwError:
            pass


def dispatch(home: Home, *, once: bool = False, workers: int = 4, on_event: OnEvent | None = None, timeout: float = 60.0) -> dict[str, Any]:
    return Dispatcher(home, workers, on_event, timeout).run(once)
