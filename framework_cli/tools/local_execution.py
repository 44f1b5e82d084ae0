"""The `local_execution` group: `exec`, granted only with `execution.enabled` and, unless the
agent chose `execution.sandbox: none`, a sandbox that works (the projection decides that). A
command runs in the run's workspace, confined to it (`runtime/sandbox.py`). The audit records
the shape of the call (`argv: array[N]`), never the command."""

from __future__ import annotations

from typing import Any

from ..domain.tool_types import Caller, Tool, object_schema
from ..home import secrets
from ..home.store import Home
from ..runtime.execution import exec_program
from ..runtime.sandbox import NO_SANDBOX, box_for, open_workspace
from .registry import register


def _exec(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    secrets.remember_home(home)  # every stored secret is redacted from what the program prints
    run = caller.run or {}
    execution = (run.get("definition") or {}).get("execution") or {}
    workspace = open_workspace(home, run)
    box = None if execution.get("sandbox") == NO_SANDBOX else box_for(home, workspace, bool(execution.get("network")))
    return exec_program(a["argv"], workspace, a.get("timeout_seconds", 60), a.get("stdin"), box)


register(
    Tool("exec", "local_execution", "dangerous",
         "Run a program: argv[0] is the program (no shell), in the run's workspace, with only PATH, HOME, LANG and TERM set; "
         "in a sandbox that sees the system read-only, the workspace and a private /tmp, and no network unless the agent "
         "allows it. Each output stream is cut at 64 KiB; at timeout_seconds (1 to 600, default 60) the program and "
         "its children are killed.",
         object_schema(["argv"], argv={"type": "array", "items": {"type": "string"}, "minItems": 1},
              timeout_seconds={"type": "number", "minimum": 1, "maximum": 600}, stdin={"type": "string"}),
         _exec),
)
