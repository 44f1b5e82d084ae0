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

app = typer.Typer(help="Which home is in use and why; create a framework home, or check every file of one.")

ORIGINS = {"--home": "given with --home", "FW_HOME": "from $FW_HOME", "default": "the default (no --home, no $FW_HOME)"}


@app.callback(invoke_without_command=True)
def status(ctx: typer.Context) -> None:
    """Alone, `fw home` says which home is in use and why (--home, $FW_HOME or the default),
    what it holds, and `fw home check`'s verdict (exit 0 either way; `fw home check` exits 4
    on problems)."""
    if ctx.invoked_subcommand is not None:
        return
    from ..errors import FwError  # lazy: start-up speed
    from ..home.store import home_origin  # lazy: start-up speed

    origin = home_origin((ctx.find_root().obj or {}).get("home"))
    try:
        home = home_of(ctx)
    except FwError as exc:
        raise FwError(exc.code, f"{exc.message} ({ORIGINS[origin]})", exc.hint, origin=origin, **exc.extra) from None
    from ..domain.bots import bot_names  # lazy: start-up speed
    from ..domain.identities import BINDINGS, principal_names  # lazy: start-up speed

    doc = check_home(home, _more_checks())
    identities = {"principals": len(principal_names(home)), "bindings": len(principal_names(home, BINDINGS)),
                  "bots": len(bot_names(home))}
    out = {"home": str(home.root.resolve()), "origin": origin, "ok": doc["ok"], "counts": doc["counts"],
           "identities": identities, "problems": len(doc["problems"]), "warnings": len(doc["warnings"])}

    def human(console: Any) -> None:
        from ..home.kinds import KINDS  # lazy: start-up speed

        console.print(f"Home: {out['home']} ({ORIGINS[origin]})")
        counted = ", ".join(f"{n} {k if n == 1 else KINDS[k].folder}" for k, n in out["counts"].items() if k in KINDS)
        console.print(f"Holds: {counted or 'nothing yet'}")
        console.print("Runs as: " + ", ".join(f"{plural(n, what)}" for what, n in
                                              (("principal", identities["principals"]), ("binding", identities["bindings"]),
                                               ("bot", identities["bots"]))))
        if out["ok"]:
            warned = f" ({plural(out['warnings'], 'warning')})" if out["warnings"] else ""
            console.print(f"Check: clean{warned}.")
        else:
            console.print(f"Check: {plural(out['problems'], 'problem')}; see them with `fw home check`.")

    emit(out, False, human)


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


def _more_checks() -> tuple[Any, ...]:
    """The checks of the floors above the domain's: whether each enabled plugin is installed
    and loads (asked of a process of its own; nothing is started when none is enabled)."""
    from ..runtime.plugin_admin import plugin_warnings  # lazy: start-up speed

    return (plugin_warnings,)


@app.command("check")
def check(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Read every file; report corrupt files (path and field or line) and dangling references.

    Exits 0 when the home is clean, 4 when any problem was found."""
    home = home_of(ctx)
    if sys.stderr.isatty() and not json_wanted(as_json):
        from rich.console import Console

        with Console(stderr=True).status("Reading every file of the home…"):
            doc = check_home(home, _more_checks())
    else:
        doc = check_home(home, _more_checks())

    def human(console: Any) -> None:
        from rich.text import Text

        for problem in doc["problems"]:
            console.print(Text.assemble((problem["code"], "red"), " ", problem["message"]))
        for warning in doc["warnings"]:
            console.print(Text.assemble(("warning", "yellow"), " ", warning["message"]))
        from ..home.kinds import KINDS  # lazy: start-up speed

        counted = ", ".join(f"{n} {k if n == 1 else KINDS[k].folder}" for k, n in doc["counts"].items())
        if doc["ok"] and not doc["warnings"]:
            console.print(f"The home at {doc['home']} is clean ({counted}).")
        elif doc["ok"]:
            console.print(f"The home at {doc['home']} has no problem ({counted}), and {plural(len(doc['warnings']), 'warning')} above; "
                          "`--json` gives each one's hint.")
        else:
            them = "it" if len(doc["problems"]) == 1 else "them"
            console.print(f"{plural(len(doc['problems']), 'problem')} in {doc['home']}. Fix {them} by hand, or a resource's file with "
                          "`fw resource edit KIND NAME`; `--json` gives each one's hint.")

    emit(doc, as_json, human)
    if not doc["ok"]:
        raise typer.Exit(EXIT_CODES["corrupt"])
