"""A real MCP server for tests, run as a process: `python mcp_server.py [--hang | --crash | --http PORT]`.

It writes its pid to the file named by $FAKE_MCP_PID_FILE (first thing, so a test can check
that even a server that hangs or crashes leaves no process behind), then:
  --hang       sleeps instead of answering, so it never initialises
  --crash      exits at once with status 3
  --http PORT  serves streamable HTTP on 127.0.0.1:PORT at /mcp instead of stdio
  --alias NAME  also offers the echo tool under NAME
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations, and Context is
# imported inside build_server, where only eager annotations can see it.
import os
import sys
import time


def write_pid() -> None:
    pid_file = os.environ.get("FAKE_MCP_PID_FILE")
    if pid_file:
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))


def build_server():
    # Imported here so that --hang and --crash act at once (the SDK takes seconds to import).
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("fake")

    @server.tool(description="Answer the text unchanged.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="The value of one of this server's environment variables, or <unset>.")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="The value of one header of this HTTP request, or <unset>.")
    def header(name: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(name.lower(), "<unset>")

    @server.tool(description="Always fails, with the text as its error.")
    def fail(text: str) -> str:
        raise ToolError(text)

    @server.tool(description="Sleep for some seconds, then answer done.")
    async def slow(seconds: float) -> str:
        import anyio

        await anyio.sleep(seconds)
        return "done"

    if "--alias" in sys.argv:  # the echo tool once more, under another name (to make two sources clash)
        alias = sys.argv[sys.argv.index("--alias") + 1]
        server.tool(name=alias, description="Answer the text unchanged (an alias).")(echo)

    return server


def main(argv: list[str]) -> None:
    write_pid()
    if "--crash" in argv:
        sys.exit(3)
    if "--hang" in argv:
        time.sleep(3600)
    server = build_server()
    if "--http" in argv:
        port = int(argv[argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
