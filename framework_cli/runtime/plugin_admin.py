"""The operator's plugin jobs (`fw plugin list | show | enable | disable`) and `fw home check`'s
word on them. What a plugin offers is always asked of a process of its own (`plugins.py`);
what a home makes of it is `plugins/<name>.yaml` and, for the settings it declares secret,
`secrets/plugin/<name>.json`.

Enabling a plugin offers its tools to every agent of the home whose `allowed_tools` lets them
through, and an agent without `allowed_tools` lets every one through.
"""

from __future__ import annotations

from typing import Any

from ..domain.plugins import DEFAULT_TIMEOUT, PLUGIN_SECRETS, enabled_plugins, load_plugin, plugin_rel, secret_settings
from ..domain.projection import PLUGIN_PREFIX
from ..errors import FwError
from ..home import secrets
from ..home.kinds import check_name
from ..home.records import edit_record, refuse_secret_values
from ..home.store import Home
from ..suggest import did_you_mean, hint_with
from .plugins import list_plugins

INSTALL_HINT = "install it into fw's Python environment (`pip install PACKAGE`), then see `fw plugin list`"


def plugin_list(home: Home) -> dict[str, Any]:
    """Every installed plugin (name, version, tools, enabled here) and every enabled one that is
    not installed. A plugin enabled with `sandbox: true` is looked at in the sandbox."""
    enabled = {name: _config_or_none(home, name) for name in enabled_plugins(home)}
    boxed = [name for name, config in enabled.items() if config and config.get("sandbox")]
    found = _listing(home, None, skip=boxed)  # those are loaded in the sandbox only
    if boxed:
        found.update(_listing(home, boxed, sandbox=True))
    names = sorted(set(found) | set(enabled))
    items = []
    for name in names:
        listed = found.get(name, {"missing": True})
        item: dict[str, Any] = {"name": name, "version": listed.get("version"), "tools": [t["name"] for t in listed.get("tools") or []],
                                "enabled": name in enabled}
        if name in enabled and enabled[name] is not None:
            item["sandbox"] = bool(enabled[name].get("sandbox"))
        problem = _problem(name, listed)
        if problem:
            item["error"] = problem
        items.append(item)
    return {"plugins": items}


def plugin_show(home: Home, name: str) -> dict[str, Any]:
    """One plugin: its version, its tools (with their model-side names and schemas), the
    settings it declares, and how this home has it (enabled, settings, sandbox, timeout)."""
    check_name(name, "plugin name")
    config = load_plugin(home, name)
    listed = _listing(home, [name], sandbox=bool(config and config.get("sandbox"))).get(name, {"missing": True})
    if config is None and listed.get("missing"):
        raise _not_installed(home, name)
    return _shown(home, name, config, listed)


def _shown(home: Home, name: str, config: dict[str, Any] | None, listed: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "version": listed.get("version"), "installed": not listed.get("missing"),
                           "enabled": config is not None}
    doc["tools"] = [{"name": t["name"], "model_name": f"{PLUGIN_PREFIX}{name}__{t['name']}", "description": t.get("description", ""),
                     "risk": t.get("risk", "write"), "input_schema": t.get("input_schema")} for t in listed.get("tools") or []]
    declared = listed.get("settings") or {}
    stored = _stored_secret_names(home, name) if config is not None else set()
    given = (config or {}).get("settings") or {}
    settings = []
    for key in sorted(set(declared) | set(given) | stored):
        spec = declared.get(key) or {}
        entry: dict[str, Any] = {"name": key, "description": spec.get("description", ""), "secret": bool(spec.get("secret")),
                                 "declared": key in declared}
        if "default" in spec:
            entry["default"] = spec["default"]
        if key in given:
            entry["value"] = given[key]
        entry["set"] = key in given or key in stored
        settings.append(entry)
    doc["settings"] = settings
    if config is not None:
        seconds = float(config.get("timeout_seconds", DEFAULT_TIMEOUT))
        doc.update(sandbox=bool(config.get("sandbox")), timeout_seconds=int(seconds) if seconds.is_integer() else seconds)
    problem = _problem(name, listed)
    if problem:
        doc["error"] = problem
    return doc


def plugin_enable(home: Home, name: str, settings: dict[str, str] | None = None, secret_values: dict[str, str] | None = None,
                  *, sandbox: bool | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Enable a plugin here (or change how it is enabled): `plugins/<name>.yaml` with its
    settings, `sandbox` and `timeout_seconds`; the settings it declares secret in
    `secrets/plugin/<name>.json`. The plugin must be installed and load (in its own process,
    in the sandbox when it is to run there); a refusal writes nothing."""
    from ..home.models import validate  # lazy: start-up speed

    check_name(name, "plugin name")
    settings, secret_values = dict(settings or {}), dict(secret_values or {})
    config = load_plugin(home, name)
    boxed = sandbox if sandbox is not None else bool(config and config.get("sandbox"))
    listed = _listing(home, [name], sandbox=boxed).get(name, {"missing": True})
    if listed.get("missing"):
        raise _not_installed(home, name)
    if "error" in listed:
        raise FwError("unavailable", f"plugin {name!r} fails to load: {listed['error']}",
                      f"fix or reinstall it, then try again (`fw plugin show {name}`)", reason="plugin_load")
    _check_settings(name, listed.get("settings") or {}, settings, secret_values)
    patch: dict[str, Any] = {"settings": settings} if settings else {}
    if config is None:
        patch = {"settings": settings, "sandbox": bool(sandbox), "timeout_seconds": DEFAULT_TIMEOUT}
    elif sandbox is not None:
        patch["sandbox"] = sandbox
    if timeout is not None:
        patch["timeout_seconds"] = int(timeout) if float(timeout).is_integer() else timeout
    merged = {**(config or {}), **patch, "settings": {**((config or {}).get("settings") or {}), **settings}}
    validate("plugin", merged, plugin_rel(name))  # before anything is written
    secrets.remember(secret_values)  # a plain setting that holds one of them is refused too
    refuse_secret_values(home, merged, None)
    with home.locked():
        if secret_values:
            secrets.save(home, PLUGIN_SECRETS, name, {"settings": {**secret_settings(home, name), **secret_values}})
        before = home.read_text(plugin_rel(name))
        edit_record(home, "plugin", plugin_rel(name), patch)
        changed = bool(secret_values) or home.read_text(plugin_rel(name)) != before
    return {**_shown(home, name, load_plugin(home, name), listed), "changed": changed}


def _check_settings(name: str, declared: dict[str, Any], settings: dict[str, str], secret_values: dict[str, str]) -> None:
    """Only settings the plugin declares; a secret one only from standard input, a plain one
    only as `--setting`."""
    for key, secret in [*((k, False) for k in settings), *((k, True) for k in secret_values)]:
        flag = "--secret-setting" if secret else "--setting"
        if key not in declared:
            suggestion = did_you_mean(key, declared)
            known = ", ".join(sorted(declared)) or "none"
            raise FwError("invalid", f"plugin {name!r} declares no setting {key!r} ({flag})",
                          hint_with(suggestion, f"its settings: {known} (see `fw plugin show {name}`)"), field=f"settings.{key}",
                          **suggestion)
        if bool(declared[key].get("secret")) != secret:
            fix = (f"give it with --secret-setting {key} (its value is read from standard input)" if not secret
                   else f"give it with --setting {key}=VALUE")
            raise FwError("invalid", f"setting {key!r} of plugin {name!r} is {'not ' if not declared[key].get('secret') else ''}secret",
                          fix, field=f"settings.{key}")


def plugin_disable(home: Home, name: str) -> dict[str, Any]:
    """Stop offering a plugin here: its file and its secret settings are removed (the values
    stay known, so that they are still redacted). A plugin that is not enabled is no change."""
    check_name(name, "plugin name")
    with home.locked():
        enabled, stored = home.exists(plugin_rel(name)), secrets.has(home, PLUGIN_SECRETS, name)
        if enabled:
            home.remove(plugin_rel(name))
        if stored:
            secrets.save(home, PLUGIN_SECRETS, name, {})  # removed, and its values kept known (retired): never shown later
    return {"name": name, "enabled": False, "changed": enabled or stored}


def plugin_warnings(home: Home) -> list[dict[str, Any]]:
    """`fw home check`: each enabled plugin that is not installed, or fails to load."""
    configs = {name: _config_or_none(home, name) for name in enabled_plugins(home)}
    readable = {name: config for name, config in configs.items() if config is not None}
    found: dict[str, dict[str, Any]] = {}
    for boxed in (False, True):
        names = [n for n, config in readable.items() if bool(config.get("sandbox")) == boxed]
        if names:
            found.update(_listing(home, names, sandbox=boxed))
    warnings = []
    for name in readable:
        problem = _problem(name, found.get(name, {"missing": True}))
        if problem:
            warnings.append({"code": "plugin_unavailable", "path": plugin_rel(name), "message": problem,
                             "hint": f"install it again, or disable it: `fw plugin disable {name}`"})
    return warnings


def _listing(home: Home, names: list[str] | None, *, sandbox: bool = False, skip: list[str] = ()) -> dict[str, dict[str, Any]]:
    """What the plugins offer, asked of their own process; a sandbox that is not there makes
    every plugin to be looked at in it an error, not the whole command."""
    try:
        return list_plugins(home, names, sandbox=sandbox, skip=skip)
    except FwError as exc:
        if names is None:
            raise
        return {name: {"error": exc.message} for name in names}


def _problem(name: str, listed: dict[str, Any]) -> str | None:
    if listed.get("missing"):
        return f"plugin {name!r} is enabled but not installed (no entry point {name!r} in group fw.plugins)"
    if "error" in listed:
        return f"plugin {name!r} fails to load: {listed['error']}"
    return None


def _config_or_none(home: Home, name: str) -> dict[str, Any] | None:
    try:
        return load_plugin(home, name)
    except FwError:
        return None  # a damaged file: `fw home check` reports it as corrupt


def _stored_secret_names(home: Home, name: str) -> set[str]:
    try:
        return set(secret_settings(home, name))
    except FwError:
        return set()


def _not_installed(home: Home, name: str) -> FwError:
    installed = [n for n in _listing(home, None) if n]
    suggestion = did_you_mean(name, installed)
    return FwError("not_found", f"no plugin named {name!r} is installed", hint_with(suggestion, INSTALL_HINT), **suggestion)
