"""fw binding: which principal runs which agent, and whether it is enabled."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..domain.identities import (
    agent_bind,
    agent_unbind,
    binding_list,
    operator,
)
from .common import DryRunOpt, complete_agent, complete_principal, home_of, maybe_dry, render_dry_run
from .output import JsonOpt, emit, table

app = typer.Typer(help="Bind principals to agents; enable, disable and remove bindings.")

PrincipalArg = Annotated[str, typer.Argument(help="The principal (identity) of the binding.", show_default=False, autocompletion=complete_principal)]


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List bindings."""
    doc = binding_list(home_of(ctx))
    columns = ["principal", "agent", "enabled", "directory", "max_rounds", "policy", "max_queue", "enabled_by", "enabled_at"]
    emit(doc, as_json, lambda c: table(c, "bindings", columns, [[b.get(k, "CORRUPT" if k == "agent" else None) for k in columns] for b in doc["bindings"]], "No bindings yet. Bind one with `fw binding set PRINCIPAL --agent AGENT`."))


def _render(console: Any, doc: dict[str, Any]) -> None:
    b = doc["binding"]
    state = "enabled" if b["enabled"] else "disabled"
    console.print(f"Binding {b['principal']} -> agent {b['agent']}: {state}, policy {b['policy']}, rounds {b['max_rounds'] or 'unlimited'}, in {b['directory']}.")
    turns = doc.get("turns") or {}
    # The counts take turns and tasks together (both wait for the binding)
    if turns.get("released"):
        console.print(f"Pending again: {_turns_or_tasks(turns['released'], 'waiting')} of open sessions; `fw dispatch --once` runs them.")
    if turns.get("held"):
        console.print(f"Held: {_turns_or_tasks(turns['held'], 'pending')}, until the binding is enabled again.")
    step = doc.get("next_step")
    if step:
        console.print(f"Next: `{step['command']}`")


@app.command("set")
def set_(
    ctx: typer.Context,
    principal: PrincipalArg,
    agent: Annotated[str, typer.Option("--agent", help="The agent it runs.", show_default=False, autocompletion=complete_agent)],
    directory: Annotated[Optional[str], typer.Option("--directory", help="Working directory (default: the home).")] = None,
    max_rounds: Annotated[Optional[int], typer.Option("--max-rounds", help="Model-call rounds per task (default: unlimited).")] = None,
    policy: Annotated[Optional[str], typer.Option("--policy", help="mentioned (default): a session message, or a bot's group message, starts a turn only when it mentions the principal (@name) or the bot (an @ of it, or a reply to its message); all: every message does.")] = None,
    max_queue: Annotated[Optional[int], typer.Option("--max-queue", metavar="N", help="How much waiting work (turns, tasks, bot events) is normal for it (default 100); `fw status` flags more. Nothing is ever dropped.")] = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Create or update a binding. A new binding is enabled; updating a disabled one keeps it
    disabled. Policy mentioned is the default, for sessions and for bots alike: a principal
    that serves a bot answers a group message only when the bot is addressed (a private
    message always); give --policy all for a bot that answers every group message."""
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: agent_bind(home, principal, agent, directory, max_rounds, policy, max_queue, by=operator()))
    emit(doc, as_json, lambda c: render_dry_run(c, doc) if dry_run else _render(c, doc))


@app.command("enable")
def enable(ctx: typer.Context, principal: PrincipalArg, as_json: JsonOpt = False) -> None:
    """Enable a binding."""
    from ..runtime.sessions import set_binding_enabled  # lazy: start-up speed

    doc = set_binding_enabled(home_of(ctx), principal, True, by=operator())
    emit(doc, as_json, lambda c: _render(c, doc))


@app.command("disable")
def disable(ctx: typer.Context, principal: PrincipalArg, as_json: JsonOpt = False) -> None:
    """Disable a binding: its agent starts no further managed runs."""
    from ..runtime.sessions import set_binding_enabled  # lazy: start-up speed

    doc = set_binding_enabled(home_of(ctx), principal, False, by=operator())
    emit(doc, as_json, lambda c: _render(c, doc))


@app.command("remove")
def remove(ctx: typer.Context, principal: PrincipalArg, as_json: JsonOpt = False) -> None:
    """Remove a binding (to decommission an agent, or before deleting it)."""
    doc = agent_unbind(home_of(ctx), principal)
    emit(doc, as_json, lambda c: c.print(f"Removed the binding of {principal}."))


def _turns_or_tasks(count: int, state: str) -> str:
    return f"{count} {state} turn or task" if count == 1 else f"{count} {state} turns or tasks"
