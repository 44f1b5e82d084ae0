"""fw run: start, show, list and end runs."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..domain.runs import run_end, run_list, run_show
from ..tools.service import start_run
from .common import home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="Start, show, list and end runs of agents.")

RunArg = Annotated[str, typer.Argument(help="The run's id.", show_default=False)]


def _render(console: Any, doc: dict[str, Any]) -> None:
    console.print(f"Run {doc['run_id']} ({doc['mode']}, as {doc['identity']}) of agent {doc['agent']}: {doc['status']}")
    console.print(f"  fingerprint {doc['fingerprint']}")
    console.print(f"  lease until {doc['lease_expires_at']}")
    tools = ", ".join(doc["tools"]) or "none (no group mounted, or the model cannot call tools)"
    console.print(f"  tools: {tools}")
    if isinstance(doc.get("event"), dict):
        console.print(f"  for event {doc['event'].get('type')} on bot {doc.get('bot')}")


@app.command("start")
def start(
    ctx: typer.Context,
    principal: Annotated[Optional[str], typer.Option("--principal", help="A managed run as this principal (its binding must be enabled).")] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="An explicit run of this agent, as runtime:AGENT.")] = None,
    lease: Annotated[Optional[int], typer.Option("--lease", metavar="SECONDS", help="How long the run may act (default 3600).")] = None,
    bot: Annotated[Optional[str], typer.Option("--bot", help="With --event: a run for an event that came to this bot (as `fw event handle --no-run`).")] = None,
    event: Annotated[Optional[str], typer.Option("--event", metavar="JSON|@FILE|-", help="With --bot: the event, frozen in the run.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run: the agent's definition and tools are frozen for the run's whole life."""
    if bot is not None or event is not None:
        _start_for_event(ctx, principal, agent, lease, bot, event, as_json)
        return
    doc = start_run(home_of(ctx), principal=principal, agent=agent, lease=lease)
    emit(doc, as_json, lambda c: _render(c, doc))


def _start_for_event(ctx: typer.Context, principal: Optional[str], agent: Optional[str], lease: Optional[int],
                     bot: Optional[str], event: Optional[str], as_json: bool) -> None:
    """`fw run start --principal P --bot B --event E`: what `fw event handle B --no-run` does."""
    from ..errors import FwError
    from ..platform.handling import handle_event
    from .event import render_handled
    from .output import read_data_arg

    if bot is None or event is None or principal is None or agent is not None:
        raise FwError("usage", "a run for an event needs --principal, --bot and --event (and no --agent)",
                      "e.g. fw run start --principal P --bot B --event @event.json")
    doc = handle_event(home_of(ctx), bot, read_data_arg(event, "--event"), run=False, principal=principal, lease=lease)
    emit(doc, as_json, lambda c: render_handled(c, doc))


@app.command("show")
def show(ctx: typer.Context, run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Show a run's snapshot and status."""
    doc = run_show(home_of(ctx), run_id)
    emit(doc, as_json, lambda c: _render(c, doc))


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List runs."""
    doc = run_list(home_of(ctx))
    cols = ["run_id", "mode", "identity", "agent", "status", "lease_expires_at"]
    emit(doc, as_json, lambda c: table(c, "runs", cols, [[r.get(k) for k in cols] for r in doc["runs"]], "No runs yet. Start one with `fw run start --agent AGENT`."))


@app.command("end")
def end(ctx: typer.Context, run_id: RunArg, as_json: JsonOpt = False) -> None:
    """End a run: it can make no further calls."""
    doc = run_end(home_of(ctx), run_id)
    emit(doc, as_json, lambda c: c.print(f"Run {run_id} has ended."))
