"""fw memory: what each principal's runs remembered."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .common import complete_principal, home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="List, read and delete what a principal's runs remembered (framework_memory_* tools).")

PrincipalArg = Annotated[str, typer.Argument(help="The principal whose memory it is.", show_default=False, autocompletion=complete_principal)]
KeyArg = Annotated[str, typer.Argument(help="The memory's key.", show_default=False)]


@app.command("list")
def list_(ctx: typer.Context, principal: PrincipalArg, as_json: JsonOpt = False) -> None:
    """List a principal's memory keys."""
    from ..runtime.sessions import memory_list, require_principal  # lazy: start-up speed

    home = home_of(ctx)
    require_principal(home, principal)
    doc = memory_list(home, principal)
    emit(doc, as_json, lambda c: table(c, f"memory of {principal}", ["key"], [[k] for k in doc["keys"]], f"{principal} remembers nothing yet."))


@app.command("read")
def read(ctx: typer.Context, principal: PrincipalArg, key: KeyArg, as_json: JsonOpt = False) -> None:
    """Show one remembered value."""
    from ..runtime.sessions import memory_read, require_principal  # lazy: start-up speed

    home = home_of(ctx)
    require_principal(home, principal)
    doc = memory_read(home, principal, key)
    emit(doc, as_json, lambda c: c.print(json.dumps(doc["value"], indent=2, ensure_ascii=False)))


@app.command("delete")
def delete(ctx: typer.Context, principal: PrincipalArg, key: KeyArg, as_json: JsonOpt = False) -> None:
    """Forget one remembered value."""
    from ..runtime.sessions import memory_delete, require_principal  # lazy: start-up speed

    home = home_of(ctx)
    require_principal(home, principal)
    doc = memory_delete(home, principal, key)
    emit(doc, as_json, lambda c: c.print(f"Deleted {principal}'s memory {key!r}."))
