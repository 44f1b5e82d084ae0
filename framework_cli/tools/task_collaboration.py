"""The `task_collaboration` group: delegate work to another principal, wait for it, report it.

Identities come from the caller: a run acts as its identity, the Manager as `manager`. Only a
task's creator may cancel it, only the run working on it may report it.
"""

from __future__ import annotations

from typing import Any

from ..domain.tool_types import NAME, Caller, Tool, object_schema
from ..home.store import Home
from ..runtime import tasks
from .registry import RUN_CALL_CHECKS, register

TC = "task_collaboration"
TASK_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}


def _who(caller: Caller) -> str | None:
    """The caller's identity, or None for the Manager (who sees and may do everything)."""
    return None if caller.is_manager else caller.identity


def _delegate(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    run = caller.run or {}
    hop = int(run["hop"]) + 1 if "hop" in run else 0  # a run started for a task or a turn delegates one hop further
    doc = tasks.task_delegate(home, a["principal"], a["instructions"], a.get("session"), created_by=caller.identity,
                              created_run=run.get("run_id"), hop=hop, member=_who(caller))
    return {"task": {k: doc["task"][k] for k in ("id", "status", "principal", "created_by")}}


register(
    Tool("task_delegate", TC, "write",
         "Give a task to another agent principal. Its own agent runs it (inheriting nothing from you) when `fw dispatch` "
         "runs; the answer of that run is the task's result unless it reports one. Returns the task's id.",
         object_schema(["principal", "instructions"], principal=NAME, instructions={"type": "string", "minLength": 1, "maxLength": 65536},
              session={**NAME, "description": "an open session the task belongs to: if it ends, the task's run stops acting"}),
         _delegate),
    Tool("task_wait", TC, "read",
         "Wait until a task ends (or timeout_seconds pass, 0 to 600, default 60) and return it with its status and result.",
         object_schema(["task_id"], task_id=TASK_ID, timeout_seconds={"type": "number", "minimum": 0, "maximum": 600}),
         lambda h, c, a: tasks.task_wait(h, a["task_id"], a.get("timeout_seconds", 60), by=_who(c)),
         ahandler=lambda h, c, a, run_sync: tasks.atask_wait(h, a["task_id"], a.get("timeout_seconds", 60), by=_who(c), run_sync=run_sync)),
    Tool("task_report", TC, "write",
         "Report the outcome of the task you are working on: status done or failed, and the result.",
         object_schema(["task_id", "status", "result"], task_id=TASK_ID, status={"type": "string", "enum": ["done", "failed"]},
              result={"type": "string", "maxLength": 65536}),
         lambda h, c, a: tasks.task_report(h, a["task_id"], a["status"], a["result"], None if c.is_manager else c.run_id)),
    Tool("task_list", TC, "read", "List your tasks: those you created, those assigned to you (role), or both.",
         object_schema([], role={"type": "string", "enum": ["created", "assigned"]}),
         lambda h, c, a: tasks.task_list(h, _who(c), a.get("role"))),
    Tool("task_cancel", TC, "dangerous", "Cancel a task you created that has not ended; a running one stops acting.",
         object_schema(["task_id"], task_id=TASK_ID), lambda h, c, a: tasks.task_cancel(h, a["task_id"], by=_who(c))),
)


def _task_still_running(home: Home, run: dict[str, Any], name: str, args: dict[str, Any]) -> None:
    tasks.still_working(home, run)


RUN_CALL_CHECKS.append(_task_still_running)
