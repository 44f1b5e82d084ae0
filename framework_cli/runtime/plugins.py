"""Plugins: Python distributions that declare an entry point of group `fw.plugins`. Their code,
finding them included, runs only in a process of its own (`_plugin_host.py`), never in fw's:
a plugin that raises, hangs or kills its process cannot take fw, or the run, down.

- `list_plugins` asks a short-lived process which plugins are installed and what they offer
  (tools, settings), one line a plugin; a plugin whose loading kills or hangs that process is
  reported as such, and the others are asked again in a new one.
- `PluginProcess` is one plugin's process for one run: started on the run's first call of the
  plugin's tools, stopped with the run. A call that raises is `unavailable` (`plugin_tool`)
  with its message, redacted; one that takes longer than the plugin's `timeout_seconds` is cut
  (`plugin_timeout`: the process is stopped, the next call starts a new one); one whose process
  dies is `plugin_crashed`.

With `sandbox: true` (its `plugins/NAME.yaml`) a plugin's process runs in the sandbox: the
system and Python read-only, a private /tmp, no network, nothing of the framework home.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from .mcp_documents import RESULT_CAP
from .sandbox import SYSTEM, Box, confine, hidden_paths, is_within
from .supervisor import start_supervised

HOST = str(Path(__file__).with_name("_plugin_host.py"))
LOAD_SECONDS = 10.0  # a plugin gets this long (or its timeout, if shorter) to load when it is listed
KEPT_ENV = ("PATH", "HOME", "LANG", "TERM", "PYTHONPATH")  # PYTHONPATH: where Python finds plugins, as fw's own does
STOP_SECONDS = 2.0
STDERR_KEPT = 4096  # bytes of a plugin process's standard error kept, to say why it ended
_END = object()


class PluginGone(Exception):
    """The plugin's process ended (or could not be written to)."""


class _Link:
    """One plugin host process: fw writes it lines, a thread reads its answers into a queue."""

    def __init__(self, home: Home, args: list[str], *, sandbox: bool, cwd: str | None) -> None:
        command = [sys.executable, HOST, *args]
        if sandbox:
            command = confine(command, plugin_box(home))  # `unavailable` when the sandbox is not there
        env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
        try:
            self.proc = start_supervised(command, cwd=None if sandbox else cwd, env=env)
        except OSError as exc:
            raise FwError("unavailable", f"no process could be started for plugins: {exc.strerror or type(exc).__name__}",
                          "check that fw's Python can be run", reason="plugin_load") from None
        self.answers: queue.Queue[Any] = queue.Queue()
        self.stderr = bytearray()
        threading.Thread(target=self._read, name="fw-plugin-out", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="fw-plugin-err", daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        try:
            for line in stream:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue  # not the protocol's: nothing a plugin writes reaches fw as an answer
                if isinstance(doc, dict):
                    self.answers.put(doc)
        except (OSError, ValueError):
            pass
        self.answers.put(_END)

    def _read_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        try:
            while chunk := stream.read1(65536):  # type: ignore[attr-defined]
                self.stderr += chunk
                del self.stderr[:-STDERR_KEPT]
        except (OSError, ValueError):
            pass

    def send(self, doc: dict[str, Any]) -> None:
        stream = self.proc.stdin
        assert stream is not None
        try:
            stream.write((json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8"))
            stream.flush()
        except (OSError, ValueError):
            raise PluginGone() from None

    def receive(self, seconds: float) -> dict[str, Any] | None:
        """The next answer; None when none comes in time; `PluginGone` when the process ended."""
        try:
            doc = self.answers.get(timeout=max(0.0, seconds))
        except queue.Empty:
            return None
        if doc is _END:
            self.answers.put(_END)  # every later read learns it too
            raise PluginGone()
        return doc

    def why_gone(self) -> str:
        """How the process ended, and the last line it wrote on standard error, redacted."""
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        lines = [line.strip() for line in bytes(self.stderr).decode("utf-8", "replace").splitlines() if line.strip()]
        said = lines[-1][:300] if lines else ""  # its last word (a traceback's last line names the error), never the traceback
        how = f"exit code {code}" if code is not None and code < 128 else f"killed by signal {code - 128}" if code else "it stopped answering"
        return redact(f"{how}{': ' + said if said else ''}")

    def stop(self, *, at_once: bool = False) -> None:
        """End of input first (the host then exits), then the supervisor kills what is left
        (`at_once`: a process that hangs is not waited for)."""
        proc = self.proc
        try:
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            proc.wait(0 if at_once else 0.5)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_SECONDS + 5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass


def plugin_box(home: Home) -> Box:
    """The box of a sandboxed plugin: Python (its installation, its environment and the folders
    it imports from) read-only besides the system; no workspace, no network; the home hidden."""
    folders = python_folders()
    return Box(None, network=False, read_only=tuple(folders), hidden=hidden_paths(home, folders))


def python_folders() -> list[str]:
    """The folders a plugin's Python runs and imports from, outside the system's (which every
    box has), each once, none inside another: the installation and the environment, where
    they import from (site-packages, what its .pth files add, $PYTHONPATH) and the host
    script's folder. Not fw's own first entry of sys.path (its script's folder, or the working
    folder), which a plugin's Python does not import from."""
    wanted: list[str] = []
    cwd = os.getcwd()
    imported = [p for p in sys.path[1:] if p and os.path.abspath(p) != cwd]
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(sys.executable)), os.path.dirname(HOST), *imported,
             *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    for path in paths:
        if not path or not os.path.isdir(path):
            continue
        for shown in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            if not any(is_within(shown, f) for f in SYSTEM):
                wanted.append(shown)
    kept: list[str] = []
    for path in sorted(set(wanted), key=len):
        if not any(is_within(path, folder) for folder in kept):
            kept.append(path)
    return kept


# -- listing -------------------------------------------------------------------------------
def list_plugins(home: Home, names: Iterable[str] | None, *, sandbox: bool = False,
                 load_seconds: dict[str, float] | None = None, skip: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """What each plugin offers, asked of a process of its own: name -> `{"version", "tools",
    "settings"}`, `{"error"}` (it failed to load, or its loading killed or hung the process) or
    `{"missing": True}` (not installed). `names`: these plugins only; None: every installed one
    but those in `skip` (which are not loaded at all)."""
    wanted = None if names is None else list(names)
    skipped = list(skip)
    found: dict[str, dict[str, Any]] = {}
    while True:
        asked = [n for n in wanted if n not in found] if wanted is not None else []
        if wanted is not None and not asked:
            return found
        args = ["--list", *asked, *(w for n in [*found, *skipped] for w in ("--skip", n))]
        link = _Link(home, args, sandbox=sandbox, cwd=str(home.root))
        loading: str | None = None
        try:
            while True:
                seconds = (load_seconds or {}).get(loading or "", LOAD_SECONDS) if loading else LOAD_SECONDS * 3
                doc = link.receive(seconds)
                if doc is None:
                    if loading is None:
                        raise PluginGone()
                    found[loading] = {"error": f"it did not finish loading in {seconds:g} s"}
                    link.stop(at_once=True)
                    break
                if "loading" in doc:
                    loading = str(doc["loading"])
                elif "plugin" in doc:
                    found[str(doc["plugin"])] = _listed(doc)
                    loading = None
                elif doc.get("done"):
                    return found
        except PluginGone:
            why = link.why_gone()
            if loading is None:  # it died before naming a plugin: nothing more can be learnt
                for name in asked:
                    found.setdefault(name, {"error": f"the process that loads plugins ended ({why})"})
                return found
            found[loading] = {"error": f"loading it ended its process ({why})"}
        finally:
            link.stop()


def _listed(doc: dict[str, Any]) -> dict[str, Any]:
    if doc.get("missing"):
        return {"missing": True}
    if "error" in doc:
        return {"error": redact(str(doc["error"]))}
    tools = [t for t in doc.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]
    settings = doc.get("settings") if isinstance(doc.get("settings"), dict) else {}
    return {"version": doc.get("version"), "tools": tools, "settings": settings}


def plugin_tools_now(home: Home, frozen: dict[str, dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """For a run about to start (`frozen`: the enabled plugins' records, as it took them): the
    tools of each plugin that loads, and why each other offers none. Sandboxed plugins are
    listed in a box of their own, at the same time as the others."""
    tools: dict[str, list[dict[str, Any]]] = {}
    unavailable: dict[str, str] = {}
    groups: dict[bool, list[str]] = {False: [], True: []}
    seconds: dict[str, float] = {}
    for name, part in frozen.items():
        if "error" in part:
            unavailable[name] = f"its file cannot be read: {part['error']}"
            continue
        data = part.get("data") or {}
        groups[bool(data.get("sandbox"))].append(name)
        seconds[name] = min(float(data.get("timeout_seconds") or LOAD_SECONDS), LOAD_SECONDS)
    results: dict[bool, dict[str, dict[str, Any]]] = {}

    def ask(boxed: bool) -> None:
        try:
            results[boxed] = list_plugins(home, groups[boxed], sandbox=boxed, load_seconds=seconds)
        except FwError as exc:  # the sandbox is not there
            results[boxed] = {name: {"error": exc.message} for name in groups[boxed]}

    asked = [boxed for boxed in (False, True) if groups[boxed]]
    threads = [threading.Thread(target=ask, args=(boxed,)) for boxed in asked[1:]]
    for thread in threads:
        thread.start()
    if asked:
        ask(asked[0])
    for thread in threads:
        thread.join()
    for listing in results.values():
        for name, found in listing.items():
            if found.get("missing"):
                unavailable[name] = f"plugin {name!r} is enabled but not installed (no entry point {name!r} in group fw.plugins)"
            elif "error" in found:
                unavailable[name] = f"plugin {name!r} fails to load: {found['error']}"
            else:
                tools[name] = found["tools"]
    return tools, unavailable


# -- one plugin's process for one run ----------------------------------------------------------
class PluginProcess:
    """A plugin's process for one run, started on its first call and kept until `close()`.
    Calls through it are one at a time (its host answers in order)."""

    def __init__(self, home: Home, name: str, config: dict[str, Any], context: dict[str, Any], secrets: dict[str, str],
                 cwd: str | None) -> None:
        self.home, self.name, self.config = home, name, config
        self.context, self.secrets, self.cwd = context, secrets, cwd
        self.timeout = float(config.get("timeout_seconds") or 60)
        self._link: _Link | None = None
        self._lock = threading.Lock()
        self._calls = 0
        self._closed = False

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            link = self._link or self._start()
            self._calls += 1
            number = self._calls
            deadline = time.monotonic() + self.timeout
            try:
                link.send({"id": number, "tool": tool, "arguments": args})
                while True:
                    doc = link.receive(deadline - time.monotonic())
                    if doc is None:
                        self._drop(at_once=True)
                        raise FwError("unavailable", f"plugin tool {tool!r} of plugin {self.name!r} did not answer in {self.timeout:g} s; "
                                      "it was stopped", f"raise its timeout (`fw plugin enable {self.name} --timeout SECONDS`), "
                                      "or check the plugin", reason="plugin_timeout")
                    if doc.get("id") == number:
                        break
            except PluginGone:
                why = link.why_gone()
                self._drop()
                raise self._crashed(why) from None
        if "error" in doc:
            raise FwError("unavailable", f"plugin tool {tool!r} of plugin {self.name!r} failed: {redact(str(doc['error']))}",
                          "the tool raised an error; check its arguments, or the plugin", reason="plugin_tool")
        return result_document(self.name, tool, doc.get("result"))

    def _start(self) -> _Link:
        link = _Link(self.home, ["--serve", self.name], sandbox=bool(self.config.get("sandbox")), cwd=self.cwd)
        try:
            ready = link.receive(self.timeout)
        except PluginGone:
            why = link.why_gone()
            link.stop()
            raise self._crashed(why) from None
        if ready is None or "error" in ready or not ready.get("ready"):
            link.stop(at_once=ready is None)
            if ready is None:
                raise FwError("unavailable", f"plugin {self.name!r} did not load in {self.timeout:g} s", "check the plugin",
                              reason="plugin_timeout")
            raise FwError("unavailable", f"plugin {self.name!r} cannot be loaded: {redact(str(ready.get('error')))}",
                          f"see `fw plugin show {self.name}`", reason="plugin_load")
        settings = {**(self.config.get("settings") or {}), **self.secrets}
        try:
            link.send({**self.context, "settings": settings})
        except PluginGone:
            why = link.why_gone()
            link.stop()
            raise self._crashed(why) from None
        self._link = link
        if self._closed:  # the run ended while the process started
            self._drop(at_once=True)
            raise self._crashed("the run ended while it started")
        return link

    def _crashed(self, why: str) -> FwError:
        return FwError("unavailable", f"the process of plugin {self.name!r} ended during the call ({why})",
                       "the run goes on without this call; the next call starts the plugin again; check the plugin",
                       reason="plugin_crashed")

    def _drop(self, *, at_once: bool = False) -> None:
        if self._link is not None:
            self._link.stop(at_once=at_once)
            self._link = None

    def close(self) -> None:
        """Stop the process now, even while a call waits for it (in another thread: that call
        then ends as `plugin_crashed`); a process started after this is stopped at once."""
        self._closed = True
        link, self._link = self._link, None
        if link is not None:
            link.stop()


def result_document(plugin: str, tool: str, value: Any) -> dict[str, Any]:
    """A plugin tool's answer as a model reads it: its result redacted, cut at 64 KiB (then it is
    the start of its JSON text, `truncated`)."""
    text = redact(json.dumps(value, ensure_ascii=False))
    data = text.encode("utf-8")
    if len(data) > RESULT_CAP:
        return {"plugin": plugin, "tool": tool, "result": data[:RESULT_CAP].decode("utf-8", "ignore"), "truncated": True}
    try:
        value = json.loads(text)
    except ValueError:  # a key redacted out of a number: the text, then
        value = text
    return {"plugin": plugin, "tool": tool, "result": value, "truncated": False}
