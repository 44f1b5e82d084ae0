"""The tool sources of a run besides the built-in groups: its MCP servers, the home's
plugins and its skills (the sandbox tools are a group module of their own, `sandbox.py`).

Sources only supply and execute; the tool service decides (projection, authorization,
validation, audit). A run's MCP servers are started when it starts, to list their tools,
and again whenever a front door needs to call one: `RunSources` keeps each server it started
until it is closed, so a model loop or `fw mcp serve --run` reuses one connection, and a
one-off `fw tool call` starts the one server it needs and stops it after the call. A plugin's
process is started on the run's first call of its tools, and kept as long as a server is.
"""

from __future__ import annotations

import threading
from typing import Any

from ..domain.plugins import secret_settings
from ..domain.runs import frozen_part
from ..domain.tool_types import long_work
from ..errors import FwError
from ..home import secrets
from ..home.kinds import KINDS
from ..home.records import read_definition
from ..home.store import Home
from ..runtime.mcp_client import McpConnections, check_hint
from ..runtime.mcp_documents import capped
from ..runtime.mcp_links import STARTUP_SECONDS, STOP_GRACE, TIMEOUT_SECONDS, ServerSpec
from ..runtime.plugins import PluginProcess


def server_spec(home: Home, name: str, cwd: str | None, frozen: dict[str, Any]) -> Any:
    """How to reach one MCP server: its definition as the run froze it (`frozen`, a part of
    the run's snapshot), with its env and headers, which are secret and read now."""

    if "error" in frozen:
        raise FwError("invalid", frozen["error"], f"fix the mcp (`fw resource read mcp {name}`), then start a new run")
    plain, env, headers = frozen["data"], {}, {}
    try:
        _, now, _ = read_definition(home, KINDS["mcp"], name)  # through the index: unchanged, it is not parsed again
        env, headers = dict(now.get("env") or {}), dict(now.get("headers") or {})
    except FwError:
        pass  # removed or damaged since the run started: it still has what it was started with
    stored = secrets.load(home, "mcp", name)
    return ServerSpec(
        name=name,
        transport=plain["transport"],
        command=plain.get("command"),
        args=list(plain.get("args") or []),
        env={**env, **(stored.get("env") or {})},
        url=plain.get("url"),
        headers={**headers, **(stored.get("headers") or {})},
        cwd=cwd if cwd and _is_dir(cwd) else None,
        timeout_seconds=plain.get("timeout_seconds") or TIMEOUT_SECONDS,
        startup_seconds=plain.get("startup_seconds") or STARTUP_SECONDS,
        max_seconds=plain.get("max_seconds"),
    )


def _is_dir(path: str) -> bool:
    import os

    return os.path.isdir(path)


def skill_description(frozen: dict[str, Any]) -> str | None:
    """A frozen skill's description, or None when the skill could not be read (missing or corrupt)."""
    return None if "error" in frozen else frozen["data"].get("description", "")


def skill_text(home: Home, run: dict[str, Any], name: str) -> dict[str, Any]:
    """A skill tool's answer: the skill's text, as the run froze it."""

    part = frozen_part(home, run, "skills", name)
    if "error" in part:
        raise FwError("unavailable", f"skill {name!r} cannot be read: {part['error']}", "fix the skill, then start a new run",
                      reason="skill")
    return {"skill": name, "text": part.get("body") or ""}


class RunSources:
    """The MCP connections one caller of a run holds, opened as they are needed. Several
    threads may call through it at once (`fw mcp serve` answers calls concurrently).
    `stop_grace`: how long each stdio server it starts gets to exit once told."""

    def __init__(self, home: Home, run: dict[str, Any] | None, connections: Any = None, *,
                 stop_grace: float = STOP_GRACE) -> None:
        self.home = home
        self.run = run
        self.directory = run.get("directory") if run else None
        self.stop_grace = stop_grace
        self._open: list[Any] = [connections] if connections is not None else []
        self._plugins: dict[str, PluginProcess] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> RunSources:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def holds_processes(self) -> bool:
        """Whether closing stops processes (MCP servers, plugins): that may take seconds."""
        with self._lock:
            return bool(self._open or self._plugins)

    def close(self) -> None:
        with self._lock:
            while self._open:
                self._open.pop().__exit__(None, None, None)
            while self._plugins:
                self._plugins.popitem()[1].close()

    def call_plugin(self, plugin: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call one plugin tool in the plugin's process for this run (started now if need be)."""
        with self._lock:
            process = self._plugins.get(plugin)
            if process is None:
                process = self._plugins[plugin] = self._plugin_process(plugin)
        return process.call(tool, args)

    def _plugin_process(self, plugin: str) -> PluginProcess:
        run = self.run or {}
        part = frozen_part(self.home, run, "plugins", plugin)
        if "error" in part:
            raise FwError("unavailable", f"plugin {plugin!r} cannot be used: {part['error']}",
                          f"see `fw plugin show {plugin}`, then start a new run", reason="plugin_load")
        try:
            stored = secret_settings(self.home, plugin)  # read now: secret values are never in a run record
        except FwError as exc:
            raise FwError("unavailable", f"plugin {plugin!r} cannot be used: {exc.message}", exc.hint, reason="plugin_load") from None
        context = {"run_id": run.get("run_id"), "identity": run.get("identity"), "agent": run.get("agent")}
        cwd = self.directory if self.directory and _is_dir(self.directory) else None
        return PluginProcess(self.home, plugin, part.get("data") or {}, context, stored, cwd)

    def call_mcp(self, server: str, tool: str, args: dict[str, Any], watch: Any = None) -> dict[str, Any]:
        """Call one MCP tool: its result cut for the model (`truncated`); a result the server
        marks `isError` is `unavailable` (reason `mcp_tool`) with the server's text. `watch` (a
        CallWatch) hears its progress, may cancel it, and may take its binary content's bytes."""
        return self._checked_result(server, tool, self._connection(server).call(server, tool, args, watch))

    async def acall_mcp(self, server: str, tool: str, args: dict[str, Any], watch: Any = None,
                        run_sync: Any = None) -> dict[str, Any]:
        """`call_mcp` from an event loop: the server is started (if it is not yet) on the
        engine's threads for long work (`run_sync.blocking`: a start may take a minute), and
        the call awaited without holding a thread."""
        import asyncio

        run_sync = run_sync or asyncio.to_thread
        connection = await long_work(run_sync)(self._connection, server)
        return self._checked_result(server, tool, await connection.acall(server, tool, args, watch))

    def _checked_result(self, server: str, tool: str, result: dict[str, Any]) -> dict[str, Any]:
        doc = capped(result)
        if doc["is_error"]:
            text = " ".join(item for item in doc["content"] if isinstance(item, str)).strip() or "no message"
            raise FwError("unavailable", f"MCP tool {tool!r} of server {server!r} failed: {text}",
                          "the tool reported an error; check its arguments, or the server", reason="mcp_tool",
                          **({"truncated": True} if doc["truncated"] else {}))
        return doc

    def _connection(self, server: str) -> Any:
        with self._lock:  # one start of a server, however many calls need it at once
            for connections in self._open:
                if server in connections.tools:
                    return connections
            try:
                frozen = frozen_part(self.home, self.run or {}, "mcps", server)
                spec = server_spec(self.home, server, self.directory, frozen)
            except FwError as exc:
                raise FwError("unavailable", f"MCP server {server!r} cannot be started: {exc.message}", exc.hint,
                              reason="mcp_server") from None
            connections = McpConnections([spec], stop_grace=self.stop_grace).__enter__()
            self._open.append(connections)
        if server in connections.unavailable:
            raise FwError("unavailable", f"MCP server {server!r} is not available: {connections.unavailable[server]}",
                          check_hint(server), reason="mcp_server")
        return connections


def list_mcp_tools(home: Home, frozen: dict[str, dict[str, Any]], directory: str | None) -> Any:
    """Start (or connect to) every server of a run about to start (`frozen`: its snapshot's
    MCP servers) at once and list their tools; the open connections (`.tools`,
    `.unavailable`), to be closed by the caller."""

    specs, broken = [], {}
    for name, part in frozen.items():
        try:
            specs.append(server_spec(home, name, directory, part))
        except FwError as exc:
            broken[name] = exc.message
    connections = McpConnections(specs).__enter__()
    connections.unavailable.update(broken)
    return connections
