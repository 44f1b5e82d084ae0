"""fw task: the tasks principals delegate to each other."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..home.secrets import redact
from .common import home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="List, show and cancel tasks (delegated with the task_delegate tool; run by `fw dispatch`).")

TaskArg = Annotated[int, typer.Argument(help="The task's id.", show_default=False)]
COLUMNS = ["id", "principal", "status", "created_by", "session", "instructions"]


def _render(console: Any, task: dict[str, Any]) -> None:
    console.print(f"Task {task['id']} for {task['principal']}, from {task['created_by']}: {task['status']}")
    console.print(f"  instructions: {task['instructions']}")
    for key in ("session", "run_id", "result", "error"):
        if task.get(key):
            console.print(f"  {key}: {task[key]}")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List every task, oldest first."""
    from ..runtime.tasks import task_list  # lazy: start-up speed

    doc = task_list(home_of(ctx))
    # redact, then cut: a key cut in two would pass redaction
    rows = [[t.get(k) if k != "instructions" else redact(t[k])[:60] for k in COLUMNS] for t in doc["tasks"]]
    emit(doc, as_json, lambda c: table(c, "tasks", COLUMNS, rows, "No tasks yet."))


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
