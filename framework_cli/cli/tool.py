"""fw tool: list and call the built-in tools, as the Manager or as a run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..tools.service import call_tool, caller_for, list_tools
from .common import complete_run, complete_tool, home_of
from .output import PROGRESS_LINES, JsonOpt, emit, print_json, progress_text, read_data_arg, table, wrapped, write_out

app = typer.Typer(help="List and call built-in tools as the Manager (--manager) or as a run (--run RUN).")

ManagerOpt = Annotated[bool, typer.Option("--manager", help="Call as the Manager: every tool, bare names.")]
RunOpt = Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Call as this run (its id, or a unique end of it): its granted framework_ tools only.", autocompletion=complete_run)]


@app.command("list")
def list_(ctx: typer.Context, manager: ManagerOpt = False, run: RunOpt = None, as_json: JsonOpt = False) -> None:
    """List the tools a caller has, with descriptions, risk and input schemas (--json)."""
    home = home_of(ctx)
    doc = list_tools(home, caller_for(home, manager, run))
    emit(doc, as_json, lambda c: table(c, "tools", ["name", "risk", "description"], [[t["name"], t["risk"], t["description"]] for t in doc["tools"]], "No tools: the run's agent mounts no group, or its model cannot call tools."))


@app.command("call")
def call(
    ctx: typer.Context,
    tool: Annotated[str, typer.Argument(help="The tool's name (framework_NAME inside a run).", show_default=False, autocompletion=complete_tool)],
    manager: ManagerOpt = False,
    run: RunOpt = None,
    args: Annotated[str, typer.Option("--args", metavar="JSON|@FILE|-", help="The parameters, an object in JSON (or YAML).")] = "{}",
    as_json: Annotated[bool, typer.Option("--json", help="Accepted for symmetry: tool call always prints JSON.", show_default=False)] = True,
) -> None:
    """Call a tool and print its result as JSON (always JSON, errors included). An MCP tool's
    progress shows on standard error as it comes."""
    from ..domain.tool_types import CallWatch  # lazy: start-up speed

    home = home_of(ctx)
    caller = caller_for(home, manager, run)
    watch = CallWatch(on_progress=lambda progress: _show_progress(tool, progress))
    print_json(call_tool(home, caller, tool, read_data_arg(args, "--args"), watch=watch))


def _show_progress(tool: str, progress: dict) -> None:
    if PROGRESS_LINES.due({"name": tool, **progress}):
        write_out(f"  tool {tool}: {progress_text(progress)}", err=True)


@app.command("catalogue")
def catalogue(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the catalogue of chat-platform tools: event tools (frozen to the event's own ids,
    offered by the events an agent selects) apart from platform tools (the agent names the
    target; chosen with `allowed_platform_tools`). The event patterns show as they are, with
    the event types fw produces that each fits. There is no raw passthrough."""
    from ..domain.catalogue import catalogue as platform_catalogue  # lazy: start-up speed

    doc = platform_catalogue()

    def human(console) -> None:
        console.print(wrapped(f"Event types fw produces: {', '.join(doc['event_types'])}.", console, ""))
        event_rows = [[t["name"], t["api"], t["risk"], ", ".join(_marked(t)), t["target"]] for t in doc["event_tools"]]
        table(console, "event tools", ["name", "api", "risk", "event patterns", "frozen target"], event_rows, "", titled=True)
        if any(t["unproduced_patterns"] for t in doc["event_tools"]):
            console.print(wrapped(f"{NOT_PRODUCED}: the pattern matches no event type fw produces, so no event offers the tool "
                                  "that way and an agent's events cannot select it.", console, ""))
        platform_rows = [[t["name"], t["api"], t["risk"], _parameters(t["input_schema"])] for t in doc["platform_tools"]]
        table(console, "platform tools", ["name", "api", "risk", "parameters"], platform_rows, "", titled=True)

    emit(doc, as_json, human)


NOT_PRODUCED = "(not produced)"


def _marked(tool: dict) -> list[str]:
    """The tool's patterns as they are, each that no produced event type matches marked."""
    return [f"{p} {NOT_PRODUCED}" if p in tool["unproduced_patterns"] else p for p in tool["event_patterns"]]


def _parameters(schema: dict) -> str:
    required = set(schema.get("required") or [])
    return ", ".join(name if name in required else f"{name}?" for name in schema.get("properties") or {}) or "none"
