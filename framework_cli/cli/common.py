"""Pieces every command module shares: the kind argument, the home, shell completion."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any

import typer

from ..home.kinds import BUILTIN_GROUPS, KIND_NAMES
from ..home.store import Home


def home_of(ctx: typer.Context) -> Home:
    from ..home import secrets  # lazy: start-up speed

    root = ctx.find_root()
    home = Home.open((root.obj or {}).get("home"))
    secrets.remember_home(home)  # every output of this command is redacted of every stored secret
    return home


def run_gateway(home: Home, run_id: str, sources: Any, on_call: Any) -> Any:
    """The gateway of one run, for an external runner: the engine's `GatewayStarter`. It is a
    network door (serve/), so the CLI hands it to the engine."""
    from ..serve.gateway import run_gateway as serve_run  # lazy: start-up speed

    return serve_run(home, run_id, sources, on_call)


TIMEOUT_HELP = "How long to wait for each model answer (default 60), or for an external runner to finish (default 600)."


# -- shell completion: each callback lists what exists, and never fails --------------------
def _matching(names: Iterable[str], incomplete: str) -> list[str]:
    return sorted(n for n in names if n.startswith(incomplete))


def _home_names(ctx: typer.Context, names_of: Callable[[Home], Iterable[str]]) -> list[str]:
    """What `names_of` finds in the home the command line names; nothing when it cannot be read."""
    try:
        return list(names_of(Home.open(ctx.find_root().params.get("home"))))
    except Exception:
        return []  # completing must never print an error into the user's shell


def complete_kind(incomplete: str) -> list[str]:
    return _matching(KIND_NAMES, incomplete)


def complete_group(incomplete: str) -> list[str]:
    return _matching(BUILTIN_GROUPS, incomplete)


def complete_reference(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..home.kinds import KINDS  # lazy: start-up speed
    from ..home.records import resource_names  # lazy: start-up speed

    kind = ctx.params.get("kind") or ("agent" if ctx.command_path.split()[-2:-1] == ["agent"] else None)
    if kind not in KINDS:
        return []
    return _matching(_home_names(ctx, lambda home: resource_names(home, KINDS[kind])), incomplete)


def complete_agent(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..home.kinds import KINDS  # lazy: start-up speed
    from ..home.records import resource_names  # lazy: start-up speed

    return _matching(_home_names(ctx, lambda home: resource_names(home, KINDS["agent"])), incomplete)


def complete_category(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..home.kinds import KINDS  # lazy: start-up speed

    kinds = [ctx.params["kind"]] if ctx.params.get("kind") in KINDS else list(KINDS)
    if ctx.command_path.split()[1:2] == ["agent"]:
        kinds = ["agent"]
    names = _home_names(ctx, lambda home: {c for k in kinds for c in home.categories(KINDS[k])})
    return _matching(names, incomplete)


def complete_principal(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..domain.identities import principal_names  # lazy: start-up speed

    return _matching(_home_names(ctx, principal_names), incomplete)


KindArg = Annotated[
    str,
    typer.Argument(
        metavar="KIND",
        help="provider, model, prompt, skill, mcp, harness or agent.",
        show_default=False,
        autocompletion=complete_kind,
    ),
]
