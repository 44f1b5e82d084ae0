"""The tool sources of a run besides the built-in groups: its MCP servers and its skills.

Sources only supply and execute; the tool service decides (projection, authorization,
validation, audit). A run's MCP servers are started when it starts, to list their tools,
and again whenever a front door needs to call one: `RunSources` keeps each server it started
until it is closed, so a model loop or `fw mcp serve --run` reuses one connection, and a
one-off `fw tool call` starts the one server it needs and stops it after the call.
"""

from __future__ import annotations

from typing import Any

from ..domain.projection import Snapshot, project
from ..domain.resources import resource_read
from ..errors import FwError
from ..home import secrets
from ..home.kinds import KINDS
from ..home.records import find_one, parse_text, validate_stored
from ..home.store import Home
from ..runtime.mcp_client import McpConnections, ServerSpec

START_TIMEOUT = 10.0  # seconds a server gets to start and list its tools (CONTRACT section 6)


def server_spec(home: Home, name: str, cwd: str | None) -> Any:
    """How to reach one MCP server: its definition with its secret env and headers."""

    spec = KINDS["mcp"]
    _, rel = find_one(home, spec, name)
    data, _ = parse_text(spec, home.read_text(rel) or "", rel)
    plain = validate_stored(spec, name, data, rel)
    stored = secrets.load(home, "mcp", name)
    return ServerSpec(
        name=name,
        transport=plain["transport"],
        command=plain.get("command"),
        args=list(plain.get("args") or []),
        env={**(plain.get("env") or {}), **(stored.get("env") or {})},
        url=plain.get("url"),
        headers={**(plain.get("headers") or {}), **(stored.get("headers") or {})},
        cwd=cwd if cwd and _is_dir(cwd) else None,
    )


def _is_dir(path: str) -> bool:
    import os

    return os.path.isdir(path)


def skill_description(home: Home, name: str) -> str | None:
    """A skill's description, or None when the skill cannot be read (missing or corrupt)."""

    try:
        return resource_read(home, "skill", name)["data"].get("description", "")
    except FwError:
        return None


def skill_text(home: Home, name: str) -> dict[str, Any]:
    """A skill tool's answer: the skill's text."""

    doc = resource_read(home, "skill", name)
    return {"skill": name, "text": doc.get("body") or ""}


class RunSources:
    """The MCP connections one caller of a run holds, opened as they are needed."""

    def __init__(self, home: Home, directory: str | None, connections: Any = None) -> None:
        self.home = home
        self.directory = directory
        self._open: list[Any] = [connections] if connections is not None else []

    def __enter__(self) -> RunSources:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        while self._open:
            self._open.pop().__exit__(None, None, None)

    def call_mcp(self, server: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return self._connection(server).call(server, tool, args)

    def _connection(self, server: str) -> Any:
        for connections in self._open:
            if server in connections.tools:
                return connections

        try:
            spec = server_spec(self.home, server, self.directory)
        except FwError as exc:
            raise FwError("unavailable", f"MCP server {server!r} cannot be started: {exc.message}", exc.hint, reason="mcp_server") from None
        connections = McpConnections([spec], start_timeout=START_TIMEOUT).__enter__()
        self._open.append(connections)
        if server in connections.unavailable:
            raise FwError("unavailable", f"MCP server {server!r} is not available: {connections.unavailable[server]}",
                          "check it with `fw resource test mcp " + server + "`", reason="mcp_server")
        return connections


def list_mcp_tools(home: Home, servers: list[str], directory: str | None) -> Any:
    """Start (or connect to) every server at once and list their tools; the open connections
    (`.tools`, `.unavailable`), to be closed by the caller."""

    specs, broken = [], {}
    for name in servers:
        try:
            specs.append(server_spec(home, name, directory))
        except FwError as exc:
            broken[name] = exc.message
    connections = McpConnections(specs, start_timeout=START_TIMEOUT).__enter__()
    connections.unavailable.update(broken)
    return connections


def tools_offered_now(home: Home, mcps: list[str], skills: list[str], directory: str | None = None) -> dict[str, Any]:
    """Every MCP and skill tool these sources give now, whatever an agent's `allowed_tools`
    say, as the projection names them; and each source or name that gives none, with the
    projection's reason (`source_unavailable`, `ambiguous_name`, ...). The servers are
    started to list their tools and stopped again before this returns."""

    snapshot = Snapshot({"mcps": list(mcps), "skills": list(skills)}, True, None, {})
    if mcps:
        connections = list_mcp_tools(home, list(mcps), directory)
        try:
            snapshot.mcp_tools, snapshot.mcp_unavailable = dict(connections.tools), dict(connections.unavailable)
        finally:
            connections.__exit__(None, None, None)
    snapshot.skills = {name: skill_description(home, name) for name in skills}
    projection = project(snapshot)
    return {"tools": [{"name": name, **projection.sources[name]} for name in projection.tools], "unavailable": projection.unavailable}
