"""The MCP servers of one run: started (stdio) or connected (http) when the run starts,
closed when it ends, with a synchronous face for the loop and the tool service.

fw speaks both of MCP's transports itself. A stdio server: fw starts its process (in a process
group of its own, under the supervisor), writes JSON-RPC requests to its stdin and reads its
stdout line by line. An http server (streamable HTTP): each request is a POST, answered by
one JSON message or an event stream that carries it, with the session id the handshake gave.
Reading the messages itself means that one tool with a bad schema, a line that is not JSON or
a request fw does not serve never loses the whole server, that the last lines of a stdio
server's stderr can say why it failed, and that a run with MCP servers does not pay the SDK's
import (over a second). The SDK serves fw's own MCP doors (`fw mcp serve`, the gateway).

Each server is owned by one task, in an event loop that runs in a background thread (an
anyio blocking portal), from its start to its close. Callers stay synchronous: `call` hands
the request to that loop and waits.

A server that fails, or does not start, initialise and list its tools within its
`startup_seconds`, is recorded in `unavailable` and never raises: the run goes on without its tools.

A tool call asks for progress (a `progressToken` in `_meta`). Its idle limit (`timeout_seconds`)
starts again with each progress notification, up to a hard limit (`max_seconds`); the progress
is handed to the caller as it comes. A call given up on at a limit, or cancelled (the caller
was interrupted, the run's connections are closing), sends `notifications/cancelled` for its
request id, so that the server can stop working on it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import os
import queue
import shutil
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import FwError, without_lone_surrogates
from ..home import secrets
from ..home.secrets import redact
from ..http_client import SseReader, UnreadableStream, bare_tls_context
from .mcp_documents import MESSAGE_CHARS, cut_line, tool_entry, tool_result_document
from .supervisor import helper_command

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # anyio's dependency there

INHERITED_ENV = ("PATH", "HOME", "LANG", "TERM")  # all a stdio server gets of fw's environment
CLOSE_TIMEOUT = 10.0  # for every server to close at the run's end; stdio shutdown is bounded below this
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
CANCEL_WAIT = 1.0  # for calls being cancelled to send their notifications/cancelled, as the connections close
PROGRESSMESSAGE_CHARS = 200

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


class McpConnections:
    """The MCP connections of one run, as a context manager:

        with McpConnections(specs) as mcp:
            mcp.tools        # {server: [{"name", "title", "description", "input_schema", "annotations",
                             #            "task_support"}]}
            mcp.unavailable  # {server: why it is not there}
            mcp.call("files", "read", {"path": "a.txt"})

    The tools are listed as the server gave them (names, schemas and all, redacted): the
    projection decides which of them a run may be offered. `start_timeout` overrides each
    server's `startup_seconds`; `stop_grace` is how long a stdio server gets to exit once told.
    """

    def __init__(self, servers: list[ServerSpec], start_timeout: float | None = None,
                 stop_grace: float = STOP_GRACE) -> None:
        for spec in servers:
            secrets.remember(spec.env)
            secrets.remember(spec.headers)
        self.servers = list(servers)
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self._active: set[_Call] = set()  # calls in flight, in the event loop
        self.tools: dict[str, list[dict[str, Any]]] = {}
        self.unavailable: dict[str, str] = {}
        self._connections: dict[str, _Connection] = {}
        self._stack = contextlib.ExitStack()
        self._portal: Any = None
        self._supervisor: Any = None

    def __enter__(self) -> McpConnections:
        from anyio.from_thread import start_blocking_portal

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
            self._portal.call(self._cancel_calls, "fw's run ended or was interrupted while the call was running")
            self._portal.call(self._closing.set)
            self._supervisor.result()  # every server closed, every process reaped
        finally:
            self._supervisor = None
            self._stack.close()  # stops the event loop and joins its thread

    def call(self, server: str, tool: str, args: dict[str, Any], watch: Any = None) -> dict[str, Any]:
        """Call one tool of one server: {"content": [text or item...], "is_error", "structured"},
        redacted. Several threads may call at once; each call is answered on its own. `watch`
        (a CallWatch) hears the call's progress in this thread, may cancel it, and may collect
        the bytes of its binary content."""
        conn = self._checked(server)
        updates: queue.SimpleQueue[Any] = queue.SimpleQueue()
        why: dict[str, str] = {}  # why the caller gave the call up, for the server
        future = self._portal.start_task_soon(self._call, conn, tool, args, updates.put, why)
        future.add_done_callback(lambda _: updates.put(_FINISHED))
        try:
            _follow(updates, future, watch, why)
        except BaseException:  # interrupted here (Ctrl-C, SIGTERM): the call is given up, and cancelled
            why.setdefault("reason", "fw was interrupted while the call was running")
            future.cancel()
            raise
        try:
            doc, attachments = future.result()
        except concurrent.futures.CancelledError:
            raise FwError("interrupted", f"the call of {tool} on MCP server {server!r} was cancelled",
                          "the caller gave it up; the server was sent notifications/cancelled") from None
        if watch is not None and getattr(watch, "attachments", None) is not None:
            watch.attachments.extend(attachments)
        return doc

    async def acall(self, server: str, tool: str, args: dict[str, Any], watch: Any = None) -> dict[str, Any]:
        """`call` from an event loop (the engine's): the call runs in the connections' own loop
        and is awaited, holding no thread; its progress reaches the watch on the caller's
        loop; cancelling the awaiting task gives the call up (`notifications/cancelled`)."""
        import asyncio

        conn = self._checked(server)
        loop = asyncio.get_running_loop()
        why: dict[str, str] = {}

        def report(item: Any) -> None:  # in the connections' loop: handed to the caller's
            if watch is not None and watch.on_progress is not None:
                loop.call_soon_threadsafe(watch.on_progress, item)

        future = self._portal.start_task_soon(self._call, conn, tool, args, report, why)
        try:  # shielded: the reason is told before the call is given up
            doc, attachments = await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError as stop:
            why.setdefault("reason", str(stop.args[0]) if stop.args else "the run was stopped while the call was running")
            future.cancel()
            raise
        except concurrent.futures.CancelledError:
            raise FwError("interrupted", f"the call of {tool} on MCP server {server!r} was cancelled",
                          "the caller gave it up; the server was sent notifications/cancelled") from None
        if watch is not None and getattr(watch, "attachments", None) is not None:
            watch.attachments.extend(attachments)
        return doc

    def _checked(self, server: str) -> Any:
        """The connection of a server that may be called now; `unavailable` otherwise."""
        conn = self._connections.get(server)
        if conn is None or self._supervisor is None:
            why = self.unavailable.get(server, "it is not one of this run's MCP servers")
            if self._supervisor is None:
                why = "the run's MCP connections are closed"
            raise FwError("unavailable", f"MCP server {server!r} is not available: {why}",
                          check_hint(server), reason="mcp_server")
        return conn

    # -- inside the event loop -----------------------------------------------------------
    async def _supervise(self, *, task_status: Any) -> None:
        """Start every server at once, report when each has started or the time is up, then
        keep them until the run ends."""
        import anyio

        self._closing = anyio.Event()
        connections = [_Connection(spec, self.stop_grace) for spec in self.servers]
        began = anyio.current_time()
        limit = {id(conn): self.start_timeout or conn.spec.startup_seconds for conn in connections}
        async with anyio.create_task_group() as group:
            for conn in connections:
                group.start_soon(self._own, conn)
            for conn in sorted(connections, key=lambda c: limit[id(c)]):
                with anyio.move_on_after(began + limit[id(conn)] - anyio.current_time()):
                    await conn.settled.wait()
            for conn in connections:
                if not conn.settled.is_set():
                    # Report it now; its process is stopped in the background, before __exit__ returns.
                    conn.give_up(conn.with_stderr(f"did not start and list its tools within {limit[id(conn)]:g} s "
                                                  "(the mcp's startup_seconds)"))
            task_status.started(connections)
            await self._closing.wait()

    async def _own(self, conn: _Connection) -> None:
        """One server, from its start to its close, in one task (anyio's rule for the SDK's client)."""
        import anyio

        try:
            with conn.scope:
                async with _open(conn) as link:
                    conn.ready(link, await link.list_tools())
                    await self._closing.wait()
                    conn.scope.deadline = anyio.current_time() + CLOSE_TIMEOUT
        except Exception as exc:
            conn.fail(await conn.explain(describe_failure(exc)))
        finally:
            conn.settled.set()

    async def _call(self, conn: _Connection, tool: str, args: dict[str, Any], report: Any,
                    why: dict[str, str]) -> tuple[dict[str, Any], list[Any]]:
        """One call, within its limits: the idle limit, moved on by each progress notification,
        and the hard limit. A call given up on, or cancelled, sends notifications/cancelled."""
        import anyio

        spec = conn.spec
        call = _Call(spec.timeout_seconds, anyio.current_time() + spec.hard_limit, report)
        self._active.add(call)
        try:
            with call.outer:
                try:
                    with call.limit:
                        return tool_result_document(await self._request(conn, tool, args, call))
                    await call.give_up(conn.link, "it reached fw's time limit")
                    raise _limit_reached(spec, tool, call)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        await call.give_up(conn.link, call.reason or why.get("reason") or "the caller gave the call up")
                    raise
            raise FwError("interrupted", f"the call of {tool} on MCP server {spec.name!r} was cancelled: {call.reason}",
                          "the server was sent notifications/cancelled")
        finally:
            self._active.discard(call)

    async def _request(self, conn: _Connection, tool: str, args: dict[str, Any], call: _Call) -> dict[str, Any]:
        name = conn.spec.name
        try:
            return await conn.link.call_tool(tool, args, call)
        except Exception as exc:
            if _is_remote_error(exc):  # the server answered the call with a JSON-RPC error
                raise FwError("unavailable", f"MCP server {name!r} refused {tool}: {describe_failure(exc)}",
                              "check the tool's name and arguments against its input_schema", reason="mcp_tool") from None
            why = await conn.explain(describe_failure(exc))
            raise FwError("unavailable", f"MCP server {name!r} failed on {tool}: {why}",
                          check_hint(name), reason="mcp_server") from None

    async def _cancel_calls(self, why: str) -> None:
        """Cancel every call in flight (each tells its server so), and wait a moment for them."""
        import anyio

        for call in list(self._active):
            call.reason = call.reason or why
            call.outer.cancel()
        with anyio.move_on_after(CANCEL_WAIT):
            while self._active:
                await anyio.sleep(0.005)


_FINISHED = object()  # put after a call's last progress: its result is ready


def _follow(updates: Any, future: Any, watch: Any, why: dict[str, str]) -> None:
    """Wait in the caller's thread for a call to finish, handing its progress to the watch as
    it comes, and cancelling the call when the watch is cancelled."""
    while True:
        try:
            item = updates.get(timeout=0.1)
        except queue.Empty:
            if watch is not None and watch.cancelled.is_set():
                why.setdefault("reason", "fw's client cancelled the call, or left")
                future.cancel()
            continue
        if item is _FINISHED:
            return
        if watch is not None and watch.on_progress is not None:
            watch.on_progress(item)


def _limit_reached(spec: ServerSpec, tool: str, call: _Call) -> FwError:
    if call.hard_reached:
        message = (f"MCP server {spec.name!r} did not finish {tool} within {spec.hard_limit:g} s "
                   "(the mcp's max_seconds), progress or not; the call was cancelled")
        fix = (f"raise the mcp's max_seconds: "
               f"fw resource write mcp {spec.name} --data '{{\"max_seconds\": {2 * spec.hard_limit:g}}}'")
    else:
        message = (f"MCP server {spec.name!r} did not answer {tool} within {spec.timeout_seconds:g} s "
                   "(the mcp's timeout_seconds), nor report progress; the call was cancelled")
        fix = (f"the server may be stuck; if the tool is just slow, raise the mcp's timeout_seconds: "
               f"fw resource write mcp {spec.name} --data '{{\"timeout_seconds\": {2 * spec.timeout_seconds:g}}}'")
    return FwError("unavailable", message, fix, reason="mcp_timeout")


class _Call:
    """One tool call in flight: its request id (once sent), its limits, and where its progress goes."""

    def __init__(self, idle: float, hard: float, report: Any) -> None:
        import anyio

        self.idle, self.hard, self.report = idle, hard, report
        self.request_id: int | None = None
        self.reason: str | None = None  # why it was cancelled
        self.outer = anyio.CancelScope()  # cancelled when the connections close
        self.limit = anyio.CancelScope(deadline=min(anyio.current_time() + idle, hard))

    @property
    def hard_reached(self) -> bool:
        import anyio

        return anyio.current_time() >= self.hard

    def progressed(self, params: dict[str, Any]) -> None:
        """A progress notification of this call: the idle limit starts again (never past the
        hard one), and the caller hears it."""
        import anyio

        doc = progress_document(params)
        if doc is None:
            return
        self.limit.deadline = min(anyio.current_time() + self.idle, self.hard)
        if self.report is not None:
            self.report(doc)

    async def give_up(self, link: Any, why: str) -> None:
        """Tell the server the call is given up (once it was sent), within a moment."""
        import anyio

        if self.request_id is None:
            return
        cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": self.request_id, "reason": why}}
        self.request_id = None
        with anyio.move_on_after(CANCEL_WAIT), contextlib.suppress(Exception):
            await link.notify(cancelled)


def progress_document(params: Any) -> dict[str, Any] | None:
    """A progress notification's params as fw passes them on: `progress`, and `total` and
    `message` when given (the message redacted and cut); None when it is no progress at all."""
    params = params if isinstance(params, dict) else {}
    progress, total, message = params.get("progress"), params.get("total"), params.get("message")
    if not _number(progress):
        return None
    doc: dict[str, Any] = {"progress": progress}
    if _number(total):
        doc["total"] = total
    if isinstance(message, str) and message.strip():
        text = " ".join(without_lone_surrogates(redact(message)).split())
        doc["message"] = text if len(text) <= PROGRESSMESSAGE_CHARS else text[:PROGRESSMESSAGE_CHARS] + "..."
    return doc


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_hint(server: str) -> str:
    return f"check the server with `fw resource test mcp {server}`"


class _Connection:
    """The state of one server's connection, shared by its owner task and the supervisor."""

    def __init__(self, spec: ServerSpec, stop_grace: float = STOP_GRACE) -> None:
        import anyio

        self.spec = spec
        self.stop_grace = stop_grace
        self.link: Any = None
        self.tools: list[dict[str, Any]] = []
        self.failure: str | None = None
        self.settled = anyio.Event()  # started, failed or given up on
        self.scope = anyio.CancelScope()
        self.process: Any = None  # a stdio server's process
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.stderr_done = anyio.Event()
        if spec.transport != "stdio":
            self.stderr_done.set()

    def ready(self, link: Any, tools: list[dict[str, Any]]) -> None:
        if self.failure is None:  # the start may have just been given up on: that stands
            self.link, self.tools = link, tools
        self.settled.set()

    def fail(self, message: str) -> None:
        if self.failure is None and self.link is None:
            self.failure = message

    def give_up(self, message: str) -> None:
        self.failure = message
        self.settled.set()
        self.scope.cancel()

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


def quiet_sdk_logging() -> None:
    """The SDK logs tracebacks (a line of a server it could not parse, a closed stream) through
    `logging`; none of it may reach fw's terminal, where only fw's own messages go."""
    import logging

    for name in ("mcp", "httpx2"):
        logger = logging.getLogger(name)
        logger.propagate = False
        if not logger.handlers:
            logger.addHandler(logging.NullHandler())


@contextlib.asynccontextmanager
async def _open(conn: _Connection) -> AsyncIterator[Any]:
    """A link to one server that can list and call its tools: `_StdioLink` or `_HttpLink`."""
    spec = conn.spec
    if spec.transport == "stdio":
        async with _stdio_link(conn) as link:
            yield link
    elif spec.transport == "http":
        async with _http_link(spec) as link:
            yield link
    else:
        raise FwError("invalid", f"unknown MCP transport {spec.transport!r}", "use stdio or http")


def server_environment(spec: ServerSpec) -> dict[str, str]:
    """What a stdio server's environment holds: a few of fw's variables, then its own."""
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.update(spec.env)
    return env


# -- stdio ----------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _stdio_link(conn: _Connection) -> AsyncIterator[_StdioLink]:
    """Start a stdio server in a process group of its own, keep its stderr's last lines, speak
    JSON-RPC with it, and stop it (and whatever it left in its group) on the way out."""
    import subprocess

    import anyio

    spec = conn.spec
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
    conn.process = process
    link = _StdioLink(process)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_keep_stderr, process.stderr, conn)
            tasks.start_soon(link.read_stdout)
            try:
                await link.initialize()
                yield link
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process, conn.stop_grace)
                    with anyio.move_on_after(1.0):
                        await conn.stderr_done.wait()
                tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # one error of ours inside the task group: pass it on bare
        raise group.exceptions[0] if len(group.exceptions) == 1 else group from None


class _LinkError(Exception):
    """The server cannot be talked to (closed, or it broke the protocol)."""


class _SessionGone(_LinkError):
    """The server answered 404 to a request of fw's session: it has forgotten the session."""


class _RemoteError(Exception):
    """The server answered a request with a JSON-RPC error."""


def _is_remote_error(exc: BaseException) -> bool:
    return isinstance(exc, _RemoteError)


class _Waiter:
    def __init__(self) -> None:
        import anyio

        self.event = anyio.Event()
        self.message: dict[str, Any] | None = None
        self.closed: str | None = None


class _Link:
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
                raise _LinkError("the server's tools/list answer has no list of tools")
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
            raise _LinkError(f"the server's answer to {method} is not a JSON object")
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


class _StdioLink(_Link):
    """JSON-RPC over a server's stdin and stdout: requests matched to answers by id, requests
    from the server refused (but ping), notifications and lines that are not JSON ignored."""

    def __init__(self, process: Any) -> None:
        import anyio

        self.process = process
        self._ids = itertools.count(1)
        self._progress = {}
        self._pending: dict[int, _Waiter] = {}
        self._write_lock = anyio.Lock()
        self.closed: str | None = None

    async def notify(self, message: dict[str, Any]) -> None:
        await self._send(message)

    async def request(self, method: str, params: dict[str, Any], call: Any = None) -> dict[str, Any]:
        if self.closed:
            raise _LinkError(self.closed)
        request_id = next(self._ids)
        waiter = self._pending[request_id] = _Waiter()
        try:
            params = self.with_progress(request_id, params, call)
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await waiter.event.wait()
        finally:
            self._pending.pop(request_id, None)
            self._progress.pop(request_id, None)
        if waiter.message is None:
            raise _LinkError(waiter.closed or "Connection closed")
        return self.result_of(waiter.message, method)

    async def _send(self, message: dict[str, Any]) -> None:
        import anyio

        data = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            async with self._write_lock:
                await self.process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self._close("Connection closed: the server stopped reading its input")
            raise _LinkError(self.closed) from None

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
        with contextlib.suppress(_LinkError):
            await self._send(self.refusal(request))

    def _close(self, why: str) -> None:
        if self.closed is None:
            self.closed = why
        for waiter in self._pending.values():
            if not waiter.event.is_set():
                waiter.closed = self.closed
                waiter.event.set()


async def _keep_stderr(stream: Any, conn: _Connection) -> None:
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
                conn.stderr.append(line[:STDERR_LINE_KEPT].decode("utf-8", "replace"))
            if len(rest) > STDERR_LINE_KEPT:
                conn.stderr.append(rest[:STDERR_LINE_KEPT].decode("utf-8", "replace"))
                rest, skipping = b"", True
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass
    finally:
        if rest:
            conn.stderr.append(rest.decode("utf-8", "replace"))
        conn.stderr_done.set()


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


# -- streamable http -------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _http_link(spec: ServerSpec) -> AsyncIterator[_HttpLink]:
    """A link to a server over MCP's streamable HTTP transport, from its handshake to the end
    of its session (a DELETE, as the transport asks; a server may refuse it)."""
    import anyio
    import httpx

    if not spec.url:
        raise FwError("invalid", "an http MCP server needs a url", "set the mcp's url")
    # A server may hold a stream open while a tool works: the call's own limits bound it.
    timeout = httpx.Timeout(30.0, read=None)
    verify: Any = True if spec.url.startswith("https:") else bare_tls_context()  # plain http loads no CA bundle
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=verify) as http:
        link = _HttpLink(http, spec.url, spec.headers)
        try:
            await link.initialize()
            yield link
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                await link.end_session()


class _HttpLink(_Link):
    """JSON-RPC over streamable HTTP, spoken directly (not through the SDK, whose import takes
    over a second and whose client drops a whole tool list for one malformed tool): each
    request is a POST, answered by one JSON message or by an event stream that carries the
    answer (and perhaps requests from the server, which are refused, and notifications). The
    session id the server gives at the handshake goes on every later request."""

    def __init__(self, http: Any, url: str, headers: dict[str, str]) -> None:
        import anyio

        self.http, self.url, self.headers = http, url, dict(headers)
        self._ids = itertools.count(1)
        self._progress = {}
        self.session: str | None = None
        self.version: str | None = None
        self._restart = anyio.Lock()

    def agreed(self, result: dict[str, Any]) -> None:
        """The protocol version the server answered goes on every later request."""
        version = result.get("protocolVersion")
        self.version = version if isinstance(version, str) and _visible_ascii(version) and len(version) < 40 else PROTOCOL_VERSION

    async def request(self, method: str, params: dict[str, Any], call: Any = None) -> dict[str, Any]:
        """One request; when the server has forgotten fw's session (404, a restarted server),
        a new session is started, as the transport asks, and the request sent once more (a
        404 means the server did nothing with it)."""
        session = self.session
        try:
            answer = await self._send_request(method, params, call)
        except _SessionGone:
            await self._start_again(session)
            answer = await self._send_request(method, params, call)
        return self.result_of(answer, method)

    async def _send_request(self, method: str, params: dict[str, Any], call: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        try:
            params = self.with_progress(request_id, params, call)
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            return await self._post(message, request_id)
        finally:
            self._progress.pop(request_id, None)

    async def _start_again(self, lost: str | None) -> None:
        async with self._restart:
            if self.session == lost:  # not yet started again by a call that found it gone first
                self.session = self.version = None
                await self.initialize()

    async def notify(self, message: dict[str, Any]) -> None:
        await self._post(message, None)

    def _request_headers(self) -> dict[str, str]:
        headers = {**self.headers, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    async def _post(self, message: dict[str, Any], wanted: int | None) -> dict[str, Any]:
        """Send one message; the answer whose id is `wanted` (None: a notification or an answer
        of fw's own, which the server only acknowledges)."""
        import httpx

        body = json.dumps(message, ensure_ascii=False).encode("utf-8")
        try:
            async with self.http.stream("POST", self.url, content=body, headers=self._request_headers()) as response:
                if message.get("method") == "initialize":
                    self.session = _session_id(response.headers.get("mcp-session-id"))
                if not 200 <= response.status_code < 300:
                    why = await _http_refusal(response, self.session is not None)
                    gone = response.status_code == 404 and self.session is not None and message.get("method") != "initialize"
                    raise (_SessionGone if gone else _LinkError)(why)
                if wanted is None:
                    return {}
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind == "application/json":
                    found = await self._take(await _read_capped(response), wanted)
                elif kind == "text/event-stream":
                    found = await self._from_stream(response, wanted)
                else:
                    raise _LinkError(f"the server answered with {kind or 'no content type'}, neither JSON nor an event stream")
        except httpx.TimeoutException:
            raise _LinkError(f"{self.url} did not answer in time") from None
        except httpx.HTTPError as exc:  # the class name only: an exception's text may quote a header
            raise _LinkError(f"{self.url} could not be reached ({type(exc).__name__})") from None
        except UnreadableStream as exc:
            raise _LinkError(f"the server's event stream cannot be read: {exc}") from None
        except UnicodeError:
            raise _LinkError("a header holds characters an HTTP header cannot carry") from None
        if found is None:
            raise _LinkError(f"the server's answer to {message.get('method')} did not come")
        return found

    async def _from_stream(self, response: Any, wanted: int) -> dict[str, Any] | None:
        reader, read = SseReader(), 0
        async for chunk in response.aiter_bytes():
            read += len(chunk)
            if read > MAX_MESSAGE_BYTES:
                raise _LinkError("the server sent an event stream over 64 MiB")
            for event in reader.feed(chunk):
                found = await self._take(event, wanted)
                if found is not None:
                    return found
        for event in reader.finish():
            found = await self._take(event, wanted)
            if found is not None:
                return found
        return None

    async def _take(self, data: Any, wanted: int) -> dict[str, Any] | None:
        """The answer `wanted` among the messages of one body or event; requests from the
        server are refused on the way; text that is not JSON is passed over, as on stdio."""
        try:
            message = json.loads(data)
        except ValueError:
            return None
        found = None
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict):
                continue
            if "method" in item and "id" in item:
                with contextlib.suppress(_LinkError):
                    await self._post(self.refusal(item), None)
            elif "method" in item:
                self.notice(item)
            elif item.get("id") == wanted and ("result" in item or "error" in item):
                found = item
        return found

    async def end_session(self) -> None:
        if not self.session:
            return
        with contextlib.suppress(Exception):
            await self.http.delete(self.url, headers=self._request_headers())


def _session_id(value: str | None) -> str | None:
    """A session id as the transport allows one (visible ASCII); anything else is not kept."""
    return value if value and len(value) <= 1024 and _visible_ascii(value) else None


def _visible_ascii(text: str) -> bool:
    """What an HTTP header value may carry as it is."""
    return all(0x21 <= ord(ch) <= 0x7E for ch in text)


async def _read_capped(response: Any) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > MAX_MESSAGE_BYTES:
            raise _LinkError("the server sent a message over 64 MiB")
    return bytes(data)


async def _http_refusal(response: Any, in_session: bool) -> str:
    """Why a POST was refused: its status, and the start of what the server said. The start
    of what was read is redacted before it is cut, and cut before its white space is
    collapsed, so that a secret it echoes leaves no piece behind, even one that straddles
    the end of what was read (far past the part shown)."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= 65536:
            break
    shown = MESSAGE_CHARS // 2
    text = redact(data.decode("utf-8", "replace"))
    text = " ".join(text[:shown].split()) + ("..." if len(text) > shown else "")
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    if response.status_code == 404 and in_session:
        return f"the server ended fw's session ({status})"
    return f"{status}: {text}" if text else status


def describe_failure(exc: BaseException) -> str:
    """A one-line account of why a server failed, safe to show: the innermost error of a
    task group's exception group, with its text redacted and cut."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FwError):
        return exc.message
    if isinstance(exc, (_LinkError, _RemoteError)):
        return _cut(" ".join(redact(str(exc)).split()))
    text = _cut(" ".join(redact(str(exc)).split()))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _cut(text: str) -> str:
    return text[:MESSAGE_CHARS] + "..." if len(text) > MESSAGE_CHARS else text
