"""Pieces every command module shares: the kind argument, the home, shell completion."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any

import typer

from ..home.kinds import BUILTIN_GROUPS, KIND_NAMES
from ..home.store import Home
from .output import verbatim


def home_of(ctx: typer.Context) -> Home:
    from ..home import secrets  # lazy: start-up speed

    root = ctx.find_root()
    home = Home.open((root.obj or {}).get("home"))
    secrets.remember_home(home)  # every output of this command is redacted of every stored secret
    OPENED.append(home)
    return home


OPENED: list[Home] = []  # the homes this invocation opened: what they refreshed of their index is saved at its end


def keep_refreshed_indexes() -> None:
    """At the end of a command: save what its reads refreshed of the index (see
    `Home.keep_refreshed_index`); never an error."""
    while OPENED:
        try:
            OPENED.pop().keep_refreshed_index()
        except Exception:  # only a cache: a home that cannot keep it is read in full next time
            pass


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
    from ..domain.run_records import run_ids  # lazy: start-up speed

    return _matching(_home_names(ctx, run_ids), incomplete)


def _state_names(ctx: typer.Context, names_of: Callable[[Any], Iterable[str]]) -> list[str]:
    """Names from state.db, read only when it exists: completing never creates it."""
    from ..runtime.sessions import store_for  # lazy: start-up speed
    from ..state.store import state_exists  # lazy: start-up speed

    def read(home: Home) -> Iterable[str]:
        if not state_exists(home):
            return []
        with store_for(home) as store:
            return list(names_of(store))

    return _home_names(ctx, read)


def complete_session(ctx: typer.Context, incomplete: str) -> list[str]:
    return _matching(_state_names(ctx, lambda store: [r["name"] for r in store.all("SELECT name FROM sessions")]), incomplete)


def complete_bot(ctx: typer.Context, incomplete: str) -> list[str]:
    from ..domain.bots import bot_names  # lazy: start-up speed

    return _matching(_home_names(ctx, bot_names), incomplete)


def complete_plugin(ctx: typer.Context, incomplete: str) -> list[str]:
    """The plugins enabled in the home (installed ones are not looked for: that runs their code)."""
    from ..domain.plugins import enabled_plugins  # lazy: start-up speed

    return _matching(_home_names(ctx, enabled_plugins), incomplete)


def complete_tool(ctx: typer.Context, incomplete: str) -> list[str]:
    """A run's granted tools with --run, the Manager's otherwise."""
    def names(home: Home) -> Iterable[str]:
        from ..domain.run_records import load_run, resolve_run_id  # lazy: start-up speed
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


# -- --dry-run: the change a write would make, as a unified diff, and nothing written -------
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the change as a unified diff of the file(s) and write nothing.")]


def maybe_dry(home: Home, dry_run: bool, write: Callable[[], dict]) -> dict:
    """`write()`'s result; with --dry-run, what it would be, plus `dry_run`, `diff` and
    `files`, while the home stays exactly as it was."""
    if not dry_run:
        return write()
    with home.dry_run() as changes:
        doc = write()
    return {**doc, "dry_run": True, "diff": diff_of(changes), "files": [_file_change(c) for c in changes]}


def _file_change(change: dict) -> dict:
    entry = {"path": change["path"], "action": change["action"]}
    if change["to"]:
        entry["to"] = change["to"]
    return entry


def _lines(text: str | None) -> list[str]:
    lines = (text or "").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def diff_of(changes: list[dict]) -> str:
    """The changes of a dry run as one unified diff (as `git diff` prints it); a secret file
    is named, never shown."""
    import difflib

    out: list[str] = []
    for change in changes:
        path, action = change["path"], change["action"]
        if action == "make_dir":
            out.append(f"new folder {path}/\n")
        elif action == "move":
            out.append(f"rename {path} => {change['to']}\n")
        elif change["secret"]:
            out.append(f"{path}: would be {'removed' if action == 'remove' else 'written'} (secret values are never shown)\n")
        else:
            before, after = change["before"], change["after"]
            if before == after:
                continue
            old = "/dev/null" if before is None else f"a/{path}"
            new = "/dev/null" if after is None else f"b/{path}"
            out += difflib.unified_diff(_lines(before), _lines(after), old, new)
    return "".join(out)


def render_dry_run(console: object, doc: dict) -> None:
    from rich.text import Text

    diff, state = doc["diff"], doc.get("state_changes") or []
    if diff:
        console.print(Text(verbatim(diff.rstrip("\n"))))  # type: ignore[attr-defined]  # the files' text as it is
    for change in state:  # what would change outside the home's files
        console.print(change[:1].upper() + change[1:] + ".")  # type: ignore[attr-defined]
    if not diff and not state:
        console.print("No change: the home already is as asked.")  # type: ignore[attr-defined]
    console.print(Text("Dry run: nothing was written.", style="dim"))  # type: ignore[attr-defined]
