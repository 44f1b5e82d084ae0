"""Deletion: a plan first, then exactly that plan, confirmed item for item.

The plan is computed from the dependency graph of the whole home: an agent uses its model,
prompt, skills, mcps and harness; a model uses its provider; a binding uses its agent. It is
computed again under the home's lock when a confirmation arrives, and only a confirmation
equal to it deletes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.kinds import DEFAULT_PROMPT, KINDS, check_name, kind_spec
from ..home.records import find_one
from ..home.store import Home
from ..suggest import closest
from .identities import AgentBindings
from .resources import scan

# Which kinds may refer to a kind: the edges of the graph, read the other way round.
REFERRERS: dict[str, tuple[str, ...]] = {
    kind: tuple(k for k, spec in KINDS.items() if any(ref_kind == kind for _, ref_kind, _ in spec.refs))
    for kind in KINDS
}
# Deleting in this order removes every user before what it uses (agents use models use providers).
DELETE_RANK = {"agent": 0, "model": 1}


def item(kind: str, name: str) -> str:
    return f"{kind}/{name}"


@dataclass
class DeletionPlan:
    target: str
    recursive: bool
    items: list[str]
    blocked: list[dict[str, Any]] = field(default_factory=list)
    # item -> the items in the plan that use it, for showing the plan as a tree
    users: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        in_plan = set(self.items)
        dependents = {i: [u for u in self.users.get(i, []) if u in in_plan] for i in self.items}
        return {
            "status": "plan",
            "target": self.target,
            "recursive": self.recursive,
            "plan": self.items,
            "blocked": self.blocked,
            "dependents": {i: d for i, d in dependents.items() if d},
            "confirm": ",".join(self.items),
        }


class HomeGraph:
    """Who uses what, over every resource of the home, read through the index."""

    def __init__(self, home: Home, kinds: set[str]) -> None:
        self.users: dict[str, set[str]] = {}
        self.corrupt: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
        for kind in kinds:
            for entry in scan(home, kind):
                if "error" in entry:
                    self.corrupt[kind].append(entry)
                    continue
                for ref_kind, ref in entry["refs"]:
                    self.users.setdefault(item(ref_kind, ref), set()).add(item(kind, entry["name"]))


def _referrer_kinds(kind: str, recursive: bool) -> set[str]:
    """The kinds whose files could make `kind` impossible to delete: direct referrers, and
    with `recursive` their referrers too."""
    found: set[str] = set()
    todo = [kind]
    while todo:
        for referrer in REFERRERS[todo.pop()]:
            if referrer not in found:
                found.add(referrer)
                if recursive:
                    todo.append(referrer)
    return found


def compute_plan(home: Home, kind: str, reference: str, recursive: bool) -> DeletionPlan:

    spec = kind_spec(kind)
    check_name(reference, f"{kind} reference")
    _, rel = find_one(home, spec, reference)
    target = item(kind, reference)
    referrers = _referrer_kinds(kind, recursive)
    graph = HomeGraph(home, referrers | {kind})
    blocked: list[dict[str, Any]] = []

    if target == item("prompt", DEFAULT_PROMPT):  # first: no change of the home can unblock it, so its hint is the one shown
        blocked.append({"item": target, "reason": "default_prompt", "detail": "the default prompt is used by agents that name no other and cannot be deleted"})
    own = next((e for e in graph.corrupt[kind] if e["name"] == reference), None)
    if own is not None:
        blocked.append({"item": target, "reason": "corrupt", "detail": own["error"]["message"]})

    # The target and, with recursive, everything that uses it, transitively.
    members = {target}
    users: dict[str, list[str]] = {}
    todo = [target]
    while todo:
        current = todo.pop()
        direct = sorted(graph.users.get(current, ()))
        users[current] = direct
        if recursive:
            for user in direct:
                if user not in members:
                    members.add(user)
                    todo.append(user)
    if not recursive and users[target]:
        blocked.append({"item": target, "reason": "has_dependents", "detail": users[target]})

    for referrer in sorted(referrers):
        for entry in graph.corrupt[referrer]:
            blocked.append(
                {
                    "item": item(referrer, entry["name"]),
                    "reason": "corrupt",
                    "detail": f"{entry['error']['message']} (it might use {target}, so what depends on {target} cannot be known)",
                }
            )

    items = sorted(members, key=lambda i: (DELETE_RANK.get(i.split("/", 1)[0], 2), i))
    agents = [i.split("/", 1)[1] for i in items if i.startswith("agent/")]
    bindings = AgentBindings(home) if agents else None
    for name in agents:
        assert bindings is not None
        managed = [item("binding", b["principal"]) for b in bindings.by_agent.get(name, [])]
        if managed:
            blocked.append({"item": item("agent", name), "reason": "managed", "detail": managed})
    for broken in bindings.corrupt if bindings else []:
        blocked.append(
            {"item": item("binding", broken["principal"]), "reason": "corrupt", "detail": f"{broken['path']} is corrupt, so whether the agents in the plan are managed cannot be known"}
        )
    return DeletionPlan(target=target, recursive=recursive, items=items, blocked=blocked, users=users)


def parse_confirm(confirm: Any) -> list[str]:
    """Items from "a/x,b/y" or ["a/x", "b/y"]."""
    if isinstance(confirm, str):
        return [part.strip() for part in confirm.split(",") if part.strip()]
    if isinstance(confirm, list) and all(isinstance(part, str) for part in confirm):
        return list(confirm)
    raise FwError("invalid", "confirm must be the plan's items: a comma-separated string or a list", "copy the plan as it was printed")


def _differences(confirmed: list[str], plan: list[str]) -> dict[str, Any]:
    return {
        "added": [i for i in plan if i not in confirmed],
        "gone": [i for i in confirmed if i not in plan],
        "reordered": sorted(confirmed) == sorted(plan) and confirmed != plan,
        "duplicated": sorted({i for i in confirmed if confirmed.count(i) > 1}),
    }


def never_a_plan(confirmed: list[str], target: str, plan: list[str], kinds: Any = KINDS) -> str | None:
    """Why `confirmed` cannot have been any plan of `target` (a typo, not a change of the
    home since): every plan names each item once, as kind/name (of `kinds`), and ends with
    its target."""
    if not confirmed:
        return "it is empty"
    malformed = [i for i in confirmed if i.split("/", 1)[0] not in kinds or "/" not in i]
    if malformed:
        close = closest(malformed[0], plan)
        if close and close not in confirmed:
            return f"{malformed[0]} is in no plan; did you mean {close}?"
        return f"{malformed[0]!r} is not an item (items are kind/name, e.g. {target})"
    if len(set(confirmed)) != len(confirmed):
        return "it names an item twice"
    if confirmed[-1] != target:
        return f"a plan ends with its target, {target}"
    for item in confirmed:
        close = closest(item, plan) if item not in plan else None
        if close and close not in confirmed:
            return f"{item} is in no plan; did you mean {close}?"
    return None


def mismatch(confirmed: list[str], target: str, items: list[str], blocked: list[dict[str, Any]], command: str,
             kinds: Any = KINDS) -> FwError:
    """A confirmation that is not the plan (`stale_confirmation`, nothing deleted), for every
    delete that plans: one that never was a plan (mistyped) is told apart from one the home
    has moved on from (`reason`), with what differs (`changes`) and the command that
    confirms the plan as it is now."""
    why = never_a_plan(confirmed, target, items, kinds)
    if why:
        message = f"the confirmation is not a plan of {target} ({why}); nothing was deleted"
        hint = f"confirm the plan as it was printed: `{command}`"
    else:
        message = "the confirmation does not match the plan as it stands now; nothing was deleted"
        hint = f"check the new plan, then confirm it: `{command}`"
    return FwError("stale_confirmation", message, hint, reason="not_a_plan" if why else "plan_changed",
                   plan=items, blocked=blocked, changes=_differences(confirmed, items))


def _mismatch(confirmed: list[str], plan: DeletionPlan) -> FwError:
    return mismatch(confirmed, plan.target, plan.items, plan.blocked, confirm_command(plan.target, plan.recursive, plan.items))


def confirm_command(target: str, recursive: bool, items: list[str]) -> str:
    kind, name = target.split("/", 1)
    flag = " --recursive" if recursive else ""
    return f"fw resource delete {kind} {name}{flag} --confirm {','.join(items)}"


def resource_delete(
    home: Home,
    kind: str,
    reference: str,
    recursive: bool = False,
    confirm: Any = None,
) -> dict[str, Any]:
    """Without `confirm`: the plan, deleting nothing. With it: delete exactly the plan, or
    nothing at all when the plan computed now differs or is blocked."""
    if confirm is None:
        return compute_plan(home, kind, reference, recursive).to_dict()
    confirmed = parse_confirm(confirm)
    with home.locked():
        plan = compute_plan(home, kind, reference, recursive)
        if confirmed != plan.items:
            raise _mismatch(confirmed, plan)
        if plan.blocked:
            reasons = "; ".join(f"{b['item']}: {b['reason']}" for b in plan.blocked)
            raise FwError(
                "protected",
                f"the plan is blocked ({reasons}); nothing was deleted",
                unblock_hint(plan.blocked[0]),
                plan=plan.items,
                blocked=plan.blocked,
            )
        for entry in plan.items:
            _delete_one(home, entry)
    return {"status": "deleted", "deleted": plan.items}


def unblock_hint(block: dict[str, Any]) -> str:
    reason = block["reason"]
    if reason == "has_dependents":
        return "delete what uses it first, or plan again with --recursive to include it"
    if reason == "managed":
        principal = block["detail"][0].split("/", 1)[1]
        return f"the agent still has a binding: remove it first with `fw binding remove {principal}`"
    if reason == "corrupt":
        return "fix or remove the corrupt file by hand (`fw home check` shows what is wrong), then plan again"
    return "the default prompt is never deleted; change its text instead: `fw resource edit prompt default`"


def _delete_one(home: Home, entry: str) -> None:
    kind, name = entry.split("/", 1)
    spec = KINDS[kind]
    for _, rel in home.locate(spec, name):
        home.remove(rel.rsplit("/", 1)[0] if spec.layout == "skill" else rel)
    if spec.secret_fields:
        secrets.remove(home, kind, name)
