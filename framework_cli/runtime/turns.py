"""Turns seen from the operator's side: list them, and retry one that failed or was
cancelled (it is pending again, or in the backlog while its binding is disabled, and
`fw dispatch` runs it as any other)."""

from __future__ import annotations

from typing import Any

from ..domain.identities import get_binding
from ..errors import FwError
from ..home.store import Home
from ..state.store import state_exists
from ..suggest import did_you_mean, hint_with
from .sessions import BACKLOG, CANCELLED, DONE, FAILED, OPEN, PENDING, RUNNING, store_for

STATUSES = (PENDING, BACKLOG, RUNNING, DONE, FAILED, CANCELLED)
RETRYABLE = (FAILED, CANCELLED)
COLUMNS = "id, session, principal, status, message_id, hop, run_id, error, created_at, started_at, ended_at"


def check_status(status: str | None, statuses: tuple[str, ...], what: str) -> None:
    if status is not None and status not in statuses:
        suggestion = did_you_mean(status, statuses)
        raise FwError("invalid", f"unknown {what} status {status!r}", hint_with(suggestion, f"one of: {', '.join(statuses)}"), **suggestion)


def turn_list(home: Home, status: str | None = None, session: str | None = None, principal: str | None = None) -> dict[str, Any]:
    """Every turn, oldest first; only those of a status, a session or a principal when given."""
    check_status(status, STATUSES, "turn")
    if not state_exists(home):
        return {"turns": []}
    where, args = [], []
    for column, value in (("status", status), ("session", session), ("principal", principal)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    sql = f"SELECT {COLUMNS} FROM turns" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id"
    with store_for(home) as store:
        return {"turns": store.all(sql, tuple(args))}


def _turn(store: Any, turn_id: Any) -> dict[str, Any]:
    if isinstance(turn_id, bool) or not isinstance(turn_id, int) or turn_id < 1:
        raise FwError("invalid", "a turn id is a whole number, at least 1", "see them with `fw turn list`")
    row = store.one(f"SELECT {COLUMNS} FROM turns WHERE id = ?", (turn_id,))
    if row is None:
        raise FwError("not_found", f"no turn {turn_id}", "see them with `fw turn list`")
    return row


def turn_retry(home: Home, turn_id: int) -> dict[str, Any]:
    """A failed or cancelled turn, waiting again: pending (backlog while the binding is
    disabled). Its session must be open, its principal still a member with a binding."""
    with store_for(home) as store, store.transaction():
        turn = _turn(store, turn_id)
        if turn["status"] not in RETRYABLE:
            raise FwError("invalid", f"turn {turn_id} is {turn['status']}: only a failed or cancelled turn is retried",
                          "see the failed ones with `fw turn list --status failed`")
        session = store.one("SELECT status FROM sessions WHERE name = ?", (turn["session"],))
        if session is None or session["status"] != OPEN:
            raise FwError("session_ended", f"session {turn['session']!r} of turn {turn_id} has ended", "post the message again in an open session")
        if store.one("SELECT 1 AS x FROM members WHERE session = ? AND principal = ?", (turn["session"], turn["principal"])) is None:
            raise FwError("invalid", f"{turn['principal']} is no longer a member of session {turn['session']!r}",
                          f"add it back: `fw session add-member {turn['session']} {turn['principal']}`")
        binding = get_binding(home, turn["principal"])
        if binding is None:
            raise FwError("not_found", f"principal {turn['principal']!r} has no binding, so nothing would run the turn",
                          f"bind it: `fw binding set {turn['principal']} --agent AGENT`")
        status = PENDING if binding["enabled"] else BACKLOG
        store.execute("UPDATE turns SET status = ?, error = NULL, run_id = NULL, started_at = NULL, ended_at = NULL WHERE id = ?",
                      (status, turn_id))
        return {"turn": _turn(store, turn_id), "retried": True}
