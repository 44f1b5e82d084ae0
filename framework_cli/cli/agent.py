"""fw agent: create, edit, show and list agents, and mount built-in tool groups on them."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..domain.agents import agent_edit, agent_show
from ..domain.resources import resource_list, resource_write
from .common import complete_agent, complete_category, complete_group, home_of
from .output import JsonOpt, emit
from .resource import render_activation, render_list, render_resource, render_written

app = typer.Typer(help="Create, edit, show and list agents; mount built-in tool groups on them.")

NameArg = Annotated[str, typer.Argument(help="The agent's name.", show_default=False, autocompletion=complete_agent)]
NewNameArg = Annotated[str, typer.Argument(help="The new agent's name.", show_default=False)]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="The model it uses ('' clears it).")]
PromptOpt = Annotated[Optional[str], typer.Option("--prompt", help="Its prompt ('' clears it).")]
SkillOpt = Annotated[Optional[list[str]], typer.Option("--skill", help="A skill it uses (repeat; replaces the list).")]
McpOpt = Annotated[Optional[list[str]], typer.Option("--mcp", help="An MCP server it uses (repeat; replaces the list).")]
HarnessOpt = Annotated[Optional[str], typer.Option("--harness", help="The harness that runs it ('' clears it).")]
DescOpt = Annotated[Optional[str], typer.Option("--description", help="What it is for.")]
ExecOpt = Annotated[Optional[bool], typer.Option("--execution/--no-execution", help="Allow local execution (with the local_execution group).")]
CategoryOpt = Annotated[Optional[str], typer.Option("--category", help="Category to place it in, or move it to.", autocompletion=complete_category)]
ListCategoryOpt = Annotated[Optional[str], typer.Option("--category", help="Only this category; default: every category.", autocompletion=complete_category)]
GroupsHelp = "resource_management, task_collaboration or local_execution"
BuiltinOpt = Annotated[Optional[list[str]], typer.Option("--builtin-tool", help=f"Mount exactly these groups (repeat; replaces the set): {GroupsHelp}.", autocompletion=complete_group)]


def _fields(model, prompt, skill, mcp, harness, description, execution) -> dict[str, Any]:
    """The flags given, as a merge patch: '' clears a single reference."""
    patch: dict[str, Any] = {}
    for key, value in (("model", model), ("prompt", prompt), ("harness", harness), ("description", description)):
        if value is not None:
            patch[key] = value or None
    if skill is not None:
        patch["skills"] = skill
    if mcp is not None:
        patch["mcps"] = mcp
    if execution is not None:
        patch["execution"] = {"enabled": execution}
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
    description: DescOpt = None,
    execution: ExecOpt = None,
    category: CategoryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an agent. It is configured, not running: bind an identity to it to enable it."""
    data = _fields(model, prompt, skill, mcp, harness, description, execution)
    if builtin_tool is not None:
        data["builtin_tools"] = builtin_tool
    doc = resource_write(home_of(ctx), "agent", name, data, create=True, category=category)
    emit(doc, as_json, lambda c: render_written(c, doc, "Created"))


@app.command("edit")
def edit(
    ctx: typer.Context,
    name: NameArg,
    builtin_tool: BuiltinOpt = None,
    add_builtin_tool: Annotated[Optional[list[str]], typer.Option("--add-builtin-tool", help="Mount a group (repeat); already mounted is no change.", autocompletion=complete_group)] = None,
    remove_builtin_tool: Annotated[Optional[list[str]], typer.Option("--remove-builtin-tool", help="Unmount a group (repeat); not mounted is no change.", autocompletion=complete_group)] = None,
    model: ModelOpt = None,
    prompt: PromptOpt = None,
    skill: SkillOpt = None,
    mcp: McpOpt = None,
    harness: HarnessOpt = None,
    description: DescOpt = None,
    execution: ExecOpt = None,
    category: CategoryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change an agent. Only the flags given change; a change applies from the next run."""
    patch = _fields(model, prompt, skill, mcp, harness, description, execution)
    doc = agent_edit(
        home_of(ctx),
        name,
        patch,
        builtin_set=builtin_tool,
        builtin_add=add_builtin_tool or (),
        builtin_remove=remove_builtin_tool or (),
        category=category,
    )
    emit(doc, as_json, lambda c: render_edited(c, doc))


def render_edited(console: Any, doc: dict[str, Any]) -> None:
    """What an edit left: saved or unchanged, and the groups mounted now."""
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
        render_resource(console, doc)
        render_activation(console, doc["activation"])

    emit(doc, as_json, human)


@app.command("list")
def list_(ctx: typer.Context, category: ListCategoryOpt = None, as_json: JsonOpt = False) -> None:
    """List agents with their model, prompt and mounted built-in tool groups."""
    doc = resource_list(home_of(ctx), "agent", category)
    emit(doc, as_json, lambda c: render_list(c, doc))
