"""fw agent: create, edit, show and list agents, and mount built-in tool groups on them."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from ..domain.agents import agent_show, edit_builtin_tools
from ..domain.resources import resource_list, resource_write
from ..suggest import plural
from .common import (
    DURATION_HELP,
    TIMEOUT_HELP,
    DryRunOpt,
    complete_agent,
    complete_category,
    complete_choice,
    complete_group,
    complete_mounted_group,
    complete_resource_of,
    complete_unmounted_group,
    home_of,
    listed,
    maybe_dry,
    parse_duration,
    refuse_add_and_remove,
    render_dry_run,
    run_gateway,
)
from .output import JsonOpt, emit, read_text_arg
from .resource import render_activation, render_list, render_resource, render_written

app = typer.Typer(help="Create, edit, show and list agents; mount built-in tool groups on them.")

NameArg = Annotated[str, typer.Argument(help="The agent's name.", show_default=False, autocompletion=complete_agent)]
NewNameArg = Annotated[str, typer.Argument(help="The new agent's name.", show_default=False)]
ModelOpt = Annotated[Optional[str], typer.Option("--model", autocompletion=complete_resource_of("model"), help="The model it uses ('' clears it).")]
PromptOpt = Annotated[Optional[str], typer.Option("--prompt", autocompletion=complete_resource_of("prompt"), help="Its prompt ('' clears it).")]
SkillOpt = Annotated[Optional[list[str]], typer.Option("--skill", autocompletion=complete_resource_of("skill"), help="A skill it uses (repeat, or a,b; replaces the list; '' clears it).")]
McpOpt = Annotated[Optional[list[str]], typer.Option("--mcp", autocompletion=complete_resource_of("mcp"), help="An MCP server it uses (repeat, or a,b; replaces the list; '' clears it).")]
AddSkillOpt = Annotated[Optional[list[str]], typer.Option("--add-skill", autocompletion=complete_resource_of("skill"), help="Use this skill too (repeat).")]
RemoveSkillOpt = Annotated[Optional[list[str]], typer.Option("--remove-skill", autocompletion=complete_resource_of("skill"), help="Stop using this skill (repeat).")]
AddMcpOpt = Annotated[Optional[list[str]], typer.Option("--add-mcp", autocompletion=complete_resource_of("mcp"), help="Use this MCP server too (repeat).")]
RemoveMcpOpt = Annotated[Optional[list[str]], typer.Option("--remove-mcp", autocompletion=complete_resource_of("mcp"), help="Stop using this MCP server (repeat).")]
HarnessOpt = Annotated[Optional[str], typer.Option("--harness", autocompletion=complete_resource_of("harness"), help="The harness that runs it ('' clears it).")]
DescOpt = Annotated[Optional[str], typer.Option("--description", help="What it is for.")]
ExecOpt = Annotated[Optional[bool], typer.Option("--execution/--no-execution", help="Allow local execution (with the local_execution group).")]
ExecSandboxOpt = Annotated[Optional[str], typer.Option("--execution-sandbox", metavar="BACKEND", autocompletion=complete_choice("bubblewrap", "none"), help="Where framework_exec runs commands: bubblewrap (the default: confined to the run's workspace) or none (on this machine, unconfined).", show_default=False)]
ExecNetworkOpt = Annotated[Optional[bool], typer.Option("--execution-network/--no-execution-network", help="Let framework_exec's commands in the sandbox reach the network (default: no).", show_default=False)]
SandboxOpt = Annotated[Optional[bool], typer.Option("--sandbox/--no-sandbox", help="Give its runs the sandbox tools (sandbox__exec, sandbox__read_file, ...), or take them away.", show_default=False)]
SandboxNetworkOpt = Annotated[Optional[bool], typer.Option("--sandbox-network/--no-sandbox-network", help="Let sandbox__exec reach the network (default: no); implies --sandbox.", show_default=False)]
CategoryOpt = Annotated[Optional[str], typer.Option("--category", help="Category to place it in, or move it to.", autocompletion=complete_category)]
ListCategoryOpt = Annotated[Optional[str], typer.Option("--category", help="Only this category; default: every category.", autocompletion=complete_category)]
GroupsHelp = "resource_management, task_collaboration or local_execution"
BuiltinOpt = Annotated[Optional[list[str]], typer.Option("--builtin-tool", help=f"Mount exactly these groups (repeat, or a,b; replaces the set; '' unmounts all): {GroupsHelp}.", autocompletion=complete_group)]
EventOpt = Annotated[Optional[list[str]], typer.Option("--event", help="A chat-platform event type or pattern it handles, e.g. message.* (repeat, or a,b; replaces the list; '' clears it).")]
PlatformToolOpt = Annotated[Optional[list[str]], typer.Option("--platform-tool", help="A platform_ tool its event runs may be offered (repeat; replaces the list; '' clears it). See `fw tool catalogue`.")]
AddEventOpt = Annotated[Optional[list[str]], typer.Option("--add-event", help="Handle this event type or pattern too (repeat).")]
RemoveEventOpt = Annotated[Optional[list[str]], typer.Option("--remove-event", help="Stop handling this event type or pattern (repeat).")]
AddPlatformToolOpt = Annotated[Optional[list[str]], typer.Option("--add-platform-tool", help="Allow this platform_ tool too (repeat).")]
RemovePlatformToolOpt = Annotated[Optional[list[str]], typer.Option("--remove-platform-tool", help="Stop allowing this platform_ tool (repeat).")]


def _fields(model, prompt, harness, description, execution, boxes=(None, None, None, None)) -> dict[str, Any]:
    """The flags given, as a merge patch: '' clears a single reference. `boxes`: the values of
    --execution-sandbox, --execution-network, --sandbox and --sandbox-network."""
    patch: dict[str, Any] = {}
    for key, value in (("model", model), ("prompt", prompt), ("harness", harness), ("description", description)):
        if value is not None:
            patch[key] = value or None
    exec_sandbox, exec_network, sandbox, sandbox_network = boxes
    wanted = {"enabled": execution, "sandbox": exec_sandbox, "network": exec_network}
    if any(value is not None for value in wanted.values()):
        patch["execution"] = {k: v for k, v in wanted.items() if v is not None}
    if sandbox is False and sandbox_network is not None:
        from ..errors import FwError  # lazy: start-up speed

        raise FwError("usage", "--no-sandbox takes the sandbox tools away: --sandbox-network has nothing to apply to",
                      "give one of them")
    if sandbox is False:
        patch["sandbox"] = None
    elif sandbox or sandbox_network is not None:
        patch["sandbox"] = {"backend": "bubblewrap", **({"network": sandbox_network} if sandbox_network is not None else {})}
    return patch


@app.command("create")
def create(
    ctx: typer.Context,
    name: NewNameArg,
    model: ModelOpt = None,
    prompt: PromptOpt = None,
    skill: SkillOpt = None,
    mcp: McpOpt = None,
    harness: HarnessOpt = None,
    builtin_tool: BuiltinOpt = None,
    event: EventOpt = None,
    platform_tool: PlatformToolOpt = None,
    description: DescOpt = None,
    execution: ExecOpt = None,
    execution_sandbox: ExecSandboxOpt = None,
    execution_network: ExecNetworkOpt = None,
    sandbox: SandboxOpt = None,
    sandbox_network: SandboxNetworkOpt = None,
    category: CategoryOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Create an agent. It is configured, not running: bind an identity to it to enable it."""
    data = _fields(model, prompt, harness, description, execution, (execution_sandbox, execution_network, sandbox, sandbox_network))
    for field, values in (("skills", skill), ("mcps", mcp), ("builtin_tools", builtin_tool)):
        if values is not None:
            data[field] = listed(values)
    if "builtin_tools" in data:  # each group named as --builtin-tool, with a did-you-mean, as `fw agent edit` does
        data["builtin_tools"] = edit_builtin_tools([], data["builtin_tools"], (), ())
    for field, values in (("events", listed(event)), ("allowed_platform_tools", listed(platform_tool))):
        if values:
            data[field] = values
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: resource_write(home, "agent", name, data, create=True, category=category))
    emit(doc, as_json, lambda c: render_written(c, doc, "Created"))


@app.command("edit")
def edit(
    ctx: typer.Context,
    name: NameArg,
    builtin_tool: BuiltinOpt = None,
    add_builtin_tool: Annotated[Optional[list[str]], typer.Option("--add-builtin-tool", help="Mount a group (repeat); already mounted is no change.", autocompletion=complete_unmounted_group)] = None,
    remove_builtin_tool: Annotated[Optional[list[str]], typer.Option("--remove-builtin-tool", help="Unmount a group (repeat); not mounted is no change.", autocompletion=complete_mounted_group)] = None,
    model: ModelOpt = None,
    prompt: PromptOpt = None,
    skill: SkillOpt = None,
    add_skill: AddSkillOpt = None,
    remove_skill: RemoveSkillOpt = None,
    mcp: McpOpt = None,
    add_mcp: AddMcpOpt = None,
    remove_mcp: RemoveMcpOpt = None,
    harness: HarnessOpt = None,
    description: DescOpt = None,
    execution: ExecOpt = None,
    execution_sandbox: ExecSandboxOpt = None,
    execution_network: ExecNetworkOpt = None,
    sandbox: SandboxOpt = None,
    sandbox_network: SandboxNetworkOpt = None,
    event: EventOpt = None,
    add_event: AddEventOpt = None,
    remove_event: RemoveEventOpt = None,
    platform_tool: PlatformToolOpt = None,
    add_platform_tool: AddPlatformToolOpt = None,
    remove_platform_tool: RemovePlatformToolOpt = None,
    category: CategoryOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Change an agent. Only the flags given change; a change applies from the next run."""
    from ..domain.agent_fields import agent_edit_lists  # lazy: start-up speed

    patch = _fields(model, prompt, harness, description, execution, (execution_sandbox, execution_network, sandbox, sandbox_network))
    flags = {  # field -> (flag, replacement, to add, to remove)
        "skills": ("skill", skill, add_skill, remove_skill),
        "mcps": ("mcp", mcp, add_mcp, remove_mcp),
        "events": ("event", event, add_event, remove_event),
        "allowed_platform_tools": ("platform-tool", platform_tool, add_platform_tool, remove_platform_tool),
        "builtin_tools": ("builtin-tool", builtin_tool, add_builtin_tool, remove_builtin_tool),
    }
    lists = {}
    for field, (flag, replace, add, remove) in flags.items():
        replace, add, remove = listed(replace), listed(add) or [], listed(remove) or []
        refuse_add_and_remove(flag, [*(replace or []), *add], remove)
        lists[field] = (replace, add, remove)
    builtin_set, builtin_add, builtin_remove = lists.pop("builtin_tools")
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: agent_edit_lists(
        home, name, patch, lists, builtin_set=builtin_set, builtin_add=builtin_add, builtin_remove=builtin_remove, category=category,
    ))
    emit(doc, as_json, lambda c: render_edited(c, doc))


def render_edited(console: Any, doc: dict[str, Any]) -> None:
    """What an edit left: saved or unchanged, and the groups mounted now."""
    if doc.get("dry_run"):
        render_dry_run(console, doc)
        return
    if doc.get("changed", True):
        render_written(console, doc, "Saved")
    else:
        console.print(f"Unchanged: agent {doc['name']} (category {doc['category']}) was already as asked.")
    console.print(f"Built-in tool groups: {', '.join(doc['data'].get('builtin_tools') or []) or 'none'}.")


@app.command("show")
def show(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """Show an agent's definition and whether anything runs it."""
    doc = agent_show(home_of(ctx), name)

    def human(console: Any) -> None:
        from rich.text import Text

        render_resource(console, doc)
        render_activation(console, doc["activation"])
        from .output import describe_runner  # lazy: start-up speed

        console.print(f"Runner: {describe_runner(doc['runner'])}" + (f" ({doc['runner']['error']})" if doc["runner"].get("error") else ""))
        for warning in doc.get("warnings") or []:
            console.print(Text(f"Warning: {warning['message']}", style="bold red"))
        console.print(f"Every tool a run of it may be offered, and why not: `fw agent tools {name}`.")

    emit(doc, as_json, human)


@app.command("tools")
def tools(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """List every tool a run of the agent may be offered (seed B's catalogue), by source:
    built-in groups, managed-run tools, event and platform tools, sandbox, MCP and plugin tools,
    skills; each with whether its configuration allows it, whether its source gives it now
    (its MCP servers are started to list their tools) and why not."""
    from ..tools.service import agent_tools  # lazy: start-up speed

    doc = agent_tools(home_of(ctx), name)
    emit(doc, as_json, lambda c: render_tools(c, doc))


def render_tools(console: Any, doc: dict[str, Any]) -> None:
    from .output import table  # lazy: start-up speed

    columns = ["name", "source", "allowed", "available", "reason"]
    rows = []
    for tool in doc["tools"]:
        source = tool["source"] + (f":{tool.get('group') or tool.get('server') or tool.get('plugin') or ''}" if
                                   tool["source"] in ("builtin", "mcp", "plugin") else "")
        rows.append([tool["name"], source, "yes" if tool["allowed"] else "no", "yes" if tool["available"] else "no",
                     tool.get("reason")])
    table(console, f"tools of agent {doc['agent']}", columns, rows, "No tool.")
    offered = [t for t in doc["tools"] if t["allowed"] and t["available"] and t["source"] not in ("event", "platform")]
    managed = sum(1 for t in offered if t["source"] == "managed_runtime")
    console.print(f"{plural(len(offered), 'tool')} allowed and available now (event and platform tools come with an event's run"
                  + (f"; the {managed} managed_runtime ones only in a managed run, as a principal bound to it: "
                     f"`fw agent run {doc['agent']} --principal P`; without --principal a run gets {len(offered) - managed})."
                     if managed else ")."))


@app.command("list")
def list_(ctx: typer.Context, category: ListCategoryOpt = None, as_json: JsonOpt = False) -> None:
    """List agents with their model, prompt and mounted built-in tool groups."""
    doc = resource_list(home_of(ctx), "agent", category)
    emit(doc, as_json, lambda c: render_list(c, doc))


@app.command("run")
def run(
    ctx: typer.Context,
    name: NameArg,
    message: Annotated[Optional[str], typer.Option("--message", metavar="TEXT", help="The message to the agent, taken literally; - reads standard input.")] = None,
    message_file: Annotated[Optional[str], typer.Option("--message-file", metavar="PATH", help="Read the message from this file.")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", help="Run as this principal (a managed run: its binding must run this agent and be enabled).")] = None,
    max_rounds: Annotated[Optional[int], typer.Option("--max-rounds", metavar="N", help="Stop after N model calls (default: the binding's limit, else none).")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DURATION", help=f"{TIMEOUT_HELP[:-1]}: {DURATION_HELP}.", show_default=False)] = None,
    continue_: Annotated[bool, typer.Option("--continue", "-c", help="Carry on the agent's last conversation (its earlier messages go to the model first); with none yet, start one. Not with --principal: a managed run's conversation is its session.")] = False,
    no_stream: Annotated[bool, typer.Option("--no-stream", help="On a terminal too, show the answer once it is whole instead of as it arrives.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run an agent on one message: start a run, let its model call the run's tools until it
    answers (or reaches --max-rounds), then end the run. Every tool call is authorised and
    audited as the run, and shown on standard error as it starts and ends. The model is
    reached through the agent's model and provider. An explicit run (no --principal) keeps its
    conversation, which --continue carries on."""
    from ..engine.agent_run import agent_run  # lazy: start-up speed
    from ..errors import FwError  # lazy: start-up speed
    from .output import json_wanted  # lazy: start-up speed

    if continue_ and principal is not None:
        raise FwError("usage", "--continue carries on an explicit run's conversation; "
                      "a run as --principal has its session instead",
                      f"drop --principal (`fw agent run {name} --continue ...`), "
                      "or post to the principal's session with `fw message post`")
    text = _message(message, message_file)
    home = home_of(ctx)
    as_json = json_wanted(as_json)
    # On a terminal the answer shows as it arrives (unless --no-stream); JSON and pipes get it whole.
    printer = None if as_json else RunPrinter(stream=sys.stdout.isatty() and not no_stream)
    conversation = None if principal is not None else "continue" if continue_ else "new"
    try:
        doc = agent_run(home, text, agent=name, principal=principal, max_rounds=max_rounds,
                        timeout=parse_duration(timeout, "--timeout") if timeout is not None else None,
                        on_event=printer, stream=bool(printer and printer.stream), gateway=run_gateway,
                        conversation=conversation)
    finally:
        if printer is not None:
            printer.end_line()  # a failure after some text came: the error starts on a line of its own
    emit(doc, as_json, lambda c: _render_answer(c, doc, shown=bool(printer and printer.shown_answer)))


def _message(message: Optional[str], message_file: Optional[str]) -> str:
    from ..errors import FwError  # lazy: start-up speed

    if (message is None) == (message_file is None):
        raise FwError("usage", "give the message with exactly one of --message TEXT, --message - and --message-file PATH", "e.g. --message 'list the agents'")
    return read_text_arg(message, message_file, "the message")


def run_progress(event: dict[str, Any]) -> None:
    """A run's progress on stderr: its start, then each tool call as it starts, as it
    progresses (an MCP tool's notifications) and as it ends, with its outcome and time."""
    from .output import PROGRESS_LINES, progress_text, write_out  # lazy: start-up speed

    if event["type"] == "started":
        run = event["run"]
        left_out = len(run.get("unavailable_tools") or [])
        why = f", {left_out} left out (see `fw run show {run['run_id']}`)" if left_out else ""
        write_out(f"Run {run['run_id']} started as {run['identity']}: {plural(len(run['tools']), 'tool')}{why}.", err=True)
    elif event["type"] == "tool_start":
        write_out(f"  tool {event['name']} ...", err=True)
    elif event["type"] == "tool_progress":
        if PROGRESS_LINES.due(event):
            write_out(f"  tool {event['name']}: {progress_text(event)}", err=True)
    elif event["type"] == "tool_call":
        outcome = event["outcome"] + (f" ({event['error']})" if event.get("error") else "")
        took = f" in {_seconds(event['seconds'])}" if isinstance(event.get("seconds"), (int, float)) else ""
        write_out(f"  tool {event['name']}: {outcome}{took}", err=True)
    elif event["type"] == "retry":
        write_out(f"  model: {event['why']}; trying again in {event['wait']:g} s (try {event['try']} of {event['of']})", err=True)


def _seconds(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


class RunPrinter:
    """`run_progress`, and with `stream` each answer's text on stdout as it arrives."""

    def __init__(self, stream: bool) -> None:
        from .output import StreamedText  # lazy: start-up speed

        self.stream = stream
        self.shown_answer = False  # the last round's text went out as it came
        self._text = StreamedText()

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "text":
            self._text.write(event["text"])
            self.shown_answer = True
            return
        self._text.end_line()  # progress goes to stderr: end the answer's line first
        if kind in ("round", "retry"):
            self.shown_answer = False  # a new answer, or this one again from its start
        run_progress(event)

    def end_line(self) -> None:
        self._text.end_line()


FINISH_NOTES = {
    "length": "The answer was cut short: the model reached its length limit (finish_reason length).",
    "content_filter": "The provider's content filter stopped the answer (finish_reason content_filter).",
}


def _render_answer(console: Any, doc: dict[str, Any], shown: bool = False) -> None:
    """The answer (unless it was shown as it streamed in), what cut it short, and a summary."""
    from rich.text import Text

    rounds = doc["rounds"]
    if doc["status"] == "max_rounds":
        console.print(Text(f"Stopped after {plural(rounds, 'round')} (--max-rounds); the last answer{' is above' if shown else ''}:", style="yellow"))
    if not shown:
        console.print(Text(doc["answer"] or "(no answer)"))
    if doc.get("finish_reason") in FINISH_NOTES:
        console.print(Text(FINISH_NOTES[doc["finish_reason"]], style="yellow"))
    console.print(Text(f"run {doc['run_id']}: {doc['status']}, {plural(rounds, 'round')}, {plural(len(doc['tool_calls']), 'tool call')}", style="dim"))
