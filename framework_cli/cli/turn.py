"""fw turn: the turns messages give agents, and retrying one that failed or was cancelled."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from .common import complete_principal, home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="List the turns messages give member agents; retry a failed or cancelled one.")

COLUMNS = ["id", "session", "principal", "status", "message_id", "hop", "error"]


@app.command("list")
def list_(
    ctx: typer.Context,
    status: Annotated[Optional[str], typer.Option("--status", help="Only turns of this status: pending, backlog, running, done, failed or cancelled.")] = None,
    session: Annotated[Optional[str], typer.Option("--session", help="Only this session's turns.")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", help="Only this principal's turns.", autocompletion=complete_principal)] = None,
    as_json: JsonOpt = False,
) -> None:
    """List turns, oldest first, with their status and, for a failed one, why."""
    from ..runtime.turns import turn_list  # lazy: start-up speed

    doc = turn_list(home_of(ctx), status=status, session=session, principal=principal)
    rows = [[t[k] for k in COLUMNS] for t in doc["turns"]]
    empty = ("No turns match these filters." if status or session or principal
             else "No turns yet. A message that mentions a member agent gives it one.")
    emit(doc, as_json, lambda c: table(c, "turns", COLUMNS, rows, empty))


@app.command("retry")
def retry(
    ctx: typer.Context,
    turn_id: Annotated[int, typer.Argument(metavar="ID", help="The turn's id (see `fw turn list`).", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Make a failed or cancelled turn wait again (pending, or in the backlog while its
    binding is disabled); `fw dispatch` runs it."""
    from ..runtime.turns import turn_retry  # lazy: start-up speed

    doc = turn_retry(home_of(ctx), turn_id)

    def human(console: Any) -> None:
        turn = doc["turn"]
        console.print(f"Turn {turn['id']} of {turn['principal']} in session {turn['session']} is {turn['status']} again.")
        if turn["status"] == "pending":
            console.print("Next: `fw dispatch --once`")
        else:
            console.print(f"Next: `fw binding enable {turn['principal']}`")

    emit(doc, as_json, human)
