"""`fw mcp serve`: the tool service over MCP (stdio), for the Manager or for one run.

The server lists the caller's tools with their JSON Schemas and passes every call to the
tool service, which authorises, validates and audits it as for `fw tool call`. Results and
errors come back as JSON text (and structured content), redacted; a refused call is a tool
result with isError set, so a model can read why.
"""

from __future__ import annotations

import json
from typing import Any

from .. import __version__
from ..domain.runs import active_run
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..tools.service import Caller, call_tool, list_tools
from ..tools.sources import RunSources


def _result(doc: dict[str, Any], is_error: bool) -> Any:
    import mcp_types as types

    text = redact(json.dumps(doc, ensure_ascii=False))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=json.loads(text),
        is_error=is_error,
    )


def build_server(home: Home, caller: Caller, sources: Any = None) -> Any:
    import mcp_types as types
    from mcp.server.lowlevel import Server


    async def on_list_tools(ctx: Any, params: Any) -> Any:
        from mcp.shared.exceptions import MCPError

        try:
            doc = list_tools(home, caller)
        except FwError as exc:  # the run ended or expired while serving: it lists nothing
            raise MCPError(-32000, redact(exc.message), exc.to_dict()) from None
        return types.ListToolsResult(
            tools=[types.Tool(name=t["name"], description=t["description"], input_schema=t["input_schema"]) for t in doc["tools"]]
        )

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        try:
            arguments = params.arguments if params.arguments is not None else {}
            return _result(call_tool(home, caller, params.name, arguments, sources), False)
        except FwError as exc:
            return _result(exc.to_dict(), True)
        except Exception as exc:  # never a traceback on the wire
            error = FwError("internal", f"unexpected error: {type(exc).__name__}", "this is a bug in fw; please report it")
            return _result(error.to_dict(), True)

    return Server("fw", version=__version__, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


DRAIN_SECONDS = 120  # how long answers to calls already read may take once input has closed


def serve(home: Home, caller: Caller) -> None:
    import anyio
    from mcp.server.stdio import stdio_server


    directory = None
    if not caller.is_manager:

        # a missing or ended run is an error before serving
        directory = active_run(home, caller.run_id).get("directory")  # type: ignore[arg-type]

    # The run's MCP servers start when a tool of theirs is first called, and stay up until the
    # client leaves, so that one session keeps one connection to each.
    with RunSources(home, directory) as sources:
        server = build_server(home, caller, sources)

        async def main() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await _serve_draining(server, read_stream, write_stream)

        anyio.run(main)


async def _serve_draining(server: Any, read_stream: Any, write_stream: Any) -> None:
    """Serve until the client closes its input, then answer every request already read
    before stopping: a client may send its last calls and close stdin at once, and the
    SDK's loop alone would cancel those calls' answers when it sees end of input."""
    import anyio
    import mcp_types as types

    unanswered: set[Any] = set()
    to_server, server_reads = anyio.create_memory_object_stream[Any](1000)
    server_writes, from_server = anyio.create_memory_object_stream[Any](1000)

    async def relay_input() -> None:
        async with to_server:
            async for message in read_stream:
                if isinstance(getattr(message, "message", None), types.JSONRPCRequest):
                    unanswered.add(message.message.id)
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
