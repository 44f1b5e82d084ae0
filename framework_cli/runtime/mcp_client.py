"""The MCP servers of one run: started (stdio) or connected (http) when the run starts,
closed when it ends, with a synchronous face for the loop and the tool service.

The SDK's client is asynchronous and anyio wants a client's context left by the task that
entered it, so each server is owned by one task, in an event loop that runs in a background
thread (an anyio blocking portal), from its start to its close. Callers stay synchronous:
`call` hands the request to that loop and waits.

A server that fails, or does not start, initialise and list its tools within `start_timeout`,
is recorded in `unavailable` and never raises: the run goes on without its tools.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import FwError
from ..home import secrets
from ..home.secrets import redact
from .documents import redact_document
from .supervisor import helper_command

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # anyio's dependency there

INHERITED_ENV = ("PATH", "HOME", "LANG", "TERM")  # all a stdio server gets of fw's environment
CLOSE_TIMEOUT = 10.0  # for every server to close at the run's end; stdio shutdown is bounded below this
_LIST_PAGES = 100  # a server whose tool list never ends cannot hang the start
_MESSAGE_CHARS = 300

# The SDK's stdio client always adds the parent's HOME, LOGNAME, PATH, SHELL, TERM and USER to
# a server's environment, and stops only the server's own process group. So each server runs
# under fw's process supervisor: it gives the server exactly the variables fw chose
# ($FW_MCP_ENV_KEYS names them; no value is ever on a command line), and when the server exits
# or is stopped (or fw goes) it kills every process the server started, in its group or not.
_ENV_KEYS_VAR = "FW_MCP_ENV_KEYS"


@dataclass
class ServerSpec:
    name: str
    transport: str = "stdio"  # "stdio" or "http"
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # secret values
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # secret values
    cwd: str | None = None


class McpConnections:
    """The MCP connections of one run, as a context manager:

        with McpConnections(specs) as mcp:
            mcp.tools        # {server: [{"name", "description", "input_schema"}]}
            mcp.unavailable  # {server: why it is not there}
            mcp.call("files", "read", {"path": "a.txt"})
    """

    def __init__(self, servers: list[ServerSpec], start_timeout: float = 10.0) -> None:
        for spec in servers:
            secrets.remember(spec.env)
            secrets.remember(spec.headers)
        self.servers = list(servers)
        self.start_timeout = start_timeout
        self.tools: dict[str, list[dict[str, Any]]] = {}
        self.unavailable: dict[str, str] = {}
        self._connections: dict[str, _Connection] = {}
        self._stack = contextlib.ExitStack()
        self._portal: Any = None
        self._supervisor: Any = None

    def __enter__(self) -> McpConnections:
        from anyio.from_thread import start_blocking_portal

        _load_sdk()
        self._portal = self._stack.enter_context(start_blocking_portal())
        try:
            self._supervisor, connections = self._portal.start_task(self._supervise)
        except BaseException as exc:
            # Passing the exception on makes the portal cancel its tasks instead of waiting
            # for a close that would never be asked for.
            self._stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        for conn in connections:
            if conn.failure is None:
                self._connections[conn.spec.name] = conn
                self.tools[conn.spec.name] = conn.tools
            else:
                self.unavailable[conn.spec.name] = conn.failure
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._supervisor is None:
            return
        try:
            self._portal.call(self._closing.set)
            self._supervisor.result()  # every server closed, every process reaped
        finally:
            self._supervisor = None
            self._stack.close()  # stops the event loop and joins its thread

    def call(self, server: str, tool: str, args: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Call one tool of one server: {"content": [text...], "is_error", "structured"}, redacted."""
        conn = self._connections.get(server)
        if conn is None or self._supervisor is None:
            why = self.unavailable.get(server, "it is not one of this run's MCP servers")
            if self._supervisor is None:
                why = "the run's MCP connections are closed"
            raise FwError("unavailable", f"MCP server {server!r} is not available: {why}",
                          "check the server with `fw resource test mcp NAME`", reason="mcp_server")
        return self._portal.call(self._call, conn, tool, args, timeout)

    # -- inside the event loop -----------------------------------------------------------
    async def _supervise(self, *, task_status: Any) -> None:
        """Start every server at once, report when each has started or the time is up, then
        keep them until the run ends."""
        import anyio

        self._closing = anyio.Event()
        connections = [_Connection(spec) for spec in self.servers]
        async with anyio.create_task_group() as group:
            for conn in connections:
                group.start_soon(self._own, conn)
            with anyio.move_on_after(self.start_timeout):
                for conn in connections:
                    await conn.settled.wait()
            for conn in connections:
                if not conn.settled.is_set():
                    # Report it now; its process is stopped in the background, before __exit__ returns.
                    conn.give_up(f"did not start and list its tools within {self.start_timeout:g} s")
            task_status.started(connections)
            await self._closing.wait()

    async def _own(self, conn: _Connection) -> None:
        """One server, from its start to its close, in one task (anyio's rule for the client)."""
        import anyio
        from mcp import Client

        try:
            with conn.scope:
                async with Client(_transport(conn.spec), client_info=_client_info()) as client:
                    conn.ready(client, await _list_tools(client))
                    await self._closing.wait()
                    conn.scope.deadline = anyio.current_time() + CLOSE_TIMEOUT
        except Exception as exc:
            conn.fail(describe_failure(exc))
        finally:
            conn.settled.set()

    async def _call(self, conn: _Connection, tool: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        import anyio

        name = conn.spec.name
        try:
            with anyio.fail_after(timeout):
                result = await conn.client.call_tool(tool, args)
        except TimeoutError:
            raise FwError("unavailable", f"MCP server {name!r} did not answer {tool} within {timeout:g} s",
                          "the server may be stuck; try again or check it", reason="mcp_server") from None
        except Exception as exc:
            raise FwError("unavailable", f"MCP server {name!r} failed on {tool}: {describe_failure(exc)}",
                          "check the server with `fw resource test mcp NAME`", reason="mcp_server") from None
        return tool_result_document(result)


class _Connection:
    """The state of one server's connection, shared by its owner task and the supervisor."""

    def __init__(self, spec: ServerSpec) -> None:
        import anyio

        self.spec = spec
        self.client: Any = None
        self.tools: list[dict[str, Any]] = []
        self.failure: str | None = None
        self.settled = anyio.Event()  # started, failed or given up on
        self.scope = anyio.CancelScope()

    def ready(self, client: Any, tools: list[dict[str, Any]]) -> None:
        if self.failure is None:  # the start may have just been given up on: that stands
            self.client, self.tools = client, tools
        self.settled.set()

    def fail(self, message: str) -> None:
        if self.failure is None and self.client is None:
            self.failure = message

    def give_up(self, message: str) -> None:
        self.failure = message
        self.settled.set()
        self.scope.cancel()


def _load_sdk() -> None:
    """Import the SDK before any server's start timer runs: the import takes a while, and it
    would block the event loop that the timers run on."""
    import mcp.client.stdio  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401


def _transport(spec: ServerSpec) -> Any:
    if spec.transport == "stdio":
        return _stdio_transport(spec)
    if spec.transport == "http":
        return _http_transport(spec)
    raise FwError("invalid", f"unknown MCP transport {spec.transport!r}", "use stdio or http")


def server_environment(spec: ServerSpec) -> dict[str, str]:
    """What a stdio server's environment holds: a few of fw's variables, then its own."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.update(spec.env)
    return env


@contextlib.asynccontextmanager
async def _stdio_transport(spec: ServerSpec) -> AsyncIterator[Any]:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if not spec.command:
        raise FwError("invalid", "a stdio MCP server needs a command", "set the mcp's command")
    env = server_environment(spec)
    if not _command_exists(spec.command, env.get("PATH", os.defpath), spec.cwd):
        raise FwError("unavailable", f"command not found: {spec.command}", "check the mcp's command and PATH",
                      reason="mcp_server")
    supervisor = helper_command(env_keys=_ENV_KEYS_VAR)
    params = StdioServerParameters(
        command=supervisor[0],
        args=[*supervisor[1:], spec.command, *spec.args],
        env={**env, _ENV_KEYS_VAR: json.dumps(sorted(env))},
        cwd=spec.cwd,
    )
    # The server's stderr must never reach fw's stdout (or clutter its stderr).
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as streams:
            yield streams


@contextlib.asynccontextmanager
async def _http_transport(spec: ServerSpec) -> AsyncIterator[Any]:
    # The SDK's HTTP transport runs on httpx2 (not httpx); headers go on the client it is given.
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    if not spec.url:
        raise FwError("invalid", "an http MCP server needs a url", "set the mcp's url")
    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults: a server may hold a stream open
    async with httpx2.AsyncClient(headers=spec.headers, timeout=timeout) as http:
        async with streamable_http_client(spec.url, http_client=http) as streams:
            yield streams


def _command_exists(command: str, path: str, cwd: str | None) -> bool:
    """Checked before starting, so that a typo is reported as such, not as a closed connection."""
    if os.sep in command:  # a path, relative to the server's working folder
        target = os.path.join(cwd or os.getcwd(), command)
        return os.path.isfile(target) and os.access(target, os.X_OK)
    return shutil.which(command, path=path) is not None


def _client_info() -> Any:
    import mcp_types


    return mcp_types.Implementation(name="fw", version=__version__)


async def _list_tools(client: Any) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor = None
    for _ in range(_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(_tool_description(t) for t in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _tool_description(tool: Any) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": redact(tool.description or ""),
        "input_schema": redact_document(tool.input_schema),
    }


def tool_result_document(result: Any) -> dict[str, Any]:
    """An MCP tool result as fw's document: its text parts, whether it is an error, and its
    structured content, each redacted."""
    structured = result.structured_content
    return {
        "content": [redact(_part_text(part)) for part in result.content],
        "is_error": bool(result.is_error),
        "structured": redact_document(structured) if structured is not None else None,
    }


def _part_text(part: Any) -> str:
    if getattr(part, "type", None) == "text":
        return part.text
    resource = getattr(part, "resource", None)
    if resource is not None and getattr(resource, "text", None) is not None:
        return resource.text
    mime = getattr(part, "mime_type", None) or getattr(resource, "mime_type", None) or "binary"
    return f"[{getattr(part, 'type', 'content')} content ({mime}) not shown]"


def describe_failure(exc: BaseException) -> str:
    """A one-line account of why a server failed, safe to show: the innermost error of a
    task group's exception group, with its text redacted and cut."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FwError):
        return exc.message
    text = " ".join(redact(str(exc)).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
