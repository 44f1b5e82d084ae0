"""fw home: create and check a framework home."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Annotated, Any, Optional

import typer

from ..domain.check import check_home
from ..errors import EXIT_CODES
from ..home.layout import init_home
from ..suggest import plural
from .common import home_of
from .output import JsonOpt, emit, json_wanted

app = typer.Typer(help="Create a framework home, or check every file of one.")


@app.command("init")
def init(
    ctx: typer.Context,
    path: Annotated[
        Optional[str],
        typer.Argument(help="Where to create it (default: --home, $FW_HOME, then ~/.fw).", show_default=False),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a home: every kind's folder with its `default` category, and the default prompt.

    Running it again on a home only adds what is missing; it never overwrites a file."""
    doc = init_home(path or (ctx.find_root().obj or {}).get("home"))

    def human(console: Any) -> None:
        verb = "Created" if doc["initialized"] else "Checked"
        console.print(f"{verb} the framework home at {doc['home']}")
        for rel in doc["created"]:
            console.print(f"  + {rel}")
        console.print(f"Next: add a provider, with its key in an environment variable:\n  {first_provider_command(doc['home'])}")

    emit(doc, as_json, human)


def first_provider_command(home: str) -> str:
    """A whole command that works as printed: the key stays in the variable, never in a file."""
    data = json.dumps({"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY"})
    return shlex.join(["fw", "--home", home, "resource", "write", "provider", "openai", "--create", "--data", data])


@app.command("check")
def check(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Read every file; report corrupt files (path and field or line) and dangling references.

    Exits 0 when the home is clean, 4 when any problem was found."""
    home = home_of(ctx)
    if sys.stderr.isatty() and not json_wanted(as_json):
        from rich.console import Console

        with Console(stderr=True).status("Reading every file of the home…"):
            doc = check_home(home)
    else:
        doc = check_home(home)

    def human(console: Any) -> None:
        from rich.text import Text

        for problem in doc["problems"]:
            console.print(Text.assemble((problem["code"], "red"), " ", problem["message"]))
        for warning in doc["warnings"]:
            console.print(Text.assemble(("warning", "yellow"), " ", warning["message"]))
        from ..home.kinds import KINDS  # lazy: start-up speed

        counted = ", ".join(f"{n} {k if n == 1 else KINDS[k].folder}" for k, n in doc["counts"].items())
        if doc["ok"]:
            console.print(f"The home at {doc['home']} is clean ({counted}).")
        else:
            console.print(f"{plural(len(doc['problems']), 'problem')} in {doc['home']}. Fix them by hand or with `fw resource write`.")

    emit(doc, as_json, human)
    if not doc["ok"]:
        raise typer.Exit(EXIT_CODES["corrupt"])
