"""How fw speaks with one MCP server: JSON-RPC as both of MCP's transports carry it, written by
fw itself, and the stdio transport (the streamable HTTP one is `mcp_http`).

A stdio server: fw starts its process (in a process group of its own, under the supervisor),
writes JSON-RPC requests to its stdin and reads its stdout line by line, and keeps the last lines
of its stderr (`ServerOutput`) to say why it failed. Reading the messages itself means that one
tool with a bad schema, a line that is not JSON or a request fw does not serve never loses the
whole server, and that a run with MCP servers does not pay the SDK's import (over a second).

A `Link` lists and calls a server's tools; a run's connections (`mcp_client.McpConnections`)
open one for each server, own it in their event loop, and put limits on its calls.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import FwError
from ..home.secrets import redact
from .mcp_documents import MESSAGE_CHARS, cut_line, tool_entry
from .supervisor import helper_command

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # anyio's dependency there

INHERITED_ENV = ("PATH", "HOME", "LANG", "TERM")  # all a stdio server gets of fw's environment
_LIST_PAGES = 100  # a server whose tool list never ends cannot hang the start
PROTOCOL_VERSION = "2025-06-18"  # what fw asks for; a server may answer with another it speaks
STDERR_LINES = 20  # the last lines of a server's stderr kept, to say why it failed
STDERR_LINE_KEPT = 16384  # bytes of each line kept (more than is shown, so a secret across the cut is still whole)
STDERR_SHOWN_CHARS = 1500
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one JSON-RPC line; a server sending more is dropped
STOP_GRACE = 2.0  # seconds a stdio server gets to exit once its stdin closes; then SIGTERM, then SIGKILL
TIMEOUT_SECONDS = 60.0  # a tool call's idle limit, unless the mcp says otherwise (CONTRACT section 13)
STARTUP_SECONDS = 10.0  # to start and list the tools
HARD_LIMIT_TIMES = 10  # max_seconds, unless given: this many times timeout_seconds

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
    timeout_seconds: float = TIMEOUT_SECONDS  # a call's idle limit
    startup_seconds: float = STARTUP_SECONDS
    max_seconds: float | None = None  # a call's hard limit; None: HARD_LIMIT_TIMES x timeout_seconds

    @property
    def hard_limit(self) -> float:
        return self.max_seconds if self.max_seconds is not None else HARD_LIMIT_TIMES * self.timeout_seconds


class ServerOutput:
    """What a server has said of itself as it ran: a stdio server's process (its exit status)
    and the last lines of its stderr, to say why it failed."""

    def __init__(self, transport: str) -> None:
        import anyio

        self.process: Any = None  # a stdio server's process
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.stderr_done = anyio.Event()
        if transport != "stdio":
            self.stderr_done.set()

    def with_stderr(self, message: str) -> str:
        """The message, and the last lines the server wrote to its stderr (redacted), if any."""
        lines = [cut_line(redact(line)) for line in self.stderr if line.strip()]  # redacted first, then cut
        if not lines:
            return message
        text = "\n".join(lines)
        if len(text) > STDERR_SHOWN_CHARS:
            text = "..." + text[-STDERR_SHOWN_CHARS:]
        return f"{message}; its stderr ended with:\n{text}"

    async def explain(self, message: str) -> str:
        """Why the server failed: the message, its exit status once it exited, its stderr's end."""
        import anyio

        with anyio.move_on_after(1.0):  # the server's last words may still be in the pipe
            await self.stderr_done.wait()
        status = getattr(self.process, "returncode", None)
        if status is not None and "exit" not in message:
            message = f"{message} (the server exited with status {status})"
        return self.with_stderr(message)


def server_environment(spec: ServerSpec) -> dict[str, str]:
    """What a stdio server's environment holds: a few of fw's variables, then its own."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.update(spec.env)
    return env


# -- stdio ----------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def stdio_link(spec: ServerSpec, output: ServerOutput, stop_grace: float) -> AsyncIterator[_StdioLink]:
    """Start a stdio server in a process group of its own, keep its stderr's last lines, speak
    JSON-RPC with it, and stop it (and whatever it left in its group) on the way out."""
    import subprocess

    import anyio

    if not spec.command:
        raise FwError("invalid", "a stdio MCP server needs a command", "set the mcp's command")
    env = server_environment(spec)
    if not _command_exists(spec.command, env.get("PATH", os.defpath), spec.cwd):
        raise FwError("unavailable", f"command not found: {spec.command}", "check the mcp's command and PATH",
                      reason="mcp_server")
    supervisor = helper_command(env_keys=_ENV_KEYS_VAR)  # the server's whole tree stops with it
    process = await anyio.open_process(
        [*supervisor, spec.command, *spec.args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**env, _ENV_KEYS_VAR: json.dumps(sorted(env))}, cwd=spec.cwd, start_new_session=True,
    )
    output.process = process
    link = _StdioLink(process)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_keep_stderr, process.stderr, output)
            tasks.start_soon(link.read_stdout)
            try:
                await link.initialize()
                yield link
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process, stop_grace)
                    with anyio.move_on_after(1.0):
                        await output.stderr_done.wait()
                tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # one error of ours inside the task group: pass it on bare
        raise group.exceptions[0] if len(group.exceptions) == 1 else group from None


class LinkError(Exception):
    """The server cannot be talked to (closed, or it broke the protocol)."""


class _RemoteError(Exception):
    """The server answered a request with a JSON-RPC error."""


def is_remote_error(exc: BaseException) -> bool:
    return isinstance(exc, _RemoteError)


class Waiter:
    def __init__(self) -> None:
        import anyio

        self.event = anyio.Event()
        self.message: dict[str, Any] | None = None
        self.closed: str | None = None


class Link:
    """What both transports do with JSON-RPC: the handshake, the tool list page by page (each
    tool read on its own, so one that is malformed never loses the others), calls (asking for
    progress, which goes to the call), answers told apart from errors, and requests from the
    server refused (but ping)."""

    _ids: Any
    _progress: dict[int, Any]  # request id (its progress token) -> the call in flight

    async def request(self, method: str, params: dict[str, Any], call: Any = None) -> dict[str, Any]:
        raise NotImplementedError

    async def notify(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def initialize(self) -> dict[str, Any]:
        result = await self.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                   "clientInfo": {"name": "fw", "version": __version__}})
        self.agreed(result)
        await self.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def agreed(self, result: dict[str, Any]) -> None:
        """What the handshake settled that later messages carry (nothing, on stdio)."""

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor = None
        for _ in range(_LIST_PAGES):
            page = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            listed = page.get("tools")
            if not isinstance(listed, list):
                raise LinkError("the server's tools/list answer has no list of tools")
            tools.extend(tool_entry(raw) for raw in listed)
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return tools

    async def call_tool(self, name: str, args: dict[str, Any], call: Any = None) -> dict[str, Any]:
        return await self.request("tools/call", {"name": name, "arguments": args}, call)

    def with_progress(self, request_id: int, params: dict[str, Any], call: Any) -> dict[str, Any]:
        """The request's params asking for progress under its own id, when it is a call that
        hears progress; the call learns its request id (to cancel it by)."""
        if call is None:
            return params
        call.request_id = request_id
        self._progress[request_id] = call
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        return {**params, "_meta": {**meta, "progressToken": request_id}}

    def notice(self, message: dict[str, Any]) -> None:
        """A notification from the server: progress goes to its call; the rest is passed over."""
        if message.get("method") != "notifications/progress" or not isinstance(message.get("params"), dict):
            return
        token = message["params"].get("progressToken")
        call = self._progress.get(token) if isinstance(token, int) and not isinstance(token, bool) else None
        if call is not None:
            call.progressed(message["params"])

    @staticmethod
    def result_of(message: dict[str, Any], method: str) -> dict[str, Any]:
        """The result of an answer; `_RemoteError` when the server answered with an error."""
        if "error" in message:
            error = message["error"]
            text = error.get("message") if isinstance(error, dict) else None
            raise _RemoteError(str(text or error))
        result = message.get("result")
        if not isinstance(result, dict):
            raise LinkError(f"the server's answer to {method} is not a JSON object")
        return result

    @staticmethod
    def refusal(request: dict[str, Any]) -> dict[str, Any]:
        """fw's answer to a request from the server: it offers a server nothing (no sampling,
        no roots, no elicitation); ping is answered."""
        if request["method"] == "ping":
            answer: dict[str, Any] = {"result": {}}
        else:
            answer = {"error": {"code": -32601, "message": f"fw does not offer {str(request['method'])[:100]}"}}
        return {"jsonrpc": "2.0", "id": request["id"], **answer}


class _StdioLink(Link):
    """JSON-RPC over a server's stdin and stdout: requests matched to answers by id, requests
    from the server refused (but ping), notifications and lines that are not JSON ignored."""

    def __init__(self, process: Any) -> None:
        import anyio

        self.process = process
        self._ids = itertools.count(1)
        self._progress = {}
        self._pending: dict[int, Waiter] = {}
        self._write_lock = anyio.Lock()
        self.closed: str | None = None

    async def notify(self, message: dict[str, Any]) -> None:
        await self._send(message)

    async def request(self, method: str, params: dict[str, Any], call: Any = None) -> dict[str, Any]:
        if self.closed:
            raise LinkError(self.closed)
        request_id = next(self._ids)
        waiter = self._pending[request_id] = Waiter()
        try:
            params = self.with_progress(request_id, params, call)
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await waiter.event.wait()
        finally:
            self._pending.pop(request_id, None)
            self._progress.pop(request_id, None)
        if waiter.message is None:
            raise LinkError(waiter.closed or "Connection closed")
        return self.result_of(waiter.message, method)

    async def _send(self, message: dict[str, Any]) -> None:
        import anyio

        data = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            async with self._write_lock:
                await self.process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self._close("Connection closed: the server stopped reading its input")
            raise LinkError(self.closed) from None

    async def read_stdout(self) -> None:
        import anyio

        buffer = bytearray()
        try:
            async for chunk in self.process.stdout:
                buffer += chunk
                if b"\n" not in chunk:
                    if len(buffer) > MAX_MESSAGE_BYTES:
                        self._close("the server sent a message over 64 MiB")
                        return
                    continue
                *lines, rest = bytes(buffer).split(b"\n")
                buffer = bytearray(rest)
                for line in lines:
                    await self._receive(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            self._close("Connection closed")

    async def _receive(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # a server's stray print: not a message, and not worth a traceback
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict):
                continue
            if "method" in item and "id" in item:  # a request from the server
                await self._refuse(item)
            elif "method" in item:
                self.notice(item)
            elif "id" in item and ("result" in item or "error" in item):
                waiter = self._pending.get(item["id"]) if isinstance(item["id"], int) else None
                if waiter is not None and not waiter.event.is_set():
                    waiter.message = item
                    waiter.event.set()

    async def _refuse(self, request: dict[str, Any]) -> None:
        with contextlib.suppress(LinkError):
            await self._send(self.refusal(request))

    def _close(self, why: str) -> None:
        if self.closed is None:
            self.closed = why
        for waiter in self._pending.values():
            if not waiter.event.is_set():
                waiter.closed = self.closed
                waiter.event.set()


async def _keep_stderr(stream: Any, output: ServerOutput) -> None:
    """Read a server's stderr to its end (so it never blocks on a full pipe), keeping its last lines."""
    import anyio

    rest = b""
    skipping = False  # the rest of a line too long to keep, up to its newline: never kept as lines of its own
    try:
        async for chunk in stream:
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk, skipping = chunk[newline + 1:], False
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                output.stderr.append(line[:STDERR_LINE_KEPT].decode("utf-8", "replace"))
            if len(rest) > STDERR_LINE_KEPT:
                output.stderr.append(rest[:STDERR_LINE_KEPT].decode("utf-8", "replace"))
                rest, skipping = b"", True
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass
    finally:
        if rest:
            output.stderr.append(rest.decode("utf-8", "replace"))
        output.stderr_done.set()


async def _stop(process: Any, grace: float = STOP_GRACE) -> None:
    """Close the server's stdin and give it a moment to exit; then signal its process group,
    SIGTERM and then SIGKILL. Whatever it started in its group is killed too."""
    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    if not await _exited(process, grace):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process, grace):
            _signal_group(process.pid, signal.SIGKILL)
            await _exited(process, STOP_GRACE)
    _signal_group(process.pid, signal.SIGKILL)  # helpers the server left running in its group


async def _exited(process: Any, seconds: float) -> bool:
    """Whether the process exited within the time (its returncode, not wait(): a helper that
    holds its pipes open would make wait() hang)."""
    import anyio

    deadline = anyio.current_time() + seconds
    pause = 0.001  # most servers exit at once when their stdin closes: look again soon, then less often
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(pause)
        pause = min(pause * 2, 0.02)
    return True


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _command_exists(command: str, path: str, cwd: str | None) -> bool:
    """Checked before starting, so that a typo is reported as such, not as a closed connection."""
    if os.sep in command:  # a path, relative to the server's working folder
        target = os.path.join(cwd or os.getcwd(), command)
        return os.path.isfile(target) and os.access(target, os.X_OK)
    return shutil.which(command, path=path) is not None


def describe_failure(exc: BaseException) -> str:
    """A one-line account of why a server failed, safe to show: the innermost error of a
    task group's exception group, with its text redacted and cut."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FwError):
        return exc.message
    if isinstance(exc, (LinkError, _RemoteError)):
        return _cut(" ".join(redact(str(exc)).split()))
    text = _cut(" ".join(redact(str(exc)).split()))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cut(text: str) -> str:
    return text[:MESSAGE_CHARS] + "..." if len(text) > MESSAGE_CHARS else text
