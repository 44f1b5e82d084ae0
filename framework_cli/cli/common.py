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


def _given(ctx: typer.Context, name: str, position: int = 0) -> str | None:
    """A parameter typed before the word being completed. While completing an option's
    value click may leave the arguments unparsed, in `ctx.args`: take it from there."""
    value = ctx.params.get(name)
    if value is None and len(ctx.args) > position:
        value = ctx.args[position]
    return value if isinstance(value, str) else None


def complete_reference(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..home.kinds import KINDS  # lazy: start-up speed
    from ..home.records import resource_names  # lazy: start-up speed

    kind = _given(ctx, "kind") or ("agent" if ctx.command_path.split()[-2:-1] == ["agent"] else None)
    if kind not in KINDS:
        return []
    return _matching(_home_names(ctx, lambda home: resource_names(home, KINDS[kind])), incomplete)


def complete_agent(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..home.kinds import KINDS  # lazy: start-up speed
    from ..home.records import resource_names  # lazy: start-up speed

    return _matching(_home_names(ctx, lambda home: resource_names(home, KINDS["agent"])), incomplete)


def complete_category(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..home.kinds import KINDS  # lazy: start-up speed

    kind = _given(ctx, "kind")
    kinds = [kind] if kind in KINDS else list(KINDS)
    if ctx.command_path.split()[1:2] == ["agent"]:
        kinds = ["agent"]
    names = _home_names(ctx, lambda home: {c for k in kinds for c in home.categories(KINDS[k])})
    return _matching(names, incomplete)


def complete_principal(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..domain.identities import principal_names  # lazy: start-up speed

    return _matching(_home_names(ctx, principal_names), incomplete)


def complete_resource_of(kind: str) -> Callable[[typer.Context, str], list[str]]:
    """Completion of the names of one kind (`--model`, `--prompt`, `--skill` ...)."""
    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        from ..home.kinds import KINDS  # lazy: start-up speed
        from ..home.records import resource_names  # lazy: start-up speed

        return _matching(_home_names(ctx, lambda home: resource_names(home, KINDS[kind])), incomplete)

    return complete


def complete_choice(*choices: str) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        return _matching(choices, incomplete)

    return complete


def complete_run(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..domain.runs import run_ids  # lazy: start-up speed

    return _matching(_home_names(ctx, run_ids), incomplete)


def _state_names(ctx: typer.Context, names_of: Callable[[Any], Iterable[str]]) -> list[str]:
    """Names from state.db, read only when it exists: completing never creates it."""
    from ..runtime.sessions import store_for  # lazy: start-up speed

    def read(home: Home) -> Iterable[str]:
        if not (home.root / "state.db").exists():
            return []
        with store_for(home) as store:
            return list(names_of(store))

    return _home_names(ctx, read)


def complete_session(ctx: typer.Context, incomplete: str) -> list[str]:
    return _matching(_state_names(ctx, lambda store: [r["name"] for r in store.all("SELECT name FROM sessions")]), incomplete)


def complete_bot(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..domain.bots import bot_names  # lazy: start-up speed

    return _matching(_home_names(ctx, bot_names), incomplete)


def complete_tool(ctx: typer.Context, incomplete: str) -> list[str]:
    """A run's granted tools with --run, the Manager's otherwise."""
    def names(home: Home) -> Iterable[str]:
        from ..domain.runs import load_run, resolve_run_id  # lazy: start-up speed
        from ..tools.service import manager_tools  # lazy: start-up speed

        run = ctx.params.get("run")
        if run:
            return load_run(home, resolve_run_id(home, run))["tools"]
        return [t.name for t in manager_tools()]

    return _matching(_home_names(ctx, names), incomplete)


def _mounted(ctx: typer.Context) -> list[str]:
    from ..domain.resources import resource_read  # lazy: start-up speed

    name = _given(ctx, "name")
    if not name:
        return []
    return _home_names(ctx, lambda home: resource_read(home, "agent", name)["data"].get("builtin_tools") or [])


def complete_mounted_group(ctx: typer.Context, incomplete: str) -> list[str]:
    """`--remove-builtin-tool`: only the groups the agent mounts."""
    return _matching(_mounted(ctx), incomplete)


def complete_unmounted_group(ctx: typer.Context, incomplete: str) -> list[str]:
    """`--add-builtin-tool`: only the groups the agent does not mount yet."""
    mounted = set(_mounted(ctx))
    return _matching([g for g in BUILTIN_GROUPS if g not in mounted], incomplete)


KindArg = Annotated[
    str,
    typer.Argument(
        metavar="KIND",
        help="provider, model, prompt, skill, mcp, harness or agent.",
        show_default=False,
        autocompletion=complete_kind,
    ),
]
