"""The MCP servers of one run: started (stdio) or connected (http) when the run starts,
closed when it ends, with a synchronous face for the loop and the tool service.

fw speaks both of MCP's transports itself (`mcp_links`); the SDK serves fw's own MCP doors
(`fw mcp serve`, the gateway).

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
import queue
from collections.abc import AsyncIterator
from typing import Any

from ..errors import FwError, without_lone_surrogates
from ..home import secrets
from ..home.secrets import redact
from .mcp_documents import tool_result_document
from .mcp_http import http_link
from .mcp_links import STOP_GRACE, ServerOutput, ServerSpec, describe_failure, is_remote_error, stdio_link

CLOSE_TIMEOUT = 10.0  # for every server to close at the run's end; stdio shutdown is bounded below this
CANCEL_WAIT = 1.0  # for calls being cancelled to send their notifications/cancelled, as the connections close
PROGRESSMESSAGE_CHARS = 200


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
                    conn.give_up(conn.output.with_stderr(f"did not start and list its tools within {limit[id(conn)]:g} s "
                                                  "(the mcp's startup_seconds)"))
            task_status.started(connections)
            await self._closing.wait()

    async def _own(self, conn: _Connection) -> None:
        """One server, from its start to its close, in one task (anyio's rule for the SDK's client)."""
        import anyio

        try:
            with conn.scope:
                async with open_link(conn.spec, conn.output, conn.stop_grace) as link:
                    conn.ready(link, await link.list_tools())
                    await self._closing.wait()
                    conn.scope.deadline = anyio.current_time() + CLOSE_TIMEOUT
        except Exception as exc:
            conn.fail(await conn.output.explain(describe_failure(exc)))
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
            if is_remote_error(exc):  # the server answered the call with a JSON-RPC error
                raise FwError("unavailable", f"MCP server {name!r} refused {tool}: {describe_failure(exc)}",
                              "check the tool's name and arguments against its input_schema", reason="mcp_tool") from None
            why = await conn.output.explain(describe_failure(exc))
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
        self.output = ServerOutput(spec.transport)  # its exit status and stderr, to say why it failed

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
async def open_link(spec: ServerSpec, output: ServerOutput, stop_grace: float = STOP_GRACE) -> AsyncIterator[Any]:
    """A link to one server that can list and call its tools: stdio (`mcp_links`) or http (`mcp_http`).
    A stdio server's exit status and stderr go to `output`; it gets `stop_grace` to exit."""
    if spec.transport == "stdio":
        async with stdio_link(spec, output, stop_grace) as link:
            yield link
    elif spec.transport == "http":
        async with http_link(spec) as link:
            yield link
    else:
        raise FwError("invalid", f"unknown MCP transport {spec.transport!r}", "use stdio or http")
