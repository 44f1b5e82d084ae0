"""fw event: hand a chat-platform event to a bot's principal."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..suggest import plural
from .common import complete_bot, home_of, run_gateway
from .output import JsonOpt, emit, read_data_arg, render_run_tools

app = typer.Typer(help="Handle chat-platform events: a managed run of the bot's principal, with the event frozen in it.")

BotArg = Annotated[str, typer.Argument(help="The bot the event came to.", show_default=False, autocompletion=complete_bot)]
NoRunOpt = Annotated[bool, typer.Option("--no-run", help="Start the run and stop there, for an external runner (`fw mcp serve --run RUN`).")]

REASONS = {
    "event_not_selected": "the agent of the bot's principal does not select this event type (its `events`)",
    "binding_disabled": "the binding of the bot's principal is disabled (`fw binding enable {principal}`)",
}


@app.command("handle")
def handle(
    ctx: typer.Context,
    bot: BotArg,
    event: Annotated[str, typer.Option("--event", metavar="JSON|@FILE|-", help='The event: {"type", "actor": {"id", "name"?}, "group": {"id"}?, "message": {"id", "text"}?, "request_id"?}.', show_default=False)],
    no_run: NoRunOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List every tool, however many.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Handle an event: if the bot's principal's agent selects its type, start a managed run
    with the event frozen in it and run the agent on it (the message text, or a description
    of the event). The answer is not sent: the agent replies by calling event_reply."""
    from ..engine.handling import handle_event  # lazy: start-up speed
    from .agent import run_progress  # lazy: start-up speed
    from .output import json_wanted  # lazy: start-up speed

    raw = read_data_arg(event, "--event")
    home = home_of(ctx)
    doc = handle_event(home, bot, raw, run=not no_run, on_event=None if json_wanted(as_json) else run_progress, gateway=run_gateway)
    if doc.get("handled") and "gateway_token" in doc["run"]:
        from .output import emit_started  # lazy: start-up speed

        emit_started(doc, doc["run"], as_json, lambda c: render_handled(c, doc, verbose))
        return
    emit(doc, as_json, lambda c: render_handled(c, doc, verbose, bot_principal(home, bot)))


def bot_principal(home: Any, bot: str) -> str:
    """The principal a bot hands its events to, for a hint; a placeholder if it cannot be read."""
    from ..domain.bots import load_bot  # lazy: start-up speed
    from ..errors import FwError  # lazy: start-up speed

    try:
        return str(load_bot(home, bot)["principal"])
    except (FwError, KeyError):
        return "PRINCIPAL"


def render_handled(console: Any, doc: dict[str, Any], verbose: bool = False, principal: str = "PRINCIPAL") -> None:
    if not doc["handled"]:
        why = REASONS.get(doc["reason"], doc["reason"]).replace("{principal}", principal)
        console.print(f"Not handled ({doc['reason']}): {why}.")
        return
    run = doc["run"]
    console.print(f"Run {run['run_id']} as {run['identity']} for {run['event']['type']} on bot {run['bot']}.")
    render_run_tools(console, run, verbose)
    result = doc.get("result")
    if result is None:
        console.print(f"  waiting for a runner: `fw mcp serve --run {run['run_id']}` or `fw tool call --run {run['run_id']} ...`")
        if "gateway_token" in run:
            console.print(f"  or over HTTP: `fw mcp serve --http`, with the gateway token (shown only now): {run['gateway_token']}")
        return
    replied = any(c["name"] == "event_reply" and c["outcome"] == "ok" for c in result["tool_calls"])
    console.print(f"  {result['status']}, {plural(result['rounds'], 'round')}, {plural(len(result['tool_calls']), 'tool call')}")
    console.print(f"  answer (not sent{'; it replied with event_reply' if replied else ''}): {result['answer'] or '(none)'}")
