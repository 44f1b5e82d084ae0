"""The whole catalogue of an agent (seed B): every tool a run of it may be offered, grouped by
source, each with whether the agent's configuration lets it through (`allowed`) and whether
its source gives it now (`available`), and why not (`reason`, `detail`).

    {"name", "source", "allowed", "available", "reason"?, "detail"?, "group" | "server" | "plugin"?}

Sources, in order: built-in groups (`framework_*`, by their mounts and `execution.enabled`),
the managed-runtime tools (every managed run), event tools (chosen by `events`), platform
tools (`allowed_platform_tools`), then the sources `allowed_tools` governs: sandbox tools, MCP
tools, plugin tools and skills. The reasons are the projection's (`domain/projection.py`),
which decides a run's tools from the same candidates; besides them: `not_mounted` and
`event_not_selected`. Event and platform tools are offered only to a run started for an
event, and also depend on its bot; they are listed as available.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..home.kinds import BUILTIN_GROUPS
from .catalogue import EVENT_TOOLS, EVENT_TYPES, PLATFORM_TOOLS, selects
from .projection import (
    AMBIGUOUS,
    BUILTIN_PREFIX,
    EXECUTION_DISABLED,
    MANAGED_RUNTIME,
    MAX_TOOLS,
    MCP_PREFIX,
    NOT_ALLOWED,
    PLUGIN_PREFIX,
    RUNNER,
    SANDBOX_PREFIX,
    SANDBOX_UNAVAILABLE,
    SKILL_PREFIX,
    TOO_MANY,
    Snapshot,
    candidates,
    judged,
    runner_refusal,
)

NOT_MOUNTED = "not_mounted"
EVENT_NOT_SELECTED = "event_not_selected"
SOURCES = ("builtin", "managed_runtime", "event", "platform", "sandbox", "mcp", "plugin", "skill")


def agent_catalogue(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Every tool of the catalogue for the snapshot's agent, in source order."""
    gate = runner_refusal(snapshot)
    entries = _builtin(snapshot, gate) + _managed(snapshot, gate) + _platform(snapshot, gate) + _governed(snapshot, gate)
    _cap(entries)
    return entries


def _entry(name: str, source: str, allowed: tuple[bool, str, str], available: tuple[bool, str, str], **more: Any) -> dict[str, Any]:
    """An entry; its reason is why it is not available, else why it is not allowed."""
    entry: dict[str, Any] = {"name": name, "source": source, "allowed": allowed[0], "available": available[0], **more}
    why = available if not available[0] else allowed if not allowed[0] else None
    if why is not None:
        entry.update(reason=why[1], detail=why[2])
    return entry


YES = (True, "", "")


def _runner(gate: str | None) -> tuple[bool, str, str]:
    return YES if gate is None else (False, RUNNER, gate)


def _builtin(snapshot: Snapshot, gate: str | None) -> list[dict[str, Any]]:
    definition = snapshot.definition
    mounted = definition.get("builtin_tools") or []
    execution = definition.get("execution") or {}
    out = []
    for group in BUILTIN_GROUPS:
        allowed = YES if group in mounted else (False, NOT_MOUNTED, f"the group {group} is not mounted (builtin_tools)")
        if group == "local_execution" and group in mounted and not execution.get("enabled"):
            allowed = (False, EXECUTION_DISABLED, "local_execution also needs execution.enabled: true")
        available = _runner(gate)
        if group == "local_execution" and available[0] and snapshot.sandbox_problem and execution.get("sandbox") != "none":
            available = (False, SANDBOX_UNAVAILABLE, snapshot.sandbox_problem)
        for tool in snapshot.group_tools.get(group, ()):
            out.append(_entry(BUILTIN_PREFIX + tool, "builtin", allowed, available, group=group))
    return out


def _managed(snapshot: Snapshot, gate: str | None) -> list[dict[str, Any]]:
    return [_entry(BUILTIN_PREFIX + tool, "managed_runtime", YES, _runner(gate)) for tool in snapshot.group_tools.get(MANAGED_RUNTIME, ())]


def _platform(snapshot: Snapshot, gate: str | None) -> list[dict[str, Any]]:
    definition = snapshot.definition
    types = [t for t in EVENT_TYPES if selects(definition.get("events"), t)]
    chosen = definition.get("allowed_platform_tools") or []
    out = []
    for tool in EVENT_TOOLS:
        allowed = YES if any(tool.fits(t) for t in types) else (False, EVENT_NOT_SELECTED, "no event type the agent's events select fits it")
        out.append(_entry(tool.name, "event", allowed, _runner(gate)))
    for tool in PLATFORM_TOOLS:
        allowed = YES if tool.name in chosen else (False, NOT_ALLOWED, "not in the agent's allowed_platform_tools")
        out.append(_entry(tool.name, "platform", allowed, _runner(gate)))
    return out


def _governed(snapshot: Snapshot, gate: str | None) -> list[dict[str, Any]]:
    """The sandbox, MCP, plugin and skill tools, as the projection judges them."""
    allowed_tools = snapshot.definition.get("allowed_tools")
    found = [judged(c) for c in candidates(snapshot)]
    counts = Counter(c["name"] for c in found if "source" in c)
    out = []
    for candidate in found:
        name = candidate["name"]
        source, owner = _source_of(name, candidate)
        if name.endswith("__*"):  # a source that gave nothing: allowed if any name of it is
            prefix = name[:-1]
            allowed = allowed_tools is None or any(n.startswith(prefix) for n in allowed_tools)
        else:
            allowed = allowed_tools is None or name in allowed_tools
        lets = YES if allowed else (False, NOT_ALLOWED, "not in the agent's allowed_tools")
        if "source" not in candidate:
            available = (False, candidate["reason"], candidate.get("detail", ""))
        elif counts[name] > 1:
            available = (False, AMBIGUOUS, f"{counts[name]} sources offer this name; neither is offered")
        else:
            available = _runner(gate)
        entry = _entry(name, source, lets, available, **owner)
        if entry not in out:
            out.append(entry)
    return out


def _source_of(name: str, candidate: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    for prefix, source, key in ((SANDBOX_PREFIX, "sandbox", None), (MCP_PREFIX, "mcp", "server"), (PLUGIN_PREFIX, "plugin", "plugin"),
                                (SKILL_PREFIX, "skill", "skill")):
        if name.startswith(prefix):
            owner = candidate.get(key) if key else None
            if key and owner is None:
                owner = name[len(prefix):].split("__", 1)[0]
            return source, ({key: owner} if key else {})
    return candidate.get("source", "unknown"), {}


def _cap(entries: list[dict[str, Any]]) -> None:
    """A run offers at most MAX_TOOLS tools, in source order: those that would fall past it
    (counting what a managed run with no event would be offered) are unavailable too."""
    counted = 0
    for entry in entries:
        if entry["source"] in ("event", "platform") or not (entry["allowed"] and entry["available"]):
            continue
        counted += 1
        if counted > MAX_TOOLS:
            entry.update(available=False, reason=TOO_MANY, detail=f"a run offers at most {MAX_TOOLS} tools")
