"""The registry of tools: the tools each group registers, and the checks every run call passes.

The registry only collects. Each tool group registers its tools from the module that does
its job (`resource_management.py`), so nothing below the tool service imports it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.projection import BUILTIN_PREFIX as TOOL_PREFIX  # noqa: F401  (re-exported) built-in tools' model-side prefix
from ..domain.projection import MANAGED_RUNTIME as MANAGED_RUNTIME  # every managed run's group; never the Manager's
from ..domain.tool_types import Tool
from ..home.store import Home

TOOLS: dict[str, Tool] = {}
# The sandbox's own tools (`sandbox__exec`, ...), by their model-side names: a tool source of its
# own, governed by `allowed_tools` like MCP, plugin and skill tools, never a built-in group.
SANDBOX_TOOLS: dict[str, Tool] = {}

# Checks every call of a run passes, after its grant and its parameters, before its handler:
# (home, run record, tool name, arguments) -> None, or raise the refusal. A run tied to a
# session that ended, for one, may no longer act. Tool groups register theirs here.
RunCallCheck = Callable[[Home, dict[str, Any], str, dict[str, Any]], None]
RUN_CALL_CHECKS: list[RunCallCheck] = []


def register(*tools: Tool, into: dict[str, Tool] = TOOLS) -> None:
    for tool in tools:
        if tool.name in into:
            raise ValueError(f"tool {tool.name!r} registered twice")
        into[tool.name] = tool


def group_tools(group: str) -> tuple[str, ...]:
    """The bare names of a group's tools, in registration order."""
    return tuple(t.name for t in TOOLS.values() if t.group == group)
