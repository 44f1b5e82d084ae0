"""Tasks: explicit work one principal delegates to another, run by `fw dispatch`.

A task runs as a managed run of the target principal's binding, with that agent's own
snapshot: it inherits nothing from the run that delegated it. `pending` while the binding is
enabled, `backlog` while it is disabled, then `running`, and it ends `done`, `failed` or
`cancelled`. A task run that ends without `task_report` is `done`, its final answer the result.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..domain.identities import get_binding, get_principal
from ..domain.run_records import run_end
from ..errors import FwError
from ..home import secrets
from ..home.kinds import check_name
from ..home.store import Home
from ..state.store import now_iso
from ..suggest import did_you_mean, hint_with
from . import work
from .sessions import BACKLOG, CANCELLED, DONE, FAILED, MAX_HOP, OPEN, PENDING, RUNNING, Claim, store_for

ENDED = (DONE, FAILED, CANCELLED)
MAX_WAIT_SECONDS = 600
POLL_SECONDS = 0.2
MAX_INSTRUCTIONS = 64 * 1024
MAX_ID = 2**63 - 1  # SQLite's largest integer

# How many threads of this process are waiting in task_wait: a dispatcher lends their worker
# slots to other work, so a parent that waits for its child never keeps the child from running.
_waiting = 0
_waiting_lock = threading.Lock()


def waiting() -> int:
    return _waiting


def present(row: dict[str, Any]) -> dict[str, Any]:
    doc = {k: row[k] for k in ("id", "status", "principal", "created_by", "instructions", "session", "run_id", "created_at", "ended_at")}
    doc["hop"] = row.get("hop", 0)
    if row["result"] is not None:
        doc["result"] = row["result"]
    if row["error"] is not None:
        doc["error"] = row["error"]
    return doc


def _task(store: Any, task_id: Any) -> dict[str, Any]:
    if isinstance(task_id, bool) or not isinstance(task_id, int) or task_id < 1:
        raise FwError("invalid", "a task id is a whole number, at least 1", "see the ids with `fw task list`")
    if task_id > MAX_ID:
        raise FwError("not_found", f"no task {task_id}", "see them with `fw task list`")
    row = store.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
    if row is None:
        raise FwError("not_found", f"no task {task_id}", "see them with `fw task list`")
    return row


def task_delegate(home: Home, principal: str, instructions: str, session: str | None = None,
                  created_by: str = "manager", created_run: str | None = None, hop: int = 0,
                  member: str | None = None) -> dict[str, Any]:
    """A task for `principal`; `hop` counts the runs that delegated on the way here (a run
    started for a task delegates at its task's hop plus one), and ends chains at MAX_HOP.
    `member` (a run's identity) must belong to `session`: otherwise, whether the session
    exists or not, the task is `denied` alike."""

    check_name(principal, "principal name")
    if not isinstance(instructions, str) or not instructions.strip() or len(instructions) > MAX_INSTRUCTIONS:
        raise FwError("invalid", f"instructions are 1 to {MAX_INSTRUCTIONS} characters of text", "say what the task is")
    if hop >= MAX_HOP:
        raise FwError("denied", f"a chain of {MAX_HOP} delegations ends here: this run may not delegate further",
                      "do the work, or report back to whoever delegated it")
    secrets.refuse(home, {"instructions": instructions})
    who = get_principal(home, principal)
    if who is None or who["kind"] != "agent":
        raise FwError("not_found", f"no agent principal named {principal!r}", "see them with `fw principal list`")
    with store_for(home) as store, store.transaction():
        binding = get_binding(home, principal)  # read inside the transaction: an enable cannot slip between
        if binding is None:
            raise FwError("not_found", f"principal {principal!r} has no binding, so nothing would run the task",
                          f"bind it: `fw binding set {principal} --agent AGENT`")
        if session is not None:
            if member is not None and store.one("SELECT 1 AS x FROM members WHERE session = ? AND principal = ?", (session, member)) is None:
                raise FwError("denied", f"{member!r} is not a member of session {session!r}",
                              "delegate in a session you belong to, or without one")
            row = store.one("SELECT status FROM sessions WHERE name = ?", (session,))
            if row is None:
                raise FwError("not_found", f"no session named {session!r}", "see them with `fw session list`")
            if row["status"] != OPEN:
                raise FwError("session_ended", f"session {session!r} has ended", "delegate without it, or in an open session")
        task_id = store.insert("tasks", {
            "principal": principal, "instructions": instructions, "session": session, "created_by": created_by,
            "created_run": created_run, "status": PENDING if binding["enabled"] else BACKLOG, "created_at": now_iso(),
            "hop": hop,
        })
        doc = {"task": present(_task(store, task_id))}
    work.changed()
    return doc


def task_show(home: Home, task_id: int) -> dict[str, Any]:
    with store_for(home) as store:
        return {"task": present(_task(store, task_id))}


STATUSES = (PENDING, BACKLOG, RUNNING, DONE, FAILED, CANCELLED)


def task_list(home: Home, identity: str | None = None, role: str | None = None, *,
              status: str | None = None, principal: str | None = None) -> dict[str, Any]:
    """Every task (the Manager, the operator), or an identity's: those it created, those
    assigned to it, or both; only those of a `status`, or assigned to a `principal`, when given."""
    if role not in (None, "created", "assigned"):
        raise FwError("invalid", "role is created or assigned", "e.g. --role created")
    if status is not None and status not in STATUSES:
        suggestion = did_you_mean(status, STATUSES)
        raise FwError("invalid", f"unknown task status {status!r}", hint_with(suggestion, f"one of: {', '.join(STATUSES)}"), **suggestion)
    found = _task_rows(home, identity, role)
    return {"tasks": [t for t in found if (status is None or t["status"] == status) and (principal is None or t["principal"] == principal)]}


def _task_rows(home: Home, identity: str | None, role: str | None) -> list[dict[str, Any]]:
    with store_for(home) as store:
        if identity is None:
            rows = store.all("SELECT * FROM tasks ORDER BY id")
        elif role == "created":
            rows = store.all("SELECT * FROM tasks WHERE created_by = ? ORDER BY id", (identity,))
        elif role == "assigned":
            rows = store.all("SELECT * FROM tasks WHERE principal = ? ORDER BY id", (identity,))
        else:
            rows = store.all("SELECT * FROM tasks WHERE created_by = ? OR principal = ? ORDER BY id", (identity, identity))
    return [present(r) for r in rows]


def task_cancel(home: Home, task_id: int, by: str | None = None) -> dict[str, Any]:
    """Cancel a task that has not ended; `by` (a run's identity) must be its creator. A
    running task's run is ended, so it acts no more."""

    with store_for(home) as store, store.transaction():
        row = _task(store, task_id)
        if by is not None and row["created_by"] != by:
            raise FwError("denied", f"only the creator of task {task_id} ({row['created_by']}) may cancel it", "ask its creator")
        if row["status"] in ENDED:
            return {"task": present(row), "cancelled": False}
        store.execute("UPDATE tasks SET status = ?, error = ?, ended_at = ? WHERE id = ?", (CANCELLED, f"cancelled by {by or 'the operator'}", now_iso(), task_id))
        run_id = row["run_id"] if row["status"] == RUNNING else None
        row = _task(store, task_id)
    work.changed()
    if run_id:
        try:
            run_end(home, run_id)
        except FwError:
            pass
    return {"task": present(row), "cancelled": True}


def task_report(home: Home, task_id: int, status: str, result: str, run_id: str | None) -> dict[str, Any]:
    """The task's own run reports its outcome; no other run may."""
    if status not in (DONE, FAILED):
        raise FwError("invalid", "status is done or failed", "report done with the result, or failed with why")

    secrets.refuse(home, {"result": result})
    with store_for(home) as store, store.transaction():
        row = _task(store, task_id)
        if run_id is None or row["run_id"] != run_id:
            raise FwError("denied", f"only the run working on task {task_id} may report it", "report the tasks you were given")
        if row["status"] != RUNNING:
            raise FwError("conflict", f"task {task_id} is {row['status']}; it can no longer be reported", "nothing was changed")
        store.execute("UPDATE tasks SET status = ?, result = ?, ended_at = ? WHERE id = ?", (status, result, now_iso(), task_id))
        doc = {"task": present(_task(store, task_id))}
    work.changed()
    return doc


def task_wait(home: Home, task_id: int, timeout_seconds: float = 60, by: str | None = None) -> dict[str, Any]:
    """Wait until the task ends or the timeout passes, and return it as it stands. Holds no
    lock while it waits: it only reads, a moment at a time."""
    global _waiting
    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) or not 0 <= timeout_seconds <= MAX_WAIT_SECONDS:
        raise FwError("invalid", f"timeout_seconds is from 0 to {MAX_WAIT_SECONDS}", "e.g. 60")
    deadline = time.monotonic() + timeout_seconds
    with _waiting_lock:
        _waiting += 1
    try:
        work.changed()  # a dispatcher may lend this worker's slot to other work now
        with store_for(home) as store:
            while True:
                seen = work.generation()
                row = _task(store, task_id)
                if by is not None and by not in (row["created_by"], row["principal"]):
                    raise FwError("denied", f"task {task_id} is neither yours nor assigned to you", "wait for the tasks you delegated")
                if row["status"] in ENDED or time.monotonic() >= deadline:
                    return {"task": present(row)}
                work.wait(seen, min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))  # a task ended here, or a poll
    finally:
        with _waiting_lock:
            _waiting -= 1


async def atask_wait(home: Home, task_id: int, timeout_seconds: float = 60, by: str | None = None, run_sync: Any = None) -> dict[str, Any]:
    """`task_wait` for an event loop: each look at the task runs on `run_sync`, and the wait
    between two looks holds no thread, so a run waiting for its child never keeps the
    engine's threads from the child's own work."""
    import asyncio

    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) or not 0 <= timeout_seconds <= MAX_WAIT_SECONDS:
        raise FwError("invalid", f"timeout_seconds is from 0 to {MAX_WAIT_SECONDS}", "e.g. 60")
    run_sync = run_sync or asyncio.to_thread
    deadline = time.monotonic() + timeout_seconds

    def look() -> dict[str, Any]:
        with store_for(home) as store:
            return _task(store, task_id)

    global _waiting
    with _waiting_lock:
        _waiting += 1  # an engine lends this run's place to other work while it waits (its child, say)
    work.changed()
    try:
        while True:
            row = await run_sync(look)
            if by is not None and by not in (row["created_by"], row["principal"]):
                raise FwError("denied", f"task {task_id} is neither yours nor assigned to you", "wait for the tasks you delegated")
            if row["status"] in ENDED or time.monotonic() >= deadline:
                return {"task": present(row)}
            await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    finally:
        with _waiting_lock:
            _waiting -= 1


def task_started(home: Home, claim: Claim, run_id: str) -> None:
    """Record the run working on a claimed task; a task cancelled (or taken back) meanwhile
    ends that run at once."""

    where, params = claim.where()
    with store_for(home) as store, store.transaction():
        recorded = store.execute(f"UPDATE tasks SET run_id = ? WHERE {where}", (run_id, *params)).rowcount
    if not recorded:
        run_end(home, run_id)


def still_working(home: Home, run: dict[str, Any]) -> None:
    """A run started for a task acts only while that task is running and is its own."""
    task_id = run.get("task")
    if task_id is None:
        return
    with store_for(home) as store:
        row = store.one("SELECT status, run_id FROM tasks WHERE id = ?", (task_id,))
    if row is None or row["status"] != RUNNING or row["run_id"] not in (None, run["run_id"]):
        status = row["status"] if row else "gone"
        raise FwError("run_ended", f"task {task_id} is {status}; run {run['run_id']} works on it no more", "nothing was changed")


def task_finished(home: Home, claim: Claim, status: str, result: str | None, error: str | None) -> str:
    """Record how a claimed task's run ended, unless the run reported it (or it was cancelled,
    or taken back) already, and give its lane back; the status it has now."""
    where, params = claim.where()
    with store_for(home) as store, store.transaction():
        store.execute(
            f"UPDATE tasks SET status = ?, result = ?, error = ?, ended_at = ? WHERE {where}",
            (status, result, error, now_iso() if status not in (BACKLOG, PENDING) else None, *params),
        )
        claim.give_back_lane(store)
        now = _task(store, claim.id)["status"]
    work.changed()
    return now
