"""Agent-specific jobs on top of the generic resource operations: editing the mounted
built-in tool groups, and showing an agent with its activation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import FwError
from ..home.kinds import BUILTIN_GROUPS
from ..home.store import Home
from ..suggest import did_you_mean, hint_with
from .identities import activation
from .resources import resource_read, resource_write
from .runs import runner_of


def _check_groups(groups: Sequence[str], flag: str) -> None:
    seen: set[str] = set()
    for group in groups:
        if group not in BUILTIN_GROUPS:
            suggestion = did_you_mean(group, BUILTIN_GROUPS)
            raise FwError(
                "invalid",
                f"unknown built-in tool group {group!r} ({flag})",
                hint_with(suggestion, f"use one of: {', '.join(BUILTIN_GROUPS)}"),
                field="builtin_tools",
                **suggestion,
            )
        if group in seen:
            raise FwError("invalid", f"built-in tool group {group!r} is given twice ({flag})", "name each group once", field="builtin_tools")
        seen.add(group)


def edit_builtin_tools(
    current: Sequence[str],
    replace: Sequence[str] | None,
    add: Sequence[str],
    remove: Sequence[str],
) -> list[str]:
    """The new set: `replace` (or the current set), plus `add`, minus `remove`, in order.
    Adding a mounted group or removing an absent one is no change, not an error."""
    if replace is not None:
        _check_groups(replace, "--builtin-tool")
    _check_groups(add, "--add-builtin-tool")
    _check_groups(remove, "--remove-builtin-tool")
    result = list(current if replace is None else replace)
    result += [g for g in add if g not in result]
    return [g for g in result if g not in remove]


def agent_edit(
    home: Home,
    name: str,
    patch: dict[str, Any],
    *,
    builtin_set: Sequence[str] | None = None,
    builtin_add: Sequence[str] = (),
    builtin_remove: Sequence[str] = (),
    category: str | None = None,
) -> dict[str, Any]:
    """Change an agent's fields and mounts under one lock, so concurrent edits all land."""
    edit_builtin_tools([], builtin_set, builtin_add, builtin_remove)  # refuse bad flags first
    patch = dict(patch)
    with home.locked():
        if builtin_set is not None or builtin_add or builtin_remove:
            current = resource_read(home, "agent", name)["data"]["builtin_tools"]
            wanted = edit_builtin_tools(current, builtin_set, builtin_add, builtin_remove)
            if wanted != current:
                patch["builtin_tools"] = wanted
        return resource_write(home, "agent", name, patch, category=category)


def agent_show(home: Home, name: str) -> dict[str, Any]:
    doc = resource_read(home, "agent", name)
    doc["activation"] = activation(home, name, doc["data"])
    doc["runner"] = _runner(home, doc["data"].get("harness"))
    warnings = sandbox_warnings(doc["data"])
    if warnings:
        doc["warnings"] = warnings
    return doc


def sandbox_warnings(definition: dict[str, Any]) -> list[dict[str, Any]]:
    """What the operator should see in red: a definition whose exec runs unconfined."""
    if (definition.get("execution") or {}).get("sandbox") != "none":
        return []
    return [{"code": "exec_unconfined",
             "message": "execution.sandbox is none: framework_exec runs commands on this machine as fw's user, unconfined "
                        "(they can read the home's secrets and reach the network); set it back with "
                        "--execution-sandbox bubblewrap"}]


def _runner(home: Home, harness: str | None) -> dict[str, Any]:
    """Which runner a run of the agent would use now (a run keeps the one it started with)."""
    if not harness:
        return runner_of(None, None)
    try:
        return runner_of(resource_read(home, "harness", harness)["data"], harness)
    except FwError as exc:
        return {"type": "unknown", "harness": harness, "error": exc.message}
