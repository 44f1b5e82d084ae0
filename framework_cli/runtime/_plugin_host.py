"""The process plugin code runs in, never fw's own: it finds plugins (entry points of group
`fw.plugins`), loads them, and calls their tools, speaking JSON lines with fw.

    python _plugin_host.py --list [NAME...] [--skip NAME...]     list plugins, then exit
    python _plugin_host.py --serve NAME                            serve one plugin's tools

It is run by path with the standard library only (fw is not imported), so that plugin code
sees nothing of fw's. Its standard output carries the protocol only: what a plugin prints goes
to standard error, and its standard input reads nothing.

`--list` writes, for each plugin, `{"loading": NAME}` and then `{"plugin": NAME, "version",
"tools": [...], "settings": {...}}`, `{"plugin": NAME, "error": TEXT}` or, for a name given
that is not installed, `{"plugin": NAME, "missing": true}`; then `{"done": true}`. (A plugin
whose loading kills or hangs the process is the one fw last saw `loading`.)

`--serve` writes `{"ready": true, "version", "tools": [...]}` (or `{"error": TEXT}` and exits),
reads one line `{"run_id", "identity", "agent", "settings"}`, then answers each line
`{"id", "tool", "arguments"}` with `{"id", "result"}` or `{"id", "error": TEXT}` until its
input ends.

A plugin is an object (or a module, or a function returning one) with `tools`: each a mapping
or object with `name`, `description`, `input_schema` (a JSON object schema), `risk` (`read`,
`write` or `dangerous`) and `function(arguments, context)`; and, optionally, `settings`: a
mapping of name to `{"description", "secret": bool, "default"}`. `context` has `run_id`,
`identity`, `agent` and `settings` (the declared defaults, then what the home sets).
"""

import json
import os
import sys
import traceback
import types

GROUP = "fw.plugins"
RISKS = ("read", "write", "dangerous")
MESSAGE_CHARS = 2000


def main(argv):
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # fw's runtime folder is nothing a plugin should import from
    out, lines = _own_streams()
    if argv[:1] == ["--serve"] and len(argv) == 2:
        return _serve(argv[1], out, lines)
    if argv[:1] == ["--list"]:
        names, skip = _names(argv[1:])
        return _list(names, skip, out)
    sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
    return 2


def _own_streams():
    """The protocol's streams, kept apart from what a plugin prints or reads."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    lines = os.fdopen(os.dup(0), "r", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull, encoding="utf-8")
    return out, lines


def _names(words):
    names, skip, into = [], [], None
    for word in words:
        if word == "--skip":
            into = skip
        else:
            (into if into is not None else names).append(word)
            into = None
    return names, set(skip)


def _write(out, doc):
    out.write(json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n")
    out.flush()


def _entry_points():
    """name -> entry point, of every installed plugin (the first of a name wins)."""
    from importlib.metadata import entry_points

    found = {}
    for point in entry_points(group=GROUP):
        found.setdefault(point.name, point)
    return found


def _list(names, skip, out):
    points = _entry_points()
    for name in sorted(names or points):
        if name in skip:
            continue
        if name not in points:
            _write(out, {"plugin": name, "missing": True})
            continue
        _write(out, {"loading": name})
        try:
            plugin = _load(points[name])
            _write(out, {"plugin": name, "version": plugin.version, "tools": plugin.described(), "settings": plugin.settings})
        except BaseException as exc:  # a plugin that fails to load (sys.exit() included) is reported by name, never fatal
            _write(out, {"plugin": name, "error": _message(exc)})
    _write(out, {"done": True})
    return 0


def _serve(name, out, lines):
    point = _entry_points().get(name)
    if point is None:
        _write(out, {"error": f"no plugin named {name!r} is installed"})
        return 0
    try:
        plugin = _load(point)
    except BaseException as exc:
        _write(out, {"error": _message(exc)})
        return 0
    _write(out, {"ready": True, "version": plugin.version, "tools": plugin.described()})
    first = lines.readline()
    if not first:
        return 0
    start = json.loads(first)
    settings = {key: spec.get("default") for key, spec in plugin.settings.items() if spec.get("default") is not None}
    settings.update(start.get("settings") or {})
    context = types.SimpleNamespace(run_id=start.get("run_id"), identity=start.get("identity"), agent=start.get("agent"),
                                    settings=settings, plugin=name)
    for line in lines:
        request = json.loads(line)
        _write(out, _answer(plugin, request, context))
    return 0


def _answer(plugin, request, context):
    tool = plugin.functions.get(request.get("tool"))
    if tool is None:
        return {"id": request.get("id"), "error": f"the plugin has no tool named {request.get('tool')!r}"}
    try:
        result = tool(dict(request.get("arguments") or {}), context)
        json.dumps(result, allow_nan=False)
    except BaseException as exc:  # the tool's failure (sys.exit() included) is its caller's answer
        return {"id": request.get("id"), "error": _message(exc)}
    return {"id": request.get("id"), "result": result}


class _Plugin:
    def __init__(self, obj, version):
        if callable(obj) and _field(obj, "tools") is None:
            obj = obj()  # a factory
        tools = _field(obj, "tools")
        if not isinstance(tools, (list, tuple)):
            raise TypeError("the plugin object has no list of tools (`tools`)")
        self.version = version
        self.tools, self.functions = [], {}
        for index, tool in enumerate(tools):
            entry, function = _tool(tool, index)
            if entry["name"] in self.functions:
                raise ValueError(f"two tools are named {entry['name']!r}")
            self.tools.append(entry)
            self.functions[entry["name"]] = function
        self.settings = _settings(_field(obj, "settings"))

    def described(self):
        return self.tools


def _field(obj, name):
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _tool(tool, index):
    name = _field(tool, "name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool {index} has no name")
    function = _field(tool, "function")
    if not callable(function):
        raise ValueError(f"tool {name!r} has no function")
    schema = _field(tool, "input_schema") or {"type": "object", "properties": {}}
    risk = _field(tool, "risk") or "write"
    if risk not in RISKS:
        raise ValueError(f"tool {name!r}: risk must be one of {', '.join(RISKS)}")
    json.dumps(schema)
    return {"name": name, "description": str(_field(tool, "description") or ""), "input_schema": schema, "risk": risk}, function


def _settings(declared):
    out = {}
    for key, spec in (declared or {}).items():
        spec = spec if isinstance(spec, dict) else {"description": str(spec)}
        entry = {"description": str(spec.get("description") or ""), "secret": bool(spec.get("secret"))}
        if spec.get("default") is not None and not entry["secret"]:
            entry["default"] = spec["default"]
        out[str(key)] = entry
    json.dumps(out)
    return out


def _load(point):
    version = None
    try:
        version = point.dist.version if point.dist is not None else None
    except Exception:
        pass
    return _Plugin(point.load(), version)


def _message(exc):
    """An exception as one line: its type and text, or the line of the plugin that failed."""
    text = " ".join(str(exc).split()) or "".join(traceback.format_exception_only(type(exc), exc)).strip()
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text[:MESSAGE_CHARS]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
