"""Deleting a principal leaves nothing of it behind. What a principal holds outside its file
(session memberships and memory in state.db, bots whose events it handles) refuses the
delete (`in_use`, naming each), or, with `recursive`, goes with it once the plan is
confirmed, so a principal created again under the same name inherits nothing. Its runs
still active (started before its binding was removed) are ended with it: a run never acts
as an identity that is gone, nor as a new one of the same name."""

from __future__ import annotations

from typing import Any

from ..domain.bots import bot_names, bot_rel, load_bot
from ..domain.deletion import mismatch, parse_confirm
from ..domain.identities import no_principal, principal_delete
from ..domain.run_records import run_end, run_list
from ..errors import FwError
from ..home.kinds import check_name
from ..home.store import Home
from ..state.store import now_iso, state_exists
from .sessions import BACKLOG, CANCELLED, PENDING, store_for

PLAN_KINDS = ("session", "memory", "bot", "principal")  # the items of a principal's plan


def holdings(home: Home, name: str) -> list[str]:
    """What `name` holds besides its file, as plan items: `session/S` (a membership),
    `memory/NAME` (its memory), `bot/B` (a bot handing it events)."""
    items: list[str] = []
    if state_exists(home):
        with store_for(home) as store:
            items += [f"session/{r['session']}" for r in store.all("SELECT session FROM members WHERE principal = ? ORDER BY session", (name,))]
            if store.one("SELECT 1 AS x FROM memory WHERE principal = ? LIMIT 1", (name,)):
                items.append(f"memory/{name}")
    for bot in bot_names(home):
        try:
            if load_bot(home, bot).get("principal") == name:
                items.append(f"bot/{bot}")
        except FwError:
            continue  # a damaged bot file: `fw home check` names it
    return items


def principal_remove(home: Home, name: str, *, recursive: bool = False, confirm: str | None = None) -> dict[str, Any]:
    """`fw principal delete`: refused while the principal is in use; with `recursive`, a
    plan (its holdings, then the principal), carried out only when `confirm` is that plan."""
    with home.locked():
        plan = principal_delete_plan(home, name)
        held = plan[:-1]
        given = parse_confirm(confirm) if recursive and confirm is not None else None
        if given is not None and given != plan:  # a confirmation is of exactly this plan, even one of one item
            raise mismatch(given, f"principal/{name}", plan, [], f"fw principal delete {name} --recursive --confirm {','.join(plan)}",
                           kinds=PLAN_KINDS)
        if not held:
            return _with_runs_ended(home, name, principal_delete(home, name))
        if not recursive:
            raise FwError("in_use", f"principal {name!r} is in use: {', '.join(held)}",
                          f"see what a delete would take with `fw principal delete {name} --recursive`", items=held)
        if given is None:
            return {"status": "plan", "plan": plan, "confirm": ",".join(plan)}
        _forget(home, name, held)
        principal_delete(home, name)
        return _with_runs_ended(home, name, {"status": "deleted", "deleted": plan})


def principal_delete_plan(home: Home, name: str) -> list[str]:
    """What deleting `name` takes, in order: its holdings, then `principal/NAME`; `not_found`
    for no such principal, `in_use` while a binding makes it run an agent."""
    check_name(name, "principal name")
    if not home.exists(f"principals/{name}.yaml"):
        raise no_principal(home, name, "see them with `fw principal list`")
    principal_delete_check(home, name)
    return [*holdings(home, name), f"principal/{name}"]


def _with_runs_ended(home: Home, name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """End the deleted principal's active runs; the document says which (`ended_runs`), if any."""
    active = [r["run_id"] for r in run_list(home, status="active")["runs"] if r.get("mode") == "managed" and r.get("identity") == name]
    ended = []
    for run_id in active:
        try:
            run_end(home, run_id)
            ended.append(run_id)
        except FwError:
            pass  # gone or damaged meanwhile: it cannot act either way
    return {**doc, "ended_runs": ended} if ended else doc


def principal_delete_check(home: Home, name: str) -> None:
    """A binding still blocks: it is removed on its own (`fw binding remove`), never as a side effect."""
    if home.exists(f"bindings/{name}.yaml"):
        raise FwError("in_use", f"principal {name!r} is in use: a binding makes it run an agent",
                      f"remove the binding first: `fw binding remove {name}`", items=[f"binding/{name}"])


def _forget(home: Home, name: str, held: list[str]) -> None:
    if state_exists(home):
        with store_for(home) as store, store.transaction():
            store.execute("DELETE FROM members WHERE principal = ?", (name,))
            store.execute("DELETE FROM memory WHERE principal = ?", (name,))
            for table in ("turns", "tasks"):
                store.execute(f"UPDATE {table} SET status = ?, error = ?, ended_at = ? WHERE principal = ? AND status IN (?, ?)",
                              (CANCELLED, "principal_deleted", now_iso(), name, PENDING, BACKLOG))
    for item in held:
        if item.startswith("bot/"):
            home.remove(bot_rel(item[4:]))
