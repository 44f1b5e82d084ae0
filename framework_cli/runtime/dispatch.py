"""`fw dispatch`: run pending turns as managed runs, in parallel across principals and one at
a time per principal, and post each run's answer to its session.

A turn is claimed in a transaction (pending -> running) only when no other turn of its
principal is running, in this dispatcher or another, so many dispatchers may share a home.
Each worker thread opens its own home and state store. A turn whose run fails is marked
`failed` with the safe error and blocks nothing else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from . import sessions
from .sessions import BACKLOG, CANCELLED, DONE, FAILED, PENDING, RUNNING
from .state import StateStore, now_iso

POLL_SECONDS = 0.5  # how often a serving dispatcher looks for new work
HISTORY_MESSAGES = 40  # earlier messages of the session a turn's run is fed

OnEvent = Callable[[dict[str, Any]], None]


@dataclass
class Summary:
    turns: dict[str, int] = field(default_factory=lambda: {"run": 0, "answered": 0, "failed": 0, "cancelled": 0})

    def to_dict(self) -> dict[str, Any]:
        return {"turns": dict(self.turns)}


class Dispatcher:
    def __init__(self, home: Home, workers: int = 4, on_event: OnEvent | None = None, timeout: float = 60.0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise FwError("invalid", "workers must be a whole number from 1 to 64", "e.g. --workers 4")
        self.root = home.root
        self.workers = workers
        self.timeout = timeout
        self.emit = on_event or (lambda event: None)
        self.summary = Summary()
        self._threads: dict[int, threading.Thread] = {}  # turn id -> its worker
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
                    if once and not started and not self._threads and not self._pending(store):
                        break
                    time.sleep(0.05 if started or self._threads else POLL_SECONDS)
            except KeyboardInterrupt:
                self.stop(store)
                raise
            self._join()
        return self.summary.to_dict()

    def stop(self, store: StateStore) -> None:
        """Ctrl-C: claim nothing more, end every run in progress (so none of them acts again)
        and cancel its turn."""
        from ..domain.runs import run_end

        self.stopping.set()
        home = Home(self.root)
        for turn_id in list(self._threads):
            row = store.one("SELECT run_id FROM turns WHERE id = ? AND status = ?", (turn_id, RUNNING))
            if row is None:
                continue
            if row["run_id"]:
                try:
                    run_end(home, row["run_id"])
                except FwError:
                    pass
            self._finish(store, turn_id, CANCELLED, "the dispatcher was interrupted")

    def _pending(self, store: StateStore) -> bool:
        return store.one("SELECT 1 AS x FROM turns WHERE status = ? LIMIT 1", (PENDING,)) is not None

    def _start_what_fits(self, store: StateStore) -> int:
        started = 0
        while len(self._threads) < self.workers:
            turn = self._claim(store)
            if turn is None:
                break
            thread = threading.Thread(target=self._work, args=(turn,), name=f"turn-{turn['id']}", daemon=True)
            with self._guard:
                self._threads[turn["id"]] = thread
            thread.start()
            started += 1
        return started

    def _claim(self, store: StateStore) -> dict[str, Any] | None:
        """The oldest pending turn whose principal runs nothing now, marked running."""
        with store.transaction():
            turn = store.one(
                "SELECT * FROM turns WHERE status = ? AND principal NOT IN (SELECT principal FROM turns WHERE status = ?) "
                "ORDER BY id LIMIT 1",
                (PENDING, RUNNING),
            )
            if turn is not None:
                store.execute("UPDATE turns SET status = ?, started_at = ? WHERE id = ?", (RUNNING, now_iso(), turn["id"]))
        return turn

    def _forget_finished(self) -> None:
        with self._guard:
            for turn_id in [t for t, thread in self._threads.items() if not thread.is_alive()]:
                del self._threads[turn_id]

    def _join(self) -> None:
        for thread in list(self._threads.values()):
            thread.join()
        self._forget_finished()

    def _reap_interrupted(self, store: StateStore) -> None:
        """Turns left `running` by a dispatcher that was killed: their run can no longer be
        trusted to finish, so they are marked failed (their runs, if any, are ended)."""
        from ..domain.runs import RUN_ID_RE, load_run, present

        home = Home(self.root)
        for row in store.all("SELECT id, run_id, started_at FROM turns WHERE status = ?", (RUNNING,)):
            alive = False
            if row["run_id"] and RUN_ID_RE.fullmatch(row["run_id"]):
                try:
                    alive = present(load_run(home, row["run_id"]))["status"] == "active"
                except FwError:
                    alive = False
            if not alive and row["run_id"]:
                self._finish(store, row["id"], FAILED, "its dispatcher stopped before it finished")

    # -- one turn ------------------------------------------------------------------------------
    def _work(self, turn: dict[str, Any]) -> None:
        home = Home(self.root)
        with StateStore(self.root / "state.db") as store:
            self.emit({"type": "turn_started", "turn": turn["id"], "principal": turn["principal"], "session": turn["session"]})
            status, error = self._run_turn(home, store, turn)
            self._finish(store, turn["id"], status, error)  # unless Ctrl-C cancelled it meanwhile
            self._count(status, error)
            self.emit({"type": "turn_ended", "turn": turn["id"], "principal": turn["principal"], "session": turn["session"],
                       "status": status, **({"error": error} if error else {})})

    def _run_turn(self, home: Home, store: StateStore, turn: dict[str, Any]) -> tuple[str, str | None]:
        from .agent_run import agent_run

        trigger = store.one("SELECT * FROM messages WHERE id = ?", (turn["message_id"],))
        assert trigger is not None
        history = self._history(store, turn, trigger)
        context = {"session": turn["session"], "turn": turn["id"], "hop": turn["hop"]}
        try:
            doc = agent_run(home, f"{trigger['author']}: {trigger['text']}", principal=turn["principal"],
                            context=context, history=history, timeout=self.timeout,
                            on_event=lambda event: self._note_run(store, turn, event))
        except FwError as exc:
            if exc.code == "denied" and "disabled" in exc.message:
                return BACKLOG, None  # disabled since: it waits for the binding again
            return FAILED, redact(f"{exc.code}: {exc.message}")
        except Exception as exc:  # a bug must fail this turn only, never the dispatcher
            return FAILED, f"internal: unexpected error: {type(exc).__name__}"
        return self._answer(home, turn, doc)

    def _note_run(self, store: StateStore, turn: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("type") == "started":
            with store.transaction():
                store.execute("UPDATE turns SET run_id = ? WHERE id = ?", (event["run"]["run_id"], turn["id"]))

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

    def _answer(self, home: Home, turn: dict[str, Any], doc: dict[str, Any]) -> tuple[str, str | None]:
        """Post the run's final answer to the session as the principal's message."""
        text = (doc.get("answer") or "").strip()
        if not text:
            return DONE, None
        try:
            sessions.message_post(home, turn["session"], turn["principal"], text, hop=turn["hop"] + 1, run_id=doc["run_id"])
        except FwError as exc:
            status = CANCELLED if exc.code == "session_ended" else FAILED
            return status, f"{exc.code}: the answer was not posted ({exc.message})"
        return DONE, "answered"

    def _finish(self, store: StateStore, turn_id: int, status: str, note: str | None) -> None:
        error = None if note == "answered" else note
        with store.transaction():
            store.execute("UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE id = ? AND status = ?",
                          (status, error, now_iso() if status != BACKLOG else None, turn_id, RUNNING))

    def _count(self, status: str, note: str | None) -> None:
        with self._guard:
            if status == BACKLOG:
                return
            self.summary.turns["run"] += 1
            if status == DONE and note == "answered":
                self.summary.turns["answered"] += 1
            elif status == FAILED:
                self.summary.turns["failed"] += 1
            elif status == CANCELLED:
                self.summary.turns["cancelled"] += 1


def dispatch(home: Home, *, once: bool = False, workers: int = 4, on_event: OnEvent | None = None, timeout: float = 60.0) -> dict[str, Any]:
    return Dispatcher(home, workers, on_event, timeout).run(once)
