"""Pieces every command module shares: the kind argument, the home, shell completion."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated

import typer

from ..home.kinds import BUILTIN_GROUPS, KIND_NAMES
from ..home.store import Home


def home_of(ctx: typer.Context) -> Home:
    from ..home import secrets  # lazy: start-up speed

    root = ctx.find_root()
    home = Home.open((root.obj or {}).get("home"))
    secrets.remember_home(home)  # every output of this command is redacted of every stored secret
    return home


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


# -- values of flags: lists and durations, parsed alike everywhere ---------------------------
def listed(values: Iterable[str] | None) -> list[str] | None:
    """A repeated flag's values, each split at commas (`--member a,b` is `--member a --member
    b`); None when the flag was not given, [] for a lone '' (which clears a list)."""
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def refuse_add_and_remove(flag: str, chosen: Iterable[str], removed: Iterable[str]) -> None:
    """`--X A --remove-X A` (or `--add-X A --remove-X A`) asks for two opposite things."""
    from ..errors import FwError  # lazy: start-up speed

    both = [value for value in dict.fromkeys(chosen) if value in set(removed)]
    if both:
        raise FwError("usage", f"{', '.join(both)} is both asked for and removed (--remove-{flag} with --{flag} or --add-{flag})",
                      f"give {both[0]} with one of the two flags")


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_HELP = "90s, 30m, 12h, 7d, 2w; a bare number is seconds"


def parse_duration(text: str, flag: str = "") -> float:
    """`90s`, `30m`, `12h`, `7d`, `2w` (a bare number is seconds) as seconds."""
    from ..errors import FwError  # lazy: start-up speed

    text = text.strip()
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        where = f"{flag} " if flag else ""
        raise FwError("invalid", f"{where}{text!r} is not a duration", f"a number and a unit: {DURATION_HELP}")
    return value * DURATION_UNITS[unit]


def whole_seconds(text: str | None, flag: str) -> int | None:
    """A duration that must come to whole seconds (a lease)."""
    from ..errors import FwError  # lazy: start-up speed

    if text is None:
        return None
    seconds = parse_duration(text, flag)
    if seconds != int(seconds):
        raise FwError("invalid", f"{flag} {text!r} is not a whole number of seconds", "e.g. 90s, 30m or 1h")
    return int(seconds)
