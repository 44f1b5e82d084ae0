"""fw principal: the identities agents run as."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..domain.identities import principal_create, principal_list
from ..home.store import Home
from .common import complete_choice, complete_principal, home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="List, create and delete the identities (principals) that agents run as.")


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List principals and their kind."""
    doc = principal_list(home_of(ctx))
    emit(doc, as_json, lambda c: table(c, "principals", ["name", "kind"], [[p["name"], p["kind"] or "CORRUPT"] for p in doc["principals"]], "No principals yet. Create one with `fw principal create NAME --kind agent`."))


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The identity's name.", show_default=False)],
    kind: Annotated[str, typer.Option("--kind", help="user, agent or manager.", show_default=False, autocompletion=complete_choice("user", "agent", "manager"))],
    as_json: JsonOpt = False,
) -> None:
    """Create an identity. An agent runs as a principal of kind agent once it is bound."""
    home = home_of(ctx)
    doc = principal_create(home, name, kind)
    emit(doc, as_json, lambda c: c.print(f"Created principal {name} (kind {kind}).{_next_step(home, name, kind)}"))


def _next_step(home: Home, name: str, kind: str) -> str:
    """Only an agent identity can be bound; a user or manager has no next step to name."""
    if kind != "agent":
        return ""
    from ..domain.identities import binding_command  # lazy: start-up speed
    from ..home.kinds import KINDS  # lazy: start-up speed
    from ..home.records import resource_names  # lazy: start-up speed

    if not resource_names(home, KINDS["agent"]):
        return " Next: create an agent for it to run, with `fw agent create --help`."
    return f" Next: bind it to an agent: {binding_command(home, name)}."


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The identity's name.", show_default=False, autocompletion=complete_principal)],
    recursive: Annotated[bool, typer.Option("--recursive", help="Also take its session memberships, memory and bots (a plan first).")] = False,
    confirm: Annotated[Optional[str], typer.Option("--confirm", metavar="ITEMS", help="With --recursive: the plan's items, comma-separated, in order.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete an identity. Refused while a binding uses it (remove the binding first), and
    while it is a session member, has memory or has a bot: --recursive shows the plan that
    takes those too, and --confirm carries it out. Its runs still active are ended."""
    from ..runtime.principals import principal_remove  # lazy: start-up speed

    doc = principal_remove(home_of(ctx), name, recursive=recursive, confirm=confirm)

    def human(console: Any) -> None:
        if doc.get("status") == "plan":
            console.print(f"Plan, in this order: {'; '.join(_said(item) for item in doc['plan'])}.")
            console.print("Nothing was deleted. To do exactly this, run:")
            console.print(f"  fw principal delete {name} --recursive --confirm {doc['confirm']}")
        else:  # `deleted` is the confirmed plan, or true when the principal held nothing
            taken = doc["deleted"][:-1] if isinstance(doc.get("deleted"), list) else []
            console.print(f"Deleted principal {name}" + (f": {'; '.join(_said(item, done=True) for item in taken)}." if taken else "."))
            if doc.get("ended_runs"):
                console.print(f"Ended its runs still active: {', '.join(doc['ended_runs'])}.")

    emit(doc, as_json, human)


_WORDS = {  # what a principal delete plan's item does: (to be done, done)
    "session": ("leave session {}", "left session {}"),
    "memory": ("forget its memory", "its memory forgotten"),
    "bot": ("remove bot {}", "bot {} removed"),
    "principal": ("delete principal {}", "principal {} deleted"),
}


def _said(item: str, done: bool = False) -> str:
    """A plan item (`session/s1`) in words: a session is left, not deleted."""
    kind, _, name = item.partition("/")
    words = _WORDS.get(kind)
    return words[done].format(name) if words else item
