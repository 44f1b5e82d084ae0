"""fw task: the tasks principals delegate to each other."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..home.secrets import redact
from .common import complete_principal, home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="List, show and cancel tasks (delegated with the task_delegate tool; run by `fw dispatch`).")

TaskArg = Annotated[int, typer.Argument(help="The task's id.", show_default=False)]
COLUMNS = ["id", "principal", "status", "created_by", "session", "instructions", "error"]


def _render(console: Any, task: dict[str, Any]) -> None:
    console.print(f"Task {task['id']} for {task['principal']}, from {task['created_by']}: {task['status']}")
    console.print(f"  instructions: {task['instructions']}")
    for key in ("session", "run_id", "result", "error"):
        if task.get(key):
            console.print(f"  {key}: {task[key]}")


@app.command("list")
def list_(
    ctx: typer.Context,
    status: Annotated[Optional[str], typer.Option("--status", help="Only tasks of this status: pending, backlog, running, done, failed or cancelled.")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", help="Only tasks assigned to this principal.", autocompletion=complete_principal)] = None,
    as_json: JsonOpt = False,
) -> None:
    """List every task, oldest first."""
    from ..runtime.tasks import task_list  # lazy: start-up speed

    doc = task_list(home_of(ctx), status=status, principal=principal)
    # redact, then cut: a key cut in two would pass redaction
    rows = [[redact(t.get(k) or "")[:60] if k in ("instructions", "error") else t.get(k) for k in COLUMNS] for t in doc["tasks"]]
    empty = "No tasks match these filters." if status or principal else "No tasks yet."
    emit(doc, as_json, lambda c: table(c, "tasks", COLUMNS, rows, empty))


@app.command("create")
def create(
    ctx: typer.Context,
    principal: Annotated[str, typer.Argument(help="The agent principal to do it (its binding runs the task).", show_default=False, autocompletion=complete_principal)],
    instructions: Annotated[str, typer.Option("--instructions", metavar="TEXT", help="What to do, taken literally; - reads standard input.", show_default=False)],
    session: Annotated[Optional[str], typer.Option("--session", help="Tie the task to this open session.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delegate a task to a principal, as the task_delegate tool does: `fw dispatch` runs it
    as a managed run of the principal's binding (pending, or in the backlog while the
    binding is disabled)."""
    from ..runtime.tasks import task_delegate  # lazy: start-up speed
    from .output import read_text_arg  # lazy: start-up speed

    text = read_text_arg(instructions, None, "the instructions")
    doc = task_delegate(home_of(ctx), principal, text, session, created_by="operator")
    emit(doc, as_json, lambda c: (_render(c, doc["task"]), c.print("Next: `fw dispatch --once`")))


@app.command("show")
def show(ctx: typer.Context, task_id: TaskArg, as_json: JsonOpt = False) -> None:
    """Show a task with its status and result."""
    from ..runtime.tasks import task_show  # lazy: start-up speed

    doc = task_show(home_of(ctx), task_id)
    emit(doc, as_json, lambda c: _render(c, doc["task"]))


@app.command("cancel")
def cancel(ctx: typer.Context, task_id: TaskArg, as_json: JsonOpt = False) -> None:
    """Cancel a task that has not ended; if it is running, its run is ended."""
    from ..runtime.tasks import task_cancel  # lazy: start-up speed

    doc = task_cancel(home_of(ctx), task_id)
    emit(doc, as_json, lambda c: c.print(f"Task {task_id}: {doc['task']['status']}" + ("" if doc["cancelled"] else " (it had already ended)")))
