"""fw run: start, show, list and end runs."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..domain.run_records import run_end, run_list, run_prune, run_show
from ..errors import FwError
from ..suggest import plural
from .common import (
    DURATION_HELP,
    complete_agent,
    complete_bot,
    complete_principal,
    complete_run,
    home_of,
    parse_duration,
    whole_seconds,
)
from .output import JsonOpt, describe_runner, emit, emit_started, json_wanted, render_run_tools, table, write_out

app = typer.Typer(help="Start, show, list and end runs of agents.")

RunArg = Annotated[str, typer.Argument(help="The run's id, or a unique end or start of it.", show_default=False, autocompletion=complete_run)]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="List every tool, however many.")]


def _render(console: Any, doc: dict[str, Any], verbose: bool = False) -> None:
    console.print(f"Run {doc['run_id']} ({doc['mode']}, as {doc['identity']}) of agent {doc['agent']}: {doc['status']}")
    outcome = doc.get("outcome")
    if isinstance(outcome, dict):
        error = outcome.get("error") if isinstance(outcome.get("error"), dict) else None
        console.print(f"  outcome: {outcome.get('status')}" + (f" ({error.get('code')}: {error.get('message')})" if error else ""))
    console.print(f"  fingerprint {doc['fingerprint']}")
    console.print(f"  lease until {doc['lease_expires_at']}")
    render_run_tools(console, doc, verbose)
    console.print(f"  runner: {describe_runner(doc.get('runner'))}")
    if "gateway_token" in doc:
        console.print(f"  gateway token (shown only now): {doc['gateway_token']}")
        console.print("  serve it with `fw mcp serve --http`; a runner sends it as Authorization: Bearer TOKEN")
    stripped = doc.get("invisible_characters_stripped") or []
    if stripped:
        names = ", ".join(f"{s['name']} ({s['characters']})" for s in stripped)
        console.print(f"  invisible characters (zero-width or bidirectional controls) were stripped from: {names}")
    if isinstance(doc.get("event"), dict):
        console.print(f"  for event {doc['event'].get('type')} on bot {doc.get('bot')}")


@app.command("start")
def start(
    ctx: typer.Context,
    principal: Annotated[Optional[str], typer.Option("--principal", help="A managed run as this principal (its binding must be enabled).", autocompletion=complete_principal)] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="An explicit run of this agent, as runtime:AGENT.", autocompletion=complete_agent)] = None,
    lease: Annotated[Optional[str], typer.Option("--lease", metavar="DURATION", help=f"How long the run may act (default 1h): {DURATION_HELP}.")] = None,
    bot: Annotated[Optional[str], typer.Option("--bot", autocompletion=complete_bot, help="With --event: a run for an event that came to this bot (as `fw event handle --no-run`).")] = None,
    event: Annotated[Optional[str], typer.Option("--event", metavar="JSON|@FILE|-", help="With --bot: the event, frozen in the run.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run's id, for scripts: RUN=$(fw run start ... -q).")] = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run: the agent's definition and tools are frozen for the run's whole life."""
    seconds = whole_seconds(lease, "--lease")
    if bot is not None or event is not None:
        doc = _start_for_event(ctx, principal, agent, seconds, bot, event)
    else:
        from ..tools.service import start_run  # lazy: start-up speed

        doc = start_run(home_of(ctx), principal=principal, agent=agent, lease=seconds)
    if quiet and not json_wanted(as_json):
        write_out(doc["run_id"])
        return
    emit_started(doc, doc, as_json, lambda c: _render(c, doc, verbose))


def _start_for_event(ctx: typer.Context, principal: Optional[str], agent: Optional[str], lease: Optional[int],
                     bot: Optional[str], event: Optional[str]) -> dict[str, Any]:
    """`fw run start --principal P --bot B --event E`: the run `fw event handle B --no-run`
    starts, as `fw run start` shows a run; an event the principal does not take is `denied`."""
    from ..engine.handling import start_event_run  # lazy: start-up speed
    from .output import read_data_arg  # lazy: start-up speed

    if bot is None or event is None or principal is None or agent is not None:
        raise FwError("usage", "a run for an event needs --principal, --bot and --event (and no --agent)",
                      "e.g. fw run start --principal P --bot B --event @event.json")
    return start_event_run(home_of(ctx), bot, read_data_arg(event, "--event"), principal=principal, lease=lease)


@app.command("show")
def show(ctx: typer.Context, run_id: RunArg, verbose: VerboseOpt = False, as_json: JsonOpt = False) -> None:
    """Show a run's snapshot and status."""
    doc = run_show(home_of(ctx), run_id)
    emit(doc, as_json, lambda c: _render(c, doc, verbose))


@app.command("list")
def list_(
    ctx: typer.Context,
    status: Annotated[Optional[str], typer.Option("--status", help="Only runs of this status: active, ended, expired or corrupt.")] = None,
    agent: Annotated[Optional[str], typer.Option("--agent", help="Only runs of this agent.", autocompletion=complete_agent)] = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, oldest first."""
    doc = run_list(home_of(ctx), status=status, agent=agent)
    cols = ["run_id", "mode", "identity", "agent", "status", "outcome", "lease_expires_at"]
    empty = "No runs match these filters." if status or agent else "No runs yet. Start one with `fw run start --agent AGENT`."
    emit(doc, as_json, lambda c: table(c, "runs", cols, [[r.get(k) for k in cols] for r in doc["runs"]], empty))


@app.command("end")
def end(ctx: typer.Context, run_id: RunArg, as_json: JsonOpt = False) -> None:
    """End a run: it can make no further calls."""
    doc = run_end(home_of(ctx), run_id)
    emit(doc, as_json, lambda c: c.print(f"Run {run_id} has ended."))


@app.command("prune")
def prune(
    ctx: typer.Context,
    ended: Annotated[bool, typer.Option("--ended", help="Only runs ended with `fw run end`, not those whose lease ran out.")] = False,
    older_than: Annotated[Optional[str], typer.Option("--older-than", metavar="DURATION", help=f"Only runs that stopped longer ago than this: {DURATION_HELP}.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete the records of runs that can no longer act: ended, or whose lease ran out.
    Active runs, and damaged records (see `fw home check`), are kept."""
    seconds = parse_duration(older_than, "--older-than") if older_than is not None else None
    doc = run_prune(home_of(ctx), ended_only=ended, older_than=seconds)
    emit(doc, as_json, lambda c: c.print(f"Pruned {plural(len(doc['pruned']), 'run')}; kept {doc['kept']}."))
