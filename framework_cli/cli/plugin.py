"""fw plugin: the plugins installed in fw's Python environment, and which of them serve this home."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from .common import DURATION_HELP, DryRunOpt, complete_plugin, home_of, maybe_dry, parse_duration, render_dry_run
from .output import JsonOpt, emit, read_stdin_text, table

app = typer.Typer(help="List the installed plugins (entry points of group fw.plugins); enable one in this home, with its "
                  "settings, or disable it. Plugin code runs only in a process of its own.")


NameArg = Annotated[str, typer.Argument(help="The plugin's name (its entry point's name).", show_default=False,
                                        autocompletion=complete_plugin)]


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the installed plugins with their version and tools, and whether this home enables
    them (an enabled plugin that is not installed is listed too, with why)."""
    from ..runtime.plugin_admin import plugin_list  # lazy: start-up speed

    doc = plugin_list(home_of(ctx))
    columns = ["name", "version", "enabled", "tools"]
    rows = [[p["name"], p.get("version"), "yes" if p["enabled"] else "no",
             f"ERROR: {p['error']}" if "error" in p else ", ".join(p["tools"]) or "(none)"] for p in doc["plugins"]]
    emit(doc, as_json, lambda c: table(c, "plugins", columns, rows,
                                       "No plugin is installed. A plugin is a Python package with an entry point in group "
                                       "fw.plugins; see docs/plugins.md."))


@app.command("show")
def show(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """Show a plugin: its tools (by the names a run offers them), the settings it declares and
    how this home has it."""
    from ..runtime.plugin_admin import plugin_show  # lazy: start-up speed

    doc = plugin_show(home_of(ctx), name)
    emit(doc, as_json, lambda c: render_plugin(c, doc))


def render_plugin(console: Any, doc: dict[str, Any]) -> None:
    from rich.text import Text

    state = "enabled" if doc["enabled"] else "not enabled"
    console.print(f"Plugin {doc['name']} {doc.get('version') or ''} ({'installed' if doc['installed'] else 'not installed'}, {state} here).")
    if doc.get("error"):
        console.print(Text(f"  {doc['error']}", style="red"))
    if doc["enabled"]:
        console.print(f"  sandbox: {'yes' if doc['sandbox'] else 'no'}; a call may take {doc['timeout_seconds']:g} s")
    for tool in doc["tools"]:
        console.print(f"  tool {tool['model_name']} ({tool['risk']}): {tool['description']}")
    for setting in doc["settings"]:
        shown = "[secret, set]" if setting["secret"] and setting["set"] else repr(setting["value"]) if "value" in setting else "not set"
        default = f", default {setting['default']!r}" if "default" in setting else ""
        console.print(f"  setting {setting['name']}: {shown}{default}" + (f" - {setting['description']}" if setting["description"] else ""))


@app.command("enable")
def enable(
    ctx: typer.Context,
    name: NameArg,
    setting: Annotated[Optional[list[str]], typer.Option("--setting", metavar="NAME=VALUE", help="A setting the plugin declares (repeat).")] = None,
    secret_setting: Annotated[Optional[list[str]], typer.Option("--secret-setting", metavar="NAME", help="A setting the plugin declares secret, its value read from standard input (repeat: one value a line, in order); kept under secrets/.")] = None,
    sandbox: Annotated[Optional[bool], typer.Option("--sandbox/--no-sandbox", help="Run the plugin's process in the sandbox (no network, nothing of this machine but the system and Python).", show_default=False)] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DURATION", help=f"How long one call may take (default 60 s): {DURATION_HELP}.", show_default=False)] = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Enable a plugin in this home, or change its settings. Its tools (plugin__NAME__TOOL) are
    then offered to every agent whose allowed_tools lets them through; an agent without
    allowed_tools gets them all."""
    from ..runtime.plugin_admin import plugin_enable  # lazy: start-up speed

    settings = _pairs(setting or [])
    secret_values = _secret_values(secret_setting or [])
    seconds = parse_duration(timeout, "--timeout") if timeout is not None else None
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: plugin_enable(home, name, settings, secret_values, sandbox=sandbox, timeout=seconds))

    def human(console: Any) -> None:
        if dry_run:
            render_dry_run(console, doc)
            return
        console.print(f"{'Enabled' if doc['changed'] else 'Unchanged:'} plugin {name} in this home. Agents without allowed_tools "
                      f"are offered every tool of it; others, those their allowed_tools name.")
        render_plugin(console, doc)

    emit(doc, as_json, human)


def _pairs(given: list[str]) -> dict[str, str]:
    from ..errors import FwError  # lazy: start-up speed

    pairs: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FwError("usage", f"--setting {item!r} is not NAME=VALUE", "e.g. --setting greeting=Hi")
        pairs[key] = value
    return pairs


def _secret_values(names: list[str]) -> dict[str, str]:
    """The values of secret settings, from standard input: all of it for one, a line each for
    several (white space around each removed)."""
    from ..errors import FwError  # lazy: start-up speed

    if not names:
        return {}
    if len(set(names)) != len(names):
        raise FwError("usage", "a --secret-setting is given twice", "name each secret setting once")
    text = read_stdin_text("the secret settings")
    values = [text.strip()] if len(names) == 1 else [line.strip() for line in text.splitlines() if line.strip()]
    if len(names) == 1 and not values[0]:
        raise FwError("invalid", f"standard input holds no value for --secret-setting {names[0]} (it was empty)",
                      f"pipe the value in: `printf '%s' \"$KEY\" | fw plugin enable NAME --secret-setting {names[0]}`")
    if len(values) != len(names) or not all(values):
        raise FwError("invalid", f"standard input holds {len(values)} value(s) for {len(names)} --secret-setting(s)",
                      "pipe one value a line, in the order of the flags: `printf '%s\\n' \"$KEY\" | fw plugin enable NAME "
                      "--secret-setting KEY`")
    return dict(zip(names, values))


@app.command("disable")
def disable(ctx: typer.Context, name: NameArg, dry_run: DryRunOpt = False, as_json: JsonOpt = False) -> None:
    """Disable a plugin in this home: its file and its secret settings are removed; later runs
    are not offered its tools. Not enabled is no change."""
    from ..runtime.plugin_admin import plugin_disable  # lazy: start-up speed

    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: plugin_disable(home, name))
    if dry_run:
        emit(doc, as_json, lambda c: render_dry_run(c, doc))
        return
    emit(doc, as_json, lambda c: c.print(f"Disabled plugin {name}." if doc["changed"] else f"Unchanged: plugin {name} was not enabled."))
