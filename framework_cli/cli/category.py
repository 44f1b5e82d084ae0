"""fw category: the sub-folders that group each kind's resources."""

from __future__ import annotations

from typing import Annotated

import typer

from ..domain.resources import category_create, category_delete, category_list
from .common import DryRunOpt, KindArg, complete_category, home_of, maybe_dry, render_dry_run
from .output import JsonOpt, emit, table

app = typer.Typer(help="List, create and delete the categories (sub-folders) of a kind.")

CategoryArg = Annotated[str, typer.Argument(help="The category's name.", show_default=False, autocompletion=complete_category)]


@app.command("list")
def list_(ctx: typer.Context, kind: KindArg, as_json: JsonOpt = False) -> None:
    """List a kind's categories, `default` first."""
    doc = category_list(home_of(ctx), kind)
    emit(doc, as_json, lambda c: table(c, f"{kind} categories", ["category"], [[n] for n in doc["categories"]], "none"))


@app.command("create")
def create(ctx: typer.Context, kind: KindArg, name: CategoryArg, dry_run: DryRunOpt = False, as_json: JsonOpt = False) -> None:
    """Create an empty category."""
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: category_create(home, kind, name))
    emit(doc, as_json, lambda c: render_dry_run(c, doc) if dry_run else c.print(f"Created {kind} category {name!r}."))


@app.command("delete")
def delete(ctx: typer.Context, kind: KindArg, name: CategoryArg, as_json: JsonOpt = False) -> None:
    """Delete an empty category. `default` is never deleted."""
    doc = category_delete(home_of(ctx), kind, name)
    emit(doc, as_json, lambda c: c.print(f"Deleted {kind} category {name!r}."))
