"""Plugin records: `plugins/<name>.yaml`, one for each plugin enabled in this home, with its
settings and the keys `sandbox` and `timeout_seconds`; the settings a plugin declares secret
are kept in `secrets/plugin/<name>.json`. Reading and checking them is the domain's; finding,
loading and running plugins (always in a process of their own) is `runtime/plugins.py`'s.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.kinds import check_name
from ..home.records import load_record
from ..home.store import Home

PLUGINS = "plugins"
PLUGIN_SECRETS = "plugin"  # secrets/plugin/<name>.json: {"settings": {NAME: VALUE}}
DEFAULT_TIMEOUT = 60


def plugin_rel(name: str) -> str:
    return f"{PLUGINS}/{name}.yaml"


def enabled_plugins(home: Home) -> list[str]:
    """The names of the plugins enabled in this home (their files), unread."""
    try:
        files = os.listdir(home.path(PLUGINS))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(f[:-5] for f in files if f.endswith(".yaml") and not f.startswith("."))


def load_plugin(home: Home, name: str) -> dict[str, Any] | None:
    """An enabled plugin's record (settings, sandbox, timeout_seconds), or None when it is not
    enabled; `corrupt` with the path and field."""
    check_name(name, "plugin name")
    if not home.exists(plugin_rel(name)):
        return None
    record = load_record(home, "plugin", name, plugin_rel(name))
    home.keep_refreshed_index()
    return record


def secret_settings(home: Home, name: str) -> dict[str, str]:
    """The secret settings stored for a plugin (read only to hand to its process)."""
    values = secrets.load(home, PLUGIN_SECRETS, name).get("settings")
    return dict(values) if isinstance(values, dict) else {}


def frozen_plugins(home: Home) -> dict[str, dict[str, Any]]:
    """Every enabled plugin's record as a run takes it when it starts: `{"name", "data"}`, or
    `{"name", "error"}` when its file cannot be read (the plugin then offers nothing)."""
    out = {}
    for name in enabled_plugins(home):
        try:
            out[name] = {"name": name, "data": load_plugin(home, name)}
        except FwError as exc:
            out[name] = {"name": name, "error": exc.message}
    return out


def check_plugin_files(home: Home) -> list[dict[str, Any]]:
    """`fw home check`: each plugin file parses and fits (whether the plugin loads is asked of
    its own process: `runtime/plugins.py`)."""
    problems = []
    for name in enabled_plugins(home):
        try:
            load_plugin(home, name)
        except FwError as exc:
            problems.append({"code": "corrupt", "message": exc.message, "path": plugin_rel(name)})
    return problems
