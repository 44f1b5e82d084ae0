"""A real MCP server (the SDK's MCPServer) with long tools, for tests: `python slow_mcp_server.py
[--http PORT]`.

Tools:
  work(seconds, every)  works for `seconds`, reporting progress every `every` seconds (when the
                        client asked for progress: the SDK sends none otherwise), then answers
  sleep(seconds)        sleeps without a word, then answers
It writes its pid to $FAKE_MCP_PID_FILE, and records to $FAKE_MCP_RECORD, one JSON object a line:
  {"event": "call", "tool", "request_id", "progress_token"}   as a call starts
  {"event": "cancelled", "request_id", "reason"}            each notifications/cancelled it receives
  {"event": "finished", "tool", "request_id"}               as a call answers
  {"event": "interrupted", "tool", "request_id"}            as a call is cancelled (its work stops)
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations.
import json
import os
import sys


def record(**fields):
    path = os.environ.get("FAKE_MCP_RECORD")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(fields) + "\n")


def build_server():
    import anyio
    import mcp_types as types
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("slow")

    async def around(tool, ctx, body):
        meta = ctx.request_context.meta or {}
        token = meta.get("progressToken", meta.get("progress_token"))
        record(event="call", tool=tool, request_id=ctx.request_id, progress_token=token)
        try:
            answer = await body()
        except anyio.get_cancelled_exc_class():
            record(event="interrupted", tool=tool, request_id=ctx.request_id)
            raise
        record(event="finished", tool=tool, request_id=ctx.request_id)
        return answer

    @server.tool(description="Work for some seconds, reporting progress every so often, then answer.")
    async def work(seconds: float, every: float, ctx: Context) -> str:
        async def body():
            steps = max(int(seconds / every), 1)
            for step in range(1, steps + 1):
                await anyio.sleep(every)
                await ctx.report_progress(step, steps, f"step {step} of {steps}")
            return f"worked {seconds:g} s"

        return await around("work", ctx, body)

    @server.tool(description="Sleep for some seconds without a word, then answer.")
    async def sleep(seconds: float, ctx: Context) -> str:
        async def body():
            await anyio.sleep(seconds)
            return f"slept {seconds:g} s"

        return await around("sleep", ctx, body)

    async def on_cancelled(ctx, params):
        record(event="cancelled", request_id=str(params.request_id), reason=params.reason)

    server._lowlevel_server.add_notification_handler("notifications/cancelled", types.CancelledNotificationParams, on_cancelled)
    return server


def main(argv):
    pid_file = os.environ.get("FAKE_MCP_PID_FILE")
    if pid_file:
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))
    server = build_server()
    if "--http" in argv:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[argv.index("--http") + 1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
