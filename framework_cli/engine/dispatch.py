"""`fw dispatch`: run pending turns and tasks as managed runs, side by side across principals
and one at a time per principal, in the order they were posted; post each turn's answer to its
session, record each task's result.

Turns and tasks are one source of the engine (`engine.py`): they share a principal's lane
(`runtime/lanes.py`). Work is claimed in a short transaction, the oldest pending piece of each
principal whose lane is free, with the lane taken in the same transaction. A claim carries its
owner (this engine's row of `dispatchers`, whose heartbeat it renews), its number (`attempts`)
and its lane's fence; every later write of the work (its run's id, its answer, its outcome)
holds only while all three do, so work taken back from an owner thought dead is never answered
twice and its status tells the truth. A dead owner's running work is ended and run again (at
most MAX_ATTEMPTS claims in all), or failed with the reason; work of an ended session is
cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any

from ..domain.identities import DEFAULT_MAX_QUEUE, get_binding
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..runtime import lanes, sessions, tasks
from ..runtime.sessions import BACKLOG, CANCELLED, DONE, FAILED, PENDING, RUNNING, Claim
from ..state.store import StateStore, now_iso
from .agent_run import arun_agent, check_timeout
from .aio import ENGINE_THREADS, Threads, run_loop
from .engine import Engine, Item, Outcome, end_run, serve_until_stopped
from .external import GatewayStarter
from .shares import HELPER_STOP_SECONDS, Helpers, Share, check_concurrency

MAX_ATTEMPTS = 3  # claims of one piece of work; work whose owners died that often is failed
HISTORY_MESSAGES = 40  # earlier messages of the session a turn's run is fed
TABLES = {"turn": "turns", "task": "tasks"}
DEFAULT_CONCURRENCY = 256

OnEvent = Callable[[dict[str, Any]], None]


@dataclass
class Summary:
    turns: dict[str, int] = field(default_factory=lambda: {"run": 0, "answered": 0, "failed": 0, "cancelled": 0})
    tasks: dict[str, int] = field(default_factory=lambda: {"run": 0, "done": 0, "failed": 0, "cancelled": 0})
    queue: dict[str, Any] = field(default_factory=dict)  # what waited when it started

    def to_dict(self) -> dict[str, Any]:
        return {"turns": dict(self.turns), "tasks": dict(self.tasks), "queue_at_start": self.queue}

    def add(self, other: dict[str, Any]) -> None:
        """Another process's counts (its summary), added to these."""
        for mine, theirs in ((self.turns, other.get("turns") or {}), (self.tasks, other.get("tasks") or {})):
            for key in mine:
                value = theirs.get(key)
                mine[key] += value if isinstance(value, int) and not isinstance(value, bool) else 0

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


def claim_of(owner: str, item: Item) -> Claim:
    return Claim(item.id, owner, item.attempts, item.lane, item.fence)


class PrincipalWork:
    """Turns and tasks: the managed runs of principals, one at a time per principal."""

    kinds = ("turn", "task")

    def __init__(self, home: Home, timeout: float | None = None, gateway: GatewayStarter | None = None,
                 share: Share | None = None) -> None:
        if timeout is not None:
            check_timeout(timeout)  # before any work is claimed
        self.root = home.root
        self.timeout = timeout  # None: each runner's default (60 s a model answer, 600 s an external runner)
        self.gateway = gateway  # serves an external runner's run (see `agent_run`)
        self.share = share  # None: every principal's work

    # -- claiming -------------------------------------------------------------------------------
    def claim(self, store: StateStore, owner: str, limit: int) -> list[Item]:
        """The oldest pending turn or task of each principal whose lane is free (oldest first),
        up to `limit`, each marked running and its lane taken, in one short transaction. Looks
        first without the write lock: most looks find nothing."""
        if self.share is not None:
            self.share.look()
        if not self._mine(store, 1):
            return []
        claimed: list[Item] = []
        with store.transaction():
            for row in self._mine(store, limit):  # lanes taken in the order of the oldest work
                lane = lanes.principal_lane(row["principal"])
                fence = lanes.take(store, lane, owner)
                if fence is None:
                    continue
                table = TABLES[row["kind"]]
                if not store.execute(f"UPDATE {table} SET status = ?, started_at = ?, owner = ?, attempts = attempts + 1 "
                                     "WHERE id = ? AND status = ?", (RUNNING, now_iso(), owner, row["id"], PENDING)).rowcount:
                    lanes.give_back(store, lane, owner, fence)
                    continue
                claimed.append(Item(row["kind"], row["id"], lane, fence, row["attempts"] + 1, row))
        return claimed

    def _mine(self, store: StateStore, limit: int) -> list[dict[str, Any]]:
        """The candidates of this process's share, up to `limit`: looked for among all of
        them (the oldest may all be another process's, busier, while this one's wait)."""
        if self.share is None:
            return self._candidates(store, limit)
        share = self.share
        return [r for r in self._candidates(store, None) if share.mine(r["principal"])][:limit]

    def _candidates(self, store: StateStore, limit: int | None) -> list[dict[str, Any]]:
        """For each principal whose lane nobody holds, its oldest pending turn or task."""
        # a free lane, and (for work left running by an owner that took no lane) no running work either
        free_lane = ("NOT EXISTS (SELECT 1 FROM lanes l WHERE l.lane = 'principal:' || w.principal AND l.owner IS NOT NULL) "
                     "AND w.principal NOT IN (SELECT principal FROM turns WHERE status = 'running' "
                     "UNION SELECT principal FROM tasks WHERE status = 'running')")
        oldest: dict[str, dict[str, Any]] = {}
        for kind, table in TABLES.items():
            at_most, params = (" LIMIT ?", (PENDING, limit)) if limit is not None else ("", (PENDING,))
            for row in store.all(f"SELECT * FROM {table} WHERE id IN (SELECT MIN(w.id) FROM {table} w WHERE w.status = ? AND {free_lane} "
                                 f"GROUP BY w.principal ORDER BY MIN(w.id){at_most})", params):
                row["kind"] = kind
                seen = oldest.get(row["principal"])
                if seen is None or (row["created_at"], row["kind"]) < (seen["created_at"], seen["kind"]):
                    oldest[row["principal"]] = row
        return sorted(oldest.values(), key=lambda r: (r["created_at"], r["kind"], r["id"]))[:limit]  # [:None]: all

    # -- running ------------------------------------------------------------------------------------
    async def run(self, item: Item, engine: Engine) -> Outcome:
        home = Home(self.root)
        claim = claim_of(engine.owner, item)
        if item.kind == "turn":
            message, history = await engine.threads(self._turn_input, item.row)
            context = {"session": item.row["session"], "turn": item.id, "hop": item.row["hop"]}
            record_run = self._turn_started
        else:
            message, history = item.row["instructions"], None
            context = {"task": item.id, "hop": item.row.get("hop", 0), **({"session": item.row["session"]} if item.row["session"] else {})}
            record_run = tasks.task_started
        answered: list[Outcome] = []  # a turn's answer, posted on the thread that ends its run, as it ends

        def post(doc: dict[str, Any]) -> None:
            answered.append(self._answer(home, item.row, claim, doc))

        doc = await self._run(engine, item, home, message, context, history, claim, record_run, post if item.kind == "turn" else None)
        if isinstance(doc, Outcome):
            return doc
        if item.kind == "task":
            return Outcome(DONE, doc.get("answer") or "")
        return answered[0]

    async def _run(self, engine: Engine, item: Item, home: Home, message: str, context: dict[str, Any],
                   history: list[dict[str, Any]] | None, claim: Claim, record_run: Callable[..., None],
                   on_ended: Callable[[dict[str, Any]], None] | None) -> dict[str, Any] | Outcome:
        """A managed run of the item's principal on `message`: its result document, or the
        outcome when it could not run. The run's id is kept with its work as the run starts, on
        the thread that starts it (before its work is answered or finished: after, the claim
        that the note needs no longer holds)."""

        def note(event: dict[str, Any]) -> None:
            if event.get("type") == "started":
                engine.started_run(item, event["run"]["run_id"])

        try:
            return await arun_agent(home, message, principal=item.row["principal"], context=context, history=history,
                                    timeout=self.timeout, on_event=note, gateway=self.gateway, run_sync=engine.threads,
                                    on_started=lambda run_id: record_run(home, claim, run_id), on_ended=on_ended)
        except FwError as exc:
            if exc.extra.get("reason") == "binding_disabled":
                return Outcome(BACKLOG)  # disabled since it was claimed: it waits for the binding again
            reason = exc.extra.get("reason")  # e.g. unavailable (model_answer): the model answered unusably
            return Outcome(_status_of(exc), redact(f"{exc.code}{f' ({reason})' if reason else ''}: {exc.message}"))

    def _turn_input(self, turn: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        with StateStore.open(Home(self.root)) as store:
            trigger = store.one("SELECT * FROM messages WHERE id = ?", (turn["message_id"],))
            assert trigger is not None
            rows = store.all("SELECT author, text FROM messages WHERE session = ? AND id < ? ORDER BY id DESC LIMIT ?",
                             (turn["session"], trigger["id"], HISTORY_MESSAGES))
        me = turn["principal"]
        history = [{"role": "assistant", "content": r["text"]} if r["author"] == me else {"role": "user", "content": f"{r['author']}: {r['text']}"}
                   for r in reversed(rows)]
        return f"{trigger['author']}: {trigger['text']}", history

    def _turn_started(self, home: Home, claim: Claim, run_id: str) -> None:
        where, params = claim.where()
        with StateStore.open(home) as store, store.transaction():
            recorded = store.execute(f"UPDATE turns SET run_id = ? WHERE {where}", (run_id, *params)).rowcount
        if not recorded:  # cancelled or taken back meanwhile: the run acts no more
            end_run(home.root, run_id)

    def _answer(self, home: Home, turn: dict[str, Any], claim: Claim, doc: dict[str, Any]) -> Outcome:
        """Post the run's final answer to the session as the principal's message; the turn
        becomes `done` in the same transaction, while this dispatcher's claim holds."""
        text = (doc.get("answer") or "").strip()
        if not text:
            return Outcome(DONE)
        try:
            sessions.message_post(home, turn["session"], turn["principal"], text, hop=turn["hop"] + 1, run_id=doc["run_id"],
                                  answers=claim)
        except FwError as exc:
            return Outcome(_status_of(exc), f"{exc.code}: the answer was not posted ({exc.message})")
        return Outcome(DONE, answered=True, recorded=True)  # made done, its lane given back, with its answer

    # -- recording --------------------------------------------------------------------------------
    def finish(self, store: StateStore, owner: str, item: Item, outcome: Outcome) -> str:
        """Record the outcome of running work while the claim holds, and give its lane back;
        the status it has now (a task may have been reported or cancelled, a turn answered,
        work taken back, meanwhile). Not asked for an answered turn: its answer's transaction
        made it `done` and freed its lane (`Outcome.recorded`)."""
        claim = claim_of(owner, item)
        if outcome.status == BACKLOG and _binding_enabled(self.root, item.row["principal"]):
            outcome = Outcome(PENDING)  # enabled again meanwhile: its backlog was released without it
        if item.kind == "task":
            result = outcome.note if outcome.status == DONE else None
            error = None if outcome.status == DONE else outcome.note
            return tasks.task_finished(Home(self.root), claim, outcome.status, result, error)
        where, params = claim.where()
        with store.transaction():
            store.execute(f"UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE {where}",
                          (outcome.status, outcome.note, now_iso() if outcome.status not in (BACKLOG, PENDING) else None, *params))
            claim.give_back_lane(store)
            return store.one("SELECT status FROM turns WHERE id = ?", (item.id,))["status"]  # type: ignore[index]

    def stopped(self, store: StateStore, owner: str, item: Item, run_id: str | None) -> bool:
        """The engine was stopped while the work ran: it is cancelled (its run was ended), unless
        it had finished meanwhile."""
        return self.finish(store, owner, item, Outcome(CANCELLED, "the dispatcher was interrupted")) == CANCELLED

    def take_back(self, home: Home, store: StateStore, owner: str, live: Container[str]) -> int:
        """Take back the running work of owners that are not alive (and of none): end its run,
        then run it again, or fail it when it has had MAX_ATTEMPTS claims; work of an ended
        session is cancelled. How many pieces of work were taken back."""
        taken = 0
        for table in TABLES.values():
            for row in store.all(f"SELECT id, owner, attempts, run_id, session FROM {table} WHERE status = ?", (RUNNING,)):
                if row["owner"] == owner or row["owner"] in live:
                    continue
                taken += _take_back_one(home, store, table, row)
        return taken


def _status_of(exc: FwError) -> str:
    """What work that failed with `exc` is: `cancelled` when its session ended, else `failed`."""
    return CANCELLED if exc.code == "session_ended" else FAILED


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
        end_run(home.root, row["run_id"], reason="abandoned")  # its dispatcher died
    return changed


def _queue(home: Home) -> dict[str, Any]:
    """What waits, as `fw status` counts it: turns and tasks pending and in backlog, and the
    principals with more waiting than their binding's max_queue."""
    with StateStore.open(home) as store:
        counts = {(r["kind"], r["status"]): int(r["n"]) for r in store.all(
            "SELECT 'turns' AS kind, status, COUNT(*) AS n FROM turns WHERE status IN ('pending', 'backlog') GROUP BY status "
            "UNION ALL SELECT 'tasks', status, COUNT(*) FROM tasks WHERE status IN ('pending', 'backlog') GROUP BY status")}
        waiting = {r["principal"]: int(r["n"]) for r in store.all(
            "SELECT principal, SUM(n) AS n FROM (SELECT principal, COUNT(*) AS n FROM turns WHERE status = 'pending' GROUP BY principal "
            "UNION ALL SELECT principal, COUNT(*) FROM tasks WHERE status = 'pending' GROUP BY principal) AS waiting GROUP BY principal")}
    over = []
    for name, n in sorted(waiting.items()):
        binding = get_binding(home, name) if n > 1 else None  # a max_queue is at least 1
        limit = (binding or {}).get("max_queue", DEFAULT_MAX_QUEUE)
        if n > limit:
            over.append({"principal": name, "waiting": n, "max_queue": limit})
    return {"turns": counts.get(("turns", PENDING), 0), "tasks": counts.get(("tasks", PENDING), 0),
            "backlog": counts.get(("turns", BACKLOG), 0) + counts.get(("tasks", BACKLOG), 0), "over_max_queue": over}


def _binding_enabled(root: Any, principal: str) -> bool:

    try:
        binding = get_binding(Home(root), principal)
    except FwError:
        return False
    return bool(binding and binding["enabled"])


def dispatch(home: Home, *, once: bool = False, concurrency: int = DEFAULT_CONCURRENCY, on_event: OnEvent | None = None,
             timeout: float | None = None, gateway: GatewayStarter | None = None, share: tuple[int, int] | None = None,
             helpers: Helpers | None = None) -> dict[str, Any]:
    """Run pending turns and tasks: until nothing is pending (`once`), or until Ctrl-C or
    SIGTERM. Stopped with runs in flight, they are ended and KeyboardInterrupt comes through
    (`interrupted`); stopped with none, the summary is returned. A dispatch run by several
    processes: this one claims the work of `share` (its index, how many), and `helpers` are
    the others, started already: it stops them if it cannot start, and waits for them (their
    counts are added to its summary)."""
    others = helpers  # what raises before the loop runs leaves them to the caller, which started them
    check_concurrency(concurrency)
    part = Share(*share, ended=others.ended if others else None) if share else None
    source = PrincipalWork(home, timeout, gateway, part)  # checks the timeout
    summary = Summary(queue=_queue(home))
    emit = on_event or (lambda event: None)
    if not once and (share is None or share[0] == 0):  # the first process speaks for the whole dispatch
        emit({"type": "serving", "concurrency": concurrency + (others.concurrency if others else 0)})

    def note(event: dict[str, Any]) -> None:
        if event["type"] == "ended":
            summary.count(event["kind"], event["status"], bool(event.get("answered")))
        emit(event)

    engine: Engine | None = None

    async def serve(threads: Threads, stopped: asyncio.Event) -> None:
        nonlocal engine
        engine = Engine(home, [source], concurrency=concurrency, on_event=note, threads=threads,
                        others=others.alive if others else None)
        await serve_until_stopped(engine, once, stopped)

    signalled, done, results = False, False, []
    try:
        _, signalled = run_loop(serve, ENGINE_THREADS, on_stop=lambda task: others.stop() if others else None)
        done = once and not signalled  # and, as its engine waited for them, the other processes are done too
    finally:
        if others:
            if not done:
                others.stop()
            results = others.finish(None if done else HELPER_STOP_SECONDS)
    for result in results:
        if result is not None:
            summary.add(result)
    if others is not None:
        for note in others.notes():  # one that failed or was stopped on its own: its share was run here
            emit({"type": "note", "text": note})
    if signalled and ((engine is not None and (engine.ended_runs or engine.stopped_starting)) or (others and others.interrupted())):
        # runs were ended, or stopped while they started (waiting for an MCP server, say), their
        # work cancelled: `interrupted`, and the command line stops their programs
        raise KeyboardInterrupt
    return summary.to_dict()

