"""Which tools a run gets: one projection, computed when the run starts, stored in its record.

Every front door (`fw tool list/call --run`, `fw mcp serve --run`, the model loop) offers
exactly the projection's `tools` and nothing else. The projection is a pure function of what
the run's snapshot holds and what the tool sources offered at its start; it decides, the
sources only supply (the registry's groups, the sandbox and whether it works, the MCP servers'
and the plugins' tool lists, the skills). MCP and plugin tools are projected by one code path,
so names, schemas, `allowed_tools` and the cap are one mechanism for every source.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..home.kinds import GROUPS_WITHOUT_TOOLS

BUILTIN_PREFIX = "framework_"
MANAGED_RUNTIME = "managed_runtime"  # the group of sessions, messages and memory: every managed run has it
MCP_PREFIX = "mcp__"
SKILL_PREFIX = "skill__"
SANDBOX_PREFIX = "sandbox__"
PLUGIN_PREFIX = "plugin__"
RISKS = ("read", "write", "dangerous")
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}

# Reasons a candidate is not offered, as the run record names them.
RUNNER = "runner_call_permission_missing"
EXECUTION_DISABLED = "execution_disabled"
SANDBOX_UNAVAILABLE = "sandbox_unavailable"
NOT_ALLOWED = "not_allowed"
SOURCE_UNAVAILABLE = "source_unavailable"
AMBIGUOUS = "ambiguous_name"
INVALID_NAME = "invalid_name"
INVALID_SCHEMA = "invalid_schema"
TOO_MANY = "too_many_tools"
TASK_REQUIRED = "task_required"  # an MCP tool that must be called as a task (execution.taskSupport: required)

# What chat-completions APIs accept as a tool's name, and how many tools one request may carry.
TOOL_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_TOOLS = 128
# Zero-width and bidirectional controls: invisible to the operator reviewing a tool, read by the model.
INVISIBLE_RE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


@dataclass
class Snapshot:
    """What the projection reads of a run's start: the agent, its model and harness, and
    what each source offered."""

    definition: dict[str, Any]
    model_tool_call: bool
    harness: dict[str, Any] | None  # None: the built-in local runner, which may call tools
    group_tools: dict[str, tuple[str, ...]]  # group -> bare tool names (the registry's)
    mcp_tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # server -> tools listed
    mcp_unavailable: dict[str, str] = field(default_factory=dict)  # server -> why
    skills: dict[str, str | None] = field(default_factory=dict)  # skill -> its description (None: unreadable)
    managed: bool = False  # a managed run also gets the managed-runtime tools, without a mount
    sandbox_problem: str | None = None  # why the sandbox cannot be used now (None: it can, or nothing asked)
    sandbox_tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # sandbox__NAME -> description, input_schema, risk
    plugins: list[str] = field(default_factory=list)  # the home's enabled plugins
    plugin_tools: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # plugin -> tools it declared
    plugin_unavailable: dict[str, str] = field(default_factory=dict)  # plugin -> why it offers nothing


@dataclass
class Projection:
    tools: list[str]
    unavailable: list[dict[str, Any]]
    # model-side name -> where it comes from, for tools that are not built-in:
    # {"source": "mcp", "server", "tool", "description", "input_schema", "risk", "title"?},
    # {"source": "plugin", "plugin", "tool", "description", "input_schema", "risk"},
    # {"source": "sandbox", "description", "input_schema", "risk"} or
    # {"source": "skill", "skill", "description", "input_schema"}
    sources: dict[str, dict[str, Any]]
    record: dict[str, Any] = field(default_factory=dict)  # more fields for the run record


def runner_refusal(snapshot: Snapshot) -> str | None:
    """Why the runner may call no tool at all, or None when it may. fw's own model loop needs a
    model that calls tools; an external runner's harness speaks for its program (fw calls no
    model for it), so there its capabilities alone decide."""
    harness = snapshot.harness
    external = harness is not None and harness.get("type") == "external"
    if not external and not snapshot.model_tool_call:
        if not snapshot.definition.get("model"):
            return "the agent has no model (fw's own loop asks one, which calls the tools)"
        return "the agent's model does not have capabilities.tool_call"
    if harness is None:
        return None
    if not (harness.get("capabilities") or {}).get("tool_calling"):
        return "the agent's harness has capabilities.tool_calling false"
    if "call" not in ((harness.get("permissions") or {}).get("tools") or []):
        return "the agent's harness lacks 'call' in permissions.tools"
    return None


def needs_sandbox(definition: dict[str, Any]) -> bool:
    """Whether a run of this definition would run anything in the sandbox: `exec` (mounted,
    enabled, not `execution.sandbox: none`) or the sandbox tools. Only then is it probed."""
    execution = definition.get("execution") or {}
    boxed_exec = ("local_execution" in (definition.get("builtin_tools") or []) and bool(execution.get("enabled"))
                  and execution.get("sandbox") != "none")
    return boxed_exec or definition.get("sandbox") is not None


def candidates(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Every candidate of the sources `allowed_tools` governs, in source order (sandbox, MCP,
    plugins, skills): a tool (with its `source`), or a refusal of a source that gives none."""
    return _sandbox(snapshot) + _mcp(snapshot) + _plugins(snapshot) + _skills(snapshot)


def project(snapshot: Snapshot) -> Projection:
    definition = snapshot.definition
    builtin, builtin_refused = _builtin(snapshot)
    external = candidates(snapshot)
    refused: list[dict[str, Any]] = list(builtin_refused)
    gate = runner_refusal(snapshot)
    if gate is not None:  # no tool at all: every candidate, with the runner's reason
        names = [name for name, _ in builtin] + [c["name"] for c in external]
        refused = [{"name": n, "reason": RUNNER, "detail": gate} for n in names] + refused
        return Projection([], refused, {})
    offered = [name for name, _ in builtin]
    sources: dict[str, dict[str, Any]] = {}
    external = [judged(candidate) for candidate in external]
    counts = Counter(c["name"] for c in external if "source" in c)
    allowed = definition.get("allowed_tools")
    for candidate in external:
        name = candidate["name"]
        if "source" not in candidate:
            refused.append(candidate)
        elif counts[name] > 1:
            if name not in sources and all(r["name"] != name for r in refused):
                refused.append({"name": name, "reason": AMBIGUOUS, "detail": f"{counts[name]} sources offer this name; neither is offered"})
        elif allowed is not None and name not in allowed:
            refused.append({"name": name, "reason": NOT_ALLOWED, "detail": "not in the agent's allowed_tools"})
        else:
            offered.append(name)
            sources[name] = {k: v for k, v in candidate.items() if k != "name"}
    stripped = [{"name": c["name"], "characters": c["stripped"]} for c in external if c.get("stripped") and c["name"] in sources]
    return Projection(offered, refused, sources, {"invisible_characters_stripped": stripped} if stripped else {})


def judged(candidate: dict[str, Any]) -> dict[str, Any]:
    """A candidate the chat APIs could not take, as a refusal: a name they refuse, or an input
    schema that is not a JSON object schema."""
    if "source" not in candidate:
        return candidate
    name = candidate["name"]
    if not TOOL_NAME_RE.fullmatch(name):
        shown = name if len(name) <= 100 else name[:100] + "..."
        return {"name": shown, "reason": INVALID_NAME, "detail": "a tool's name must match ^[a-zA-Z0-9_-]{1,64}$"}
    schema = candidate["input_schema"]
    if not isinstance(schema, dict) or schema.get("type") != "object" or not isinstance(schema.get("properties", {}), dict):
        return {"name": name, "reason": INVALID_SCHEMA, "detail": "its input schema is not a JSON object schema"}
    return candidate


def cap_tools(projection: Projection) -> None:
    """At most MAX_TOOLS offered, in source order; the rest are listed as too_many_tools."""
    for name in projection.tools[MAX_TOOLS:]:
        projection.sources.pop(name, None)
        projection.unavailable.append({"name": name, "reason": TOO_MANY, "detail": f"a run offers at most {MAX_TOOLS} tools"})
    del projection.tools[MAX_TOOLS:]


def strip_invisible(value: Any) -> tuple[Any, int]:
    """The value with zero-width and bidirectional controls removed from every string in it,
    and how many were removed."""
    if isinstance(value, str):
        cleaned, count = INVISIBLE_RE.subn("", value)
        return cleaned, count
    if isinstance(value, dict):
        out, total = {}, 0
        for key, item in value.items():
            (key, n), (item, m) = strip_invisible(key), strip_invisible(item)
            out[key] = item
            total += n + m
        return out, total
    if isinstance(value, list):
        items = [strip_invisible(item) for item in value]
        return [item for item, _ in items], sum(n for _, n in items)
    return value, 0


def risk_of(annotations: dict[str, Any]) -> str:
    """An MCP tool's risk from its annotations (destructiveHint counts only when it is not read-only)."""
    if annotations.get("readOnlyHint") is True:
        return "read"
    if annotations.get("destructiveHint") is True:
        return "dangerous"
    return "write"


def _builtin(snapshot: Snapshot) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """(model-side name, group) of every built-in tool the mounts offer, and the tools a mount
    does not grant (`local_execution` without `execution.enabled`)."""
    offered, refused = [], []
    execution = bool((snapshot.definition.get("execution") or {}).get("enabled"))
    boxed_exec = (snapshot.definition.get("execution") or {}).get("sandbox") != "none"
    groups = list(snapshot.definition.get("builtin_tools") or [])
    if snapshot.managed:
        groups.insert(0, MANAGED_RUNTIME)
    for group in groups:
        for tool in snapshot.group_tools.get(group, ()):
            name = BUILTIN_PREFIX + tool
            if group == "local_execution" and not execution:
                refused.append({"name": name, "reason": EXECUTION_DISABLED, "detail": "local_execution also needs execution.enabled: true"})
            elif group == "local_execution" and snapshot.sandbox_problem and boxed_exec:
                refused.append({"name": name, "reason": SANDBOX_UNAVAILABLE, "detail": snapshot.sandbox_problem})
            else:
                offered.append((name, group))
    return offered, refused


def _mcp(snapshot: Snapshot) -> list[dict[str, Any]]:
    servers = snapshot.definition.get("mcps") or []
    return _listed(MCP_PREFIX, "mcp", "server", servers, snapshot.mcp_tools, snapshot.mcp_unavailable,
                   lambda tool: risk_of(tool.get("annotations") or {}))


def _plugins(snapshot: Snapshot) -> list[dict[str, Any]]:
    return _listed(PLUGIN_PREFIX, "plugin", "plugin", snapshot.plugins, snapshot.plugin_tools, snapshot.plugin_unavailable,
                   lambda tool: tool.get("risk") if tool.get("risk") in RISKS else "write")


def _listed(prefix: str, source: str, key: str, names: list[str], listed: dict[str, list[dict[str, Any]]],
            unavailable: dict[str, str], risk: Any) -> list[dict[str, Any]]:
    """The candidates of sources that list their tools (MCP servers, plugins): each tool as
    `<prefix><source name>__<tool>`, or `<prefix><source name>__*` for one that gave none."""
    out: list[dict[str, Any]] = []
    for owner in names:
        if owner in unavailable or owner not in listed:
            why = unavailable.get(owner, "it was not started")
            out.append({"name": f"{prefix}{owner}__*", "reason": SOURCE_UNAVAILABLE, "detail": why})
            continue
        for tool in listed[owner]:
            if tool.get("task_support") == "required":  # fw speaks no MCP tasks yet; "optional" is called plainly
                name = strip_invisible(tool["name"])[0]
                out.append({"name": f"{prefix}{owner}__{name}", "reason": TASK_REQUIRED,
                            "detail": "the tool must be called as an MCP task (execution.taskSupport: required), "
                            "which this version of fw does not do"})
                continue
            name, in_name = strip_invisible(tool["name"])
            description, in_description = strip_invisible(tool.get("description") or "")
            schema, in_schema = strip_invisible(tool.get("input_schema") or NO_PARAMETERS)
            title, in_title = strip_invisible(tool.get("title"))
            candidate = {
                "name": f"{prefix}{owner}__{name}",
                "source": source,
                key: owner,
                "tool": tool["name"],  # the source's own name, to call it by
                "description": description,
                "input_schema": schema,
                "risk": risk(tool),
            }
            if title:
                candidate["title"] = title
            if in_name + in_description + in_schema + in_title:
                candidate["stripped"] = in_name + in_description + in_schema + in_title
            out.append(candidate)
    return out


def _sandbox(snapshot: Snapshot) -> list[dict[str, Any]]:
    """The sandbox tools, for an agent with a `sandbox:` block; each listed as unavailable
    when the sandbox does not work now."""
    if snapshot.definition.get("sandbox") is None:
        return []
    out: list[dict[str, Any]] = []
    for name, tool in snapshot.sandbox_tools.items():
        if snapshot.sandbox_problem:
            out.append({"name": name, "reason": SOURCE_UNAVAILABLE, "detail": f"the sandbox is not available: {snapshot.sandbox_problem}"})
        else:
            out.append({"name": name, "source": "sandbox", "description": tool["description"], "input_schema": tool["input_schema"],
                        "risk": tool["risk"]})
    return out


def _skills(snapshot: Snapshot) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for skill in snapshot.definition.get("skills") or []:
        name = f"{SKILL_PREFIX}{skill}"
        description = snapshot.skills.get(skill)
        if description is None:
            out.append({"name": name, "reason": SOURCE_UNAVAILABLE, "detail": f"skill {skill!r} cannot be read"})
        else:
            out.append({"name": name, "source": "skill", "skill": skill, "description": description, "input_schema": NO_PARAMETERS})
    return out


def mount_notes(definition: dict[str, Any], snapshot: Snapshot, agent: str = "AGENT") -> list[dict[str, Any]]:
    """For each mounted group: whether a run would get its tools, and if not, why, in plain
    words (for `fw agent show` and a written agent's `activation`)."""

    gate = runner_refusal(snapshot)
    execution = bool((definition.get("execution") or {}).get("enabled"))
    notes = []
    for group in definition.get("builtin_tools") or []:
        why = None
        if gate is not None:
            why = gate
        elif group in GROUPS_WITHOUT_TOOLS:
            why = "this version of fw has no tools in this group yet"
        elif group == "local_execution" and not execution:
            why = f"execution.enabled is false (turn it on with `fw agent edit {agent} --execution`)"
        notes.append({"group": group, "grants": why is None, **({"why": why} if why else {})})
    return notes
