"""`fw mcp serve`: the tool service over MCP (stdio), for the Manager or for one run.

The server lists the caller's tools with their JSON Schemas (an upstream MCP tool keeps its
own title) and passes every call to the tool service, which authorises, validates and audits
it as for `fw tool call`. Results and errors come back as JSON text (and structured content),
redacted; a refused or failed call (an upstream MCP tool's error included) is a tool result
with isError set, so a model can read why. An upstream result's resource links, and the bytes
of its binary content, go on as MCP content items beside the JSON text. Calls are answered
concurrently; an upstream call's progress is relayed to the client that asked for it, and a
call the client cancels (or leaves) is cancelled upstream. `ToolHandlers` holds what any
transport serves.

Over stdio the server stops within 2 s of the end of its input (or SIGTERM): answers to calls
already read get a moment, then what still runs is cancelled and every process it started is
stopped. A `--run` run is not ended: it lives on by its lease, for a client that reconnects.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..domain.run_records import active_run
from ..domain.tool_types import CallWatch
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..runtime.mcp_client import quiet_sdk_logging
from ..runtime.supervisor import stop_all
from ..tools.service import Caller, call_tool, list_tools
from ..tools.sources import RunSources


class ToolHandlers:
    """What fw answers to an MCP client, whatever the transport: the caller's tools as MCP
    describes them, and calls, each through the one tool service (authorization, validation,
    audit). Calls run in worker threads, so that a slow call never holds a quick one; each
    thread gets its own `Home` (a home's lock is re-entrant within one object, and must keep
    two threads' writes apart as it keeps two processes' apart)."""

    def __init__(self, home: Home, caller: Caller, sources: Any = None, via: str | None = None, on_call: Any = None) -> None:
        # `via`: the front door the audit names (`gateway`, which also serves the asset tools);
        # `on_call(name, arguments, document, is_error)` hears each call's outcome
        self.home, self.caller, self.sources, self.via, self.on_call = home, caller, sources, via, on_call

    def tools(self) -> list[dict[str, Any]]:
        """The caller's tools as MCP lists them: name, title, description, input schema and
        annotations from fw's risk levels."""
        return [mcp_tool(t) for t in list_tools(self.home, self.caller, assets=self.via is not None)["tools"]]

    def call(self, name: str, arguments: Any, watch: CallWatch | None = None) -> tuple[dict[str, Any], bool]:
        """(the result or error document, whether it is an error); never raises. `watch`
        follows the call (its progress, its binary content, a cancel)."""
        doc, is_error = self._call(name, arguments, watch)
        if self.on_call is not None:
            self.on_call(name, arguments, doc, is_error)
        return doc, is_error

    def _call(self, name: str, arguments: Any, watch: CallWatch | None) -> tuple[dict[str, Any], bool]:
        try:
            return call_tool(Home(self.home.root), self.caller, name, arguments, self.sources, via=self.via,
                             assets=self.via is not None, watch=watch), False
        except FwError as exc:
            return exc.to_dict(), True
        except Exception as exc:  # never a traceback on the wire
            error = FwError("internal", f"unexpected error: {type(exc).__name__}", "this is a bug in fw; please report it")
            return error.to_dict(), True


def mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """One of fw's tools as an MCP tool: `readOnlyHint` for `read`, `destructiveHint` for
    `dangerous` (and neither hint claims more than fw's risk says)."""
    risk = tool.get("risk")
    title = tool.get("title") or _title(tool["name"])  # an upstream MCP tool keeps its own
    annotations = {"title": title, "readOnlyHint": risk == "read"}
    if risk != "read":  # meaningful only for a tool that changes something
        annotations["destructiveHint"] = risk == "dangerous"
    return {"name": tool["name"], "title": title, "description": tool["description"],
            "input_schema": tool["input_schema"], "annotations": annotations}


def _title(name: str) -> str:
    """`framework_resource_write` and `resource_write` read as "Resource write"; a tool of
    another source keeps its name."""
    if name.startswith(("mcp__", "skill__")):
        return name
    return name.removeprefix("framework_").replace("_", " ").capitalize()


def _result(doc: dict[str, Any], is_error: bool, attachments: list[dict[str, Any]] | None = None) -> Any:
    """The document as JSON text (and structured content), then the resource links it holds
    and the binary content whose bytes came apart (`attachments`), as MCP content items."""
    import mcp_types as types

    text = redact(json.dumps(doc, ensure_ascii=False))
    content: list[Any] = [types.TextContent(type="text", text=text)]
    items = doc.get("content") if not is_error and isinstance(doc.get("content"), list) else []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "resource_link" and item.get("uri"):
            content.append(types.ResourceLink(type="resource_link", uri=item["uri"],
                                              name=item.get("name") or item["uri"], mime_type=item.get("mimeType")))
    for item in attachments or []:
        if item["type"] == "resource":
            blob = types.BlobResourceContents(uri=item["uri"] or "fw:unnamed", mime_type=item["mimeType"],
                                              blob=item["blob"])
            content.append(types.EmbeddedResource(type="resource", resource=blob))
        elif item["type"] == "image":
            content.append(types.ImageContent(type="image", data=item["data"], mime_type=item["mimeType"]))
        elif item["type"] == "audio":
            content.append(types.AudioContent(type="audio", data=item["data"], mime_type=item["mimeType"]))
    return types.CallToolResult(content=content, structured_content=json.loads(text), is_error=is_error)


def build_server(home: Home, caller: Caller, sources: Any = None) -> Any:
    handlers = ToolHandlers(home, caller, sources)
    return mcp_server(lambda ctx: handlers)


def mcp_server(handlers_for: Callable[[Any], ToolHandlers]) -> Any:
    """The MCP server of fw's tools; `handlers_for(ctx)` gives the handlers of the request's
    caller (one caller for stdio, the token's run for the gateway) and may refuse it."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        from mcp.shared.exceptions import MCPError

        try:
            handlers = handlers_for(ctx)
            tools = await anyio.to_thread.run_sync(handlers.tools)
        except FwError as exc:  # the run ended or expired while serving: it lists nothing
            raise MCPError(-32000, redact(exc.message), exc.to_dict()) from None
        return types.ListToolsResult(tools=[
            types.Tool(name=t["name"], title=t["title"], description=t["description"], input_schema=t["input_schema"],
                       annotations=types.ToolAnnotations(**t["annotations"]))
            for t in tools
        ])

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        arguments = params.arguments if params.arguments is not None else {}
        try:
            handlers = handlers_for(ctx)
        except FwError as exc:
            return _result(exc.to_dict(), True)
        watch = CallWatch(on_progress=_relay(ctx), attachments=[])
        try:
            # Abandoned when the client cancels or leaves: the watch then cancels the call upstream.
            doc, is_error = await anyio.to_thread.run_sync(handlers.call, params.name, arguments, watch,
                                                           abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            watch.cancel()
            raise
        return _result(doc, is_error, watch.attachments)

    return Server("fw", version=__version__, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def _relay(ctx: Any) -> Any:
    """Progress of an upstream call, passed on to the client (when it asked for progress: the
    SDK sends nothing otherwise). Called in the call's worker thread."""
    import anyio

    def relay(progress: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):  # the client has gone, or the transport cannot carry it
            anyio.from_thread.run(ctx.session.report_progress, progress["progress"], progress.get("total"),
                                  progress.get("message"))

    return relay


DRAIN_SECONDS = 0.5  # how long answers to calls already read may take once input has closed: within 2 s all is stopped
STOP_GRACE = 0.3  # for each MCP server it started to exit once told, before it is signalled


def serve(home: Home, caller: Caller) -> None:
    import anyio
    from mcp.server.stdio import stdio_server


    run = None
    if not caller.is_manager:
        run = active_run(home, caller.run_id)  # type: ignore[arg-type]  # a missing or ended run is an error before serving
    quiet_sdk_logging()

    # The run's MCP servers start when a tool of theirs is first called, and stay up until the
    # client leaves, so that one session keeps one connection to each.
    with RunSources(home, run, stop_grace=STOP_GRACE) as sources:
        server = build_server(home, caller, sources)

        async def main() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await _serve_draining(server, read_stream, write_stream)

        try:
            anyio.run(main)
        finally:
            stop_all()  # the programs of calls still running (exec): their callers are gone


async def _serve_draining(server: Any, read_stream: Any, write_stream: Any) -> None:
    """Serve until the client closes its input, then answer the requests already read, for a
    moment (DRAIN_SECONDS), before stopping: a client may send its last calls and close stdin
    at once, and the SDK's loop alone would cancel those calls' answers when it sees end of
    input. A request the client cancelled is never answered, so it is not waited for."""
    import anyio
    import mcp_types as types

    unanswered: set[Any] = set()
    to_server, server_reads = anyio.create_memory_object_stream[Any](1000)
    server_writes, from_server = anyio.create_memory_object_stream[Any](1000)

    async def relay_input() -> None:
        async with to_server:
            async for message in read_stream:
                inner = getattr(message, "message", None)
                if isinstance(inner, types.JSONRPCRequest):
                    unanswered.add(inner.id)
                elif isinstance(inner, types.JSONRPCNotification) and inner.method == "notifications/cancelled":
                    unanswered.discard((inner.params or {}).get("requestId"))
                await to_server.send(message)
            with anyio.move_on_after(DRAIN_SECONDS):
                while unanswered:
                    await anyio.sleep(0.01)

    async def relay_output() -> None:
        async with from_server, write_stream:  # closing the stdio writer lets the transport stop
            async for message in from_server:
                await write_stream.send(message)
                if isinstance(getattr(message, "message", None), (types.JSONRPCResponse, types.JSONRPCError)):
                    unanswered.discard(message.message.id)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(relay_input)
        tasks.start_soon(relay_output)
        await server.run(server_reads, server_writes, server.create_initialization_options())
