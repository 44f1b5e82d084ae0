"""The registry of tools: what a tool is, who calls it, and the tools each group registers.

The registry only collects. Each tool group registers its tools from the module that does
its job (`resource_management.py`), so nothing below the tool service imports it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..domain.projection import BUILTIN_PREFIX as TOOL_PREFIX  # noqa: F401  (re-exported) built-in tools' model-side prefix
from ..domain.projection import MANAGED_RUNTIME as MANAGED_RUNTIME  # every managed run's group; never the Manager's
from ..home.kinds import KIND_NAMES
from ..home.store import Home

NAME = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,62}$"}
KIND = {"type": "string", "enum": list(KIND_NAMES)}


def object_schema(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


# The audit's caller for a run that does not exist: not a valid principal name, so it can
# never be mistaken for an identity.
UNKNOWN_RUN = "(unknown run)"


@dataclass(frozen=True)
class Caller:
    """Who is calling: the Manager (`fw tool call --manager`) or a run (never the Manager)."""

    kind: str  # "manager" or "run"
    run_id: str | None = None
    run: dict[str, Any] | None = None  # the run's record, once loaded and checked

    @property
    def is_manager(self) -> bool:
        return self.kind == "manager"

    @property
    def identity(self) -> str:
        if self.is_manager:
            return "manager"
        return self.run["identity"] if self.run else UNKNOWN_RUN


@dataclass(frozen=True)
class Tool:
    name: str
    group: str
    risk: str  # read, write, dangerous
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[Home, Caller, dict[str, Any]], dict[str, Any]]


# -- handlers: each is the one function the matching CLI command calls -------------------


TOOLS: dict[str, Tool] = {}

# Checks every call of a run passes, after its grant and its parameters, before its handler:
# (home, run record, tool name, arguments) -> None, or raise the refusal. A run tied to a
# session that ended, for one, may no longer act. Tool groups register theirs here.
RunCallCheck = Callable[[Home, dict[str, Any], str, dict[str, Any]], None]
RUN_CALL_CHECKS: list[RunCallCheck] = []


def register(*tools: Tool) -> None:
    for tool in tools:
        if tool.name in TOOLS:
            raise ValueError(f"tool {tool.name!r} registered twice")
        TOOLS[tool.name] = tool


def group_tools(group: str) -> tuple[str, ...]:
    """The bare names of a group's tools, in registration order."""
    return tuple(t.name for t in TOOLS.values() if t.group == group)
