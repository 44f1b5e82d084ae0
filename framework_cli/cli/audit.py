"""fw audit: the log of tool calls."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..tools.audit import audit_list
from .common import DURATION_HELP, home_of, parse_duration
from .output import JsonOpt, emit, table

app = typer.Typer(help="Read the audit log of tool calls (shapes of parameters only, never values).")


@app.command("list")
def list_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", help="How many of the latest entries.")] = 50,
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Only this run's calls (its id, or the start or end of it).")] = None,
    tool: Annotated[Optional[str], typer.Option("--tool", help="Only calls of this tool (the name called, e.g. framework_resource_list).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", metavar="DURATION", help=f"Only calls in the last DURATION: {DURATION_HELP}.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the latest tool calls: time (UTC), caller, run, tool, and the result (ok, or
    the error code of a refused or failed call). On a terminal it fits the width; --json has every field."""
    seconds = parse_duration(since, "--since") if since is not None else None
    doc = audit_list(home_of(ctx), limit, run=run, tool=tool, since=seconds)
    filtered = run is not None or tool is not None or since is not None
    if doc.get("did_you_mean") and not as_json:
        emit(doc, as_json, lambda c: c.print(f"No tool calls match these filters: no call of {tool} was logged; "
                                             f"did you mean {doc['did_you_mean']}?"))
        return
    emit(doc, as_json, lambda c: render_audit(c, doc["entries"], filtered))


def render_audit(console: Any, entries: list[dict[str, Any]], filtered: bool = False) -> None:
    if not entries:
        console.print("No tool calls match these filters." if filtered else "No tool calls yet.")
        return
    rows = [_audit_row(entry) for entry in entries]
    table(console, None, ["time (UTC)", "caller", "run", "tool", "result"], rows, "")


def _audit_row(entry: dict[str, Any]) -> list[str]:
    """One entry in short: the time without year and fraction, the run by its last 8 characters."""
    if entry.get("corrupt_line"):
        return ["?", "?", "", "(a damaged line)", "corrupt"]
    stamp = str(entry.get("time") or "")
    when = stamp[5:19].replace("T", " ") if len(stamp) >= 19 else stamp
    run = str(entry.get("run_id") or "")
    run = run[-8:] if run.startswith("run-") else run or "-"
    outcome = str(entry.get("error") or entry.get("outcome") or "")  # a code says refused or failed, and why
    return [when, str(entry.get("caller") or ""), run, str(entry.get("tool") or ""), outcome]
