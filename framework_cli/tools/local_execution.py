"""The `local_execution` group: `exec`, granted only with `execution.enabled` (the projection
decides that). The audit records the shape of the call (`argv: array[N]`), never the command."""

from __future__ import annotations

from typing import Any

from ..domain.tool_types import Caller, Tool, object_schema
from ..home import secrets
from ..home.store import Home
from ..runtime.execution import exec_program
from .registry import register


def _exec(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    secrets.remember_home(home)  # every stored secret is redacted from what the program prints
    directory = (caller.run or {}).get("directory") or str(home.root)
    return exec_program(a["argv"], directory, a.get("timeout_seconds", 60), a.get("stdin"))


register(
    Tool("exec", "local_execution", "dangerous",
         "Run a program on the host: argv[0] is the program (no shell), in the run's working folder, with only PATH, HOME, "
         "LANG and TERM set. Each output stream is cut at 64 KiB; at timeout_seconds (1 to 600, default 60) the program and "
         "its children are killed.",
         object_schema(["argv"], argv={"type": "array", "items": {"type": "string"}, "minItems": 1},
              timeout_seconds={"type": "number", "minimum": 1, "maximum": 600}, stdin={"type": "string"}),
         _exec),
)
