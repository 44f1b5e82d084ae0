"""fw audit: the log of tool calls."""

from __future__ import annotations

from typing import Annotated

import typer

from ..tools.audit import audit_list
from .common import home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="Read the audit log of tool calls (shapes of parameters only, never values).")


@app.command("list")
def list_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many of the latest entries.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Show the latest tool calls: time, caller, run, tool, outcome and error code."""
    doc = audit_list(home_of(ctx), limit)
    cols = ["time", "caller", "run_id", "tool", "outcome", "error"]
    emit(doc, as_json, lambda c: table(c, "audit", cols, [[e.get(k) for k in cols] for e in doc["entries"]], "No tool calls yet."))
