"""The sandbox tools (seed B's "sandbox built-in tools"): a command and four file operations,
confined to the run's workspace. An agent with a `sandbox:` block has them as candidates,
governed by `allowed_tools`; the projection lists them `source_unavailable` when the sandbox
does not work. `sandbox__exec` always runs in the box (`runtime/sandbox.py`); the file tools
never leave the workspace (`runtime/workspace_files.py`). Output caps, redaction and the audit
(the shape of the parameters only) are exec's."""

from __future__ import annotations

from typing import Any

from ..domain.projection import SANDBOX_PREFIX
from ..domain.tool_types import Caller, Tool, object_schema
from ..home import secrets
from ..home.store import Home
from ..runtime.execution import exec_program
from ..runtime.sandbox import box_for, open_workspace
from ..runtime.workspace_files import Workspace
from .registry import SANDBOX_TOOLS, register

GROUP = "sandbox"
PATH = {"type": "string", "minLength": 1, "maxLength": 4096, "description": "relative to the workspace"}


def _workspace(home: Home, caller: Caller) -> Workspace:
    secrets.remember_home(home)  # every stored secret is redacted from what the tools return
    return Workspace(home, open_workspace(home, caller.run or {}))


def _exec(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    workspace = _workspace(home, caller)
    network = bool((((caller.run or {}).get("definition") or {}).get("sandbox") or {}).get("network"))
    box = box_for(home, workspace.shown, network)
    return exec_program(a["argv"], workspace.shown, a.get("timeout_seconds", 60), a.get("stdin"), box)


def _tool(name: str, risk: str, description: str, schema: dict[str, Any], handler: Any) -> Tool:
    return Tool(SANDBOX_PREFIX + name, GROUP, risk, description, schema, handler)


register(
    _tool("exec", "dangerous",
          "Run a program in the sandbox: argv[0] is the program (no shell), in the workspace, which the sandbox sees "
          "read-write besides the system (read-only) and a private /tmp; no network unless the agent allows it. Each output "
          "stream is cut at 64 KiB; at timeout_seconds (1 to 600, default 60) the program and its children are killed.",
          object_schema(["argv"], argv={"type": "array", "items": {"type": "string"}, "minItems": 1},
                        stdin={"type": "string"}, timeout_seconds={"type": "number", "minimum": 1, "maximum": 600}),
          _exec),
    _tool("read_file", "read", "Read a text file of the workspace (cut at 64 KiB).",
          object_schema(["path"], path=PATH), lambda h, c, a: _workspace(h, c).read(a["path"])),
    _tool("write_file", "write", "Write a text file of the workspace (made, with its folders, if missing; replaced if there).",
          object_schema(["path", "content"], path=PATH, content={"type": "string"}),
          lambda h, c, a: _workspace(h, c).write(a["path"], a["content"])),
    _tool("list_files", "read",
          "List a folder of the workspace (default: the workspace itself); with pattern (a glob such as *.py or src/*.py), "
          f"every file and folder below it that matches. At most {1000} entries.",
          object_schema([], path=PATH, pattern={"type": "string", "minLength": 1, "maxLength": 256}),
          lambda h, c, a: _workspace(h, c).list(a.get("path"), a.get("pattern"))),
    _tool("edit_file", "write", "Replace the one occurrence of old with new in a text file of the workspace.",
          object_schema(["path", "old", "new"], path=PATH, old={"type": "string", "minLength": 1}, new={"type": "string"}),
          lambda h, c, a: _workspace(h, c).edit(a["path"], a["old"], a["new"])),
    into=SANDBOX_TOOLS,
)
